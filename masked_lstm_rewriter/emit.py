# SPDX-License-Identifier: Apache-2.0
"""Stage 2b, emit: turn :class:`~masked_lstm_rewriter.match.MaskedRecurrentLayer` records into ONNX nodes.

What each mask needs (lengths, the guard or the reorder) comes from :mod:`.masks`.

:func:`plan_nodes` groups layers into ONNX ``LSTM`` / ``GRU`` / ``RNN`` nodes: a forward and a
reverse layer of the same kind over the same input and mask (a ``Bidirectional`` layer, or any
such pair) share one ``direction="bidirectional"`` node, which computes exactly the two
separate directions. Only the weights' layout and the op's attributes depend on the kind
(:func:`_onnx_weights`); the fix-ups hold for all three ops, which onnxruntime runs alike over
``sequence_lens`` (zeros past a row's length, the state at its last valid step).

:func:`emit_group` emits one node and, per layer, the fix-ups that make its outputs Keras's at
every position:

* at padded steps a plain layer repeats the last valid output (zeros before the first valid
  step), where onnxruntime writes zeros: ``Where(mask, Y, last_output)``;
* with ``zero_output_for_mask`` (``Bidirectional``), or in reverse, masked steps are zeros;
* a ``go_backwards`` layer returns its sequence in reversed time order; a ``Bidirectional``
  layer reverses it back, so that pair of reversals is skipped;
* a row with no valid step keeps the initial state in Keras; ONNX runtimes disagree on what they
  return there (zeros in onnxruntime): ``Where(length > 0, Y_h, initial_h)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from tf2onnx import utils
from tf2onnx.graph_builder import GraphBuilder

from .masks import MaskTensors
from .match import MaskedRecurrentLayer

# the ONNX ops' order of the gate blocks in W, R and B
ONNX_GATE_ORDER = {"LSTM": ("i", "o", "f", "c"), "GRU": ("z", "r", "h"), "RNN": ("h",)}


def _const(graph, name, value):
    return graph.make_const(utils.make_name(name), value).output[0]


def plan_nodes(layers: list) -> list:
    """Group layers into ONNX nodes: (forward, reverse) pairs of one kind sharing input and mask, else alone."""
    groups, forward = [], [layer for layer in layers if layer.direction == "forward"]
    for layer in layers:
        if layer.direction == "forward":
            continue
        partner = next((f for f in forward if _node_key(f) == _node_key(layer)), None)
        if partner is None:
            groups.append((layer,))
        else:
            forward.remove(partner)
            groups.append((partner, layer))
    return [(layer,) for layer in forward] + groups


def _node_key(layer):
    """What two layers must share to be one bidirectional node."""
    return layer.x_source, layer.mask, layer.kind, layer.hidden_size, layer.linear_before_reset


@dataclasses.dataclass(frozen=True)
class DirectionOutputs:
    """One direction's raw ONNX results, in the model's time order."""

    y: str       # [T, B, H]
    h_last: str  # [B, H]
    c_last: str  # [B, H], LSTM only (else None)
    h_last_step: str  # [1, B, H]: h_last before the squeeze, broadcasts over the time axis


def emit_group(graph, layers: tuple, mask_tensors: MaskTensors) -> None:
    """One ONNX node for ``layers`` (one layer, or a forward and a reverse one), then each
    layer's Keras outputs; finally the loops' consumers are pointed at them."""
    x = layers[0].x
    if mask_tensors.reorder is not None:
        x = _gather_steps(graph, x, mask_tensors.reorder.gather_input, layers[0].input_size)
    outputs = _emit_recurrent_node(graph, layers, x, mask_tensors.lengths)
    replacements = [_keras_outputs(graph, layer, out, mask_tensors) for layer, out in zip(layers, outputs)]
    for layer, replacement in zip(layers, replacements):
        _rewire(graph, layer, *replacement)


def _gather_steps(g, tensor: str, flat_index: str, width: int) -> str:
    """``tensor`` [T, B, width] re-ordered: position (t, b) takes row ``flat_index[t, b]`` of it."""
    rows = g.make_node("Reshape", [tensor, _const(g, "rows_shape", np.array([-1, width], np.int64))]).output[0]
    return g.make_node("Gather", [rows, flat_index], attr={"axis": 0}).output[0]


def _emit_recurrent_node(g, layers: tuple, x: str, lengths: str) -> list:
    """The ONNX LSTM, GRU or RNN node (one row of weights per direction), split per direction."""
    gb = GraphBuilder(g)
    kind = layers[0].kind
    weights = [_onnx_weights(layer) for layer in layers]
    w, r, b = (np.concatenate([per_layer[i] for per_layer in weights], axis=0) for i in range(3))
    b = _const(g, "B", b) if any(layer.bias is not None or layer.recurrent_bias for layer in layers) else ""
    states = 2 if kind == "LSTM" else 1
    initial = [""] * states  # zeros
    if not all(layer.zero_initial_state for layer in layers):
        initial = [_stack_states(g, [layer.initial_h for layer in layers])]
        if kind == "LSTM":
            initial.append(_stack_states(g, [layer.initial_c for layer in layers]))
    direction = "bidirectional" if len(layers) == 2 else layers[0].direction
    activations = [a for layer in layers for a in layer.activations]
    attr = {"hidden_size": layers[0].hidden_size, "direction": direction, **_activation_attrs(activations)}
    if kind == "GRU":
        attr["linear_before_reset"] = layers[0].linear_before_reset
    node = g.make_node(
        kind, [x, _const(g, "W", w), _const(g, "R", r), b, lengths] + initial, output_count=1 + states, attr=attr,
        name=utils.make_name("/".join(layer.layer for layer in layers) + f"/masked_{kind.lower()}"))
    outputs = []
    for index in range(len(layers)):
        y, h_step, *c = (_direction(gb, out, axis, index, len(layers))
                         for out, axis in zip(node.output, (1, 0, 0)))
        squeeze = lambda tensor, axis: gb.make_squeeze({"data": tensor, "axes": [axis]})  # noqa: E731
        outputs.append(DirectionOutputs(y=squeeze(y, 1), h_last=squeeze(h_step, 0),
                                        c_last=squeeze(c[0], 0) if c else None, h_last_step=h_step))
    return outputs


def _onnx_weights(layer: MaskedRecurrentLayer) -> tuple:
    """One direction's W [1, G*H, I], R [1, G*H, H] and B [1, 2*G*H] in the ONNX op's gate order.

    Keras's bias is ONNX's Wb; Rb is zeros except where the layer has a separate recurrent bias
    (a GRU with ``reset_after=True``, whose reset gate multiplies ``h @ R + Rb``)."""
    order = ONNX_GATE_ORDER[layer.kind]
    zeros = np.zeros(layer.hidden_size, np.float32)
    w = _stack_gates([layer.kernel[g].T for g in order])
    r = _stack_gates([layer.recurrent[g].T for g in order])
    wb = _stack_gates([zeros if layer.bias is None else layer.bias[g] for g in order])
    rb = _stack_gates([layer.recurrent_bias.get(g, zeros) for g in order])
    return w, r, np.concatenate([wb, rb], axis=1)


def _direction(gb, tensor, axis, index, count):
    """Direction ``index`` of an ONNX recurrent op's output, the direction axis kept (size 1)."""
    if count > 1:
        tensor = gb.make_slice({"data": tensor, "starts": [index], "ends": [index + 1], "axes": [axis]})
    return tensor


