# SPDX-License-Identifier: Apache-2.0
"""What the rewriter does not (yet) handle stays tf2onnx's Loop, with a logged reason."""

import logging

import pytest

from kerasutil import assert_matches_keras, convert, keras, op_counts
from models import UNITS, embedding_model

import masked_lstm_rewriter as mlr


def warnings_for(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "masked_lstm_rewriter" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("layer", [
    lambda: keras.layers.GRU(UNITS, return_sequences=True, activation="swish"),
    lambda: keras.layers.GRU(UNITS, return_sequences=True, recurrent_activation="softmax"),
    lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True, activation="swish"),
    lambda: keras.layers.GRU(UNITS, return_sequences=True, dtype="float64"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, dtype="float64"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, activation="swish"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="selu"),
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="softplus"),
    lambda: keras.layers.GRU(UNITS, return_sequences=True, activation="softplus"),
    lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True, activation="softplus"),
], ids=["gru swish", "gru softmax", "simple_rnn swish", "gru float64", "float64", "swish", "selu",
        "lstm softplus", "gru softplus", "simple_rnn softplus"])
def test_unsupported_layer_stays_a_loop_and_is_logged(caplog, layer):
    model, spec, inputs = embedding_model(layer())
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert counts["Loop"] == 1 and counts["LSTM"] == counts["GRU"] == counts["RNN"] == 0, counts
    warnings = warnings_for(caplog)
    assert len(warnings) == 1 and "left as a Loop" in warnings[0], warnings
    assert mlr.last_report().left_as_loop[0].detail in warnings[0]
    assert_matches_keras(model, onnx_model, spec, inputs)
