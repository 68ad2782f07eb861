# SPDX-License-Identifier: Apache-2.0
"""The time axis reader (``read/time_axis.py``): where a layer's number of steps can be read off.

A loop whose stop condition holds the static number of steps as a constant (Keras 3's
``maximum_iterations`` with a static time axis) is rewritten only when the input's static length is
found. A ``Dense`` layer over a sequence (``tf.tensordot``: a Reshape to ``shape(x)[:-1] + [units]``,
then a bias) hides it from tf2onnx's shapes when the batch is dynamic, so the reader follows the
reshape's shape back to its input's axis.
"""

import numpy as np
import tensorflow as tf

from masked_lstm_rewriter.read.time_axis import time_axis_of

import _graphs as G

STEPS, FEATURES, UNITS = 7, 3, 4


def _read_time_axis(fn, signature) -> list:
    """The TimeAxis of the time-major tensor (the Transpose's output) of each graph tf2onnx hands a
    custom rewriter, with the static lengths tf2onnx knows of the tensors on the way."""
    found = []

    def capture(graph, ops):
        for node in ops:
            if node.type == "Transpose":
                found.append((time_axis_of(graph, [node.output[0]]), graph.get_shape(node.input[0])))
        return ops

    G.tf2onnx.convert.from_function(fn, input_signature=signature, opset=G.OPSET, custom_rewriter=[capture])
    return found


def test_the_static_length_is_read_through_a_dense_layer():
    rng = np.random.default_rng(0)
    kernel, bias = rng.normal(size=(FEATURES, UNITS)).astype(np.float32), np.ones(UNITS, np.float32)

    def fn(x):
        dense = tf.nn.bias_add(tf.tensordot(x, kernel, [[2], [0]]), bias)
        return tf.transpose(dense, [1, 0, 2])

    signature = [tf.TensorSpec([None, STEPS, FEATURES], tf.float32, name="x")]
    (axis, dense_shape), = _read_time_axis(tf.function(fn, input_signature=signature, autograph=False), signature)
    assert dense_shape is None or dense_shape[1] in (None, -1), "tf2onnx knows the length: nothing to test"
    assert axis.steps == STEPS and ("x", 1) in axis.dims, axis


def test_a_reshape_reads_the_input_axis_its_shape_names():
    """A Reshape that puts the input's batch axis where the time axis goes is as long as that axis, not
    as the input's time axis: no static number of steps comes of it."""
    def fn(x):
        return tf.transpose(tf.reshape(tf.reshape(x, [-1, FEATURES]), tf.stack([-1, tf.shape(x)[0], FEATURES])),
                            [1, 0, 2])

    signature = [tf.TensorSpec([None, STEPS, FEATURES], tf.float32, name="x")]
    (axis, _), = _read_time_axis(tf.function(fn, input_signature=signature, autograph=False), signature)
    assert axis.steps is None and ("x", 0) in axis.dims and ("x", 1) not in axis.dims, axis


def test_the_static_length_is_read_through_an_activation_and_a_squeeze():
    """A Dense layer's activation and a squeezed axis keep the time axis: the walk follows both back
    to the input (graph.axis_source)."""
    kernel = np.ones((FEATURES, UNITS), np.float32)

    def fn(x):
        dense = tf.math.sigmoid(tf.tensordot(x, kernel, [[2], [0]]))
        return tf.transpose(tf.squeeze(tf.expand_dims(dense, 0), [0]), [1, 0, 2])

    signature = [tf.TensorSpec([None, STEPS, FEATURES], tf.float32, name="x")]
    (axis, _), = _read_time_axis(tf.function(fn, input_signature=signature, autograph=False), signature)
    assert axis.steps == STEPS and ("x", 1) in axis.dims, axis
