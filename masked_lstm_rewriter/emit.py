# SPDX-License-Identifier: Apache-2.0
"""Stage 2b, emit: turn a :class:`~masked_lstm_rewriter.match.MaskedRecurrentLayer` into ONNX nodes.

What each mask needs (lengths, the guard or the reorder) comes from :mod:`.masks`.

Each cell of the layer is one native node (a layer has one cell; ``keras.layers.RNN([cell, ...])``
several): the first reads the layer's input, each other one the steps the node below produced,
exactly as that node ran them (its valid steps first, reversed for a backward layer). The top
cell's node gives the layer's outputs; every cell gives its own final states.

The emitted graph gives Keras's numbers on any runtime that computes each row's valid steps
correctly, whether or not it honours ``sequence_lens`` past them (OpenVINO ignores it with
dynamic shapes; onnxruntime stops at the length). So it reads nothing a runtime computes past a
row's length:

* every layer is one ``direction="forward"`` node over post-padded rows; a backward layer runs
  over its rows reversed within their length (``ReverseSequence``), and its outputs are
  reversed back the same way;
* the last output and the final ``h`` are gathered from ``Y`` at each row's last valid step
  (zeros for a row with none), never read from ``Y_h``;
* an LSTM's final cell state can only come from ``Y_c``: when it is used, the input gets one
  more column, 1 at padded steps, whose weights drive the input gate to exactly 0 and the
  forget gate to exactly 1 there, so that ``c`` is carried unchanged over padded steps whatever
  the runtime does with them (this needs a recurrent activation that saturates exactly:
  sigmoid or hard_sigmoid; otherwise :func:`portability_refusal` keeps the layer a Loop).

Then the fix-ups make every output Keras's at every position:

* at padded steps a plain layer repeats the last valid output (zeros before the first valid
  step): ``Where(mask, Y, last_output)``;
* with ``zero_output_for_mask`` (``Bidirectional``), or in reverse, masked steps are zeros;
* a ``go_backwards`` layer returns its sequence in reversed time order; a ``Bidirectional``
  layer reverses it back, so that pair of reversals is skipped;
* a row with no valid step keeps the initial state in Keras: ``Where(length > 0, h, initial_h)``.

Only ``Where`` selects values by the mask (never arithmetic): padded inputs may hold anything,
``-inf`` and NaN included.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from tf2onnx import utils
from tf2onnx.graph_builder import GraphBuilder

from .cell import producer
from .masks import MaskTensors
from .match import MaskedRecurrentLayer, RecurrentCell
from .schedule import RecurrentNode, emit_node

# the ONNX ops' order of the gate blocks in W, R and B
ONNX_GATE_ORDER = {"LSTM": ("i", "o", "f", "c"), "GRU": ("z", "r", "h"), "RNN": ("h",)}
# added to the i and f gates' pre-activations at padded steps when the cell state is carried over
# them: far past where sigmoid and hard_sigmoid saturate, and finite in float16 too
PADDING_DRIVE = 1e4
SATURATING = ("Sigmoid", "HardSigmoid")


def _const(graph, name, value):
    return graph.make_const(utils.make_name(name), value).output[0]


@dataclasses.dataclass(frozen=True)
class NodeOutputs:
    """One layer's raw ONNX results, in the node layout (post-padded rows, compacted in "any")."""

    y: str            # [T, B, H]: valid steps in time order (reversed back for a backward layer)
    y_node: str       # [T, B, H]: the node's steps as it ran them (what a stacked cell's node reads)
    h_last: str       # [B, H]: the output at the last valid step, zeros for a row with none
    h_last_step: str  # [1, B, H]: the same, broadcasting over the time axis
    c_last: Optional[str]  # [B, H], LSTM only: the cell state after the last valid step
    carried: bool = False  # y repeats each row's last output past its length (zeros for an empty row)


def carries_cell_state(cell: RecurrentCell) -> bool:
    """Is the LSTM's final cell state used, so that it must not depend on the runtime's padding?"""
    return cell.final_c is not None and bool(cell.while_node.graph.find_output_consumers(cell.final_c))


