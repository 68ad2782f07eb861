# SPDX-License-Identifier: Apache-2.0
"""Stage 2, plan/emit: turn a :class:`~masked_lstm_rewriter.match.MaskedLstm` into ONNX nodes.

For each mask (once, however many layers share it) :class:`MaskPlanner` emits:

* ``sequence_lens``: the count of valid steps per row, computed in the graph;
* the post-padding guard: ``sequence_lens`` only describes rows whose valid steps all come
  first, i.e. whose mask never rises. The lengths reach the LSTM through a Reshape whose target
  size is the batch size plus the number of rises, so any other row makes the Reshape fail, on
  every runtime, with the node's name (which states the problem and the remedy) in the error;
* the time-major mask and "row has a valid step", for the fix-ups.

For each layer :func:`emit_lstm` emits the ONNX ``LSTM`` and the fix-ups that make its outputs
Keras's at every position:

* at padded steps Keras repeats the last valid output (zeros before the first valid step);
  onnxruntime writes zeros there: ``Where(mask, Y, last_output)``;
* a row with no valid step keeps the initial state in Keras; ONNX runtimes disagree on what they
  return there (zeros in onnxruntime): ``Where(length > 0, Y_h, initial_h)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import TensorProto
from tf2onnx import utils
from tf2onnx.graph_builder import GraphBuilder

from .match import MaskedLstm

GUARD_MESSAGE = ("masked_lstm_rewriter: the mask is not post-padded (a row has padding before or "
                 "between valid steps); reconvert with mask_mode='any'")
ONNX_GATE_ORDER = ("i", "o", "f", "c")


@dataclasses.dataclass(frozen=True)
class MaskTensors:
    """Tensors derived from one [B, T] mask, shared by every layer that uses it."""

    lengths: str      # [B] int32, valid steps per row; passes through the guard
    has_steps: str    # [B, 1] bool, length > 0
    mask_tm: str      # [T, B, 1] bool, time-major mask for the output fix-up


class MaskPlanner:
    """Emits (once per mask tensor) the lengths, the guard and the time-major mask."""

    def __init__(self, graph, mask_mode: str = "post"):
        if mask_mode != "post":
            raise NotImplementedError(f"mask_mode={mask_mode!r} is not implemented yet")
        self.graph = graph
        self._cache = {}

    def tensors_for(self, mask: str) -> MaskTensors:
        if mask not in self._cache:
            self._cache[mask] = self._emit(mask)
        return self._cache[mask]

    def _emit(self, mask: str) -> MaskTensors:
        g, gb = self.graph, GraphBuilder(self.graph)
        counts = g.make_node("Cast", [mask], attr={"to": TensorProto.INT32}).output[0]
        lengths = gb.make_reduce_sum({"data": counts, "axes": [1], "keepdims": 0, "noop_with_empty_axes": 0})
        checked = self._guard_post_padded(counts, lengths)
        positive = g.make_node("Greater", [lengths, _const(g, "zero_i32", np.array(0, np.int32))]).output[0]
        has_steps = gb.make_unsqueeze({"data": positive, "axes": [1]})
        transposed = g.make_node("Transpose", [mask], attr={"perm": [1, 0]}).output[0]
        mask_tm = gb.make_unsqueeze({"data": transposed, "axes": [2]})
        return MaskTensors(lengths=checked, has_steps=has_steps, mask_tm=mask_tm)

    def _guard_post_padded(self, counts: str, lengths: str) -> str:
        """``lengths`` routed through a Reshape that fails unless every row is post-padded.

        A row is post-padded exactly when its mask never rises (no padded step is followed by a
        valid one); the Reshape asks for batch + (number of rises) elements.
        """
        g, gb = self.graph, GraphBuilder(self.graph)
        int_max = np.iinfo(np.int64).max
        before = gb.make_slice({"data": counts, "starts": [0], "ends": [-1], "axes": [1]})
        after = gb.make_slice({"data": counts, "starts": [1], "ends": [int_max], "axes": [1]})
        rises = g.make_node("Cast", [g.make_node("Less", [before, after]).output[0]],
                            attr={"to": TensorProto.INT64}).output[0]
        per_row = gb.make_reduce_sum({"data": rises, "axes": [1], "keepdims": 0, "noop_with_empty_axes": 0})
        total = gb.make_reduce_sum({"data": per_row, "axes": [0], "keepdims": 1, "noop_with_empty_axes": 0})
        target = g.make_node("Add", [g.make_node("Shape", [lengths]).output[0], total]).output[0]
        return g.make_node("Reshape", [lengths, target], name=utils.make_name(GUARD_MESSAGE)).output[0]


def _const(graph, name, value):
    return graph.make_const(utils.make_name(name), value).output[0]


def _stack_gates(arrays: dict, transpose: bool) -> np.ndarray:
    blocks = [arrays[g].T if transpose else arrays[g] for g in ONNX_GATE_ORDER]
    return np.concatenate(blocks, axis=0)[np.newaxis].astype(np.float32)


def _activation_attrs(activations) -> dict:
    attrs = {"activations": [a.name for a in activations]}
    alphas = [a.alpha for a in activations if a.alpha is not None]
    betas = [a.beta for a in activations if a.beta is not None]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


def emit_lstm(graph, layer: MaskedLstm, mask_tensors: MaskTensors) -> None:
    """Replace ``layer``'s While loop by an ONNX LSTM plus the Keras fix-ups, then drop the loop."""
    g, gb = graph, GraphBuilder(graph)
    hidden = layer.hidden_size
    w = _const(g, "W", _stack_gates(layer.kernel, transpose=True))
    r = _const(g, "R", _stack_gates(layer.recurrent, transpose=True))
    b = ""
    if layer.bias is not None:
        wb = _stack_gates(layer.bias, transpose=False).reshape(1, 4 * hidden)
        b = _const(g, "B", np.concatenate([wb, np.zeros_like(wb)], axis=1))
    initial_h = initial_c = ""  # zeros
    if not layer.zero_initial_state:
        initial_h = gb.make_unsqueeze({"data": layer.initial_h, "axes": [0]})
        initial_c = gb.make_unsqueeze({"data": layer.initial_c, "axes": [0]})
    lstm = g.make_node(
        "LSTM", [layer.x, w, r, b, mask_tensors.lengths, initial_h, initial_c], output_count=3,
        attr={"hidden_size": hidden, "direction": "forward", **_activation_attrs(layer.activations)},
        name=utils.make_name(f"{layer.layer}/masked_lstm"))
    y = gb.make_squeeze({"data": lstm.output[0], "axes": [1]})       # [T, B, H]
    h_last = gb.make_squeeze({"data": lstm.output[1], "axes": [0]})  # [B, H]
    c_last = gb.make_squeeze({"data": lstm.output[2], "axes": [0]})

    final_h, final_c, carried = _keras_states(g, layer, mask_tensors, h_last, c_last)
    if layer.output_carried:
        # padded steps repeat the last output: h at the last valid step, zeros if none
        sequence = g.make_node("Where", [mask_tensors.mask_tm, y, carried]).output[0]
        last_output = carried
    else:
        # masked steps output zeros (zero_output_for_mask): zero them explicitly, whatever the
        # runtime writes past a row's length
        zero = _const(g, "zero_f32", np.array(0, np.float32))
        sequence = g.make_node("Where", [mask_tensors.mask_tm, y, zero]).output[0]
        last_output = gb.make_squeeze({"data": gb.make_slice(
            {"data": sequence, "starts": [-1], "ends": [np.iinfo(np.int64).max], "axes": [0]}), "axes": [0]})
    if not layer.writes_sequence:
        sequence = gb.make_unsqueeze({"data": last_output, "axes": [0]})

    _rewire(g, layer, sequence, last_output, final_h, final_c)


