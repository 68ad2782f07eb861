# SPDX-License-Identifier: Apache-2.0
"""What the rewriter does not (yet) handle stays tf2onnx's Loop, with a logged reason."""

import logging

import pytest

from kerasutil import assert_matches_keras, convert, keras, op_counts
from models import UNITS, embedding_model


def warnings_for(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "masked_lstm_rewriter" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("layer", [
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, go_backwards=True),
    lambda: keras.layers.GRU(UNITS, return_sequences=True),
    lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, dtype="float64"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, activation="swish"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="selu"),
], ids=["go_backwards", "gru", "simple_rnn", "float64", "swish", "selu"])
def test_unsupported_layer_stays_a_loop_and_is_logged(caplog, layer):
    model, spec, inputs = embedding_model(layer())
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert counts["Loop"] == 1 and counts["LSTM"] == 0, counts
    warnings = warnings_for(caplog)
    assert len(warnings) == 1 and "left as a Loop" in warnings[0], warnings
    assert_matches_keras(model, onnx_model, spec, inputs)


@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_forward_half_is_rewritten_exactly(return_sequences):
    """Until backward layers are supported, a Bidirectional layer's forward half is rewritten
    alone (with return_sequences its masked outputs are zeros) and the backward half stays a
    Loop; the whole must still equal Keras."""
    layer = keras.layers.LSTM(UNITS, return_sequences=return_sequences, return_state=True)
    model, spec, inputs = embedding_model(keras.layers.Bidirectional(layer))
    onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert (counts["LSTM"], counts["Loop"]) == (1, 1), counts
    assert_matches_keras(model, onnx_model, spec, inputs)