def portability_refusal(layer: MaskedRecurrentLayer) -> Optional[str]:
    """Why the layer cannot be emitted without depending on how a runtime treats padded steps, or None.

    The final cell state is carried over padded steps by an input column that drives the input
    gate to 0 and the forget gate to 1 there: only a saturating recurrent activation reaches
    them. Otherwise the native node's ``Y_c`` would be right only where the runtime honours
    ``sequence_lens`` (onnxruntime; OpenVINO only with static shapes), and the Loop stays."""
    for cell in layer.cells:
        if carries_cell_state(cell) and cell.activations[0].name not in SATURATING:
            return (f"the final cell state is used and recurrent activation {cell.activations[0].name} cannot "
                    f"hold it over padded steps: a native LSTM would depend on the runtime honouring sequence_lens "
                    f"(OpenVINO does not with dynamic shapes)")
    return None


# Runtimes a conversion can target, and what each compiles inside its native recurrent ops (None:
# every activation the plugin supports; OpenVINO 2026.4, measured: "Unsupported activation
# function" for the others, at compile time). A model converted for a target is exact there;
# without one, on every runtime docs/supported-layers.md names.
TARGET_ACTIVATIONS = {"onnxruntime": None, "openvino": ("Sigmoid", "Tanh", "Relu")}
TARGETS = tuple(TARGET_ACTIVATIONS)
TARGET_NAMES = {"onnxruntime": "onnxruntime", "openvino": "OpenVINO"}


def check_target(target: Optional[str]) -> None:
    if target is not None and target not in TARGETS:
        raise ValueError(f"target must be None (any runtime) or one of {TARGETS}, not {target!r}")


def target_refusal(layer: MaskedRecurrentLayer, target: Optional[str]) -> Optional[str]:
    """Why ``layer`` must stay a Loop for ``target`` (None: any runtime), or None.

    The Loop is what such a runtime can run: OpenVINO runs tf2onnx's masked Loops exactly where
    its native ops refuse the activation (measured on every activation the plugin supports)."""
    portability = portability_refusal(layer)
    if portability or target is None or TARGET_ACTIVATIONS[target] is None:
        return portability
    for cell in layer.cells:
        unsupported = sorted({a.name for a in cell.activations} - set(TARGET_ACTIVATIONS[target]))
        if unsupported:
            return (f"target {target}: {TARGET_NAMES[target]}'s native {cell.kind} op compiles only "
                    f"{', '.join(TARGET_ACTIVATIONS[target])} activations, not {', '.join(unsupported)}")
    return None


def emit_layer(graph, layer: MaskedRecurrentLayer, masks: MaskTensors) -> None:
    """One ONNX node per cell of ``layer``, each reading the steps of the one below, then the Keras
    outputs (of the top cell) and every cell's final states; finally the loop's consumers are
    pointed at them."""
    x_node, states = _layer_input(graph, layer, masks), []
    for cell in layer.cells:
        out = _emit_recurrent_node(graph, layer, cell, masks, x_node)
        states.append(_keras_states(graph, cell, masks, out.h_last, out.c_last))
        x_node = out.y_node
    _rewire(graph, layer, *_keras_outputs(graph, layer, out, masks), states)


def _layer_input(g, layer: MaskedRecurrentLayer, masks: MaskTensors) -> str:
    """The layer's input [T, B, I] in the node layout: each row's valid steps first ("any" moves
    them there), reversed within the row's length for a backward layer."""
    x = layer.x
    if masks.reorder is not None:
        x = _gather_steps(g, x, masks.reorder.gather_input, layer.input_size)
    if layer.direction == "reverse":
        x = _reverse_valid_steps(g, x, masks)
    return x


