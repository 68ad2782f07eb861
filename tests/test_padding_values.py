# SPDX-License-Identifier: Apache-2.0
"""Padded steps holding +inf, -inf, 1e30 or NaN.

Keras skips a masked step with ``where``: whatever the input holds there never reaches an output.
Stock tf2onnx turns the loop's ``SelectV2`` into arithmetic (``mask * new + (1 - mask) * old``), so
an infinite padding value becomes NaN in its ``Loop`` (``0 * inf``). The plugin selects every
mask-derived value with ``Where`` (and moves steps with ``Gather`` / ``ReverseSequence``), never
arithmetic, so its model gives Keras's numbers at every position.

A ``Masking`` layer cannot mask inf (it multiplies its input by the mask, NaN in Keras itself), so
the mask comes the ways users bring one with such data: a boolean mask model input, or token ids
(``ids > 0``, passed as ``mask=``) whose embeddings are concatenated with float features. (Keras 3's
``Concatenate`` would not carry the ``Embedding``'s own mask: it joins the masks with ``any``, and
the features have none, so every step would count as valid; tf_keras joins them with ``all``.)
"""

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import (LENGTHS, STEPS, check_batches, convert, keras, keras_outputs, mask_from_lengths, oracle_outputs,
                       onnx_outputs, post_padded_tokens, randomize_weights)
from models import FEATURES, UNITS, token_mask

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

VALUES = {"+inf": np.inf, "-inf": -np.inf, "1e30": 1e30, "nan": np.nan}
MODES = ["post", "any"]
K = keras.layers

LAYERS = {
    "lstm": (lambda: K.LSTM(UNITS, return_sequences=True, return_state=True), {"LSTM": 1}),
    "gru go_backwards": (lambda: K.GRU(UNITS, go_backwards=True, return_sequences=True, return_state=True),
                         {"GRU": 1}),
    "simple_rnn": (lambda: K.SimpleRNN(UNITS, return_sequences=True), {"RNN": 1}),
    "bidirectional lstm": (lambda: K.Bidirectional(K.LSTM(UNITS, return_sequences=True, return_state=True)),
                           {"LSTM": 2}),
    "stacked cells go_backwards": (lambda: K.RNN([K.LSTMCell(UNITS), K.GRUCell(3)], go_backwards=True,
                                                 return_sequences=True, return_state=True), {"LSTM": 1, "GRU": 1}),
}


def mask_for(mode):
    """[B, T] bool: post-padded rows for "post"; for "any" also pre-padded and holed rows. Both
    with a full row, an empty row and rows of different lengths."""
    if mode == "post":
        return mask_from_lengths(LENGTHS, STEPS)
    return np.array([[1, 1, 1, 1, 1, 1, 1],
                     [0, 0, 0, 0, 1, 1, 1],
                     [0, 0, 0, 0, 0, 0, 0],
                     [1, 0, 1, 0, 0, 1, 0],
                     [0, 1, 1, 1, 1, 1, 0]], bool)


def padded_features(mask, value, seed=0):
    x = np.random.default_rng(seed).normal(size=mask.shape + (FEATURES,)).astype(np.float32)
    x[~mask] = value
    return x


def flat(outputs):
    return tf.nest.flatten(outputs)


def explicit_mask_model(layer, mask, seed=0):
    """Features and a boolean mask input, passed as ``mask=``; (model, spec, value -> inputs)."""
    keras.utils.set_random_seed(seed)
    features = keras.Input((None, FEATURES), name="features")
    mask_in = keras.Input((None,), dtype="bool", name="mask")
    model = randomize_weights(keras.Model([features, mask_in], flat(layer(features, mask=mask_in))), seed)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
            tf.TensorSpec((None, None), tf.bool, name="mask"))
    return model, spec, lambda value: [padded_features(mask, value, seed), mask]


def tokens_and_features_model(layer, mask, seed=0):
    """Token ids -> Embedding, concatenated with float features; the mask ``ids > 0``."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    features = keras.Input((None, FEATURES), name="features")
    x = K.Concatenate()([K.Embedding(50, 2)(tokens), features])
    model = randomize_weights(keras.Model([tokens, features], flat(layer(x, mask=token_mask(tokens)))), seed)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),
            tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"))
    ids = np.where(mask, post_padded_tokens([STEPS] * len(mask), STEPS, 50, seed), 0).astype(np.int32)
    return model, spec, lambda value: [ids, padded_features(mask, value, seed)]


def assert_keras_is_finite(model, inputs):
    """The test means something only if Keras's own outputs are finite."""
    assert all(np.all(np.isfinite(out)) for out in oracle_outputs(model, inputs))


def check_every_value(build, name, mode):
    """The model built by ``build`` over a batch padded with each of VALUES, one batch each (the model
    is converted once per signature form)."""
    layer, ops = LAYERS[name]
    model, spec, inputs_for = build(layer(), mask_for(mode))
    batches = [inputs_for(value) for value in VALUES.values()]
    for inputs in batches:
        assert_keras_is_finite(model, inputs)
    check_batches(model, spec, batches, rewriter=mlr.make_rewriter(mode), ops=ops)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(LAYERS))
def test_explicit_mask_over_extreme_padding(name, mode):
    check_every_value(explicit_mask_model, name, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["lstm", "gru go_backwards", "bidirectional lstm"])
def test_embedding_mask_with_float_features_over_extreme_padding(name, mode):
    check_every_value(tokens_and_features_model, name, mode)


def test_stock_loop_turns_infinite_padding_into_nan():
    """Why this matters (pinned: fails if tf2onnx changes): stock tf2onnx's Loop gives NaN where
    Keras, and the plugin's model, give finite numbers."""
    model, spec, inputs_for = explicit_mask_model(K.LSTM(UNITS, return_sequences=True), mask_for("post"))
    inputs = inputs_for(-np.inf)
    stock = onnx_outputs(convert(model, spec, rewriter=None), spec, inputs)[0]
    assert np.isnan(stock).any()
    plugin = onnx_outputs(convert(model, spec), spec, inputs)[0]
    np.testing.assert_allclose(plugin, keras_outputs(model, inputs)[0], atol=1e-5)


def test_mask_derived_values_are_selected_with_where():
    """Between the input and the outputs, the plugin's model multiplies nothing: every op that reads a
    mask-derived tensor and a float tensor is a Where."""
    model, spec, _ = explicit_mask_model(K.Bidirectional(K.LSTM(UNITS, return_sequences=True, return_state=True)),
                                         mask_for("post"))
    for mode in MODES:
        onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
        arithmetic = [n.op_type for n in onnx_model.graph.node if n.op_type in ("Mul", "Add", "Sub", "Div")
                      and _reads_float_data(onnx_model, n)]
        # Keras's own Bidirectional concat is a Concat; nothing else adds or multiplies float data
        assert not arithmetic, arithmetic


def _reads_float_data(onnx_model, node):
    """Does ``node`` read a float tensor (what the model computes from the features)?"""
    import onnx  # pylint: disable=import-outside-toplevel
    inferred = onnx.shape_inference.infer_shapes(onnx_model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    types.update({i.name: i.data_type for i in onnx_model.graph.initializer})
    return any(types.get(t) == onnx.TensorProto.FLOAT for t in node.input)
