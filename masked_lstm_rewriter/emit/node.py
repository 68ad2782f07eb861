# SPDX-License-Identifier: Apache-2.0
"""One native ONNX node per cell: its weights in the op's layout, its attributes, and the node itself
(or, with the length-aware schedule, an If between its segments and it: :mod:`.segments`). The two
halves of a pair (:mod:`..plan.pairs`) are one node with ``direction="bidirectional"``: each weight
stacks their blocks along its first (direction) axis, forward first.

Everything kind-specific comes from the cell kind (:mod:`..cells`): the gate order of W, R and B,
the number of states, the kind's own attributes, the gates the padding column drives.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from tf2onnx import utils

from .. import targets
from ..cells import CellKind, kind_of
from ..graph import const, filled, int64_const, int64_scalar, make_op
from ..layer import RecurrentCell
from ..nodes import MIN_OPSET
from ..plan.pairs import names_activations
from ..plan.schedule import SegmentPlan, schedule_if
from .read_alone import read_alone
from .segments import segment_source, segments

@dataclasses.dataclass(frozen=True)
class RecurrentNode:
    """One layer's forward ONNX node (or one pair's bidirectional node), as the emitter built its inputs
    (node layout)."""

    kind: CellKind       # its op, states and outputs
    x: str               # [T, B, I] input in the node layout
    weights: tuple       # (W, R, B or "")
    lengths: str         # [B] int32 sequence_lens (the single node only)
    initial: tuple       # each state's initial value per direction, ((h,), (c,)) or ((h_fwd, h_bwd), ...) as
                         # [B, H] tensors, or () for zeros
    attr: dict
    name: str
    hidden: int
    wants_c: bool        # the final cell state is used
    extra: tuple = ()    # the kind's inputs after the initial states (cells.kind.CellKind.extra_inputs)
    directions: int = 1  # 2: direction="bidirectional", Y [T, 2, B, H] and each state [2, B, H]
    zero_h: str = ""     # [D, B, H] zeros, the initial h given where the states start from zeros (zero_h())


def emit_node(graph, node: RecurrentNode, plan: Optional[SegmentPlan], pad_rows: bool = False) -> tuple:
    """(y [T, B, H], final c [B, H] or None) in the node layout: the single node, or, with a plan, an
    If between the segments and it (:func:`_scheduled`), ``y`` then gathered from rows with a zero row
    appended where ``pad_rows`` (the fix-ups' zero step). Past each row's length the segments give
    zeros, onnxruntime's single node too; the fix-ups read no step there elsewhere."""
    if plan is None:
        (y, c_last), = _per_direction(graph, node, _single(graph, node))
        return y, c_last
    return _scheduled(graph, node, plan, pad_rows)


def _scheduled(graph, node: RecurrentNode, plan: SegmentPlan, pad_rows: bool) -> tuple:
    """An If between the segments and the single node, each branch giving rows of outputs: the
    segments' stacked, or the single node's Y. ``y`` is one Gather of those rows after the If at the
    plan's ``gather_y``, which the fix-ups that gather from ``y`` compose with their own indices
    (:func:`..graph.gathered_rows`): one copy of the outputs, not two. With ``pad_rows`` a zero row is
    appended to the rows after the If (one copy of them, as the Pad that gives the fix-ups their zero
    step without the schedule), where the segments' indices past each row's length point; else the
    segments append their own.

    The single node's branch holds that node alone, its outputs the If's: its input is made outside
    the If, as without the schedule, and every node after it is outside too. (Measured: a Transpose or
    Slice in front of the node in the branch made a masked LSTM 4% slower at batch 32 on onnxruntime
    1.31; a Squeeze after it, 5% on OpenVINO 2026.4; the node alone costs nothing on either.) The
    branches also give the shape the Reshapes after the If read their results with
    (:func:`_rows_shape`); those alias them."""
    source = segment_source(graph, node.x)

    def single(g):
        return [_rows_shape(g, node.hidden), *_single(g, node)]

    def in_segments(g):
        return [_rows_shape(g, node.hidden), *segments(g, node, plan, source, own_zero_row=not pad_rows)]

    shape, *outputs = schedule_if(graph, plan.use, node.name.replace("/", "_"), in_segments, single)
    for output, dims in zip(outputs, ([-1, 1, -1, node.hidden], [1, -1, node.hidden])):
        graph.set_shape(output, dims)  # what the converters of the consumers read (a Concat's axis)
    rows, *c_last = (make_op(graph, "Reshape", output, shape) for output in outputs)
    for tensor in (rows, *c_last):
        graph.set_shape(tensor, [-1, node.hidden])
    if pad_rows:
        rows = make_op(graph, "Pad", rows, int64_const(graph, "pads", [0, 0, 1, 0]))
        graph.set_shape(rows, [-1, node.hidden])
    y = make_op(graph, "Gather", rows, plan.gather_y, axis=0)
    graph.set_shape(y, [-1, -1, node.hidden])
    return y, (c_last[0] if node.wants_c else None)


def _rows_shape(g, hidden: int) -> str:
    """[-1, hidden], returned by the If so that it is known only at run time, which makes the Reshape
    after the If a point where OpenVINO 2026.4 infers shapes. It lets tensors computed after the
    If's outputs are read share their memory, and resizes those at its next such point: with none
    before the readers, a run whose shapes outgrow the runs before reallocated that memory before
    the If's outputs were read (a Bidirectional layer's forward half wrong, with no error)."""
    return int64_const(g, "rows_shape", [-1, hidden])


def emit_directions(graph, node: RecurrentNode) -> list:
    """[(y [T, B, H], final c [B, H] or None)] of each direction of the single ``node`` (no schedule),
    forward first: a bidirectional node's reverse direction gives its steps in the model's time order."""
    return _per_direction(graph, node, _single(graph, node))


def _per_direction(graph, node: RecurrentNode, outputs: list) -> list:
    """The node's Y [T, D, B, H] and Y_c [D, B, H] (when wanted) cut into D directions: one direction
    squeezed, each of several gathered (a Gather of a scalar index drops the axis)."""
    def cut(tensor, axis):
        if node.directions == 1:
            return [make_op(graph, "Squeeze", tensor, int64_const(graph, "axes", [axis]))]
        return [make_op(graph, "Gather", tensor, int64_scalar(graph, index), axis=axis)
                for index in range(node.directions)]
    ys = cut(outputs[0], 1)
    cs = cut(outputs[1], 0) if node.wants_c else [None] * node.directions
    return list(zip(ys, cs))


def _single(g, node: RecurrentNode) -> list:
    """The layer as one node over the whole batch (what the plugin emits without a schedule)."""
    initial = [_stacked(g, per_direction) for per_direction in node.initial] or \
        [node.zero_h] + [""] * (node.kind.states - 1)
    out = g.make_node(node.kind.op, [node.x, *node.weights, node.lengths] + initial + list(node.extra),
                      output_count=node.kind.outputs, attr=node.attr, name=utils.make_name(node.name))
    return [out.output[0]] + ([out.output[2]] if node.wants_c else [])


def _stacked(g, per_direction: tuple) -> str:
    """[D, B, H]: a state's initial value in each direction ([B, H] each), as the node takes it."""
    unsqueezed = [make_op(g, "Unsqueeze", state, int64_const(g, "axes", [0])) for state in per_direction]
    return unsqueezed[0] if len(unsqueezed) == 1 else make_op(g, "Concat", *unsqueezed, axis=0)


def cell_node(g, cell: RecurrentCell, x: str, lengths: str, name: str, padding_column: bool = False,
              batch: str = "") -> RecurrentNode:
    """The native node of ``cell`` over ``x`` (time-major), its weights, bias, initial states and the
    kind's own inputs made constants; ``lengths`` its sequence_lens ("" for none). ``x`` is read
    through a node of its own where a runtime would scramble a shared input. ``batch``: see
    :func:`zero_h`."""
    return directions_node(g, (cell,), x, lengths, name, padding_column, batch)


def directions_node(g, cells: tuple, x: str, lengths: str, name: str, padding_column: bool = False,
                    batch: str = "") -> RecurrentNode:
    """The native node running each of ``cells`` (one: forward; a forward and a backward cell of one
    kind, size and activations, both starting from zeros or both from given states: bidirectional)
    over ``x``, as :func:`cell_node` says."""
    kind = kind_of(cells[0].kind)
    x = read_alone(g, x) if targets.shared_swaps_scrambled() else x
    w, r, b = (np.concatenate(blocks) for blocks in zip(*(kind.onnx_weights(cell, padding_column) for cell in cells)))
    extra = tuple(const(g, parts[0][0], np.concatenate([value for _, value in parts]))
                  for parts in zip(*(kind.extra_inputs(cell) for cell in cells)))
    bias = const(g, "B", b) if any(cell.bias is not None or cell.recurrent_bias for cell in cells) else ""
    return RecurrentNode(kind=kind, x=x, weights=(const(g, "W", w), const(g, "R", r), bias), lengths=lengths,
                         initial=_initial_states(cells), attr=node_attributes(*cells, masked=bool(lengths)), name=name,
                         hidden=cells[0].hidden_size,
                         wants_c=padding_column or any(cell.carries_cell_state for cell in cells), extra=extra,
                         directions=len(cells), zero_h=zero_h(g, batch, len(cells), cells[0].hidden_size)
                         if batch and all(cell.zero_initial_state for cell in cells) else "")


def zero_h(g, batch: str, directions: int, hidden: int) -> str:
    """[D, B, H] zeros, B read off ``batch`` ([1] int64). Without an initial h, OpenVINO makes the zeros
    from the shape of the node's input, and so keeps the transposes in front of the node that it
    otherwise folds into its own layout (about 2% of a masked LSTM at batch 32): the planner gives
    ``batch`` where a target may be OpenVINO (:func:`..targets.explicit_zero_state`)."""
    shape = make_op(g, "Concat", int64_const(g, "directions", [directions]), batch, int64_const(g, "hidden", [hidden]),
                    axis=0)
    return filled(g, shape, np.float32(0))


def _initial_states(cells: tuple) -> tuple:
    """Each state's initial value per direction (:attr:`RecurrentNode.initial`), () for zeros."""
    if all(cell.zero_initial_state for cell in cells):
        return ()
    return tuple(zip(*(cell.initial_states for cell in cells)))


def node_attributes(*cells: RecurrentCell, masked: bool = True) -> dict:
    """The native node's attributes: forward over post-padded rows (bidirectional for a pair's two
    cells), each direction's activations where the node names them (:func:`..plan.pairs.names_activations`;
    ``masked``: it has ``sequence_lens``), the kind's own."""
    direction = "forward" if len(cells) == 1 else "bidirectional"
    activations = tuple(activation for cell in cells for activation in cell.activations)
    named = _activation_attrs(activations) if names_activations(cells, masked) else {}
    return {"hidden_size": cells[0].hidden_size, "direction": direction, **named, **dict(cells[0].attributes)}


def _activation_attrs(activations) -> dict:
    """The ``activations`` attribute, and their alphas and betas where they have some."""
    attrs = {"activations": [a.name for a in activations]}
    alphas = [a.alpha for a in activations if a.alpha is not None]
    betas = [a.beta for a in activations if a.beta is not None]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


def opset_refusal(graph) -> Optional[str]:
    """Why no layer of ``graph`` can be rewritten at its opset, or None."""
    if graph.opset < MIN_OPSET:
        return (f"opset {graph.opset}: the native form is emitted for opset {MIN_OPSET} and later; "
                f"convert with opset {MIN_OPSET} or later for a native op")
    return None
