# SPDX-License-Identifier: Apache-2.0
"""Emit stage, mask_mode="any": no guard; the valid steps are moved to the front and back.

The golden structure: one native node, no Loop, no guard ``Split`` (no node named with
``GUARD_MESSAGE``, no ``Split`` at all); the reordering (a ``CumSum`` over the mask, one
``ScatterElements``, and ``Gather`` s of whole feature vectors: one into the native node's input,
one mapping its outputs back, batch-major, as the post-padded layout does); ``sequence_lens`` straight from the mask's count. Then the numbers:
on a batch with pre-padded rows, rows with holes, an empty and a full row, every output equals
the numpy oracle at every position, for each cell kind; for a backward loop and a loop that keeps
only its last output, ``check_rewrites`` of ``_harness.py`` (numpy and stock tf2onnx's Loop, on
post-padded, pre-padded and holed batches).
"""

import numpy as np
import pytest

import masked_lstm_rewriter as mlr

import _graphs as G
from _harness import check_rewrites

KINDS = [pytest.param(G.Loop("LSTM"), id="lstm"), pytest.param(G.Loop("GRU", reset_after=True), id="gru-reset_after"),
         pytest.param(G.Loop("GRU", reset_after=False), id="gru-reset_before"), pytest.param(G.Loop("RNN"), id="simple_rnn")]


def readers(model, tensor):
    return [n for n in model.graph.node if tensor in n.input]


@pytest.mark.parametrize("spec", KINDS)
def test_golden_structure(spec):
    converted, _ = G.convert_loop(spec, "any")
    ops = converted.ops()
    assert ops.count(spec.kind) == 1 and "Loop" not in ops
    assert "Split" not in ops and not [n for n in converted.model.graph.node if mlr.GUARD_MESSAGE in n.name]
    # CumSums: the reorder's running count, and the batch-major rows' (and their row offsets)
    assert ops.count("ScatterElements") == 1 and ops.count("CumSum") == 3
    (node,) = converted.native_nodes()
    by_output = G.producers(converted.model)
    # the input is gathered into the compacted order (through the LSTM's padding column, if any)
    upstream, tensor = [], node.input[0]
    while tensor in by_output and by_output[tensor].op_type != "Gather":
        upstream.append(by_output[tensor].op_type)
        tensor = by_output[tensor].input[0] if by_output[tensor].op_type != "Where" else by_output[tensor].input[1]
    assert by_output[tensor].op_type == "Gather" and set(upstream) <= {"Where", "Pad"}
    assert by_output[node.input[4]].op_type == "ReduceSum"
    # the sequence output is mapped back, batch-major, by one flat Gather of Y's [(T + 1) * B, H] rows
    (squeeze,) = readers(converted.model, node.output[0])
    (pad,) = [n for n in readers(converted.model, squeeze.output[0]) if n.op_type == "Pad"]
    (reshape,) = readers(converted.model, pad.output[0])
    assert squeeze.op_type == "Squeeze" and [n.op_type for n in readers(converted.model, reshape.output[0])] == ["Gather"]
    assert G.sequence_chain(converted) == ["Gather", "Reshape", "Pad", "Squeeze"]
    assert converted.report.layers[0].mask_mode == "any"


@pytest.mark.parametrize("spec", KINDS)
@pytest.mark.parametrize("mask", [pytest.param(G.NOT_POST_PADDED, id="pre-padded-and-holes"),
                                  pytest.param(G.POST_PADDED, id="post-padded")])
def test_outputs_equal_the_oracle_for_any_mask(spec, mask):
    converted, weights = G.convert_loop(spec, "any")
    G.assert_matches_reference(spec, converted, weights, mask)


def test_pre_padded_batch_differs_from_post_padded_lengths():
    """The oracle is not trivially satisfied: the same lengths post-padded give other numbers."""
    spec = G.Loop("GRU")
    converted, _ = G.convert_loop(spec, "any")
    pre = np.array([[0, 0, 1, 1, 1]] * 4, bool)
    post = pre[:, ::-1].copy()
    feeds, _ = G.batch(spec, pre)
    got_pre = converted.run(feeds)["last"]
    got_post = converted.run({**feeds, "mask": post})["last"]
    assert not np.allclose(got_pre, got_post, atol=1e-3)


@pytest.mark.parametrize("spec", [pytest.param(G.Loop("LSTM", backward=True), id="lstm"),
                                  pytest.param(G.Loop("GRU", backward=True, reset_after=False), id="gru")])
def test_backward_loop_on_any_mask(spec):
    _, report = check_rewrites(G.WhileLoop(spec), "any", natives=[spec.kind])
    assert report.layers[0].detail == f"{spec.kind}, backward: a forward node over each row reversed within its length"


def test_last_output_only_on_any_mask():
    check_rewrites(G.WhileLoop(G.Loop("LSTM", sequence=False)), "any", natives=["LSTM"])
