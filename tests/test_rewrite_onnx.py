# SPDX-License-Identifier: Apache-2.0
"""ONNX files in: a Keras model converted by stock tf2onnx, then rewritten with ``rewrite_onnx``, reaches
the native op counts of the same model converted with the plugin directly, and gives Keras's outputs at
every position on onnxruntime and OpenVINO, in both mask modes (and fails loudly in "post" on a mask
that is not post-padded). Both flavours run this file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import masked_lstm_rewriter as mlr
import runtimes
from kerasutil import FLAVOUR, LENGTHS, STEPS, assert_matches_keras, convert, keras, op_counts, randomize_weights
from models import FEATURES, UNITS, embedding_model, explicit_mask_model, initial_state_model, masking_model

pytestmark = [pytest.mark.usefixtures("plugin_off"), pytest.mark.grid]
NATIVE = ("LSTM", "GRU", "RNN")


def _stacked_cells():
    return keras.layers.RNN([keras.layers.LSTMCell(UNITS), keras.layers.GRUCell(3)], return_sequences=True)


def _unmasked_gru():
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="features")
    model = randomize_weights(keras.Model(x_in, keras.layers.GRU(UNITS, return_sequences=True)(x_in)))
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    return model, spec, [np.random.default_rng(0).normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)]


def _repeat_vector():
    """An encoder's last output repeated as a decoder's steps (an autoencoder, addition_rnn): Keras 3
    writes the repeated steps' number as a constant inside a reshape's computed shape."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="features")
    encoded = keras.layers.RepeatVector(4)(keras.layers.SimpleRNN(UNITS)(x_in))
    model = randomize_weights(keras.Model(x_in, keras.layers.SimpleRNN(3, return_sequences=True)(encoded)))
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    return model, spec, [np.random.default_rng(0).normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)]


MODELS = {
    "lstm": lambda: embedding_model(keras.layers.LSTM(UNITS, return_sequences=True)),
    "gru": lambda: embedding_model(keras.layers.GRU(UNITS, return_sequences=True)),
    "gru_reset_before": lambda: embedding_model(keras.layers.GRU(UNITS, return_sequences=True, reset_after=False)),
    "simple_rnn_last": lambda: embedding_model(keras.layers.SimpleRNN(UNITS)),
    "go_backwards": lambda: embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, go_backwards=True)),
    "bidirectional": lambda: embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True))),
    "stack": lambda: embedding_model(keras.layers.LSTM(UNITS, return_sequences=True), keras.layers.GRU(3)),
    "stacked_cells": lambda: embedding_model(_stacked_cells()),
    "masking_return_state": lambda: masking_model(keras.layers.GRU(UNITS, return_sequences=True, return_state=True)),
    "masking_clipped_relu": lambda: masking_model(keras.layers.ReLU(max_value=1.0), keras.layers.LSTM(UNITS)),
    "explicit_mask": lambda: explicit_mask_model(keras.layers.LSTM(UNITS, return_sequences=True)),
    "initial_state": lambda: initial_state_model(keras.layers.LSTM(UNITS, return_sequences=True)),
    "unmasked_gru": _unmasked_gru,
    "repeat_vector": _repeat_vector,
}


def _natives(onnx_model) -> dict:
    counts = op_counts(onnx_model)
    return {op: counts[op] for op in NATIVE + ("Loop",) if counts[op]}


def _pre_padded(inputs: list) -> list:
    """The batch with each row's valid steps moved to its end (and a hole in the first row)."""
    moved = []
    for value in inputs:
        if value.ndim >= 2 and value.shape[1] == STEPS:
            value = np.stack([np.roll(row, STEPS - length, axis=0) for row, length in zip(value, LENGTHS)])
            if value.dtype == bool:
                value[0, 2] = False
            elif np.issubdtype(value.dtype, np.integer):
                value[0, 2] = 0
        moved.append(value)
    return moved


