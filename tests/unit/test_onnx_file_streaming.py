# SPDX-License-Identifier: Apache-2.0
"""Streaming through ``rewrite_onnx``: a file's Loops made native take their initial states as
inputs ``<layer>/h_in`` (``c_in``) and return their final states as ``<layer>/h_out`` (``c_out``),
named after the layer the Loop's names give (tf2onnx's scope, jax2onnx's node). The oracle is the
file itself: zero states give its outputs at every position, and a batch cut into chunks (one
step each, uneven), each fed the states the previous returned, gives the one call's outputs at
every position. What cannot stream (a backward direction, a state the model computes) fails with
the reason, unless ``keep_wrong``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import masked_lstm_rewriter as mlr
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter.pipeline.streaming import BACKWARD_REASON, COMPUTED_STATE_REASON
from masked_lstm_rewriter.verify_batches import graph_inputs
from _harness import assert_same_outputs, runner
from _onnx_files import JAX_FILES, TF2ONNX_FILES, feeds_for, name_of

LENGTHS = [7, 3, 1, 0, 5]  # a full row, rows of different lengths, an empty row
CHUNKINGS = ([1] * 7, [3, 1, 3])
REFUSALS = (BACKWARD_REASON, COMPUTED_STATE_REASON)


def _streamed(path: str, mode: str = "any"):
    """(the file, its streaming rewrite), or skip when the file cannot stream (checked: with a known reason)."""
    original = onnx.load(path)
    try:
        return original, mlr.rewrite_onnx(original, mask_mode=mode, streaming=True).onnx_model
    except mlr.KnownWrong as error:
        assert "cannot stream" in str(error) and any(reason in str(error) for reason in REFUSALS), str(error)
        pytest.skip(f"cannot stream: {error}")


def _state_inputs(model, original) -> list:
    return [i.name for i in model.graph.input if i.name not in {j.name for j in original.graph.input}]


def _zeros(model, names, rows: int) -> dict:
    dims = {i.name: i.type.tensor_type.shape.dim[1].dim_value for i in model.graph.input}
    return {name: np.zeros((rows, dims[name]), np.float32) for name in names}


@pytest.mark.parametrize("path", TF2ONNX_FILES + JAX_FILES, ids=name_of)
def test_zero_states_give_the_file_and_chunks_give_one_call(path):
    original, model = _streamed(path)
    states = _state_inputs(model, original)
    added = [o.name for o in model.graph.output][len(original.graph.output):]
    assert states and added == [name[:-len("in")] + "out" for name in states]
    assert all(name.endswith(("/h_in", "/c_in")) for name in states)
    run, file_run = runner(model, "onnxruntime"), runner(original, "onnxruntime")
    for layout in ("post", "holes"):
        feeds = feeds_for(original, LENGTHS, layout)
        rows = len(next(iter(feeds.values())))  # the file's batch where it is static
        whole = run({**feeds, **_zeros(model, states, rows)})
        assert_same_outputs(file_run(feeds), whole[:len(original.graph.output)], f"zero states, {layout}")
        timed = [name for name, (_, dims) in graph_inputs(original).items() if len(dims) > 1]
        if any(graph_inputs(original)[name][1][1] for name in timed):
            continue  # a static number of steps: one chunk only
        for sizes in CHUNKINGS:
            _check_chunks(run, feeds, timed, states, whole, len(original.graph.output), sizes)


def _check_chunks(run, feeds, timed, states, whole, outputs: int, sizes, first=None) -> None:
    """Chunks of ``sizes`` steps, each fed the states the previous one returned (``first``: the first
    chunk's, else zeros): every sequence output (steps on axis 1) equals the one call's at every step,
    every other output and state after the last."""
    carried, start, pieces = first or _zeros_like(states, whole, outputs), 0, []
    for size in sizes:
        chunk = {name: (value[:, start:start + size] if name in timed else value) for name, value in feeds.items()}
        got = run({**chunk, **carried})
        carried = dict(zip(states, got[outputs:]))
        pieces.append(got)
        start += size
    for index in range(outputs):
        if whole[index].ndim >= 3 and whole[index].shape[1] == start:
            got = np.concatenate([piece[index] for piece in pieces], axis=1)
        else:
            got = pieces[-1][index]
        assert_same_outputs([whole[index]], [got], f"chunks {sizes}, output {index}")
    assert_same_outputs(whole[outputs:], pieces[-1][outputs:], f"chunks {sizes}, final states")


def _zeros_like(states, whole, outputs: int) -> dict:
    return {name: np.zeros_like(final) for name, final in zip(states, whole[outputs:])}


def test_a_backward_layer_fails_with_the_reason_and_keep_wrong_writes_it():
    (path,) = [p for p in TF2ONNX_FILES if "bilstm" in name_of(p)][:1]
    with pytest.raises(mlr.KnownWrong, match="cannot stream: a backward direction"):
        mlr.rewrite_onnx(path, streaming=True)
    kept = mlr.rewrite_onnx(path, streaming=True, keep_wrong=True)
    assert kept.report.known_wrong


FEATURES, UNITS, ROWS = 3, 4, 5


def _stock_native_lstms(layers: int, frozen: bool) -> onnx.ModelProto:
    """Unmasked LSTM layers as stock tf2onnx writes them, native nodes over [T, B, F], each node's initial
    h and c one tensor: zeros of the input's batch unsqueezed (a Keras 3 LSTM), or with ``frozen`` one
    constant [1, 5, H] that every node of the stack reads (a tf_keras stack of stateful layers, whose
    states tf2onnx froze: here not zeros, as after a call)."""
    rng = np.random.default_rng(layers)
    weights = [numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), f"{name}{k}")
               for k in range(layers) for name, shape in (("W", (1, 4 * UNITS, FEATURES if k == 0 else UNITS)),
                                                          ("R", (1, 4 * UNITS, UNITS)), ("B", (1, 8 * UNITS)))]
    nodes = [helper.make_node("Transpose", ["x"], ["x_tbf"], perm=[1, 0, 2])]
    if frozen:
        weights.append(numpy_helper.from_array(rng.normal(0, 0.5, (1, ROWS, UNITS)).astype(np.float32), "frozen"))
        state = "frozen"
    else:
        weights += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                    (("one", [1]), ("zero", [0]), ("units", [UNITS]))] + [numpy_helper.from_array(np.float32(0), "z")]
        nodes += [helper.make_node("Shape", ["x"], ["shape"]),
                  helper.make_node("Slice", ["shape", "zero", "one", "zero"], ["rows"]),
                  helper.make_node("Concat", ["rows", "units"], ["dims"], axis=0),
                  helper.make_node("Expand", ["z", "dims"], ["zeros"]),
                  helper.make_node("Unsqueeze", ["zeros", "zero"], ["zeros3"])]
        state = "zeros3"
    below = "x_tbf"
    for k in range(layers):
        nodes += [helper.make_node("LSTM", [below, f"W{k}", f"R{k}", f"B{k}", "", state, state],
                                   [f"y{k}", f"h{k}", f"c{k}"], name=f"LSTM__{k}", hidden_size=UNITS),
                  helper.make_node("Squeeze", [f"y{k}", "one" if not frozen else "axis1"], [f"y{k}_tbh"])]
        below = f"y{k}_tbh"
    if frozen:
        weights.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    nodes.append(helper.make_node("Transpose", [below], ["y"], perm=[1, 0, 2]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS if frozen else "n", None, FEATURES])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, UNITS])
    graph = helper.make_graph(nodes, "stock", [x], [y], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


@pytest.mark.parametrize("layers, frozen", [(1, False), (2, True)], ids=["zeros h and c", "one frozen state, a stack"])
def test_native_nodes_whose_states_share_a_tensor_stream_each_state(layers, frozen):
    """Stock tf2onnx feeds a node's initial h and c from one tensor, and a stateful stack's nodes from one
    constant: each state input is read where its state was (h where h, c where c), the file loads, the
    file's own states give its outputs and chunks give the one call."""
    original = _stock_native_lstms(layers, frozen)
    model, report = mlr.rewrite_onnx(original, streaming=True)
    onnx.checker.check_model(model, full_check=True)
    states = _state_inputs(model, original)
    assert len(states) == 2 * layers
    declared = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in list(model.graph.input) + list(model.graph.output)}
    assert all(declared[name] == declared[name[:-2] + "out"] == [ROWS if frozen else "n", UNITS] for name in states), \
        "a state has the rows of the input's batch"
    assert [line.split(": ", 1)[1] for line in report.streams] == \
        [f"{h}, {c} -> {h[:-2]}out, {c[:-2]}out" for h, c in zip(states[::2], states[1::2])]
    assert f"{layers} native layer(s) tf2onnx made stream" in str(report)
    lstms = [node for node in model.graph.node if node.op_type == "LSTM"]
    read = [[_source_input(model, tensor) for tensor in node.input[5:7]] for node in lstms]
    assert read == [[f"{prefix}/h_in", f"{prefix}/c_in"] for prefix in (name[:-len("/h_in")] for name in states[::2])]
    feeds = {"x": np.random.default_rng(7).normal(size=(ROWS, 7, FEATURES)).astype(np.float32)}
    kept = numpy_helper.to_array(original.graph.initializer[-2])[0] if frozen else np.zeros((ROWS, UNITS), np.float32)
    first = {name: kept for name in states}
    for runtime in ("onnxruntime", "openvino"):
        run = runner(model, runtime)
        whole = run({**feeds, **first})
        assert_same_outputs(runner(original, "onnxruntime")(feeds), whole[:1], f"the file's own states, {runtime}")
        for sizes in CHUNKINGS:
            _check_chunks(run, feeds, ["x"], states, whole, 1, sizes, first)


def _source_input(model, tensor: str) -> str:
    """The graph input ``tensor`` is unsqueezed from."""
    producer = {o: node for node in model.graph.node for o in node.output}[tensor]
    return producer.input[0]
