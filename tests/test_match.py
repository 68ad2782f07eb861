# SPDX-License-Identifier: Apache-2.0
"""What the matcher reads off real tf2onnx graphs of Keras layers (both flavours)."""

import pytest

from kerasutil import FLAVOUR, convert, keras
from models import UNITS, embedding_model

from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.read.activation import Activation
from masked_lstm_rewriter.read.body import BodyMatch, is_masked_recurrent_body, read_body
from masked_lstm_rewriter.read.loop import layer_name


def body_matches(*layers):
    """Every masked recurrent body's match result, in conversion order."""
    found = []

    def record(graph, ops):
        if is_masked_recurrent_body(graph):
            found.append(read_body(graph))
        return ops
    model, spec, _ = embedding_model(*layers)
    convert(model, spec, rewriter=record)
    return found


def test_plain_lstm_body():
    (body,) = body_matches(keras.layers.LSTM(UNITS, return_sequences=True))
    assert isinstance(body, BodyMatch)
    assert body.output_carried and body.writes_sequence
    assert body.top.kind == "LSTM" and body.top.c_index is not None
    assert body.top.cell.activations == (Activation("Sigmoid"), Activation("Tanh"), Activation("Tanh"))
    assert set(body.top.cell.gates) == {"i", "f", "c", "o"}
    assert all(form.bias is not None for form in body.top.cell.gates.values())


def test_last_output_only_body_writes_one_slot():
    (body,) = body_matches(keras.layers.LSTM(UNITS, use_bias=False))
    assert not body.writes_sequence
    assert all(form.bias is None for form in body.top.cell.gates.values())


def test_hard_sigmoid_is_read_with_each_flavours_definition():
    (body,) = body_matches(keras.layers.LSTM(UNITS, recurrent_activation="hard_sigmoid"))
    alpha = 1 / 6 if FLAVOUR == "keras3" else 0.2
    assert body.top.cell.activations[0].name == "HardSigmoid"
    assert body.top.cell.activations[0].alpha == pytest.approx(alpha)
    assert body.top.cell.activations[0].beta == pytest.approx(0.5)


def test_bidirectional_bodies_output_zeros_at_masked_steps():
    bodies = body_matches(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    assert len(bodies) == 2
    assert all(isinstance(b, BodyMatch) and not b.output_carried for b in bodies)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_body(reset_after):
    """reset_after=True is ONNX's linear_before_reset=1, with the recurrent bias kept apart."""
    (body,) = body_matches(keras.layers.GRU(UNITS, return_sequences=True, reset_after=reset_after))
    assert isinstance(body, BodyMatch), body
    assert body.top.kind == "GRU" and body.top.c_index is None
    assert body.top.cell.linear_before_reset == int(reset_after)
    assert body.top.cell.activations == (Activation("Sigmoid"), Activation("Tanh"))
    assert set(body.top.cell.gates) == {"z", "r", "h"}
    assert all(form.kernel and form.recurrent and form.bias for form in body.top.cell.gates.values())
    assert (body.top.cell.gates["h"].recurrent_bias is not None) == reset_after


def test_simple_rnn_body():
    (body,) = body_matches(keras.layers.SimpleRNN(UNITS, activation="relu"))
    assert isinstance(body, BodyMatch), body
    assert body.top.kind == "RNN" and body.top.c_index is None and not body.writes_sequence
    assert body.top.cell.activations == (Activation("Relu"),)
    assert set(body.top.cell.gates) == {"h"}


@pytest.mark.parametrize("layer", [lambda: keras.layers.GRU(UNITS, activation="swish"),
                                   lambda: keras.layers.SimpleRNN(UNITS, activation="swish")],
                         ids=["gru", "simple_rnn"])
def test_unsupported_activation_is_a_reason(layer):
    (body,) = body_matches(layer())
    assert isinstance(body, Refusal) and "activation" in body.reason


class _Node:
    def __init__(self, name):
        self.name = name


@pytest.mark.parametrize("name, layer", [
    ("functional_1/lstm_1/while", "lstm_1"),
    ("model/lstm/PartitionedCall/while", "lstm"),
    ("functional/bidirectional/forward_lstm/while", "bidirectional/forward_lstm"),
    ("while", "while"),
])
def test_layer_name_from_while_op(name, layer):
    assert layer_name(_Node(name)) == layer
