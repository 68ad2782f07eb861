# SPDX-License-Identifier: Apache-2.0
"""Trace a Keras 3 model as on a machine with a GPU, without one: the graph then holds Keras's cuDNN
op (``CudnnRNNV3``), as a SavedModel exported on a training machine does.

Keras 3 takes its cuDNN path when its own check, ``_is_gpu_available``, says yes; a CUDA build of
TensorFlow orders a GRU's gates as cuDNN does. The op only has to be in the graph: nothing here runs
it. Used for the regression corpus's cuDNN entries and the tests of the cuDNN reader.
"""

from __future__ import annotations

import contextlib
import importlib


@contextlib.contextmanager
def traced_as_on_a_gpu():
    """Keras 3 traces its cuDNN path while this is in force (its eager calls fall back by themselves)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")  # the package's `rnn` is a function
    build_info = tf.sysconfig.get_build_info
    saved = rnn._is_gpu_available, build_info  # pylint: disable=protected-access
    rnn._is_gpu_available = lambda: True  # pylint: disable=protected-access
    tf.sysconfig.get_build_info = lambda: {**build_info(), "is_cuda_build": True}
    try:
        yield
    finally:
        rnn._is_gpu_available, tf.sysconfig.get_build_info = saved  # pylint: disable=protected-access
