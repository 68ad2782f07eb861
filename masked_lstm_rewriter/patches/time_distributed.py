# SPDX-License-Identifier: Apache-2.0
"""Keras 3 ``TimeDistributed`` with a dynamic time axis: traced as one call over [batch * time, ...].

Why. When the time axis is unknown at trace time (``TensorSpec((None, None, ...))``), Keras 3
runs the wrapped layer through ``vectorized_map`` (TensorFlow's pfor) over
``ops.arange(input_shape[0])``, with ``input_shape`` read *before* the batch and time axes are
swapped: since Keras 3.14 (keras-team/keras#22039) it iterates over the batch size, not the time
steps. The traced graph is wrong in TensorFlow itself: it returns a time axis equal to the batch
size, or fails when the batch is larger than the time axis. tf2onnx converts that broken graph
faithfully. A recurrent layer inside is worse: pfor vectorizes its While loop, and TensorFlow's
freezing fails ("... pfor ... incompatible with expected resource") before tf2onnx sees a graph.
Only Keras's Python code can be fixed, so the fix is applied while the model is traced.

What. While the plugin is enabled, :func:`install` replaces ``TimeDistributed.call`` with one
that, in exactly that case (a TensorFlow graph being traced, one input tensor, a dynamic time
axis, not training), merges the time axis into the batch, calls the wrapped layer once and
splits the axes again. That is tf_keras's own implementation, and it computes what Keras
computes eagerly step by step, since the wrapped layer treats each row on its own (every Keras
layer does, in inference). A masked recurrent layer inside becomes an ordinary masked loop over
[batch * time, ...] that the rewriter makes native. Every other call goes to Keras's ``call``.

:func:`traced_over_batch` finds graphs traced without the fix (``custom_rewriter=`` alone,
a SavedModel exported by Keras 3): the rewriter cannot repair them, so the conversion fails
with what :func:`traced_over_batch` says, unless the user keeps the model as it is.
"""

from __future__ import annotations

import importlib
import logging
import sys
import weakref

import tensorflow as tf
from tf2onnx.graph_matcher import GraphMatcher, OpTypePattern

logger = logging.getLogger("masked_lstm_rewriter")

KERAS_MODULE = "keras.src.layers.rnn.time_distributed"

_original_call = None
_announced = weakref.WeakSet()  # layers already logged: Keras traces a model several times


def install() -> bool:
    """Patch Keras 3's ``TimeDistributed.call``, if Keras 3 is loaded; True if it is patched.

    Keras 3 is never imported here: in a tf_keras process it is not loaded (TensorFlow loads
    Keras 3 on import only when it is its Keras), and tf_keras traces ``TimeDistributed`` by
    reshaping already."""
    global _original_call  # pylint: disable=global-statement
    if _original_call is not None:
        return True
    keras = sys.modules.get("keras")
    if keras is None or not str(getattr(keras, "__version__", "")).startswith("3."):
        logger.debug("Keras 3 is not loaded: TimeDistributed left as it is")
        return False
    layer_class = importlib.import_module(KERAS_MODULE).TimeDistributed
    _original_call = layer_class.call
    layer_class.call = _call
    return True


def uninstall() -> None:
    """Give Keras back its own ``TimeDistributed.call``."""
    global _original_call  # pylint: disable=global-statement
    if _original_call is not None:
        sys.modules[KERAS_MODULE].TimeDistributed.call = _original_call
        _original_call = None


def _call(self, inputs, training=None, mask=None):
    """``TimeDistributed.call``: the merged call where Keras would map over the wrong axis."""
    if not _needs_merged_call(inputs, training):
        return _original_call(self, inputs, training=training, mask=mask)
    if self not in _announced:
        _announced.add(self)
        logger.info("Keras 3 TimeDistributed layer '%s' traced as one call over [batch * time, ...] "
                    "(its dynamic time axis would make Keras map over the batch size)", self.name)
    return _merged_call(self, inputs, training, mask)


def _needs_merged_call(inputs, training) -> bool:
    """A graph trace (not eager), one tensor with a dynamic time axis, inference: Keras's pfor path."""
    return (not tf.executing_eagerly() and isinstance(inputs, tf.Tensor) and inputs.shape.rank is not None
            and inputs.shape.rank >= 3 and inputs.shape[1] is None and training in (None, False))