def _stack_gates(blocks: list) -> np.ndarray:
    """Gate blocks one after the other along the first axis, with a leading direction axis."""
    return np.concatenate(blocks, axis=0)[np.newaxis].astype(np.float32)


def _stack_states(g, states: list) -> str:
    gb = GraphBuilder(g)
    parts = [gb.make_unsqueeze({"data": state, "axes": [0]}) for state in states]
    return parts[0] if len(parts) == 1 else g.make_node("Concat", parts, attr={"axis": 0}).output[0]


def _activation_attrs(activations) -> dict:
    attrs = {"activations": [a.name for a in activations]}
    alphas = [a.alpha for a in activations if a.alpha is not None]
    betas = [a.beta for a in activations if a.beta is not None]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


def _keras_outputs(g, layer: MaskedRecurrentLayer, out: DirectionOutputs, mask_tensors: MaskTensors):
    """(sequence in Keras's order, sequence in the model's time order, last output, final h, c)."""
    gb = GraphBuilder(g)
    final_h, final_c, carried = _keras_states(g, layer, mask_tensors, out.h_last, out.c_last)
    in_time_order = None
    if mask_tensors.reorder is not None:
        # mask_mode="any": the LSTM ran over the valid steps moved to the front; map back
        where = mask_tensors.reorder.output_map(layer.direction, layer.output_carried)
        mapped = _gather_steps(g, out.y, where.index, layer.hidden_size)
        in_time_order = g.make_node("Where", [where.keep, mapped, _zero(g)]).output[0]
        if layer.direction == "reverse":
            sequence = _reverse_time(gb, in_time_order)
            last_output = carried if layer.output_carried else _step(gb, in_time_order, 0)
        else:
            sequence, in_time_order = in_time_order, None
            last_output = carried if layer.output_carried else _step(gb, sequence, -1)
    elif layer.direction == "reverse":
        # Keras ran forward over the reversed rows, whose padding comes first: those steps output
        # zeros (the carried output starts at zeros); its last step saw the row's first step.
        in_time_order = g.make_node("Where", [mask_tensors.mask_tm, out.y, _zero(g)]).output[0]
        sequence = _reverse_time(gb, in_time_order)
        last_output = carried
    elif layer.output_carried:
        # padded steps repeat the last output: h at the last valid step, zeros if none; with a
        # zero initial state that is the runtime's [1, B, H] Y_h as it is (no Squeeze node)
        fill = out.h_last_step if layer.zero_initial_state else carried
        sequence = g.make_node("Where", [mask_tensors.mask_tm, out.y, fill]).output[0]
        last_output = carried
    else:
        # masked steps output zeros (zero_output_for_mask): zero them explicitly, whatever the
        # runtime writes past a row's length
        sequence = g.make_node("Where", [mask_tensors.mask_tm, out.y, _zero(g)]).output[0]
        last_output = _step(gb, sequence, -1)
    if not layer.writes_sequence:
        sequence = in_time_order = gb.make_unsqueeze({"data": last_output, "axes": [0]})
    return sequence, in_time_order, last_output, final_h, final_c


