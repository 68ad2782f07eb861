# SPDX-License-Identifier: Apache-2.0
"""Streaming, on raw TensorFlow loops: each layer made native starts from ``<layer>/h_in`` (and
``c_in``) and returns ``<layer>/h_out`` (and ``c_out``), and a batch cut into chunks, each fed the
states the previous one returned, gives numpy's masked recurrence over the whole sequence: every
step of the sequence output, and after each chunk the last output and the states over the steps so
far. What cannot stream (a backward loop) fails the conversion, naming the layer and why."""

import numpy as np
import pytest
import tf2onnx

from _graphs import NOT_POST_PADDED, OPSET, POST_PADDED, Loop, batch, masked_loop, reference
from _harness import assert_same_outputs, available_runtimes, runner

import masked_lstm_rewriter as mlr

CHUNKINGS = ([5], [1] * 5, [2, 1, 2], [3, 2])  # the later chunks are all padding for the short rows


def convert_streaming(spec: Loop, mode: str, keep_wrong: bool = False):
    fn, signature, weights = masked_loop(spec)
    model, _ = tf2onnx.convert.from_function(
        fn, input_signature=signature, opset=OPSET,
        custom_rewriter=[mlr.make_rewriter(mode, streaming=True, keep_wrong=keep_wrong)])
    return model, weights


def state_names(spec: Loop) -> list:
    prefix = spec.kind.lower()  # the loop's name scope
    return [f"{prefix}/{state}_in" for state in ("h", "c")[:2 if spec.kind == "LSTM" else 1]]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_chunks_continue_the_sequence(kind, mode):
    spec = Loop(kind=kind, outputs=("seq", "last", "h", "c"))
    model, weights = convert_streaming(spec, mode)
    states = state_names(spec)
    assert [i.name for i in model.graph.input][-len(states):] == states
    outputs = [o.name for o in model.graph.output]
    assert outputs[len(spec.returned):] == [name[:-2] + "out" for name in states]
    feeds, mask = batch(spec, POST_PADDED if mode == "post" else NOT_POST_PADDED)
    for runtime in available_runtimes():
        run = runner(model, runtime)
        for sizes in CHUNKINGS:
            carried = {name: np.zeros((mask.shape[0], spec.units), np.float32) for name in states}
            start, sequence = 0, []
            for end in np.cumsum(sizes):
                got = dict(zip(outputs, run({**{k: v[:, start:end] for k, v in feeds.items()}, **carried})))
                carried = {name: got[name[:-2] + "out"] for name in states}
                sequence.append(got[outputs[0]])
                so_far = reference(spec, weights, feeds["x"][:, :end], mask[:, :end])
                expected = [so_far[name] for name in spec.returned[1:]] + [so_far[name[-4]] for name in states]
                assert_same_outputs(expected, [got[name] for name in outputs[1:]], f"{runtime} {sizes} after {end}")
                start = end
            whole = reference(spec, weights, feeds["x"], mask)["seq"]
            assert_same_outputs([whole], [np.concatenate(sequence, axis=1)], f"{runtime} {sizes}: sequence")


def test_zero_states_give_the_model_without_streaming():
    spec = Loop(kind="LSTM")
    model, weights = convert_streaming(spec, "post")
    feeds, mask = batch(spec, POST_PADDED)
    zeros = {name: np.zeros((mask.shape[0], spec.units), np.float32) for name in state_names(spec)}
    got = runner(model, "onnxruntime")({**feeds, **zeros})
    expected = reference(spec, weights, feeds["x"], mask)
    assert_same_outputs([expected[name] for name in spec.returned], got[:len(spec.returned)], "zero states")


def test_a_backward_loop_cannot_stream():
    """Inside enable() the conversion fails; with custom_rewriter= alone tf2onnx's Python API only logs
    the error, and the report has it; with keep_wrong the Loop is written."""
    spec = Loop(kind="GRU", backward=True)
    fn, signature, _ = masked_loop(spec)
    with mlr.enable("post", streaming=True):
        with pytest.raises(mlr.KnownWrong, match="layer 'gru' cannot stream: a backward direction"):
            tf2onnx.convert.from_function(fn, input_signature=signature, opset=OPSET)
    for keep_wrong in (False, True):
        model, _ = convert_streaming(spec, "post", keep_wrong)
        report = mlr.last_report()
        assert report.left_as_loop and any("cannot stream" in problem for problem in report.known_wrong), str(report)
        assert "Loop" in {node.op_type for node in model.graph.node}
