# SPDX-License-Identifier: Apache-2.0
"""Models off the beaten track: half precision, subclassed models, several masks, shared masks,
long sequences and large batches. Keras is the oracle, at every output position."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import (FLAVOUR, assert_matches_keras, assert_native, check_conversion, convert, keras,
                       keras_outputs, mask_from_lengths, onnx_outputs, op_counts, post_padded_tokens,
                       randomize_weights, token_spec)
from models import FEATURES, UNITS, embedding_model

import masked_lstm_rewriter as mlr

FLOAT16_ATOL = 5e-3  # float16 has 11 significant bits: Keras and the Loop round differently


def half_precision(policy):
    """A layer dtype: "float16", or the "mixed_float16" policy (float16 compute, float32 variables)."""
    if policy == "mixed_float16" and FLAVOUR == "tf_keras":
        return keras.mixed_precision.Policy(policy)
    return policy


@pytest.mark.parametrize("policy", ["float16", "mixed_float16"])
def test_half_precision_stays_a_loop_with_a_reason(caplog, policy):
    """Only float32 is proven exact: a float16 layer stays tf2onnx's Loop, which matches Keras."""
    model, spec, inputs = embedding_model(
        keras.layers.LSTM(UNITS, return_sequences=True, dtype=half_precision(policy)))
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert counts["Loop"] == 1 and counts["LSTM"] == 0, counts
    (layer,) = mlr.last_report().left_as_loop
    assert "float32" in layer.detail, layer
    assert any("left as a Loop" in r.getMessage() and "float32" in r.getMessage() for r in caplog.records)
    expected = keras_outputs(model, inputs)
    got = onnx_outputs(onnx_model, spec, inputs)
    assert expected[0].dtype == got[0].dtype == np.float16
    error = float(np.max(np.abs(expected[0].astype(np.float32) - got[0].astype(np.float32))))
    assert error <= FLOAT16_ATOL, error


def subclassed_model():
    class Tagger(keras.Model):  # pylint: disable=abstract-method
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(50, FEATURES, mask_zero=True)
            self.encode = keras.layers.LSTM(UNITS, return_sequences=True)
            self.tag = keras.layers.Dense(3)

        def call(self, tokens):  # pylint: disable=arguments-differ
            return self.tag(self.encode(self.embed(tokens)))

    return Tagger()


@pytest.mark.parametrize("mode", ["post", "any"])
def test_masked_lstm_inside_a_subclassed_model(mode):
    keras.utils.set_random_seed(0)
    model = subclassed_model()
    tokens = post_padded_tokens([7, 3, 0, 1, 6], 7)
    model(tokens)  # builds the layers
    randomize_weights(model)
    check_conversion(model, (token_spec(),), [tokens], rewriter=mlr.make_rewriter(mode), ops={"LSTM": 1})


def test_two_independent_masks():
    """Two inputs, each with its own Embedding mask and LSTM: two LSTMs, two guards, each its own lengths."""
    keras.utils.set_random_seed(0)
    words = keras.Input((None,), dtype="int32", name="words")
    chars = keras.Input((None,), dtype="int32", name="chars")
    a = keras.layers.LSTM(UNITS)(keras.layers.Embedding(50, FEATURES, mask_zero=True)(words))
    b = keras.layers.LSTM(UNITS + 1, return_state=True)(keras.layers.Embedding(30, FEATURES, mask_zero=True)(chars))
    model = randomize_weights(keras.Model([words, chars], [keras.layers.Concatenate()([a, b[0]]), b[2]]))
    spec = (token_spec("words"), token_spec("chars"))
    inputs = [post_padded_tokens([7, 3, 0, 1, 6], 7, seed=1), post_padded_tokens([0, 9, 9, 2, 5], 9, vocab=30, seed=2)]
    onnx_model = check_conversion(model, spec, inputs, ops={"LSTM": 2})
    guards = [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert len(guards) == 2
    # a pre-padded row in either input is refused
    for index in range(2):
        bad = [x.copy() for x in inputs]
        bad[index] = bad[index][:, ::-1].copy()
        with pytest.raises(Exception, match="not post-padded"):
            onnx_outputs(onnx_model, spec, bad)


def test_a_mask_consumed_by_other_layers_too():
    """The Embedding's mask also drives a masked average pooling of the same embeddings.

    No all-padding row here: Keras's masked average of an empty row is 0/0 = NaN itself."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(50, FEATURES, mask_zero=True)(tokens)
    sequence = keras.layers.LSTM(UNITS, return_sequences=True)(embedded)
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    summary = keras.layers.GlobalAveragePooling1D()(sequence)
    model = randomize_weights(keras.Model(tokens, [sequence, keras.layers.Concatenate()([pooled, summary])]))
    check_conversion(model, (token_spec(),), [post_padded_tokens([7, 3, 1, 6, 2], 7)], ops={"LSTM": 1})


def test_very_long_sequences():
    """T=2000: the error stays within 1e-5 over the whole sequence (padded steps included)."""
    steps = 2000
    model, spec, _ = embedding_model(keras.layers.LSTM(2, return_sequences=True, return_state=True))
    tokens = post_padded_tokens([steps, 1000, 0, 1, 1999], steps)
    onnx_model = convert(model, spec)
    assert_native(onnx_model)
    # traced, Keras runs the 2000 steps in a graph instead of one eager step at a time (same numbers)
    traced = tf.function(lambda x, training=False: model(x, training=training))
    assert_matches_keras(traced, onnx_model, spec, [tokens])


def test_batch_of_512():
    rng = np.random.default_rng(0)
    steps = 20
    lengths = rng.integers(0, steps + 1, size=512)
    lengths[:3] = [steps, 0, 1]
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    onnx_model = convert(model, spec)
    assert_native(onnx_model, lstm=2)
    assert_matches_keras(model, onnx_model, spec, [post_padded_tokens(lengths, steps)])


def test_explicit_masks_of_two_inputs_of_different_lengths():
    """Two explicit boolean masks over float inputs of different lengths, "any" mode, holes included."""
    keras.utils.set_random_seed(0)
    x1 = keras.Input((None, FEATURES), name="x1")
    m1 = keras.Input((None,), dtype="bool", name="m1")
    x2 = keras.Input((None, FEATURES), name="x2")
    m2 = keras.Input((None,), dtype="bool", name="m2")
    a = keras.layers.LSTM(UNITS, go_backwards=True)(x1, mask=m1)
    b = keras.layers.LSTM(UNITS)(x2, mask=m2)
    model = randomize_weights(keras.Model([x1, m1, x2, m2], keras.layers.Concatenate()([a, b])))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="x1"), tf.TensorSpec((None, None), tf.bool, name="m1"),
            tf.TensorSpec((None, None, FEATURES), tf.float32, name="x2"), tf.TensorSpec((None, None), tf.bool, name="m2"))
    rng = np.random.default_rng(0)
    mask2 = mask_from_lengths([4, 0, 2, 1, 3], 4)
    mask2[0, 1] = False  # a hole
    inputs = [rng.normal(size=(5, 6, FEATURES)).astype(np.float32), mask_from_lengths([6, 3, 0, 1, 5], 6)[:, ::-1].copy(),
              rng.normal(size=(5, 4, FEATURES)).astype(np.float32), mask2]
    check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter("any"), ops={"LSTM": 2})