def _keras_states(g, layer: MaskedLstm, mask_tensors: MaskTensors, h_last, c_last):
    """(final h, final c, last carried output) as Keras has them, rows with no valid step included.

    Keras keeps the initial state for such a row, and its carried output stays at zeros. With a
    zero initial state the runtime's own answer (zeros, or the initial state) is already right.
    """
    if layer.zero_initial_state:
        return h_last, c_last, h_last
    has_steps = mask_tensors.has_steps
    final_h = g.make_node("Where", [has_steps, h_last, layer.initial_h]).output[0]
    final_c = g.make_node("Where", [has_steps, c_last, layer.initial_c]).output[0]
    carried = g.make_node("Where", [has_steps, h_last, _const(g, "zero_f32", np.array(0, np.float32))]).output[0]
    return final_h, final_c, carried


def _rewire(g, layer: MaskedLstm, sequence, last_output, final_h, final_c):
    """Point every consumer of the loop at the new tensors, then remove the loop."""
    for stacked in layer.sequence_outputs:
        g.replace_all_inputs(stacked, sequence)
    g.replace_all_inputs(layer.last_output, last_output)
    g.replace_all_inputs(layer.final_h, final_h)
    g.replace_all_inputs(layer.final_c, final_c)
    for stacked in layer.sequence_outputs:
        g.remove_node(g.get_node_by_output(stacked).name)
    g.remove_node(layer.while_node.name)
