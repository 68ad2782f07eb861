# SPDX-License-Identifier: Apache-2.0
"""Keras 3's ``model.export(path, format="onnx")`` on the JAX and torch backends, while the plugin is enabled.

On those backends Keras exports through jax2onnx or torch's exporter, which write every recurrent
layer as a ``Loop`` (JAX), fail on ``go_backwards`` and ``Bidirectional`` (JAX: "Reverse scan is not
supported"), or unroll a masked layer for one fixed number of steps (torch). While the plugin is
enabled, such an export converts the model the way :func:`masked_lstm_rewriter.convert` does in a
TensorFlow process (:mod:`..backend_process`), with the enabled options (``streaming`` as given to
:func:`..plugin.enable`: a stateful model is not streamed unless asked), and writes the native
model to ``path``; ``input_signature`` and ``opset_version`` are honoured. On the TensorFlow
backend Keras's own export runs (through tf2onnx, which the plugin already rewrites in), with the
model's layer names remembered (:mod:`..layer_names`), so that a streaming model's states are named
after its Keras layers (``gru/h_in``), not after the scopes Keras 3 traces them under (``gru_1``).
Installed by :func:`..plugin.enable` when Keras 3 is imported already (import Keras first).
"""

from __future__ import annotations

import importlib
import logging
import sys

from .. import layer_names

logger = logging.getLogger("masked_lstm_rewriter")

# where Keras 3's model.export finds export_onnx (it imports it from the package when called)
KERAS_EXPORT = ("keras.src.export", "keras.src.export.onnx")
_original = []
_options = {}


def install(mask_mode: str, runtime, schedule: bool, keep_wrong: bool = False, streaming: bool = False) -> None:
    """Route Keras's ONNX export on other backends through the plugin (idempotent; the options of
    the latest call apply)."""
    _options.update(mask_mode=mask_mode, runtime=runtime, schedule=schedule, keep_wrong=keep_wrong,
                    streaming=streaming)
    if _original or "keras" not in sys.modules:  # Keras 3 not imported (a tf_keras process): nothing to route
        return
    try:
        modules = [importlib.import_module(name) for name in KERAS_EXPORT]
    except ImportError:  # not Keras 3
        return
    _original.append(modules[-1].export_onnx)
    for module in modules:
        module.export_onnx = export_onnx


def uninstall() -> None:
    if _original:
        original = _original.pop()
        for name in KERAS_EXPORT:
            importlib.import_module(name).export_onnx = original
    _options.clear()


def export_onnx(model, filepath, verbose=None, input_signature=None, opset_version=None, **kwargs):
    """Keras's ``export_onnx``, with a model on another backend than TensorFlow converted by the plugin."""
    from .. import backend_process, conversion  # pylint: disable=import-outside-toplevel
    if not backend_process.needs_tensorflow_process(model):
        return _keras_export_named(model, filepath, verbose=verbose, input_signature=input_signature,
                                   opset_version=opset_version, **kwargs)
    signature = None if input_signature is None else _flat_specs(input_signature)
    onnx_model, report = backend_process.convert_in_tensorflow_process(
        model, opset=opset_version, input_signature=signature, **_options)
    conversion.save(onnx_model, filepath)
    logger.info("%s", report)
    return None


def _keras_export_named(model, filepath, **options):
    """Keras's own export on TensorFlow, ``model``'s layer names remembered for the rewriter's names."""
    layer_names.remember(model)
    try:
        return _original[0](model, filepath, **options)
    finally:
        layer_names.forget()


def _flat_specs(input_signature) -> list:
    """Keras's input signature (``InputSpec``s, ``KerasTensor``s or tensors, maybe one list of them)."""
    specs = input_signature[0] if len(input_signature) == 1 and isinstance(input_signature[0], (list, tuple)) \
        else input_signature
    return [_Spec(getattr(spec, "name", None) or f"input_{i}", tuple(spec.shape), str(getattr(spec, "dtype", None) or "float32"))
            for i, spec in enumerate(specs)]


class _Spec:
    """A backend-neutral tensor spec: what the conversion process rebuilds a ``tf.TensorSpec`` from."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, shape, dtype
