# SPDX-License-Identifier: Apache-2.0
"""Emit stage, mask_mode="post": the golden node structure of a rewritten loop, and its numbers.

For each cell kind, the converted graph (f) is checked against what it must be (f_ref):

* one native node of the kind, ``direction="forward"``, no Loop, no reordering;
* its ``sequence_lens`` come through the guard: a one-output ``Split`` named with
  ``masked_lstm_rewriter.GUARD_MESSAGE``, whose split size is counted by ``Pad, Pad, Greater,
  Cast, ReduceSum`` from the mask;
* its W, R and B are Keras's weights in the ONNX op's gate order (LSTM i, o, f, c), with the LSTM's
  padding column (-1e4 into i, +1e4 into f) when the cell state is an output, GRU's recurrent
  bias as ``Rb`` for ``reset_after=True``;
* its outputs equal the numpy oracle and the Loop stock tf2onnx makes of the same function, at
  every position of post-padded batches (a full row, an empty row, lengths in between), and a
  batch that is not post-padded makes onnxruntime fail with the guard's message
  (``check_rewrites`` and ``assert_guard_fails`` of ``_harness.py``).
"""

import numpy as np
import pytest

import masked_lstm_rewriter as mlr

import _graphs as G
from _harness import assert_guard_fails, check_rewrites, native_nodes

KINDS = [pytest.param(G.Loop("LSTM"), id="lstm"), pytest.param(G.Loop("GRU", reset_after=True), id="gru-reset_after"),
         pytest.param(G.Loop("GRU", reset_after=False), id="gru-reset_before"), pytest.param(G.Loop("RNN"), id="simple_rnn")]
GUARD_CHAIN = ("ReduceSum", "Cast", "Greater", "Pad")  # the split size, from the Split back to the mask


def guard_of(converted):
    """The guard Split feeding the native node's sequence_lens."""
    (node,) = converted.native_nodes()
    split = G.producers(converted.model)[node.input[4]]
    return node, split


@pytest.mark.parametrize("spec", KINDS)
def test_golden_structure(spec):
    converted, _ = G.convert_loop(spec, "post")
    ops = converted.ops()
    assert ops.count(spec.kind) == 1 and "Loop" not in ops
    assert not {"ScatterElements", "ReverseSequence"} & set(ops)
    assert "Where" not in G.sequence_chain(converted)  # one Gather gives it, batch-major, for Keras's Transpose
    node, split = guard_of(converted)
    assert split.op_type == "Split" and split.name.startswith(mlr.GUARD_MESSAGE) and len(split.output) == 1
    assert [n for n in converted.model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)] == [split]
    by_output, chain, tensor = G.producers(converted.model), [], split.input[1]
    for _ in GUARD_CHAIN:
        producer = by_output[tensor]
        chain.append(producer)
        tensor = producer.input[0]
    assert tuple(n.op_type for n in chain) == GUARD_CHAIN
    greater = chain[2]
    assert [by_output[t].op_type for t in greater.input] == ["Pad", "Pad"]  # [1, mask] > [mask, 0]: the falls
    attrs = G.attributes(node)
    assert (attrs["direction"], attrs["hidden_size"]) == ("forward", spec.units)
    if spec.kind == "GRU":
        assert attrs["linear_before_reset"] == int(spec.reset_after)