def _emit_recurrent_node(g, layer: MaskedRecurrentLayer, cell: RecurrentCell, masks: MaskTensors,
                         x: str) -> NodeOutputs:
    """The forward ONNX LSTM, GRU or RNN node of ``cell`` over ``x``, its input in the node layout."""
    gb = GraphBuilder(g)
    padding_column = carries_cell_state(cell)  # saturating: portability_refusal() let it through
    if padding_column:
        x = _with_padding_column(g, x, masks.valid_steps, cell.input_size)
    x = _read_alone(g, x)
    w, r, b = _onnx_weights(cell, padding_column)
    b = _const(g, "B", b) if cell.bias is not None or cell.recurrent_bias else ""
    initial = () if cell.zero_initial_state else tuple(
        state for state in (cell.initial_h, cell.initial_c) if state is not None)
    attr = {"hidden_size": cell.hidden_size, "direction": "forward", **_activation_attrs(cell.activations)}
    if cell.kind == "GRU":
        attr["linear_before_reset"] = cell.linear_before_reset
    node = RecurrentNode(kind=cell.kind, x=x, weights=(_const(g, "W", w), _const(g, "R", r), b), lengths=masks.lengths,
                         initial=initial, attr=attr, name=f"{layer.layer}/masked_{cell.kind.lower()}",
                         hidden=cell.hidden_size, wants_c=padding_column)
    # in segments, an LSTM's final cell state past its row's length is held by the padding column
    carry = None
    if cell is layer.top and _shows_carried_outputs(layer, masks):
        carry = lambda branch, y_node: _carry_last_output(branch, y_node, masks, cell.hidden_size)  # noqa: E731
    y, c_last, carried = emit_node(g, node, masks.segments, carry)
    y_node = y
    if carried:  # the last step shows each row's last output
        h_last_step = gb.make_slice({"data": y, "starts": [-1], "ends": [np.iinfo(np.int64).max], "axes": [0]})
    else:
        h_last_step = _last_valid_step(g, y, masks, cell.hidden_size)
    if layer.direction == "reverse":
        y = _reverse_valid_steps(g, y, masks)
    return NodeOutputs(y=y, y_node=y_node, h_last=gb.make_squeeze({"data": h_last_step, "axes": [0]}),
                       h_last_step=h_last_step, c_last=c_last, carried=carried)


def _read_alone(g, x: str) -> str:
    """``x`` as the node should read it: through ``Max(x, x)`` nodes of its own where OpenVINO would
    otherwise give the node, or other readers of its input, scrambled steps.

    OpenVINO's CPU plugin (2026.4, ``OptimizeSequenceTransposes``) folds the Transpose it puts in
    front of a recurrent op into a Reshape, and does so for every reader of that Transpose: when a
    dimension of the input is static, the other readers get the steps scrambled, with no error
    (stock tf2onnx's unmasked LSTMs included). So no node may read a swap that another node reads:

    * a layer over another layer's sequence that is also used elsewhere (a Concatenate, an
      attention, a residual Add) reads it through a Max of its own;
    * two nodes over the same input (parallel layers; tf2onnx merges duplicate nodes, so the same
      computation counts as the same tensor) read it through a chain of Maxes, one more each.

    ``Max`` because OpenVINO removes an Identity, an ``Add`` of 0 or a ``Mul`` by 1."""
    if _may_read_a_shared_swap(g, x):
        x = g.make_node("Max", [x, x]).output[0]
    known = {}
    read = {_computation(g, node.input[0], known) for node in g.get_nodes() if node.type in ("LSTM", "GRU", "RNN")}
    computation = _computation(g, x, known)
    while computation in read:
        x = g.make_node("Max", [x, x]).output[0]
        computation = _computation(g, x, known)
    return x


