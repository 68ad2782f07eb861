# SPDX-License-Identifier: Apache-2.0
"""One native ONNX node per cell: its weights in the op's layout, its attributes, and the node itself
(or, with the length-aware schedule, an If between its segments and it: :mod:`.segments`).

Everything kind-specific comes from the cell kind (:mod:`..cells`): the gate order of W, R and B,
the number of states, the kind's own attributes, the gates the padding column drives.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf2onnx import utils

from .. import targets
from ..cells import CellKind, kind_of
from ..graph import int64_const, make_op
from ..layer import RecurrentCell
from ..plan.schedule import SegmentPlan, schedule_if
from .read_alone import read_alone
from .segments import segments

MIN_OPSET = 13  # Split and Squeeze take their sizes and axes as inputs, as the emitted nodes give them


@dataclasses.dataclass(frozen=True)
class RecurrentNode:
    """One layer's forward ONNX node, as the emitter built its inputs (node layout)."""

    kind: CellKind       # its op, states and outputs
    x: str               # [T, B, I] input in the node layout
    weights: tuple       # (W, R, B or "")
    lengths: str         # [B] int32 sequence_lens (the single node only)
    initial: tuple       # (initial_h, initial_c) as [B, H] tensors, or () for zeros
    attr: dict
    name: str
    hidden: int
    wants_c: bool        # the final cell state is used
    extra: tuple = ()    # the kind's inputs after the initial states (cells.kind.CellKind.extra_inputs)


def emit_node(graph, node: RecurrentNode, plan: Optional[SegmentPlan], carry=None) -> tuple:
    """(y [T, B, H], final c [B, H] or None, carried) in the node layout: the single node, or, with a
    plan, an If between the segments and it. Each branch returns its results unsqueezed, as the node
    does (the Squeezes after the If alias them; inside a branch, they would copy).

    ``carry``, (graph, the node's Y [T, 1, B, H]) -> Y with each row's last valid output repeated
    past its length and zeros for an empty row, is what the segments give for free (their gather
    reads step min(t, length - 1), an empty row a zeros row). With a plan, the single node's branch
    applies it, so that both branches agree, and ``carried`` is True: the caller's fix-up is done."""
    carried = plan is not None and carry is not None
    if plan is None:
        outputs = _single(graph, node)
    else:
        def single(g):
            outputs = _single(g, node)
            return [carry(g, outputs[0])] + outputs[1:] if carried else outputs

        outputs = schedule_if(graph, plan.use, node.name.replace("/", "_"), lambda g: segments(g, node, plan), single)
        for output, shape in zip(outputs, ([-1, 1, -1, node.hidden], [1, -1, node.hidden])):
            graph.set_shape(output, shape)  # what the converters of the consumers read (a Concat's axis)
    y = make_op(graph, "Squeeze", outputs[0], int64_const(graph, "axes", [1]))
    return y, (make_op(graph, "Squeeze", outputs[1], int64_const(graph, "axes", [0])) if node.wants_c else None), carried


def _single(g, node: RecurrentNode) -> list:
    """The layer as one node over the whole batch (what the plugin emits without a schedule)."""
    initial = [make_op(g, "Unsqueeze", state, int64_const(g, "axes", [0])) for state in node.initial]
    initial = initial or [""] * node.kind.states
    out = g.make_node(node.kind.op, [node.x, *node.weights, node.lengths] + initial + list(node.extra),
                      output_count=node.kind.outputs, attr=node.attr, name=utils.make_name(node.name))
    return [out.output[0]] + ([out.output[2]] if node.wants_c else [])


def cell_node(g, cell: RecurrentCell, x: str, lengths: str, name: str, padding_column: bool = False) -> RecurrentNode:
    """The native node of ``cell`` over ``x`` (time-major), its weights, bias, initial states and the
    kind's own inputs made constants; ``lengths`` its sequence_lens ("" for none). ``x`` is read
    through a node of its own where a runtime would scramble a shared input."""
    kind = kind_of(cell.kind)
    x = read_alone(g, x) if targets.shared_swaps_scrambled() else x
    w, r, b = kind.onnx_weights(cell, padding_column)
    extra = tuple(_const(g, part, value) for part, value in kind.extra_inputs(cell))
    bias = _const(g, "B", b) if cell.bias is not None or cell.recurrent_bias else ""
    initial = () if cell.zero_initial_state else tuple(
        state for state in (cell.initial_h, cell.initial_c) if state is not None)
    return RecurrentNode(kind=kind, x=x, weights=(_const(g, "W", w), _const(g, "R", r), bias), lengths=lengths,
                         initial=initial, attr=node_attributes(cell), name=name, hidden=cell.hidden_size,
                         wants_c=padding_column or cell.carries_cell_state, extra=extra)


def _const(g, name: str, value) -> str:
    return g.make_const(utils.make_name(name), value).output[0]


def node_attributes(cell: RecurrentCell) -> dict:
    """The native node's attributes: forward over post-padded rows, the activations, the kind's own."""
    return {"hidden_size": cell.hidden_size, "direction": "forward", **_activation_attrs(cell.activations),
            **dict(cell.attributes)}


def _activation_attrs(activations) -> dict:
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