@pytest.mark.parametrize("spec", KINDS)
def test_weights_are_keras_weights_in_onnx_gate_order(spec):
    converted, weights = G.convert_loop(spec, "post")
    (node,) = converted.native_nodes()
    init = G.initializers(converted.model)
    w, r, b = (init[name][0] for name in node.input[1:4])
    units, features = spec.units, spec.features
    assert w.shape[1] == features + (1 if spec.kind == "LSTM" else 0)  # LSTM with c out: the padding column
    kernel = G.keras_blocks(spec.kind, weights["kernel"], units)
    recurrent = G.keras_blocks(spec.kind, weights["recurrent"], units)
    bias = weights["bias"]
    in_bias, rec_bias = (bias[0], bias[1]) if bias.ndim == 2 else (bias, np.zeros_like(bias))
    in_bias, rec_bias = G.keras_blocks(spec.kind, in_bias, units), G.keras_blocks(spec.kind, rec_bias, units)
    onnx_w, onnx_r = G.onnx_blocks(spec.kind, w, units), G.onnx_blocks(spec.kind, r, units)
    onnx_wb, onnx_rb = G.onnx_blocks(spec.kind, b[:len(b) // 2], units), G.onnx_blocks(spec.kind, b[len(b) // 2:], units)
    for gate in G.KERAS_GATES[spec.kind]:
        np.testing.assert_array_equal(onnx_w[gate][:, :features], kernel[gate].T, err_msg=gate)
        np.testing.assert_array_equal(onnx_r[gate], recurrent[gate].T, err_msg=gate)
        if spec.kind == "GRU" and spec.reset_after and gate == "h":  # inside r * (h R + Rb)
            np.testing.assert_allclose(onnx_rb[gate], rec_bias[gate], err_msg=gate)
            np.testing.assert_allclose(onnx_wb[gate], in_bias[gate], err_msg=gate)
        else:
            np.testing.assert_allclose(onnx_wb[gate] + onnx_rb[gate], in_bias[gate] + rec_bias[gate],
                                       rtol=1e-6, err_msg=gate)
    if spec.kind == "LSTM":
        column = {gate: block[:, features] for gate, block in onnx_w.items()}
        assert {g: set(v.tolist()) for g, v in column.items()} == {"i": {-1e4}, "f": {1e4}, "o": {0.0}, "c": {0.0}}


def test_no_padding_column_without_the_cell_state():
    spec = G.Loop("LSTM", outputs=("seq", "last", "h"))
    model, _ = check_rewrites(G.WhileLoop(spec), "post", natives=["LSTM"])
    (node,) = native_nodes(model)
    assert G.initializers(model)[node.input[1]].shape == (1, 4 * spec.units, spec.features)


@pytest.mark.parametrize("spec", KINDS)
def test_outputs_equal_the_oracle_and_the_stock_loop(spec):
    """f against f_ref twice: numpy's masked recurrence, and tf2onnx's own Loop of the same function
    (the While case's two references)."""
    check_rewrites(G.WhileLoop(spec), "post", natives=[spec.kind])


@pytest.mark.parametrize("spec", [pytest.param(G.Loop("LSTM"), id="lstm"), pytest.param(G.Loop("RNN"), id="simple_rnn")])
def test_guard_fails_a_batch_that_is_not_post_padded(spec):
    """Pre-padded rows, and rows with holes (``G.NOT_POST_PADDED`` among them)."""
    case = G.WhileLoop(spec)
    assert_guard_fails(case, case.rewrite("post")[0])


def test_backward_loop_runs_forward_over_rows_reversed_in_place():
    """go_backwards: ReverseSequence by each row's length, never a direction="reverse" node."""
    model, report = check_rewrites(G.WhileLoop(G.Loop("LSTM", backward=True)), "post", natives=["LSTM"])
    (node,) = native_nodes(model)
    assert G.attributes(node)["direction"] == "forward" and "ReverseSequence" in [n.op_type for n in model.graph.node]
    assert report.layers[0].detail == "LSTM, backward: a forward node over each row reversed within its length"


SHORT_ROWS = np.array([[1, 1, 1, 0, 0],   # the longest row: 3 of 5 steps
                       [1, 0, 0, 0, 0],
                       [0, 0, 0, 0, 0],
                       [1, 1, 0, 0, 0]], bool)


def node_input_chain(converted) -> list:
    """The native node's input back to the loop's input: the producers' op types (at most three)."""
    by_output, chain = G.producers(converted.model), []
    (node,) = converted.native_nodes()
    tensor = node.input[0]
    while tensor in by_output and len(chain) < 3:
        chain.append(by_output[tensor])
        tensor = by_output[tensor].input[0]
    return chain


@pytest.mark.parametrize("runtime, cut", [(None, True), ("openvino", True), ("onnxruntime", False)])
def test_the_node_runs_up_to_the_longest_row_where_a_runtime_would_run_every_step(runtime, cut):
    """OpenVINO runs every step of a node's input (and, with static shapes, in a per-step loop while
    the node has sequence_lens): its input is cut to the longest row, at least one step. onnxruntime
    stops there by itself. The outputs are the same at every position, padded ones too."""
    spec = G.Loop("GRU", reset_after=True)  # no padding column in front of the node
    converted, weights = G.convert_loop(spec, "post", runtime=runtime)
    chain = node_input_chain(converted)
    assert chain[0].op_type == "Transpose" and (chain[1:2] != [] and chain[1].op_type == "Slice") is cut, chain
    if cut:
        longest = G.producers(converted.model)[chain[1].input[2]]
        assert longest.op_type == "Max" and G.producers(converted.model)[longest.input[0]].op_type == "ReduceMax"
    for mask in (G.POST_PADDED, SHORT_ROWS, np.zeros_like(SHORT_ROWS)):
        G.assert_matches_reference(spec, converted, weights, mask)


@pytest.mark.parametrize("runtime, given", [(None, True), ("openvino", True), ("onnxruntime", False)])
def test_the_zero_initial_state_is_given_where_openvino_may_run_the_node(runtime, given):
    """OpenVINO folds the transposes around a node only when its initial h is given: zeros made from
    the batch size. Elsewhere the op's default zeros cost no node. Same outputs either way."""
    spec = G.Loop("GRU", reset_after=True)
    converted, weights = G.convert_loop(spec, "post", runtime=runtime)
    (node,) = converted.native_nodes()
    initial_h = node.input[5] if len(node.input) > 5 else ""
    assert (initial_h != "" and G.producers(converted.model)[initial_h].op_type == "ConstantOfShape") is given
    for mask in (G.POST_PADDED, SHORT_ROWS, np.zeros_like(SHORT_ROWS)):
        G.assert_matches_reference(spec, converted, weights, mask)
