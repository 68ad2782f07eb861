# SPDX-License-Identifier: Apache-2.0
"""cells/: each kind declares its gates, states and ONNX weight layout; the registry lists them once."""

import dataclasses

import numpy as np
import pytest

from masked_lstm_rewriter import cells
from masked_lstm_rewriter.cells.kind import PADDING_DRIVE


@dataclasses.dataclass
class Cell:
    """The weights of a cell in Keras's layout, as the layer description holds them."""

    kind: str
    hidden_size: int
    kernel: dict
    recurrent: dict
    bias: dict
    recurrent_bias: dict


def keras_cell(op, hidden=2, inputs=3):
    """Every gate's block filled with its own number: the block a gate lands in shows its order."""
    gates = cells.kind_of(op).keras_gates
    number = {gate: float(k + 1) for k, gate in enumerate(gates)}
    return Cell(op, hidden, {g: np.full((inputs, hidden), number[g], np.float32) for g in gates},
                {g: np.full((hidden, hidden), 10 * number[g], np.float32) for g in gates},
                {g: np.full(hidden, 100 * number[g], np.float32) for g in gates}, {})


def test_the_registry_lists_each_kind_once_in_reading_order():
    assert [kind.name for kind in cells.KINDS] == [kind.op for kind in cells.KINDS] == ["LSTM", "GRU", "RNN"]
    assert [cells.kind_of(op).keras_name for op in ("LSTM", "GRU", "RNN")] == ["LSTM", "GRU", "SimpleRNN"]
    assert [kind.states for kind in cells.KINDS] == [2, 1, 1]
    assert [kind.outputs for kind in cells.KINDS] == [3, 2, 2]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_weights_are_stacked_in_the_onnx_gate_order(op):
    kind = cells.kind_of(op)
    cell = keras_cell(op)
    w, r, b = kind.onnx_weights(cell)
    gates, hidden = len(kind.onnx_gates), cell.hidden_size
    assert w.shape == (1, gates * hidden, 3) and r.shape == (1, gates * hidden, hidden) and b.shape == (1, 2 * gates * hidden)
    for block, gate in enumerate(kind.onnx_gates):
        rows = slice(block * hidden, (block + 1) * hidden)
        assert np.all(w[0, rows] == cell.kernel[gate][0, 0]) and np.all(r[0, rows] == cell.recurrent[gate][0, 0])
        assert np.all(b[0, rows] == cell.bias[gate][0]) and np.all(b[0, gates * hidden:] == 0)


def test_the_lstm_padding_column_drives_its_input_gate_shut_and_its_forget_gate_open():
    kind = cells.kind_of("LSTM")
    w, _, _ = kind.onnx_weights(keras_cell("LSTM"), padding_column=True)
    column = {gate: w[0, k * 2:(k + 1) * 2, -1] for k, gate in enumerate(kind.onnx_gates)}
    assert np.all(column["i"] == -PADDING_DRIVE) and np.all(column["f"] == PADDING_DRIVE)
    assert np.all(column["o"] == 0) and np.all(column["c"] == 0)
    assert cells.kind_of("GRU").padding_drive is None  # no cell state to carry


def test_a_gru_recurrent_bias_is_onnx_rb():
    cell = keras_cell("GRU")
    cell.recurrent_bias = {"h": np.full(2, 7, np.float32)}
    _, _, b = cells.kind_of("GRU").onnx_weights(cell)
    rb = b[0, 6:]
    assert np.all(rb[:4] == 0) and np.all(rb[4:] == 7)  # z, r: none; h: its own


def test_a_kinds_extra_inputs_follow_the_initial_states():
    """A kind's own inputs (an LSTM's peepholes, P, come after initial_h and initial_c) reach the node."""
    from tf2onnx.graph import Graph  # pylint: disable=import-outside-toplevel

    from masked_lstm_rewriter.emit.node import RecurrentNode, emit_node  # pylint: disable=import-outside-toplevel
    graph = Graph([], opset=15)
    node = RecurrentNode(kind=cells.kind_of("LSTM"), x="x", weights=("W", "R", "B"), lengths="lengths", initial=(), attr={},
                         name="lstm", hidden=2, wants_c=False, extra=("P",))
    emit_node(graph, node, None)
    (lstm,) = [n for n in graph.get_nodes() if n.type == "LSTM"]
    assert list(lstm.input) == ["x", "W", "R", "B", "lengths", "", "", "P"]
    assert cells.kind_of("LSTM").extra_inputs(keras_cell("LSTM")) == ()


def test_native_ops_and_state_names_come_from_the_kinds():
    from masked_lstm_rewriter.corpus.ops import RECURRENT_OPS  # spelled out there: that module imports no TensorFlow
    assert cells.NATIVE_OPS == RECURRENT_OPS == ("LSTM", "GRU", "RNN")
    assert [cells.kind_of(name).state_names for name in ("LSTM", "GRU", "RNN")] == [("h", "c"), ("h",), ("h",)]
