# SPDX-License-Identifier: Apache-2.0
"""Keras's generic recurrent code traced for tf2onnx, even on a machine with a GPU.

Why. Keras 3's ``LSTM`` and ``GRU`` (TensorFlow backend) first try
``keras.src.backend.tensorflow.rnn.lstm`` / ``gru``, which trace cuDNN's kernel
(``tf.raw_ops.CudnnRNNV3``, with ``sequence_lengths`` from the mask) when ``cudnn_ok(...)`` holds:
the layer's options suit cuDNN (the default ones do) and ``_is_gpu_available()`` finds a logical
GPU. tf2onnx has no handler for ``CudnnRNNV3``: the model it makes keeps the TensorFlow op, which
no runtime loads. Which code Keras traces is decided in Python, while the model is traced, so it
is decided here, not in tf2onnx's graph.

What. :func:`generic_path` makes that module answer "no GPU" while a conversion traces the model
(and runs a layer built with ``use_cudnn=True``, which would raise instead, as one built with
``"auto"``); Keras then traces the generic loop (the one it traces on a CPU, computing the same
function), which stock tf2onnx and the rewriter convert. While the plugin is enabled, :func:`install` runs every
trace a conversion makes in it: tf2onnx's ``from_keras`` (through ``_get_concrete_function``, which
the command line's ``--keras`` loader also calls), ``from_function`` (a ``tf.function`` it traces
itself), and Keras 3's ``model.export(format="onnx")`` (``keras.src.export.onnx.get_concrete_fn``).
Outside a conversion Keras keeps its answer: training and inference in the same process still use
cuDNN. A graph traced before (a SavedModel exported on a GPU machine, a ``tf.function`` already
traced there) is not traced again.

tf_keras traces its generic code already. Its ``LSTM`` and ``GRU`` choose by device only when run
eagerly; a trace (``lstm_with_backend_selection``, ``gru_with_backend_selection``) calls the
generic function and only registers the cuDNN one in the graph's library, both marked
``api_implements``, for Grappler's implementation selector to swap at run time. tf2onnx never runs
that selector: freezing (``convert_variables_to_constants_v2``) deletes the ``api_implements``
attributes and inlines the called function with Grappler's function optimizer alone, and
tf2onnx's own Grappler pass runs ``constfold``, ``function`` and ``dependency`` only, so the
registered cuDNN function is dropped. Registering it traces that function and builds its gradient,
about 2 s per layer: inside :func:`generic_path` tf_keras's ``function_register`` does nothing
(:data:`TF_KERAS_REGISTER`), and the converted graph is the same.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import sys

from tf2onnx import convert as tf2onnx_convert

logger = logging.getLogger("masked_lstm_rewriter")

KERAS_RNN = "keras.src.backend.tensorflow.rnn"   # Keras 3's TensorFlow recurrent kernels
KERAS_EXPORT = "keras.src.export.onnx"           # Keras 3's model.export(format="onnx")
KERAS_LAYERS = (("keras.src.layers.rnn.lstm", "LSTM"), ("keras.src.layers.rnn.gru", "GRU"))
GPU_CHECK = "_is_gpu_available"
# tf_keras's module and function registering the cuDNN twin of a traced LSTM or GRU (its return value is unused)
TF_KERAS_REGISTER = ("tf_keras.src.layers.rnn.gru_lstm_utils", "function_register")

_depth = 0       # nested generic_path() blocks in force
_replaced = []   # (owner, attribute, Keras's own value) while the outer block is in force
_announced = False  # the INFO record of this block was logged
_wrapped = {}    # (module, name) -> the function install() replaced


@contextlib.contextmanager
def generic_path():
    """Keras's recurrent layers traced with their generic code alone inside the block (re-entrant):
    Keras 3's, not cuDNN's; tf_keras's, without registering the cuDNN twin (see the module's docstring)."""
    global _depth, _announced  # pylint: disable=global-statement
    if _depth == 0:
        _announced = False
        for owner, name, replacement in _replacements():
            _replaced.append((owner, name, getattr(owner, name)))
            setattr(owner, name, replacement)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            while _replaced:
                owner, name, original = _replaced.pop()
                setattr(owner, name, original)


def _replacements() -> list:
    """(owner, attribute, replacement) of what :func:`generic_path` replaces in the Keras that is loaded.

    In Keras 3, its GPU check, and the ``inner_loop`` of ``LSTM`` and ``GRU``: a layer built with
    ``use_cudnn=True`` raises rather than run its generic code, so that code is given
    ``use_cudnn="auto"`` for the call (the same function; the ONNX model runs no cuDNN anyway).
    In tf_keras, the registration of the cuDNN function tf2onnx drops."""
    utils = sys.modules.get(TF_KERAS_REGISTER[0])
    found = [(utils, TF_KERAS_REGISTER[1], skip_registration)] if hasattr(utils, TF_KERAS_REGISTER[1]) else []
    rnn = sys.modules.get(KERAS_RNN)
    if rnn is None or not hasattr(rnn, GPU_CHECK):
        return found
    found.append((rnn, GPU_CHECK, _no_gpu_while_tracing))
    for module, name in KERAS_LAYERS:
        layer = getattr(sys.modules.get(module), name, None)
        if layer is not None and "inner_loop" in vars(layer):
            found.append((layer, "inner_loop", _generic_even_if_cudnn_required(vars(layer)["inner_loop"])))
    return found


def skip_registration(func, *args, **kwargs):  # pylint: disable=unused-argument
    """tf_keras's ``function_register`` during a conversion: the cuDNN twin is not registered."""
    return None


