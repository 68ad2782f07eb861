# SPDX-License-Identifier: Apache-2.0
"""Masked unidirectional LSTMs: native ONNX LSTM, equal to Keras at every output position."""

import numpy as np
import pytest

from kerasutil import (assert_matches_keras, assert_native, check_conversion, convert, keras, randomize_weights, token_spec,
                       post_padded_tokens)
from models import (UNITS, computed_mask_model, embedding_model, explicit_mask_model, initial_state_model,
                    masking_model, token_mask)

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


def lstm(**options):
    return keras.layers.LSTM(UNITS, **options)


def check(model, spec, inputs, lstm_count=1, opset=15):
    return check_conversion(model, spec, inputs, ops={"LSTM": lstm_count}, opset=opset)


@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("return_state", [False, True])
def test_outputs_and_states(return_sequences, return_state):
    check(*embedding_model(lstm(return_sequences=return_sequences, return_state=return_state)))


@pytest.mark.parametrize("activation, recurrent_activation", [
    ("tanh", "sigmoid"), ("tanh", "hard_sigmoid"), ("relu", "sigmoid"), ("softsign", "hard_sigmoid"),
    ("linear", "sigmoid"), ("elu", "sigmoid"), ("hard_sigmoid", "sigmoid"),
    ("elu", "hard_sigmoid"), ("linear", "hard_sigmoid")])
def test_activations(activation, recurrent_activation):
    check(*embedding_model(lstm(activation=activation, recurrent_activation=recurrent_activation,
                                return_sequences=True)))


@pytest.mark.parametrize("options", [dict(use_bias=False), dict(unit_forget_bias=False),
                                     dict(dropout=0.3), dict(recurrent_dropout=0.3),
                                     dict(dropout=0.2, recurrent_dropout=0.2, return_state=True)],
                         ids=lambda o: ",".join(o))
def test_layer_options(options):
    check(*embedding_model(lstm(return_sequences=True, **options)))


@pytest.mark.parametrize("mask_value", [0.0, -1.5])
def test_masking_layer(mask_value):
    check(*masking_model(lstm(return_sequences=True), mask_value=mask_value))


@pytest.mark.parametrize("return_sequences", [True, False])
def test_explicit_mask_input(return_sequences):
    check(*explicit_mask_model(lstm(return_sequences=return_sequences, return_state=True)))


def test_mask_computed_in_graph():
    check(*computed_mask_model(lstm(return_sequences=True)))


@pytest.mark.parametrize("return_sequences", [True, False])
def test_initial_state(return_sequences):
    """Rows with no valid step keep the given initial state (onnxruntime alone would give zeros)."""
    check(*initial_state_model(lstm(return_sequences=return_sequences, return_state=True)))


def test_stacked_layers_share_one_mask_computation():
    model, spec, inputs = embedding_model(lstm(return_sequences=True), lstm(return_sequences=True,
                                                                            return_state=True))
    onnx_model = check(model, spec, inputs, lstm_count=2)
    guards = [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert len(guards) == 1


@pytest.mark.parametrize("opset", [13, 14, 15, 16, 17, 18])
def test_opsets(opset):
    check(*embedding_model(lstm(return_sequences=True, return_state=True)), opset=opset)


def test_dynamic_batch_and_time():
    """One converted model serves batches of 1 to 64 rows and any number of steps."""
    model, spec, _ = embedding_model(lstm(return_sequences=True, return_state=True))
    onnx_model = convert(model, spec)
    assert_native(onnx_model)
    rng = np.random.default_rng(1)
    for batch, steps in [(1, 1), (1, 9), (2, 3), (17, 12), (64, 30)]:
        lengths = rng.integers(0, steps + 1, size=batch)
        lengths[0] = steps
        if batch > 2:
            lengths[1] = 0
        assert_matches_keras(model, onnx_model, spec, [post_padded_tokens(lengths, steps, seed=batch)])


def test_dense_head_after_last_output():
    """A classifier head on the last output: the typical text model."""
    check(*embedding_model(lstm(), keras.layers.Dense(2, activation="softmax")))


def test_encoder_decoder_states_as_initial_state():
    """seq2seq: the decoder starts from the masked encoder's final states (rows with empty input
    give the encoder's zeros; rows with empty target keep the encoder's states)."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    _, h, c = keras.layers.LSTM(UNITS, return_state=True)(keras.layers.Embedding(30, 3, mask_zero=True)(source))
    decoded = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)(
        keras.layers.Embedding(30, 3, mask_zero=True)(target), initial_state=[h, c], mask=token_mask(target))
    model = randomize_weights(keras.Model([source, target], decoded))
    spec = (token_spec("source"), token_spec("target"))
    inputs = [post_padded_tokens([5, 0, 2, 5], 5, 30, seed=1), post_padded_tokens([4, 3, 0, 1], 4, 30, seed=2)]
    check(model, spec, inputs, lstm_count=2)
