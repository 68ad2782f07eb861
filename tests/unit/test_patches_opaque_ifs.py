# SPDX-License-Identifier: Apache-2.0
"""patches/opaque_ifs.py: tf2onnx's optimizers pass over the rewriter's If nodes without entering their
branches, on a graph built by hand (tf2onnx's graph, as the rewriter leaves it): three Ifs of ours that read
the same outer tensors (two of them read by one Concat), one of them an Identity's output (the optimizers remove it) and one a sum of two
constants (they fold it), and one If whose outputs nobody reads. Afterwards each If is the If it was, its
branches untouched (an Identity the optimizers would remove inside is still there) and reading the
renamed tensors; none were merged; the model computes what numpy does on both branches."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from tf2onnx import optimizer
from tf2onnx.graph import Graph

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.graph import make_if, make_op
from masked_lstm_rewriter.patches import opaque_ifs
from masked_lstm_rewriter.plan.schedule import SCHEDULE_NAME

X = np.array([1.0, -2.0, 3.0], np.float32)
K = 5.0  # the folded constant: 2 + 3


def graph_with_our_ifs():
    g = Graph([], opset=15)
    g.add_graph_input("x", TensorProto.FLOAT, [3])
    g.add_graph_input("use", TensorProto.BOOL, [])
    x = make_op(g, "Identity", "x")
    k = make_op(g, "Add", g.make_const("two", np.array(2.0, np.float32)).output[0],
                g.make_const("three", np.array(3.0, np.float32)).output[0])

    def branch(kind):
        return lambda inner: [make_op(inner, kind, make_op(inner, "Identity", x), k)]

    outputs = [make_if(g, "use", f"{SCHEDULE_NAME}_{name}", branch(then), branch(other))[0]
               for name, then, other in (("mul", "Mul", "Sub"), ("add", "Add", "Sub"), ("unread", "Div", "Sub"))]
    both = make_op(g, "Concat", *outputs[:2], axis=0)  # not graph outputs: a pass merging duplicates may merge them
    g.set_dtype(both, TensorProto.FLOAT)
    g.add_graph_output(both, TensorProto.FLOAT, [6])
    return g


def optimized():
    graph = opaque_ifs.optimize_graph(graph_with_our_ifs())
    return graph.make_model("opaque Ifs"), graph


def run(model, use: bool) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X, "use": np.array(use)})


@pytest.mark.parametrize("use", [True, False])
def test_the_ifs_compute_what_they_did(use):
    model, _ = optimized()
    mul, add = np.split(run(model, use)[0], 2)
    np.testing.assert_allclose(mul, X * K if use else X - K)
    np.testing.assert_allclose(add, X + K if use else X - K)


def test_the_branches_are_untouched_and_read_the_renamed_tensors():
    model, _ = optimized()
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    assert len(ifs) == 2 and all(n.name.startswith(SCHEDULE_NAME) for n in ifs)
    outer = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.initializer}
    for node in ifs:
        assert list(node.input) == ["use"] and node.domain == ""
        for branch in (a.g for a in node.attribute):
            assert [n.op_type for n in branch.node][0] == "Identity"   # the optimizers would remove it
            reads = {i for n in branch.node for i in n.input} - {o for n in branch.node for o in n.output}
            assert "x" in reads and reads <= outer | {"x"}


def test_the_opaque_nodes_are_gone_and_nothing_else_holds_the_branches():
    _, graph = optimized()
    assert not [n for n in graph.get_nodes() if n.type == opaque_ifs.OPAQUE]
    assert all(not n.attr.get("key") for n in graph.get_nodes())
    for node in graph.get_nodes():
        for branch in (node.get_body_graphs() or {}).values():
            assert branch.parent_graph is graph


def test_enable_installs_it_and_disable_restores_tf2onnxs():
    stock = optimizer.optimize_graph
    with mlr.enable():
        assert optimizer.optimize_graph is opaque_ifs.optimize_graph
    assert optimizer.optimize_graph is stock
