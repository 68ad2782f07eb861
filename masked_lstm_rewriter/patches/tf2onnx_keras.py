# SPDX-License-Identifier: Apache-2.0
"""tf2onnx 1.17's two Keras front doors, fixed while the plugin is enabled.

* ``tf2onnx.convert.from_keras`` on a Keras 3 ``Sequential`` model. It names a model's outputs
  with ``model.output_names``, or, where a model has none, with the names of ``model.outputs``,
  and looks those names up among the traced function's outputs. A Keras 3 ``Sequential`` model
  has no ``output_names`` and its outputs are called ``keras_tensor_N``, which the function does
  not know: every Keras 3 ``Sequential`` model fails with ``KeyError: 'keras_tensor_N'`` before
  any rewriter runs, plugin or not. Here its output is named after its last layer, as Keras 3
  names a functional model's outputs: the traced function returns ``{name: output}``.
* ``python -m tf2onnx.convert --keras FILE`` (``tf_loader.from_keras``). It traces the model with
  the shapes it was last built or called with (a ``Sequential`` built by a call on a [2, 4] batch
  converts with a fixed [2, 4] input) and drops all but one output of a layer whose outputs share
  a name (Keras 3's ``return_state=True``). Here a Keras file is traced as
  :func:`masked_lstm_rewriter.convert` traces it: the signature of :mod:`.keras_source` (dynamic
  batch and time) and one output per model output.

* ``from_keras`` on a model with several inputs that tf2onnx calls the wrong way: a subclassed
  model whose ``call`` takes several tensors (``call(inputs, states)``), called with one list in
  tf_keras, and, in Keras 3, a functional model built on a dict of inputs or a subclassed model
  whose ``call`` takes its inputs as one list, called with one argument per input. Here each
  gets what its ``call`` takes.

Every other model goes to tf2onnx's own code. Every traced model's layer names are remembered for
the conversion (:mod:`..layer_names`: the Keras names of the scopes Keras 3 makes unique).
"""

from __future__ import annotations

import sys

import tensorflow as tf
from tf2onnx import convert as tf2onnx_convert
from tf2onnx import tf_loader

from .. import keras_source, layer_names

# module -> names of its functions replaced while enabled
PATCHED = {tf2onnx_convert: ("_get_output_names", "_get_concrete_function"), tf_loader: ("from_keras",)}
_originals = {}


def install() -> None:
    """Replace tf2onnx's functions (idempotent; :func:`uninstall` restores them)."""
    if _originals:
        return
    for module, names in PATCHED.items():
        for name in names:
            _originals[name] = getattr(module, name)
            setattr(module, name, globals()[name])


def uninstall() -> None:
    for module, names in PATCHED.items():
        for name in names:
            if name in _originals:
                setattr(module, name, _originals[name])
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


def call_arguments(model, input_signature):
    """How the traced function passes its inputs to ``model`` (args -> the arguments), where tf2onnx
    gets it wrong, or None.

    tf2onnx calls a Keras 3 model with one argument per input, and a tf_keras model with one list
    of them. A subclassed model whose ``call`` takes several tensors (``call(inputs, states)``)
    wants one argument each; a Keras 3 functional model built on a dict of inputs wants that
    dict ("The structure of `inputs` doesn't match"); a Keras 3 subclassed model whose ``call``
    takes its inputs as one list wants the list ("too many positional arguments")."""
    if input_signature and keras_source.spreads_inputs(model, len(input_signature)):
        return tuple
    keras = sys.modules.get("keras")
    if keras is None or not str(getattr(keras, "__version__", "")).startswith("3.") or not isinstance(model, keras.Model):
        return None
    if type(model).__name__ == "Functional":
        structure = getattr(model, "_inputs_struct", None)
        return (lambda args: (tf.nest.pack_sequence_as(structure, list(args)),)) if isinstance(structure, dict) \
            else None
    if type(model).__name__ == "Sequential" or not input_signature or len(input_signature) < 2:
        return None
    return lambda args: (list(args),)


def _get_concrete_function(model, input_signature):
    layer_names.remember(model)  # the Keras names of the scopes the trace opens (a streaming model's state names)
    name = sequential_output_name(model)
    arguments = call_arguments(model, input_signature)
    if not name and not arguments:
        return _originals["_get_concrete_function"](model, input_signature)
    if input_signature is None:  # named as the model names them, for inputs_as_nchw=[...] to find them
        input_signature = [tf.TensorSpec(shape=x.shape, dtype=x.dtype, name=x.name) for x in model.inputs]
    elif arguments is tuple:
        input_signature = keras_source.named_after_arguments(model, input_signature)
    names = [name] if name else getattr(model, "output_names", None)  # what _get_output_names looks up

    @tf.function(input_signature=input_signature)
    def model_fn(*args):
        outputs = model(*(arguments(args) if arguments else args), training=False)
        return dict(zip(names, tf.nest.flatten(outputs))) if names else outputs
    return model_fn.get_concrete_function()


def from_keras(model_path, input_names, output_names):  # pylint: disable=unused-argument
    """``tf_loader.from_keras``: (frozen graph, input tensor names, output tensor names) of a Keras file.

    Like tf2onnx's, it converts every input and output of the model (``--inputs`` and
    ``--outputs`` do not cut a Keras model there either)."""
    with tf.device("/cpu:0"):
        model = keras_source.load(model_path)
        renamed = tf2onnx_convert._rename_duplicate_keras_model_names(model)  # pylint: disable=protected-access
        try:
            function = tf2onnx_convert._get_concrete_function(  # pylint: disable=protected-access
                model, keras_source.input_signature(model))
        finally:
            if renamed is not None:
                tf2onnx_convert._set_output_names(model, renamed)  # pylint: disable=protected-access
        captured = {id(t) for t in function.captured_inputs}
        inputs = [t.name for t in function.inputs if t.dtype != tf.resource and id(t) not in captured]
        outputs = [t.name for t in function.outputs if t.dtype != tf.resource]
        return tf_loader.from_function(function, inputs, outputs), inputs, outputs
