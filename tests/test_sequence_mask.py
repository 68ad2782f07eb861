# SPDX-License-Identifier: Apache-2.0
"""Masks built by ``tf.sequence_mask(lengths, T)`` are post-padded by construction: no guard,
no reorder; where T is not provably the layer's number of steps the guard stays."""

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import assert_matches_keras, assert_native, check_conversion, convert, keras, onnx_outputs, randomize_weights
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


def lengths_model(maxlen, embedding, layer):
    """An LSTM masked by sequence_mask(lengths, maxlen) built in a Lambda layer."""
    keras.utils.set_random_seed(0)
    lengths = keras.Input((), dtype="int32", name="lengths")
    if embedding:
        x_in = keras.Input((None,), dtype="int32", name="x")
        x = keras.layers.Embedding(20, FEATURES)(x_in)
        x_spec = tf.TensorSpec((None, None), tf.int32, name="x")
    else:
        x_in = x = keras.Input((None, FEATURES), name="x")
        x_spec = tf.TensorSpec((None, None, FEATURES), tf.float32, name="x")

    def make_mask(args):
        ids, n = args
        if maxlen == "shape":
            return tf.sequence_mask(n, tf.shape(ids)[1])
        return tf.sequence_mask(n) if maxlen is None else tf.sequence_mask(n, maxlen)

    mask = keras.layers.Lambda(make_mask)([x_in, lengths])
    model = randomize_weights(keras.Model([x_in, lengths], layer(x, mask=mask)))
    return model, (x_spec, tf.TensorSpec((None,), tf.int32, name="lengths"))


def batch(embedding, steps=6, lengths=(6, 3, 0, 1, 9, -2)):
    rng = np.random.default_rng(0)
    shape = (len(lengths), steps) if embedding else (len(lengths), steps, FEATURES)
    x = rng.integers(1, 20, shape).astype(np.int32) if embedding else rng.normal(size=shape).astype(np.float32)
    return [x, np.array(lengths, np.int32)]


def guards(onnx_model):
    return [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]


LAYERS = {
    "forward": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True),
    "bidirectional": lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
}


@pytest.mark.parametrize("mask_mode", ["post", "any"])
@pytest.mark.parametrize("embedding", [False, True], ids=["features", "embedding"])
@pytest.mark.parametrize("layer", LAYERS)
def test_sequence_mask_over_the_input_length_needs_no_guard(mask_mode, embedding, layer):
    model, spec = lengths_model("shape", embedding, LAYERS[layer]())
    # lengths above T and below 0 are clipped by sequence_mask itself
    onnx_model = check_conversion(model, spec, batch(embedding), rewriter=mlr.make_rewriter(mask_mode),
                                  ops={"LSTM": 2 if layer == "bidirectional" else 1})
    assert not guards(onnx_model)
    assert not any(n.op_type == "ScatterElements" for n in onnx_model.graph.node), "no reorder needed"


@pytest.mark.parametrize("maxlen", [None, 6], ids=["max of lengths", "constant"])
def test_sequence_mask_with_unproven_length_keeps_the_guard(maxlen):
    """maxlen = max(lengths), or a constant while the input's length is dynamic: no proof."""
    model, spec = lengths_model(maxlen, False, LAYERS["forward"]())
    onnx_model = convert(model, spec)  # (not row by row: max(lengths) of a row is not T)
    assert_native(onnx_model)
    assert len(guards(onnx_model)) == 1
    assert_matches_keras(model, onnx_model, spec, batch(False, lengths=(6, 3, 0, 1, 6, 2)))


def test_an_ordinary_mask_keeps_the_guard():
    """A Less against a range that is not over lengths proves nothing."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="x")
    mask = keras.layers.Lambda(lambda x: tf.reduce_sum(x, axis=-1) < 1.0)(x_in)
    model = randomize_weights(keras.Model(x_in, keras.layers.LSTM(UNITS, return_sequences=True)(x_in, mask=mask)))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="x"),)
    onnx_model = convert(model, spec)
    assert len(guards(onnx_model)) == 1
    x = -np.abs(np.random.default_rng(1).normal(size=(3, 5, FEATURES))).astype(np.float32)
    x[1, 3:] = 5.0
    assert_matches_keras(model, onnx_model, spec, [x])
    x[0, 1] = 5.0  # a hole
    with pytest.raises(Exception, match="not post-padded"):
        onnx_outputs(onnx_model, spec, [x])