def _runtimes(report) -> list:
    refused = {runtime for layer in report.layers for runtime in layer.not_for}
    return [runtime for runtime in runtimes.runtimes() if runtime not in refused]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_stock_files_rewritten_equal_keras_and_the_direct_conversion(name, mode):
    model, spec, inputs = MODELS[name]()
    stock = convert(model, spec, rewriter=None)
    if name == "unmasked_gru" and FLAVOUR == "tf_keras":
        assert not op_counts(stock)["Loop"]
        pytest.skip("stock tf2onnx makes tf_keras's GRU native: there is no Loop to rewrite")
    assert op_counts(stock)["Loop"], "stock tf2onnx makes a Loop of this model"
    direct = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    rewritten, report = mlr.rewrite_onnx(stock, mask_mode=mode)
    assert _natives(rewritten) == _natives(direct), (str(report), _natives(rewritten), _natives(direct))
    assert "Loop" not in _natives(rewritten) and not report.left_as_loop, str(report)
    batches = [inputs] + ([_pre_padded(inputs)] if mode == "any" and any(layer.masked for layer in report.layers)
                          else [])
    for runtime in _runtimes(report):
        for batch in batches:
            assert_matches_keras(model, rewritten, spec, batch, runtime)
    if mode == "post" and any(layer.masked for layer in report.layers):
        feeds = {s.name: np.asarray(x) for s, x in zip(spec, _pre_padded(inputs))}
        with pytest.raises(Exception, match="not post-padded"):
            runtimes.run_onnxruntime(rewritten, feeds)


@pytest.mark.skipif(FLAVOUR != "keras3", reason="model.export(format='onnx') is Keras 3's")
@pytest.mark.parametrize("name", ["bidirectional", "initial_state", "masking_return_state", "stack"])
def test_files_of_keras_own_export_rewritten_equal_keras(name, tmp_path):
    """Keras 3's ``model.export(format="onnx")`` on the TensorFlow backend, without the plugin: stock
    tf2onnx's Loops, traced by Keras's own export, become native and give Keras's outputs."""
    model, spec, inputs = MODELS[name]()
    model(inputs if len(inputs) > 1 else inputs[0])  # Keras exports only a model that has been called
    path = tmp_path / "model.onnx"
    model.export(str(path), format="onnx", input_signature=[list(spec) if len(spec) > 1 else spec[0]], verbose=False)
    stock = onnx.load(str(path))
    assert op_counts(stock)["Loop"], "Keras's export makes a Loop of this model"
    rewritten, report = mlr.rewrite_onnx(stock)
    assert "Loop" not in _natives(rewritten) and not report.left_as_loop, str(report)
    for runtime in _runtimes(report):
        assert_matches_keras(model, rewritten, spec, inputs, runtime)


def test_a_masked_convolutional_layer_stays_a_loop_with_the_conversion_s_reason():
    """ConvLSTM1D with a mask: the file's Loop is kept byte for byte, reported with the reason a
    conversion gives (not skipped silently as a loop of no recurrent layer)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    keras.utils.set_random_seed(0)
    frames, mask = keras.Input((STEPS, 5, 1), name="frames"), keras.Input((STEPS,), dtype="bool", name="mask")
    outputs = keras.layers.ConvLSTM1D(2, 3, padding="same")(frames, mask=mask)
    model = keras.Model([frames, mask], outputs)
    spec = (tf.TensorSpec((None, STEPS, 5, 1), tf.float32, name="frames"),
            tf.TensorSpec((None, STEPS), tf.bool, name="mask"))
    stock = convert(model, spec, rewriter=None)
    rewritten, report = mlr.rewrite_onnx(stock)
    assert [(layer.rewritten, layer.masked) for layer in report.layers] == [(False, True)], str(report)
    assert "convolves its input and state" in report.layers[0].detail
    loops = [node.SerializeToString() for node in stock.graph.node if node.op_type == "Loop"]
    assert [node.SerializeToString() for node in rewritten.graph.node if node.op_type == "Loop"] == loops


def test_rewriting_twice_changes_nothing():
    model, spec, _ = MODELS["lstm"]()
    once, _ = mlr.rewrite_onnx(convert(model, spec, rewriter=None))
    twice, report = mlr.rewrite_onnx(once)
    assert not report.layers and twice.SerializeToString() == once.SerializeToString()


@pytest.mark.skipif(FLAVOUR != "keras3", reason="tf_keras's GRU is native in stock tf2onnx")
def test_the_unmasked_gru_is_reported_without_a_mask():
    model, spec, _ = MODELS["unmasked_gru"]()
    _, report = mlr.rewrite_onnx(convert(model, spec, rewriter=None))
    assert [layer.masked for layer in report.layers] == [False]