def _keras_gpu_check():
    """Keras's own answer: is there a GPU?"""
    return next((bool(original()) for owner, name, original in _replaced if name == GPU_CHECK), False)


def _no_gpu_while_tracing() -> bool:
    """Keras's GPU check during a conversion: "no GPU" (said once at INFO when there is one)."""
    global _announced  # pylint: disable=global-statement
    if not _announced and _keras_gpu_check():
        _announced = True
        logger.info("a GPU is visible: Keras's LSTM and GRU layers are traced with their generic code for the "
                    "conversion, not with cuDNN's CudnnRNNV3 (which tf2onnx cannot convert)")
    return False


def _generic_even_if_cudnn_required(inner_loop):
    """``inner_loop`` of a layer class, run with ``use_cudnn="auto"`` where the layer says True."""
    @functools.wraps(inner_loop)
    def generic_inner_loop(self, *args, **kwargs):
        if getattr(self, "use_cudnn", None) is not True:
            return inner_loop(self, *args, **kwargs)
        logger.debug("Keras layer '%s' (use_cudnn=True) traced with its generic code", self.name)
        self.use_cudnn = "auto"
        try:
            return inner_loop(self, *args, **kwargs)
        finally:
            self.use_cudnn = True
    return generic_inner_loop


def _traced_generically(function):
    """``function``, run inside :func:`generic_path`."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with generic_path():
            return function(*args, **kwargs)
    return wrapper


def _trace_points():
    """(module, function name) of each place a conversion traces a Keras model."""
    points = [(tf2onnx_convert, "_get_concrete_function"), (tf2onnx_convert, "from_function")]
    keras = sys.modules.get("keras")
    if keras is not None and str(getattr(keras, "__version__", "")).startswith("3."):
        try:
            points.append((importlib.import_module(KERAS_EXPORT), "get_concrete_fn"))
        except ImportError:  # pragma: no cover - every Keras 3 we support has it
            logger.debug("%s not found: Keras 3's model.export(format='onnx') traces as it does", KERAS_EXPORT)
    return [(module, name) for module, name in points if hasattr(module, name)]


def install() -> None:
    """Run every trace a conversion makes inside :func:`generic_path` (idempotent).

    It wraps the functions in force when called: :func:`~.plugin.enable` installs it after the
    fixes of :mod:`.tf2onnx_keras`, and :func:`uninstall` must run before theirs is undone."""
    if _wrapped:
        return
    for module, name in _trace_points():
        _wrapped[(module, name)] = getattr(module, name)
        setattr(module, name, _traced_generically(_wrapped[(module, name)]))


def uninstall() -> None:
    """Give back the functions :func:`install` wrapped."""
    for (module, name), function in _wrapped.items():
        setattr(module, name, function)
    _wrapped.clear()
