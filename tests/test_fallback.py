# SPDX-License-Identifier: Apache-2.0
"""What the rewriter does not (yet) handle stays tf2onnx's Loop, with a logged reason."""

import logging

import pytest
import tensorflow as tf

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


# --- reasons say which part was not understood ---------------------------------------------------

class _LstmLikeCell(keras.layers.Layer):
    """The LSTM step written out by hand, with a peephole on the input gate (``i = sigmoid(... + c * p)``)
    or without the recurrent product: custom cells the matcher must refuse, saying why."""

    def __init__(self, units, variant, **kwargs):
        super().__init__(**kwargs)
        self.units, self.variant = units, variant
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4 * self.units), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, 4 * self.units), name="recurrent_kernel")
        self.bias = self.add_weight(shape=(4 * self.units,), name="bias")
        self.peephole = self.add_weight(shape=(self.units,), name="peephole")
        self.built = True

    def call(self, inputs, states):  # pylint: disable=arguments-differ
        h, c = states[0], states[1]
        z = tf.matmul(inputs, self.kernel) + self.bias
        if self.variant != "no recurrent term":
            z = z + tf.matmul(h, self.recurrent_kernel)
        i, f, g, o = tf.split(z, 4, axis=-1)
        if self.variant == "peephole":
            i = i + c * self.peephole
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, [h, c]


def left_as_loop_reason(layer):
    model, spec, inputs = embedding_model(layer)
    onnx_model = convert(model, spec)
    assert op_counts(onnx_model)["Loop"] == 1
    assert_matches_keras(model, onnx_model, spec, inputs)
    (left,) = mlr.last_report().left_as_loop
    return left.detail


@pytest.mark.parametrize("layer, reason", [
    (lambda: keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="swish"),
     "a gate's activation is not one ONNX LSTM supports (it is computed by Mul)"),
    (lambda: keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="selu"),
     "a gate's activation is not one ONNX LSTM supports (it is computed by Selu)"),
    (lambda: keras.layers.GRU(UNITS, return_sequences=True, activation="swish"),
     "a gate's activation is not one ONNX GRU supports (it is computed by Mul)"),
    (lambda: keras.layers.GRU(UNITS, return_sequences=True, reset_after=False, recurrent_activation="selu"),
     "a gate's activation is not one ONNX GRU supports (it is computed by Selu)"),
    (lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True, activation="selu"),
     "a gate's activation is not one ONNX RNN supports (it is computed by Selu)"),
    (lambda: keras.layers.RNN(_LstmLikeCell(UNITS, "peephole"), return_sequences=True),
     "a gate's pre-activation is computed by Mul, which the matcher does not read"),
    (lambda: keras.layers.RNN(_LstmLikeCell(UNITS, "no recurrent term"), return_sequences=True),
     "a gate's pre-activation has no h @ R term"),
], ids=["lstm swish", "lstm selu", "gru swish", "gru reset_after=False selu", "simple_rnn selu", "peephole",
        "no recurrent term"])
def test_the_reason_names_what_was_not_understood(layer, reason):
    """Activations are blamed only when they are the unsupported part; otherwise the op the matcher
    could not read is named."""
    detail = left_as_loop_reason(layer())
    assert detail == reason
    if "pre-activation" in reason:
        assert "activation ONNX" not in detail and "unsupported activation" not in detail


# --- a layer whose native form would depend on how a runtime treats padded steps ------------------

def test_a_masked_convolutional_recurrent_layer_stays_a_loop_and_says_why():
    """ConvLSTM1D selects by its mask broadcast to the state: still a masked recurrent loop, reported."""
    inputs = keras.Input(shape=(None, 6, 2), name="x")
    layer = keras.layers.ConvLSTM1D(3, 3, padding="same", return_sequences=True, name="conv_lstm")
    model = keras.Model(inputs, layer(keras.layers.Masking()(inputs)))
    onnx_model, report = mlr.convert(model)
    assert op_counts(onnx_model)["Loop"] == 1
    (left,) = report.left_as_loop
    assert "conv_lstm" in left.layer, str(report)
    assert left.detail.startswith("the step convolves its input and state"), left.detail


@pytest.mark.parametrize("recurrent_activation", ["tanh", "relu"])
def test_cell_state_with_a_non_saturating_gate_stays_a_loop(caplog, recurrent_activation):
    """The final c is carried over padded steps by gates driven to exactly 0 and 1, which tanh and
    relu cannot reach: with c used, the layer stays a Loop (exact on every runtime); without, it
    is native."""
    layer = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True,
                              recurrent_activation=recurrent_activation)
    model, spec, inputs = embedding_model(layer)
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    assert op_counts(onnx_model)["Loop"] == 1
    reason = mlr.last_report().left_as_loop[0].detail
    assert "cannot hold it over padded steps" in reason and recurrent_activation in reason.lower(), reason
    assert any(reason in message for message in warnings_for(caplog))
    assert_matches_keras(model, onnx_model, spec, inputs)

    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True,
                                                            recurrent_activation=recurrent_activation))
    onnx_model = convert(model, spec)
    assert (op_counts(onnx_model)["Loop"], op_counts(onnx_model)["LSTM"]) == (0, 1)
    assert_matches_keras(model, onnx_model, spec, inputs)


def test_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="runtime must be one of onnxruntime, openvino, not 'tensorrt'"):
        mlr.make_rewriter("post", runtime="tensorrt")
