# SPDX-License-Identifier: Apache-2.0
"""plan/batch.py's walk of a batch axis back to its root, on ONNX graphs loaded as the package loads a
file: ONNX's Max, Min, Sum and Mean are elementwise (TensorFlow's ops of those names reduce), so a
clipped activation (``ReLU(max_value=...)``: Relu, Min, Max with scalars) keeps its input's axes."""

from masked_lstm_rewriter.plan.batch import batch_root
from _onnx_graphs import FLOAT, const, info, load, make_model, node

X = info("x", FLOAT, ["batch", "time", 3])


def _root(nodes, axis, initializers=()):
    """The root of ``axis`` of the graph's output ``y``."""
    graph, _, _ = load(make_model(nodes, [X, info("w", FLOAT, ["batch", "time", 3])], [], initializers,
                                  exposed=[("y", FLOAT, ["batch", "time", 3])]))
    return batch_root(graph, "y", axis, {})


def test_a_clipped_relu_keeps_every_axis_of_its_input():
    nodes = [node("Relu", ["x"], ["r"]), node("Min", ["r", "top"], ["m"]), node("Max", ["m", "zero"], ["y"])]
    scalars = [const("top", 20.0), const("zero", 0.0)]
    assert _root(nodes, 0, scalars) == ("x", 0)
    assert _root(nodes, 1, scalars) == ("x", 1)


def test_onnx_sum_and_mean_broadcast_constants_along_the_axis():
    nodes = [node("Sum", ["x", "bias"], ["s"]), node("Mean", ["s", "half"], ["y"])]
    assert _root(nodes, 0, [const("bias", [1.0, 2.0, 3.0]), const("half", [[[0.5]]])]) == ("x", 0)


def test_two_inputs_with_roots_of_their_own_stop_the_walk():
    assert _root([node("Max", ["x", "w"], ["y"])], 0) == ("y", 0)


def test_an_operand_with_more_axes_than_the_result_stops_the_walk():
    """A reduction spelled with an elementwise name (TensorFlow's Max without its keep_dims attribute)
    must not map the result's axis onto the input's."""
    graph, _, _ = load(make_model([node("Max", ["x", "top"], ["y"])], [X], [], [const("top", 1.0)],
                                  exposed=[("y", FLOAT, ["batch", 3])]))
    graph.set_shape("y", [-1, 3])  # the shape a reduction over the time axis gives
    assert batch_root(graph, "y", 0, {}) == ("y", 0)