def _computation(g, tensor: str, known: dict, depth: int = 0):
    """A key that two tensors share when they compute the same thing (as tf2onnx's merging of
    duplicate nodes sees it): the producer's op, attributes and inputs' keys; a small constant's
    value; past a few steps, the same for all (two keys may then be equal when the tensors are
    not, which costs a Max at most). ``known`` holds the keys already worked out."""
    if depth > 8:
        return "..."
    if (tensor, depth) not in known:
        node = producer(g, tensor)
        if node is None:
            key = tensor
        elif node.is_const():
            value = node.get_tensor_value(as_list=False)
            key = ("const", str(value.dtype), value.shape, value.tobytes()) if value.size <= 1024 else tensor
        else:
            attrs = tuple(sorted((name, attr.SerializeToString()) for name, attr in node.attr.items()))
            inputs = tuple(_computation(g, name, known, depth + 1) for name in node.input)
            key = node.type, attrs, inputs, list(node.output).index(tensor)
        known[tensor, depth] = key
    return known[tensor, depth]


def _may_read_a_shared_swap(g, x: str) -> bool:
    """Time-major ``x`` is what the node reads; the runtime swaps it to batch-major. Either ``x`` is a
    swap of a batch-major tensor, and the two cancel: the node then reads that tensor, which may be a
    shared swap itself (or become one); or the runtime's swap of ``x`` merges with another node's.
    ``x``'s own readers are not counted: until this rewrite they include the loop's."""
    node = producer(g, x)
    if _swaps_first_axes(g, node):
        derived, shared = _swap_derived(g, node.input[0], {})
        return derived and shared
    return any(_swaps_first_axes(g, reader) for reader in _data_readers(g, x))


def _swap_derived(g, tensor: str, known: dict, depth: int = 0) -> tuple:
    """(derived, shared): can tf2onnx's transpose optimizer turn ``tensor`` into a swap of the first
    two axes (it is one, or every non-constant input of its producer is one, recursively: the
    optimizer moves swaps down through element-wise ops and concatenations), and does a tensor on
    the way have other readers than one swap? Unsure past a few steps: (True, True). ``known``
    holds the answers already worked out."""
    if depth > 8:
        return True, True
    if tensor not in known:
        known[tensor] = _swap_derived_here(g, tensor, known, depth)
    return known[tensor]


def _swap_derived_here(g, tensor: str, known: dict, depth: int) -> tuple:
    """:func:`_swap_derived` worked out at ``tensor``."""
    node = producer(g, tensor)
    readers = _data_readers(g, tensor)
    swaps = [reader for reader in readers if _swaps_first_axes(g, reader)]
    shared = len(readers) - len(swaps) + bool(swaps) > 1  # equal swaps merge (a Bidirectional's two halves)
    if node is None:
        return False, shared
    if _swaps_first_axes(g, node):
        return True, shared
    inputs = [name for name in node.input if not g.is_const(name)]
    if not inputs:
        return False, shared
    below = [_swap_derived(g, name, known, depth + 1) for name in inputs]
    return all(d for d, _ in below), shared or any(s for _, s in below)


def _data_readers(g, tensor: str) -> list:
    """The nodes that read ``tensor``'s values, not only its shape (Keras reads a layer input's batch size)."""
    return [node for node in g.find_output_consumers(tensor) if node.type not in ("Shape", "Size")]


def _swaps_first_axes(g, node) -> bool:
    """Is ``node`` a Transpose with ``perm=[1, 0, 2]`` (TensorFlow's, as an input, or ONNX's)?"""
    if node is None or node.type != "Transpose":
        return False
    perm = node.get_attr_value("perm")
    if perm is None and len(node.input) > 1 and g.is_const(node.input[1]):
        perm = g.get_tensor_value(node.input[1])
    return perm is not None and list(perm) == [1, 0, 2]


def _shows_carried_outputs(layer: MaskedRecurrentLayer, masks: MaskTensors) -> bool:
    """Does the layer's sequence repeat each row's last output past its length, in the node layout
    (a plain forward layer over post-padded rows)? Then the schedule's gather gives it as it is."""
    return layer.direction == "forward" and layer.output_carried and layer.writes_sequence and masks.reorder is None


