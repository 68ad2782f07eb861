# SPDX-License-Identifier: Apache-2.0
"""tf2onnx 1.17's ``from_keras`` on a Keras 3 ``Sequential`` model: its outputs named after the last layer.

Why. ``from_keras`` names a model's outputs with ``model.output_names``, or, where a model has
none, with the names of ``model.outputs``, and looks those names up among the traced function's
outputs. A Keras 3 ``Sequential`` model has no ``output_names`` and its outputs are called
``keras_tensor_N``, which the function does not know: every Keras 3 ``Sequential`` model fails
with ``KeyError: 'keras_tensor_N'`` before any rewriter runs, plugin or not.

What. While the plugin is enabled (:func:`install`), tf2onnx's two helpers behind that lookup see
a Keras 3 ``Sequential`` model as Keras 3 names a functional model's output: after its last
layer. The traced function returns ``{last layer's name: output}``, so the ONNX output carries
that name, as it does for a functional model or a tf_keras ``Sequential``. Every other model goes
to tf2onnx's own helpers.
"""

from __future__ import annotations

import sys

import tensorflow as tf
from tf2onnx import convert as tf2onnx_convert

_originals = {}


def install() -> None:
    """Replace tf2onnx's output-name helpers (idempotent; :func:`uninstall` restores them)."""
    if _originals:
        return
    _originals["_get_output_names"] = tf2onnx_convert._get_output_names  # pylint: disable=protected-access
    _originals["_get_concrete_function"] = tf2onnx_convert._get_concrete_function  # pylint: disable=protected-access
    tf2onnx_convert._get_output_names = _get_output_names  # pylint: disable=protected-access
    tf2onnx_convert._get_concrete_function = _get_concrete_function  # pylint: disable=protected-access


def uninstall() -> None:
    for name, original in _originals.items():
        setattr(tf2onnx_convert, name, original)
    _originals.clear()


def sequential_output_name(model):
    """The output name of a Keras 3 ``Sequential`` model (its last layer's), or None for any other model."""
    keras = sys.modules.get("keras")
    if keras is None or not str(getattr(keras, "__version__", "")).startswith("3."):
        return None
    if not isinstance(model, keras.Sequential) or hasattr(model, "output_names") or not model.layers:
        return None
    return model.layers[-1].name


def _get_output_names(model):
    name = sequential_output_name(model)
    return [name] if name else _originals["_get_output_names"](model)


def _get_concrete_function(model, input_signature):
    name = sequential_output_name(model)
    if not name:
        return _originals["_get_concrete_function"](model, input_signature)
    if input_signature is None:
        input_signature = [tf.TensorSpec(shape=x.shape, dtype=x.dtype) for x in model.inputs]

    @tf.function(input_signature=input_signature)
    def model_fn(*args):
        return {name: model(*args, training=False)}
    return model_fn.get_concrete_function()
