# SPDX-License-Identifier: Apache-2.0
"""Keras layers without a mask that stock tf2onnx leaves as Loops become native ops, exact at every
position; the layers stock already makes native keep stock's graph.

Measured with tf2onnx 1.17 (Keras 3: GRU, GRU(reset_after=False), SimpleRNN, Bidirectional(GRU)
and LSTM(recurrent_activation="hard_sigmoid") stay Loops; tf_keras: GRU(reset_after=False) and
SimpleRNN do).
"""

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import FLAVOUR, check_conversion, convert, keras, op_counts, randomize_weights
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr
import runtimes

STEPS = 6
LAYERS = {
    "gru": (lambda: keras.layers.GRU(UNITS, return_sequences=True), {"GRU": 1}),
    "gru_reset_before": (lambda: keras.layers.GRU(UNITS, reset_after=False, return_sequences=True), {"GRU": 1}),
    "gru_backwards_last": (lambda: keras.layers.GRU(UNITS, go_backwards=True), {"GRU": 1}),
    "simple_rnn": (lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True), {"RNN": 1}),
    "simple_rnn_state": (lambda: keras.layers.SimpleRNN(UNITS, return_state=True), {"RNN": 1}),
    # tf_keras: stock tf2onnx makes one bidirectional node of it (kept as it is)
    "bidirectional_gru": (lambda: keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True)),
                          {"GRU": 1 if FLAVOUR == "tf_keras" else 2}),
    "bidirectional_simple_rnn": (lambda: keras.layers.Bidirectional(keras.layers.SimpleRNN(UNITS), merge_mode="sum"),
                                 {"RNN": 2}),
    "lstm_hard_sigmoid": (lambda: keras.layers.LSTM(UNITS, recurrent_activation="hard_sigmoid",
                                                    return_sequences=True), {"LSTM": 1}),
    "stacked": (lambda: keras.Sequential([keras.layers.GRU(UNITS, return_sequences=True),
                                          keras.layers.SimpleRNN(UNITS, return_sequences=True)]),
                {"GRU": 1, "RNN": 1}),
}


def unmasked_model(name):
    make, ops = LAYERS[name]
    inputs = keras.Input((None, FEATURES), name="features")
    outputs = make()(inputs)
    model = keras.Model(inputs, outputs)
    randomize_weights(model)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    batch = np.random.default_rng(0).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    return model, spec, [batch], ops


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_native_and_exact(name, monkeypatch):
    model, spec, inputs, ops = unmasked_model(name)
    if name == "lstm_hard_sigmoid" and FLAVOUR == "tf_keras":  # stock's native LSTM: OpenVINO compiles no
        monkeypatch.setattr(runtimes, "runtimes", lambda: ("onnxruntime",))  # HardSigmoid in it
    onnx_model = check_conversion(model, spec, inputs, ops=ops)
    counts = op_counts(onnx_model)
    assert not counts["Split"] and not counts["ScatterElements"] and not counts["CumSum"], counts  # no guard, no reorder
    assert all(not layer.masked for layer in mlr.last_report().layers), mlr.last_report()


def test_where_stock_is_native_its_graph_is_kept():
    inputs = keras.Input((None, FEATURES), name="features")
    model = keras.Model(inputs, keras.layers.LSTM(UNITS, return_sequences=True)(inputs))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    stock, rewritten = convert(model, spec, rewriter=None), convert(model, spec)
    assert [n.op_type for n in stock.graph.node] == [n.op_type for n in rewritten.graph.node]
    assert mlr.last_report().layers == ()
    assert op_counts(rewritten)["LSTM"] == 1, FLAVOUR
