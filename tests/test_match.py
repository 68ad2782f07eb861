# SPDX-License-Identifier: Apache-2.0
"""What the matcher reads off real tf2onnx graphs of Keras layers (both flavours)."""

import pytest

from kerasutil import FLAVOUR, convert, keras
from models import UNITS, embedding_model

from masked_lstm_rewriter.cell import Activation
from masked_lstm_rewriter.match import BodyMatch, NoMatch, is_masked_recurrent_body, layer_name, match_body


def body_matches(*layers):
    """Every masked recurrent body's match result, in conversion order."""
    found = []

    def record(graph, ops):
        if is_masked_recurrent_body(graph):
            found.append(match_body(graph))
        return ops
    model, spec, _ = embedding_model(*layers)
    convert(model, spec, rewriter=record)
    return found


def test_plain_lstm_body():
    (body,) = body_matches(keras.layers.LSTM(UNITS, return_sequences=True))
    assert isinstance(body, BodyMatch)
    assert body.output_carried and body.writes_sequence
    assert (body.recurrent_activation, body.cell_activation, body.hidden_activation) == (
        Activation("Sigmoid"), Activation("Tanh"), Activation("Tanh"))
    assert set(body.gates) == {"i", "f", "c", "o"}
    assert all(form.bias is not None for form in body.gates.values())


def test_last_output_only_body_writes_one_slot():
    (body,) = body_matches(keras.layers.LSTM(UNITS, use_bias=False))
    assert not body.writes_sequence
    assert all(form.bias is None for form in body.gates.values())


def test_hard_sigmoid_is_read_with_each_flavours_definition():
    (body,) = body_matches(keras.layers.LSTM(UNITS, recurrent_activation="hard_sigmoid"))
    alpha = 1 / 6 if FLAVOUR == "keras3" else 0.2
    assert body.recurrent_activation.name == "HardSigmoid"
    assert body.recurrent_activation.alpha == pytest.approx(alpha)
    assert body.recurrent_activation.beta == pytest.approx(0.5)


def test_bidirectional_bodies_output_zeros_at_masked_steps():
    bodies = body_matches(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    assert len(bodies) == 2
    assert all(isinstance(b, BodyMatch) and not b.output_carried for b in bodies)


def test_gru_body_is_recognised_as_masked_but_not_matched():
    (body,) = body_matches(keras.layers.GRU(UNITS, return_sequences=True))
    assert isinstance(body, NoMatch) and body.reason


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
