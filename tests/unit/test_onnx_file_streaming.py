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


def _check_chunks(run, feeds, timed, states, whole, outputs: int, sizes) -> None:
    """Chunks of ``sizes`` steps, each fed the states the previous one returned: every sequence output
    (steps on axis 1) equals the one call's at every step, every other output and state after the last."""
    carried, start, pieces = _zeros_like(states, whole, outputs), 0, []
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
