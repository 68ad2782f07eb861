# SPDX-License-Identifier: Apache-2.0
"""The LSTM cell kind: ``c = f*c + i*g``, ``h = o*act(c)``; ONNX ``LSTM``, states h and c.

An LSTM's final cell state is carried over padded steps by an extra input column that drives
the input gate to 0 and the forget gate to 1 there (:attr:`KIND.padding_drive`).
"""

from __future__ import annotations

from ..failure import Refusal
from ..graph import mul_operands, producer
from ..read.activation import read_activation
from ..read.gates import read_gates
from ..read.linear import LinearReader
from .kind import CellAlgebra, CellKind


def read_lstm_cell(graph, x_item, h_prev, h_new, cell_state):
    """Gate forms and activations from ``c_new = f*c_prev + i*g`` and ``h_new = o*act(c_new)``, with
    ``cell_state`` = ``(c_prev, c_new)``."""
    c_prev, c_new = cell_state
    add = producer(graph, c_new)
    if add is None or add.type not in ("Add", "AddV2"):
        raise Refusal("the cell state update is not f * c + i * g")
    products = [mul_operands(graph, t) for t in add.input]
    if None in products:
        raise Refusal("the cell state update is not f * c + i * g")
    forget = [p for p in products if c_prev in p]
    if len(forget) != 1:
        raise Refusal("the cell state update is not f * c + i * g")
    f_gate = next(t for t in forget[0] if t != c_prev)
    i_or_g = products[1 - products.index(forget[0])]

    h_operands = mul_operands(graph, h_new)
    if h_operands is None:
        raise Refusal("the hidden state is not o * act(c)")
    for o_gate, squashed in (h_operands, h_operands[::-1]):
        hidden_act, act_input = read_activation(graph, squashed)
        if act_input == c_new:
            break
    else:
        raise Refusal("the hidden state is not o * act(c) with an activation ONNX LSTM supports")

    reader = LinearReader(graph, x_item, h_prev)
    gates = read_gates(graph, reader, (f_gate, o_gate) + tuple(i_or_g), "LSTM")
    (recurrent_act, f_form), (o_act, o_form), (a_act, a_form), (b_act, b_form) = gates
    # i and g multiply each other: i is the one with the recurrent activation
    if a_act != recurrent_act and b_act == recurrent_act:
        (a_act, a_form), (b_act, b_form) = (b_act, b_form), (a_act, a_form)
    i_act, i_form, cell_act, g_form = a_act, a_form, b_act, b_form
    forms = {"i": i_form, "f": f_form, "c": g_form, "o": o_form}
    if len({i_act, o_act, recurrent_act}) != 1:
        raise Refusal("the i, f and o gates use different activations")
    return CellAlgebra("LSTM", forms, (recurrent_act, cell_act, hidden_act))


KIND = CellKind(name="LSTM", op="LSTM", keras_name="LSTM", keras_gates=("i", "f", "c", "o"), onnx_gates=("i", "o", "f", "c"),
                states=2, read=read_lstm_cell, padding_drive={"i": -1, "f": +1},
                cudnn_mode="lstm", cudnn_gates=("i", "f", "c", "o"), default_activations=("Sigmoid", "Tanh", "Tanh"))
