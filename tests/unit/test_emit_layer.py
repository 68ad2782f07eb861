# SPDX-License-Identifier: Apache-2.0
"""emit/layer.py's reversal of the time axis: with a static number of steps a Gather at the steps'
numbers backwards, which tf2onnx's transpose optimizer does not move; the form it moves a Slice into
is pinned below as OpenVINO computes it (wrongly), so that the test fails when OpenVINO changes."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

from masked_lstm_rewriter.emit.layer import reverse_time
from _harness import available_runtimes, run
from _onnx_graphs import FLOAT, info, load, make_model, node

STEPS, FEATURES, HIDDEN = 6, 8, 4


def _reversed_by_the_rewriter(steps):
    graph, _, _ = load(make_model([node("Identity", ["x"], ["y"])], [info("x", FLOAT, [steps, "batch", 3])],
                                  [info("y", FLOAT, [steps, "batch", 3])]))
    out = reverse_time(graph, "x")
    graph.add_graph_output(out, TP.FLOAT, graph.get_shape("x"))
    return graph.make_model("reversal"), out


@pytest.mark.parametrize("steps, op", [(STEPS, "Gather"), ("time", "Slice")])
def test_the_time_axis_is_reversed_by_a_gather_where_static(steps, op):
    model, out = _reversed_by_the_rewriter(steps)
    assert [n.op_type for n in model.graph.node if out in n.output] == [op]
    x = np.random.default_rng(0).normal(size=(STEPS, 2, 3)).astype(np.float32)
    names = [o.name for o in model.graph.output]
    np.testing.assert_array_equal(run(model, {"x": x})[names.index(out)], x[::-1])


def _bidirectional_pair_after_optimizer():
    """x [T, B, F] (time-major) -> Keras's batch-major transpose of it, read by a forward GRU (transposed
    back) and by a backward one through a reversing Slice on the batch-major side and a Transpose (how
    tf2onnx's optimizer leaves a Slice of the time-major side); the backward sequence reversed back,
    both concatenated and transposed to batch-major."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.normal(size=shape) * 0.3).astype(np.float32), name)
               for half in ("f", "b") for name, shape in ((f"W{half}", (1, 3 * HIDDEN, FEATURES)),
                                                          (f"R{half}", (1, 3 * HIDDEN, HIDDEN)))]
    ints = [numpy_helper.from_array(np.array(value, np.int64), name)
            for name, value in (("back", [-1]), ("first", [np.iinfo(np.int64).min]), ("one", [1]), ("zero", [0]))]
    nodes = [node("Transpose", ["x"], ["batch_major"], perm=[1, 0, 2]),
             node("Transpose", ["batch_major"], ["forward_x"], perm=[1, 0, 2]),
             node("Slice", ["batch_major", "back", "first", "one", "back"], ["reversed"]),
             node("Transpose", ["reversed"], ["backward_x"], perm=[1, 0, 2])]
    for half in ("forward", "backward"):
        nodes += [node("GRU", [f"{half}_x", f"W{half[0]}", f"R{half[0]}"], [f"{half}_y4"], hidden_size=HIDDEN,
                       linear_before_reset=1), node("Squeeze", [f"{half}_y4", "one"], [f"{half}_y"])]
    nodes += [node("Slice", ["backward_y", "back", "first", "zero", "back"], ["backward_in_order"]),
              node("Concat", ["forward_y", "backward_in_order"], ["both"], axis=2),
              node("Transpose", ["both"], ["y"], perm=[1, 0, 2])]
    graph = helper.make_graph(nodes, "pair", [info("x", FLOAT, [STEPS, "batch", FEATURES])],
                              [info("y", FLOAT, ["batch", STEPS, 2 * HIDDEN])], weights + ints)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


@pytest.mark.skipif("openvino" not in available_runtimes(), reason="openvino is not installed")
def test_openvino_computes_a_slice_moved_past_static_transposes_wrongly():
    """If this fails, OpenVINO computes the pair as onnxruntime does: the Gather may go back to a Slice."""
    model = _bidirectional_pair_after_optimizer()
    onnx.checker.check_model(model)
    x = np.random.default_rng(1).normal(size=(STEPS, 5, FEATURES)).astype(np.float32)
    expected, got = run(model, {"x": x})[0], run(model, {"x": x}, "openvino")[0]
    assert np.abs(expected[..., :HIDDEN] - got[..., :HIDDEN]).max() < 1e-5    # the forward half
    assert np.abs(expected[..., HIDDEN:] - got[..., HIDDEN:]).max() > 0.1     # the backward half
