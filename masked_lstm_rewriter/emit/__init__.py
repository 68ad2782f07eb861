# SPDX-License-Identifier: Apache-2.0
"""Emit: the ONNX nodes of one planned layer.

:mod:`.layer` emits a layer (one native node per cell, then the fix-ups that give Keras's outputs
at every position), :mod:`.bidirectional` a pair of layers as one bidirectional node (with the
same fix-ups), :mod:`.node` one native node (or :mod:`.segments`, the schedule's), and
:mod:`.rewire` points the loop's consumers at the result. :mod:`.read_alone` keeps a runtime that
scrambles shared inputs from doing so.
"""