def _merged_call(wrapper, inputs, training, mask):
    """The wrapped layer called once on [batch * time, ...] (and its mask), split back per row."""
    layer = wrapper.layer
    kwargs = {}
    if layer._call_has_mask_arg and mask is not None:  # pylint: disable=protected-access
        kwargs["mask"] = _merge_time_axis(mask)
    if layer._call_has_training_arg:  # pylint: disable=protected-access
        kwargs["training"] = training
    batch_and_time = tf.shape(inputs)[:2]
    outputs = layer.call(_merge_time_axis(inputs), **kwargs)
    return tf.nest.map_structure(lambda output: _split_time_axis(output, batch_and_time), outputs)


def _merge_time_axis(tensor):
    """[batch, time, ...] -> [batch * time, ...]."""
    return tf.reshape(tensor, tf.concat([[-1], tf.shape(tensor)[2:]], axis=0))


def _split_time_axis(tensor, batch_and_time):
    """[batch * time, ...] -> [batch, time, ...]."""
    return tf.reshape(tensor, tf.concat([batch_and_time, tf.shape(tensor)[1:]], axis=0))


# Range(0, Shape(x)[0], 1) feeding a pfor: Keras 3 mapping TimeDistributed over the batch size
_RANGE_OVER_FIRST_AXIS = OpTypePattern("Range", name="range", inputs=[
    OpTypePattern("Const"),
    OpTypePattern("StridedSlice", name="size",
                  inputs=[OpTypePattern("Shape", name="shape"), "Const", "Const", "Const"]),
    OpTypePattern("Const"),
])


def traced_over_batch(graph, ops) -> list:
    """What is wrong with each Keras 3 ``TimeDistributed`` traced without the fix: one sentence per
    layer, naming it and saying how to convert it right (empty when none is).

    Its ``vectorized_map`` runs over ``Range(0, Shape(x)[0], 1)`` while ``x`` is also transposed
    to time-major for the wrapped layer: the model maps over the batch size. A graph this did not
    foresee is taken as sound (logged at DEBUG), never as broken."""
    try:
        return [_wrong_layer_message(name) for name in _layers_traced_over_batch(graph, ops)]
    except Exception as error:  # pylint: disable=broad-except
        logger.debug("TimeDistributed check skipped: %s: %s", type(error).__name__, error)
        return []


def _wrong_layer_message(name: str) -> str:
    return (f"Keras 3 TimeDistributed layer '{name}' was traced mapping over the batch size, not the time axis "
            "(a Keras 3.14+ bug with a dynamic time axis): the model computes other values than Keras, in "
            "TensorFlow too. Convert the Keras model with the plugin enabled (masked_lstm_rewriter.convert, "
            "python -m masked_lstm_rewriter, or inside masked_lstm_rewriter.enable(); for a SavedModel, export "
            "it inside enable()), or give the time axis a fixed size")


def _layers_traced_over_batch(graph, ops) -> list:
    names = []
    for match in GraphMatcher(_RANGE_OVER_FIRST_AXIS).match_ops(ops):
        rng, size, shape = match.get_op("range"), match.get_op("size"), match.get_op("shape")
        if _is_first_axis(size) and _is_time_major_copy(graph, shape.input[0]) and _feeds_pfor(graph, rng):
            names.append(_scope(rng))
    return names


def _is_first_axis(strided_slice) -> bool:
    """``StridedSlice(shape, [0], [1], [1], shrink_axis_mask=1)``: element 0 of a shape."""
    begin, end, strides = (strided_slice.inputs[i].get_tensor_value() for i in (1, 2, 3))
    return begin == [0] and end == [1] and strides == [1] and strided_slice.get_attr_value("shrink_axis_mask") == 1


def _is_time_major_copy(graph, tensor) -> bool:
    """``tensor`` is also transposed with its first two axes swapped (Keras's time-major copy)."""
    for consumer in graph.find_output_consumers(tensor):
        if consumer.type == "Transpose" and len(consumer.input) == 2 and consumer.inputs[1].is_const():
            if list(consumer.inputs[1].get_tensor_value())[:2] == [1, 0]:
                return True
    return False


def _feeds_pfor(graph, node) -> bool:
    return any("/pfor/" in consumer.name for consumer in graph.find_output_consumers(node.output[0]))


def _scope(node) -> str:
    """The Keras layer's name: the scope the node is in ("functional_1/tagger_1/range" -> "tagger_1";
    a SavedModel's graph adds scopes in front)."""
    parts = node.name.split("/")
    return parts[-2] if len(parts) > 1 else node.name