def _carry_last_output(g, y_node: str, masks: MaskTensors, hidden: int) -> str:
    """The node's Y [T, 1, B, H] with each row's last valid output past its length, zeros for a row
    with none: ``Where(mask, Y, last output)``, kept in Y's layout."""
    y = GraphBuilder(g).make_squeeze({"data": y_node, "axes": [1]})
    mask = GraphBuilder(g).make_unsqueeze({"data": masks.mask_tm, "axes": [1]})
    return g.make_node("Where", [mask, y_node, _last_valid_step(g, y, masks, hidden)]).output[0]


def _gather_steps(g, tensor: str, flat_index: str, width: int) -> str:
    """``tensor`` [T, B, width] re-ordered: position (t, b) takes row ``flat_index[t, b]`` of it."""
    rows = g.make_node("Reshape", [tensor, _const(g, "rows_shape", np.array([-1, width], np.int64))]).output[0]
    return g.make_node("Gather", [rows, flat_index], attr={"axis": 0}).output[0]


def _reverse_valid_steps(g, tensor: str, masks: MaskTensors) -> str:
    """[T, B, ...] with each row's valid steps (the first ``length``) in reverse order, the rest in place."""
    return g.make_node("ReverseSequence", [tensor, masks.lengths_i64],
                       attr={"batch_axis": 1, "time_axis": 0}).output[0]


def _with_padding_column(g, x: str, valid_steps: str, width: int) -> str:
    """[T, B, width + 1]: ``x`` and a column of zeros at valid steps; ``[0, ..., 0, 1]`` at padded ones
    (whatever ``x`` held there: -inf and NaN would not stay out of a carried state otherwise)."""
    padded = g.make_node("Pad", [x, _const(g, "pads", np.array([0, 0, 0, 0, 0, 1], np.int64))]).output[0]
    marker = np.zeros(width + 1, np.float32)
    marker[-1] = 1
    return g.make_node("Where", [valid_steps, padded, _const(g, "padding_marker", marker)]).output[0]


def _last_valid_step(g, y: str, masks: MaskTensors, hidden: int) -> str:
    """[1, B, H]: ``y`` [T, B, H] at each row's last valid step, zeros for a row with none (its index,
    -1, reads the last step, which the Where then replaces)."""
    index = g.make_node("Expand", [masks.last_step, _const(g, "hidden_shape", np.array([1, 1, hidden], np.int64))]
                        ).output[0]
    gathered = g.make_node("GatherElements", [y, index], attr={"axis": 0}).output[0]
    return g.make_node("Where", [masks.has_steps, gathered, _zero(g)]).output[0]


def _onnx_weights(cell: RecurrentCell, padding_column: bool = False) -> tuple:
    """W [1, G*H, I], R [1, G*H, H] and B [1, 2*G*H] in the ONNX op's gate order.

    Keras's bias is ONNX's Wb; Rb is zeros except where the layer has a separate recurrent bias
    (a GRU with ``reset_after=True``, whose reset gate multiplies ``h @ R + Rb``). With
    ``padding_column`` (LSTM), W gets one more input column: -PADDING_DRIVE into the input
    gate, +PADDING_DRIVE into the forget gate."""
    order = ONNX_GATE_ORDER[cell.kind]
    zeros = np.zeros(cell.hidden_size, np.float32)
    kernels = [cell.kernel[g].T for g in order]
    if padding_column:
        drive = {"i": -PADDING_DRIVE, "f": PADDING_DRIVE}
        kernels = [np.concatenate([k, np.full((cell.hidden_size, 1), drive.get(g, 0.0), np.float32)], axis=1)
                   for g, k in zip(order, kernels)]
    w = _stack_gates(kernels)
    r = _stack_gates([cell.recurrent[g].T for g in order])
    wb = _stack_gates([zeros if cell.bias is None else cell.bias[g] for g in order])
    rb = _stack_gates([cell.recurrent_bias.get(g, zeros) for g in order])
    return w, r, np.concatenate([wb, rb], axis=1)


def _stack_gates(blocks: list) -> np.ndarray:
    """Gate blocks one after the other along the first axis, with a leading direction axis."""
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


