# SPDX-License-Identifier: Apache-2.0
"""Read: turn a source of recurrent layers into the typed layer description (:mod:`..layer`), or a
:class:`~..failure.Refusal` saying what was not understood and where.

A TensorFlow While loop in tf2onnx's graph: :mod:`.body` reads the step out
of each loop body (with the cell kinds of :mod:`..cells`), :mod:`.trip` each loop's stop
condition, and :mod:`.loop` the While op of the main graph, proving its time axis
(:mod:`.time_axis`), trip count and weights (:mod:`.weights`). :mod:`.linear`, :mod:`.activation`
and :mod:`.gates` read a gate's algebra, whatever way tf2onnx spelled it. An ONNX ``Loop`` is read
by :mod:`.onnx_loop` (with :mod:`.select`, :mod:`.onnx_trip` and :mod:`.onnx_layout`), a cuDNN op by
:mod:`.cudnn`.
"""
