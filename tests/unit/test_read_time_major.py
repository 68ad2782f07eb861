# SPDX-License-Identifier: Apache-2.0
"""Read stage, time-major loops: tf_keras's ``time_major=True`` spelling of the same layer.

A time-major layer reads x [T, B, F] and the mask [T, B] Keras hands it, and unstacks the input and
``expand_dims(mask, -1)`` as they are, without the transposes of a batch-major layer
(``_graphs.Loop(time_major=True)``). The reader takes that mask in the "time" layout (the planner
gets its [B, T] transpose, once per mask), or, when it is itself ``transpose(mask)`` of a [B, T]
mask (``transpose(sequence_mask(lengths, T))``), that mask: a mask made from lengths is then
post-padded by construction, with neither the guard nor the reordering.

Each rewritten loop equals numpy's masked recurrence and stock tf2onnx's Loop at every position
(``check_rewrites`` of ``_harness.py``), its sequence time-major.
"""

import pytest

import masked_lstm_rewriter as mlr

import _graphs as G
from _harness import check_rewrites


def guards(model) -> list:
    return [node for node in model.graph.node if node.name.startswith(mlr.GUARD_MESSAGE)]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("spec", [
    pytest.param(G.Loop("LSTM", time_major=True), id="lstm-mask-input"),
    pytest.param(G.Loop("GRU", time_major=True, mask="masking", backward=True), id="gru-masking-backward"),
    pytest.param(G.Loop("RNN", time_major=True, sequence=False), id="rnn-last-output"),
])
def test_time_major_mask_is_read(spec, mode):
    model, _ = check_rewrites(G.WhileLoop(spec), mode, natives=[spec.kind])
    assert len(guards(model)) == (1 if mode == "post" else 0)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_transposed_sequence_mask_is_post_padded(mode):
    """``transpose(sequence_mask(lengths, T))``: read as the [B, T] mask it transposes."""
    model, _ = check_rewrites(G.WhileLoop(G.Loop("LSTM", time_major=True, mask="lengths")), mode, natives=["LSTM"])
    assert not guards(model) and "ScatterElements" not in {node.op_type for node in model.graph.node}
