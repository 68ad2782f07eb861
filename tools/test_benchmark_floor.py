# SPDX-License-Identifier: Apache-2.0
"""tools/benchmark_floor.py on unmasked models built with onnx.helper (no Keras): the floor gives
the masked layer's value at every position (a padded step repeats the row's last valid output,
zeros for a row with none; the oracle runs the unmasked model on each row's valid steps alone),
on onnxruntime and, where installed, OpenVINO with dynamic shapes; its guard fails a mask that
is not post-padded; it refuses the graphs it does not know."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmark_floor import floor_model  # noqa: E402  (beside this file: pytest puts tools/ on sys.path)
from masked_lstm_rewriter.sessions import onnxruntime_session

VOCAB, FEATURES, HIDDEN, STEPS = 20, 3, 4, 7
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
LENGTHS = [7, 3, 0, 5, 1]  # a full row, an empty one, lengths in between


def unmasked_model(op: str, direction: str = "forward", seed: int = 0) -> onnx.ModelProto:
    """tokens -> Gather(embedding) -> Transpose -> ``op`` (zero initial state built from the batch size,
    as tf2onnx does) -> Squeeze -> Transpose."""
    rng = np.random.default_rng(seed)
    gates, dirs = GATES[op], 2 if direction == "bidirectional" else 1

    def weights(name, *shape):
        return numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name)

    initializers = [weights("embedding", VOCAB, FEATURES), weights("W", dirs, gates * HIDDEN, FEATURES),
                    weights("R", dirs, gates * HIDDEN, HIDDEN), weights("B", dirs, 2 * gates * HIDDEN),
                    numpy_helper.from_array(np.array([0], np.int64), "zero"),
                    numpy_helper.from_array(np.array([1], np.int64), "one"),
                    numpy_helper.from_array(np.array([0, 1, 0], np.int64), "batch_at"),
                    numpy_helper.from_array(np.array([dirs, 0, HIDDEN], np.int64), "state_shape")]
    nodes = [helper.make_node("Gather", ["embedding", "tokens"], ["embedded"]),
             helper.make_node("Transpose", ["embedded"], ["x"], perm=[1, 0, 2]),
             helper.make_node("Shape", ["tokens"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"]),  # [1] -> state shape [dirs, B, H]
             helper.make_node("Mul", ["batch_at", "batch"], ["batch_only"]),
             helper.make_node("Add", ["state_shape", "batch_only"], ["h0_shape"]),
             helper.make_node("ConstantOfShape", ["h0_shape"], ["h0"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node(op, ["x", "W", "R", "B", "", "h0"], ["y"], hidden_size=HIDDEN, direction=direction),
             helper.make_node("Squeeze", ["y", "one"], ["squeezed"]),
             helper.make_node("Transpose", ["squeezed"], ["out"], perm=[1, 0, 2])]
    graph = helper.make_graph(nodes, "unmasked", [helper.make_tensor_value_info("tokens", TensorProto.INT32,
                                                                                  ["batch", "steps"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "steps", HIDDEN])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


def tokens_for(lengths, seed=1) -> np.ndarray:
    tokens = np.random.default_rng(seed).integers(1, VOCAB, (len(lengths), STEPS)).astype(np.int32)
    for row, length in enumerate(lengths):
        tokens[row, length:] = 0
    return tokens


def keras_values(unmasked, tokens) -> np.ndarray:
    """What the masked layer returns: each row's outputs over its valid steps, then its last one."""
    session = onnxruntime_session(unmasked)
    expected = np.zeros(tokens.shape + (HIDDEN,), np.float32)
    for row, valid in enumerate(tokens != 0):
        length = int(valid.sum())
        if length:
            alone = session.run(None, {"tokens": tokens[row:row + 1, :length]})[0][0]
            expected[row, :length], expected[row, length:] = alone, alone[-1]
    return expected


@pytest.mark.parametrize("op", list(GATES))
def test_the_floor_gives_every_position_on_onnxruntime(op):
    unmasked, tokens = unmasked_model(op), tokens_for(LENGTHS)
    floor = floor_model(unmasked)
    got = onnxruntime_session(floor).run(None, {"tokens": tokens})[0]
    np.testing.assert_allclose(got, keras_values(unmasked, tokens), atol=1e-6)
    assert "ConstantOfShape" in {n.op_type for n in floor.graph.node}  # the floor's own, for the zero step
    assert not {"h0", "h0_shape"} & {name for n in floor.graph.node for name in n.output}  # pruned


def test_the_floor_gives_every_position_on_openvino():
    ov = pytest.importorskip("openvino")
    unmasked, tokens = unmasked_model("LSTM"), tokens_for(LENGTHS)
    compiled = ov.Core().compile_model(ov.Core().read_model(floor_model(unmasked).SerializeToString(), b""), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({"tokens": tokens})[compiled.output(0)]
    np.testing.assert_allclose(got, keras_values(unmasked, tokens), atol=1e-5)


def test_the_guard_fails_a_mask_that_is_not_post_padded():
    tokens = tokens_for(LENGTHS)
    tokens[1, 0] = 0
    session = onnxruntime_session(floor_model(unmasked_model("GRU")))
    with pytest.raises(Exception, match="not post-padded"):
        session.run(None, {"tokens": tokens})


def test_other_graphs_are_refused():
    with pytest.raises(ValueError, match="a bidirectional LSTM node, not a forward one"):
        floor_model(unmasked_model("LSTM", "bidirectional"))
    model = unmasked_model("GRU")
    model.graph.output[0].name = "squeezed"
    with pytest.raises(ValueError, match="is not Transpose"):
        floor_model(model)
