# SPDX-License-Identifier: Apache-2.0
"""Patches to Keras and tf2onnx that models need to convert at all (or in reasonable time), kept apart
from the pipeline: :mod:`.tf2onnx_keras` (tf2onnx's Keras 3 front door), :mod:`.time_distributed`
(how Keras 3 traces ``TimeDistributed``), :mod:`.generic_path` (Keras's generic recurrent code, not
cuDNN's, on a machine with a GPU), :mod:`.opaque_ifs` (tf2onnx's optimizers pass over the
rewriter's ``If`` nodes). :func:`..plugin.enable` installs them; :func:`..plugin.disable` removes them.
"""
