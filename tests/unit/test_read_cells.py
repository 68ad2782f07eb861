# SPDX-License-Identifier: Apache-2.0
"""Read stage, cells: the body reader recognises each cell kind in the loop Keras writes.

Each test builds a masked loop in raw TensorFlow (``_graphs.masked_loop``), lets tf2onnx hand its
While body to the reader alone (``_graphs.read_bodies``: nothing is rewritten) and checks what
the reader made of it: the cell kind, the activations in the ONNX op's order, GRU's
``linear_before_reset``, and how the loop writes its outputs. Then, as a whole, the same loop is
rewritten into one native node whose outputs equal the numpy oracle and stock tf2onnx's Loop at
every position (``check_rewrites`` of ``_harness.py``).
"""

import pytest

import _graphs as G
from _harness import check_rewrites, native_nodes

CELLS = [
    pytest.param(G.Loop("LSTM"), ("LSTM", ("Sigmoid", "Tanh", "Tanh"), 0), id="lstm"),
    pytest.param(G.Loop("GRU", reset_after=True), ("GRU", ("Sigmoid", "Tanh"), 1), id="gru-reset_after"),
    pytest.param(G.Loop("GRU", reset_after=False), ("GRU", ("Sigmoid", "Tanh"), 0), id="gru-reset_before"),
    pytest.param(G.Loop("RNN"), ("RNN", ("Tanh",), 0), id="simple_rnn"),
]


@pytest.mark.parametrize("spec, expected", CELLS)
def test_reader_reads_the_cell_kind_and_activations(spec, expected):
    kind, activations, linear_before_reset = expected
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert read == G.BodyRead(reason=None, kind=kind, activations=activations,
                              linear_before_reset=linear_before_reset, writes_sequence=True,
                              output_carried=True, cells=1)


@pytest.mark.parametrize("spec, expected", CELLS)
def test_each_cell_kind_is_rewritten_into_its_native_op_exactly(spec, expected):
    _, report = check_rewrites(G.WhileLoop(spec), "post", natives=[expected[0]])
    assert [(layer.layer, layer.rewritten, layer.detail) for layer in report.layers] == [
        (spec.kind.lower(), True, f"{expected[0]}, forward")]


@pytest.mark.parametrize("kind, activation, recurrent, expected", [
    ("LSTM", "relu", "sigmoid", ("Sigmoid", "Relu", "Relu")),
    ("GRU", "softsign", "sigmoid", ("Sigmoid", "Softsign")),
    ("RNN", "relu", "sigmoid", ("Relu",)),
    ("GRU", "tanh", "softsign", ("Softsign", "Tanh")),
])
def test_reader_reads_other_supported_activations(kind, activation, recurrent, expected):
    spec = G.Loop(kind, activation=activation, recurrent_activation=recurrent)
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert (read.reason, read.kind, read.activations) == (None, kind, expected)
    check_rewrites(G.WhileLoop(spec), "post", natives=[kind])


def test_reader_sees_a_backward_loop_as_the_same_cell():
    """go_backwards reverses the input and mask lists in the main graph: the body is unchanged."""
    (read,) = G.read_bodies(*G.masked_loop(G.Loop("GRU", backward=True))[:2])
    assert (read.reason, read.kind, read.linear_before_reset) == (None, "GRU", 1)


def test_a_larger_cell_reads_the_same():
    """Nothing in the reader depends on the sizes: 5 units over 7 features."""
    model, _ = check_rewrites(G.WhileLoop(G.Loop("LSTM", units=5, features=7, seed=3)), "post", natives=["LSTM"])
    (node,) = native_nodes(model)
    assert {a.name: a.i for a in node.attribute if a.name == "hidden_size"} == {"hidden_size": 5}


def test_reader_reads_a_loop_that_keeps_only_the_last_output():
    """return_sequences=False: Keras writes every step into slot 0 of a one-element list."""
    spec = G.Loop("RNN", sequence=False)
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert (read.reason, read.kind, read.writes_sequence) == (None, "RNN", False)
    check_rewrites(G.WhileLoop(spec), "post", natives=["RNN"])