def _keras_outputs(g, layer: MaskedRecurrentLayer, out: NodeOutputs, masks: MaskTensors):
    """(sequence in Keras's order, sequence in the model's time order, last output), from the top
    cell's node."""
    gb = GraphBuilder(g)
    last_output = out.h_last  # the carried output: zeros for a row with no valid step
    in_time_order = None
    if masks.reorder is not None:
        # mask_mode="any": the node ran over the valid steps moved to the front; map back
        where = masks.reorder.output_map(layer.direction, layer.output_carried)
        mapped = _gather_steps(g, out.y, where.index, layer.top.hidden_size)
        in_time_order = g.make_node("Where", [where.keep, mapped, _zero(g)]).output[0]
        if layer.direction == "reverse":
            sequence = _reverse_time(gb, in_time_order)
            last_output = last_output if layer.output_carried else _step(gb, in_time_order, 0)
        else:
            sequence, in_time_order = in_time_order, None
            last_output = last_output if layer.output_carried else _step(gb, sequence, -1)
    elif layer.direction == "reverse":
        # Keras ran forward over the reversed rows, whose padding comes first: those steps output
        # zeros (the carried output starts at zeros); its last step saw the row's first step.
        in_time_order = g.make_node("Where", [masks.mask_tm, out.y, _zero(g)]).output[0]
        sequence = _reverse_time(gb, in_time_order)
    elif out.carried:
        sequence = out.y
    elif layer.output_carried:
        # padded steps repeat the last output: the output at the last valid step, zeros if none
        sequence = g.make_node("Where", [masks.mask_tm, out.y, out.h_last_step]).output[0]
    else:
        # masked steps output zeros (zero_output_for_mask)
        sequence = g.make_node("Where", [masks.mask_tm, out.y, _zero(g)]).output[0]
        last_output = _step(gb, sequence, -1)
    if not layer.writes_sequence:
        sequence = in_time_order = gb.make_unsqueeze({"data": last_output, "axes": [0]})
    return sequence, in_time_order, last_output


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


def _keras_states(g, cell: RecurrentCell, masks: MaskTensors, h_last, c_last):
    """(final h, final c) of ``cell`` as Keras has them: a row with no valid step keeps the initial state.

    With a zero initial state that is zeros, which ``h_last`` already is there (and ``c_last``:
    the padding column holds it, and runtimes that skip such a row return zeros)."""
    if cell.zero_initial_state:
        return h_last, c_last
    final_h = g.make_node("Where", [masks.has_steps, h_last, cell.initial_h]).output[0]
    final_c = None if c_last is None else g.make_node("Where", [masks.has_steps, c_last, cell.initial_c]).output[0]
    return final_h, final_c


def _rewire(g, layer: MaskedRecurrentLayer, sequence, in_time_order, last_output, states):
    """Point every consumer of the loop at the new tensors (``states``: each cell's final h and c),
    then remove the loop."""
    for stacked in layer.sequence_outputs:
        if in_time_order is not None and layer.writes_sequence:
            _skip_reversal_back(g, stacked, in_time_order)
        _replace(g, stacked, sequence)
    _replace(g, layer.last_output, last_output)
    for cell, (final_h, final_c) in zip(layer.cells, states):
        _replace(g, cell.final_h, final_h)
        if final_c is not None:  # else nothing reads it (carries_cell_state)
            _replace(g, cell.final_c, final_c)
    for stacked in layer.sequence_outputs:
        g.remove_node(g.get_node_by_output(stacked).name)
    g.remove_node(layer.while_node.name)


def _replace(g, old: Optional[str], new: Optional[str]) -> None:
    """Consumers of ``old`` read ``new``, which takes on ``old``'s shape where tf2onnx knew it and not
    ``new``'s: a layer stacked above reads its static sizes (the number of steps its loop runs)."""
    if old is None:
        return
    if g.get_shape(new) is None and g.get_shape(old) is not None:
        g.set_shape(new, g.get_shape(old))
    g.replace_all_inputs(old, new)


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
                _replace(g, reverse.output[0], batch_major)
