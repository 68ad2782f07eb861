# SPDX-License-Identifier: Apache-2.0
"""Native ONNX LSTM, GRU and RNN ops for masked Keras recurrent layers converted with tf2onnx.

A layer goes through these stages, one subpackage each: :mod:`.read` (a reader turns a source of
recurrent layers, such as a TensorFlow While loop in tf2onnx's graph, a cuDNN op or an ONNX
``Loop``, into the typed layer description of :mod:`.layer`, or a :class:`~.failure.Refusal`),
:mod:`.plan` (masks, lengths, guard, schedule), :mod:`.emit` (ONNX nodes). :mod:`.sources` lists
the sources, one module each, and :mod:`.pipeline` takes every source's layers through the stages.
:mod:`.plugin` is how users switch it on inside tf2onnx, :mod:`.patches` the fixes to Keras and
tf2onnx it installs. :mod:`.cells` holds one module per cell kind, :mod:`.targets` one entry per
runtime, :mod:`.graph` the graph helpers every stage shares; :mod:`.report` says what the last
conversion did. :mod:`.conversion` is the one-call front door (``convert``), :mod:`.onnx_file` the
one for an ONNX file (``rewrite_onnx``), :mod:`.verification` checks a conversion against Keras
(``verify``), :mod:`.quantize` makes a converted model int8 for onnxruntime (``quantize_model``), and
:mod:`.cli` is the command line. :mod:`.corpus` is the regression corpus.

Importing the package is cheap: the names below load their module (and with it tf2onnx and
TensorFlow) when first used, so that a process can import ``masked_lstm_rewriter.corpus`` or
the command line before it chooses its Keras flavour. Where TensorFlow, tf2onnx or a runtime is
not installed, that first use raises :class:`.dependencies.MissingDependency`, naming the extra
that brings it.
"""

import importlib

_EXPORTS = {
    "convert": "conversion", "Converted": "conversion", "rewrite_onnx": "onnx_file", "verify": "verification", "Verification": "verification",
    "make_rewriter": "plugin", "rewrite_masked_lstm": "plugin", "enable": "plugin", "disable": "plugin",
    "enabled_mode": "plugin", "last_report": "report", "ConversionReport": "report", "LayerReport": "report",
    "GUARD_MESSAGE": "plan.masks", "MASK_MODES": "plan.masks", "TARGETS": "targets",
    "MissingDependency": "dependencies", "KnownWrong": "failure", "quantize_model": "quantize",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name):
    """The public names, each imported from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .dependencies import needed  # pylint: disable=import-outside-toplevel
    with needed():  # TensorFlow or tf2onnx not installed: one error naming the extra that brings it
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
