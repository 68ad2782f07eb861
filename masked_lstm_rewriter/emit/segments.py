# SPDX-License-Identifier: Apache-2.0
"""The length-aware schedule's emission: a layer's node as one node per time segment over the rows
still valid in it, their outputs stacked for a gather into the node layout (the plan is
:mod:`..plan.schedule`'s)."""

from __future__ import annotations

import dataclasses

import numpy as np
from tf2onnx import utils

from ..graph import const, gathered_rows, int64_const, int64_scalar, make_op, producer, split, transpose_perm
from ..plan.schedule import SegmentPlan


def segments(g, node, plan: SegmentPlan, source: SegmentSource, own_zero_row: bool = True) -> list:
    """The layer as one node per segment over the ordered rows: [their outputs stacked as [N, 1, 1, H]
    (Y's rank), a zero row last where ``own_zero_row`` (the plan's ``gather_y`` points there past each
    row's length; else one is appended after the If); the final cell state in the node layout, if
    wanted]. Their inputs are read from ``source``
    (:func:`segment_source`)."""
    shapes, sizes, active = _bounds(g, plan)
    inputs_x = _segment_inputs(g, source, plan, sizes)
    order = make_op(g, "Gather", plan.rows, int64_scalar(g, 0), axis=0)
    states = [make_op(g, "Gather", state, order, axis=0) for (state,) in node.initial]  # one direction
    if states:
        states = [make_op(g, "Unsqueeze", _slice_rows(g, state, active[0], 0), int64_const(g, "axes", [0]))
                  for state in states]
    flat_y, flat_c = [], []
    for index in range(plan.segments):
        x = make_op(g, "Reshape", inputs_x[index], shapes[index])
        if index and states:
            states = [_slice_rows(g, state, active[index], 1) for state in states]
        inputs = [x, *node.weights, ""] + (states or [""] * node.kind.states) + list(node.extra)
        out = g.make_node(node.kind.op, inputs, output_count=node.kind.outputs, attr=node.attr,
                          name=utils.make_name(f"{node.name}_segment{index}"))
        flat_y.append(make_op(g, "Reshape", out.output[0], int64_const(g, "rows", [-1, 1, 1, node.hidden])))
        states = list(out.output[1:])
        if node.wants_c:
            flat_c.append(make_op(g, "Reshape", out.output[2], int64_const(g, "rows", [-1, node.hidden])))
    if own_zero_row:
        flat_y.append(const(g, "zero_output", np.zeros((1, 1, 1, node.hidden), np.float32)))
    outputs = [make_op(g, "Concat", *flat_y, axis=0)]
    if node.wants_c:
        zero_c = const(g, "zero_state", np.zeros((1, node.hidden), np.float32))
        gather_c = make_op(g, "Gather", plan.rows, int64_const(g, "second", [1]), axis=0)      # [1, B]
        outputs.append(make_op(g, "Gather", make_op(g, "Concat", *flat_c, zero_c, axis=0), gather_c, axis=0))
    return outputs


@dataclasses.dataclass(frozen=True)
class SegmentSource:
    """Where the segments read a layer's input ``x`` [T, B, I] from: the batch-major tensor ``tensor``
    [B, T, I] (``batch_major``), or ``tensor`` time-major, [T, B, I], or, where ``index`` [T, B] is
    given, the rows [N, I] that ``x`` is gathered from at it."""

    tensor: str
    batch_major: bool = False
    index: str = ""


def segment_source(graph, x: str) -> SegmentSource:
    """Where the segments read ``x`` from, in ``graph`` (the If's): the rows it is gathered from
    (:func:`..graph.gathered_rows`: composed indices), the batch-major tensor Keras transposes into it
    (:func:`batch_major_source`), or ``x`` itself: one copy of the rows the segments run."""
    gathered = gathered_rows(graph, x)
    if gathered is not None:
        return SegmentSource(gathered[0], index=gathered[1])
    batch_major = batch_major_source(graph, x)
    return SegmentSource(batch_major, batch_major=True) if batch_major else SegmentSource(x)


def _segment_inputs(g, source: SegmentSource, plan: SegmentPlan, sizes: str) -> list:
    """The segments' inputs, each [steps * rows, I], gathered at its part of the indices (one copy of the rows)."""
    if source.batch_major:
        rows, index = make_op(g, "Flatten", source.tensor, axis=2), plan.gather_x
    elif source.index:
        rows = source.tensor
        flat = make_op(g, "Reshape", source.index, int64_const(g, "flat", [-1]))
        index = make_op(g, "Gather", flat, _time_major(g, plan.gather_x, source.index), axis=0)
    else:
        rows, index = make_op(g, "Flatten", source.tensor, axis=2), _time_major(g, plan.gather_x, source.tensor)
    pieces = split(g, index, sizes, plan.segments)
    return [make_op(g, "Gather", rows, piece, axis=0) for piece in pieces]


def _time_major(g, batch_major: str, like: str) -> str:
    """The rows ``batch_major`` of a [B * T, ...] tensor as rows of its [T * B, ...] transpose, T and B
    read off ``like`` ([T, B, ...])."""
    shape = make_op(g, "Shape", like)
    steps, batch = (make_op(g, "Gather", shape, int64_const(g, "axis", [axis]), axis=0) for axis in (0, 1))
    step = make_op(g, "Mod", batch_major, steps)
    return make_op(g, "Add", make_op(g, "Mul", step, batch), make_op(g, "Div", batch_major, steps))


def batch_major_source(graph, x: str) -> str:
    """The [B, T, I] tensor that ``x`` [T, B, I] transposes ("" if none): the segments read it, and only
    the single node's branch transposes it, so that the Transpose runs only when that branch does."""
    node = producer(graph, x)
    if node is not None and node.type == "Transpose" and transpose_perm(graph, node) == [1, 0, 2]:
        return node.input[0]
    return ""


def _bounds(g, plan: SegmentPlan) -> tuple:
    """The plan's bounds cut, in one Split, into per segment its input's [3] shape, the [S] row-steps
    of all, and per segment its [1] rows."""
    count = plan.segments
    pieces = split(g, plan.bounds, int64_const(g, "sizes", [3] * count + [count] + [1] * count), 2 * count + 1)
    return pieces[:count], pieces[count], pieces[count + 1:]


def _slice_rows(g, tensor: str, rows: str, axis: int) -> str:
    """The first ``rows`` ([1] int64) entries of ``tensor`` along ``axis``."""
    return make_op(g, "Slice", tensor, int64_const(g, "zero", [0]), rows, int64_const(g, "axis", [axis]))