def _step(gb, sequence, index):
    """Time step ``index`` of a [T, B, H] sequence, as [B, H]."""
    end = np.iinfo(np.int64).max if index == -1 else index + 1
    return gb.make_squeeze({"data": gb.make_slice({"data": sequence, "starts": [index], "ends": [end],
                                                   "axes": [0]}), "axes": [0]})


def _zero(g):
    return _const(g, "zero_f32", np.array(0, np.float32))


def _reverse_time(gb, tensor):
    return gb.make_slice({"data": tensor, "starts": [-1], "ends": [np.iinfo(np.int64).min], "axes": [0],
                          "steps": [-1]})


def _keras_states(g, layer: MaskedRecurrentLayer, mask_tensors: MaskTensors, h_last, c_last):
    """(final h, final c, last carried output) as Keras has them, rows with no valid step included.

    Keras keeps the initial state for such a row, and its carried output stays at zeros. With a
    zero initial state the runtime's own answer (zeros, or the initial state) is already right.
    """
    if layer.zero_initial_state:
        return h_last, c_last, h_last
    has_steps = mask_tensors.has_steps
    final_h = g.make_node("Where", [has_steps, h_last, layer.initial_h]).output[0]
    final_c = None if c_last is None else g.make_node("Where", [has_steps, c_last, layer.initial_c]).output[0]
    carried = g.make_node("Where", [has_steps, h_last, _zero(g)]).output[0]
    return final_h, final_c, carried


def _rewire(g, layer: MaskedRecurrentLayer, sequence, in_time_order, last_output, final_h, final_c):
    """Point every consumer of the loop at the new tensors, then remove the loop."""
    for stacked in layer.sequence_outputs:
        if in_time_order is not None and layer.writes_sequence:
            _skip_reversal_back(g, stacked, in_time_order)
        g.replace_all_inputs(stacked, sequence)
    g.replace_all_inputs(layer.last_output, last_output)
    g.replace_all_inputs(layer.final_h, final_h)
    if layer.final_c is not None:
        g.replace_all_inputs(layer.final_c, final_c)
    for stacked in layer.sequence_outputs:
        g.remove_node(g.get_node_by_output(stacked).name)
    g.remove_node(layer.while_node.name)


def _skip_reversal_back(g, stacked, in_time_order):
    """Where Keras reverses a reversed sequence back (``Bidirectional``: ``reverse(transpose(s))``
    over the time axis), hand the consumers the sequence in time order instead of reversing twice."""
    for transpose in g.find_output_consumers(stacked):
        if transpose.type != "Transpose" or not g.is_const(transpose.input[1]) or \
                g.get_tensor_value(transpose.input[1]) != [1, 0, 2]:
            continue
        for reverse in g.find_output_consumers(transpose.output[0]):
            if reverse.type == "ReverseV2" and g.is_const(reverse.input[1]) and \
                    g.get_tensor_value(reverse.input[1]) in (1, [1]):
                batch_major = g.make_node("Transpose", [in_time_order], attr={"perm": [1, 0, 2]}).output[0]
                g.replace_all_inputs(reverse.output[0], batch_major)
