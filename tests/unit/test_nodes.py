# SPDX-License-Identifier: Apache-2.0
"""nodes.py: nodes written as opset 13 spells them, made in a graph of opset 11 or 12, compute the same
on onnxruntime and OpenVINO as at opset 13, and get their shapes inferred; a Split of computed sizes
still fails, on both runtimes, when the sizes do not add up (the mask check's failure); nodes an
opset already allows are made as they are."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from tf2onnx.graph import Graph

from masked_lstm_rewriter.graph import int64_const, make_if, make_op, split
from masked_lstm_rewriter.sessions import openvino_runner
from _harness import available_runtimes, op_counts, run

INT64 = TensorProto.INT64


def _model(build, opset: int, inferred: bool = True) -> onnx.ModelProto:
    """A model at ``opset`` of the 1-D outputs ``build(graph, x, sizes)`` makes; ``x`` [N] int64,
    ``sizes`` [2] int64."""
    graph = Graph([], opset=opset)
    graph.add_graph_input("x", INT64, [-1])
    graph.add_graph_input("sizes", INT64, [2])
    outputs = build(graph, "x", "sizes")
    assert not inferred or all(graph.get_shape(o) is not None for o in outputs), "shapes inferred as they are made"
    for output in outputs:
        graph.add_graph_output(output, INT64, [-1])
    model = graph.make_model("opset test")
    onnx.checker.check_model(model, full_check=True)
    return model


def _every_spelling(graph, x, sizes) -> list:
    """Squeeze, Unsqueeze, ReduceSum, Splits of constant and computed sizes, GreaterOrEqual, integer
    Max and Min, inside an If's branch too."""
    column = make_op(graph, "Unsqueeze", x, int64_const(graph, "axes", [1]))
    total = make_op(graph, "ReduceSum", column, int64_const(graph, "axes", [0, 1]), keepdims=0)
    row = make_op(graph, "Squeeze", make_op(graph, "Unsqueeze", x, int64_const(graph, "axes", [0])),
                  int64_const(graph, "axes", [0]))
    head, tail = split(graph, x, sizes, 2)
    pair = split(graph, sizes, int64_const(graph, "sizes", [1, 1]), 2)
    at_least = make_op(graph, "Cast", make_op(graph, "GreaterOrEqual", x, pair[0]), to=INT64)
    clipped = make_op(graph, "Min", make_op(graph, "Max", x, pair[0]), pair[1])
    branch = make_if(graph, make_op(graph, "Greater", total, int64_const(graph, "zero", 0)), "branch",
                     lambda g: [make_op(g, "Squeeze", make_op(g, "Unsqueeze", x, int64_const(g, "axes", [0])),
                                        int64_const(g, "axes", [0]))],
                     lambda g: [make_op(g, "Neg", x)])
    return [row, make_op(graph, "Unsqueeze", total, int64_const(graph, "axes", [0])), head, tail, at_least,
            clipped] + branch


def _outputs(model, feeds: dict, runtime: str) -> list:
    if runtime == "onnxruntime":
        return run(model, feeds)
    return openvino_runner(model)([o.name for o in model.graph.output], feeds)


@pytest.mark.parametrize("opset", [11, 12])
@pytest.mark.parametrize("runtime", available_runtimes())
def test_respelled_nodes_compute_what_opset_13_computes(opset, runtime):
    lowered, reference = _model(_every_spelling, opset), _model(_every_spelling, 13)
    assert not [n.op_type for n in lowered.graph.node
                if n.op_type in ("Squeeze", "Unsqueeze", "ReduceSum", "Split") and len(n.input) == 2]
    if opset == 11:
        assert not op_counts(lowered)["GreaterOrEqual"] and not op_counts(lowered)["Max"]
    for x, sizes in (([5, 1, 7, 3], [1, 3]), ([2, 9], [2, 0]), ([], [0, 0])):
        feeds = {"x": np.array(x, np.int64), "sizes": np.array(sizes, np.int64)}
        expected = _outputs(reference, feeds, "onnxruntime")
        for got, want in zip(_outputs(lowered, feeds, runtime), expected):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("runtime", available_runtimes())
def test_a_split_of_computed_sizes_still_fails_when_they_do_not_add_up(runtime):
    """The guard is such a Split, named with its message: both runtimes must fail, naming it."""
    def guarded(graph, x, sizes):
        size = make_op(graph, "ReduceSum", sizes, int64_const(graph, "axes", [0]), keepdims=1)
        return split(graph, x, size, 1, name="the_guard")
    model = _model(guarded, 11)
    assert "Split" not in op_counts(model)
    feeds = {"x": np.array([4, 2, 1], np.int64)}
    np.testing.assert_array_equal(_outputs(model, dict(feeds, sizes=np.array([1, 2], np.int64)), runtime)[0],
                                  feeds["x"])
    for wrong in ([1, 1], [2, 2], [3, 1]):
        with pytest.raises(Exception, match="the_guard"):
            _outputs(model, dict(feeds, sizes=np.array(wrong, np.int64)), runtime)


def test_nodes_the_opset_allows_are_left_as_they_were():
    """Stock tf2onnx's nodes at opset 11 (axes as attributes, a float Max) and any node at opset 13."""
    def stock(graph, x, sizes):
        floats = make_op(graph, "Cast", x, to=TensorProto.FLOAT)
        return [make_op(graph, "Cast", make_op(graph, "Max", floats, floats), to=INT64),
                make_op(graph, "Squeeze", make_op(graph, "Unsqueeze", x, axes=[0]), axes=[0])]
    assert sorted(n.op_type for n in _model(stock, 11).graph.node) == ["Cast", "Cast", "Max", "Squeeze", "Unsqueeze"]
    at_13 = _model(_every_spelling, 13)
    assert op_counts(at_13)["Split"] == 2 and op_counts(at_13)["GreaterOrEqual"] == 1


@pytest.mark.skipif("openvino" not in available_runtimes(), reason="OpenVINO is not installed")
def test_openvino_does_not_fail_a_reshape_to_another_length():
    """Why a Split of computed sizes is checked by a Concat before opset 13, not by a Reshape to the sizes'
    sum: OpenVINO 2026.4 runs such a Reshape and returns the input as it was (onnxruntime fails)."""
    def reshaped(graph, x, sizes):
        total = make_op(graph, "ReduceSum", sizes, int64_const(graph, "axes", [0]), keepdims=1)
        return [make_op(graph, "Reshape", x, total)]
    model = _model(reshaped, 11, inferred=False)
    feeds = {"x": np.array([4, 2, 1], np.int64), "sizes": np.array([1, 1], np.int64)}
    np.testing.assert_array_equal(_outputs(model, feeds, "openvino")[0], feeds["x"])
    with pytest.raises(Exception, match="cannot be reshaped"):
        _outputs(model, feeds, "onnxruntime")


def test_the_corpus_takes_every_opset_from_the_lowest_the_nodes_support():
    from masked_lstm_rewriter.corpus import manifest  # pylint: disable=import-outside-toplevel
    from masked_lstm_rewriter.nodes import MIN_OPSET  # pylint: disable=import-outside-toplevel
    assert manifest.OPSETS[0] == MIN_OPSET
