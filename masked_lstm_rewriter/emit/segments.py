# SPDX-License-Identifier: Apache-2.0
"""The length-aware schedule's emission: a layer's node as one node per time segment over the rows
still valid in it, gathered back into the node layout (the plan is :mod:`..plan.schedule`'s)."""

from __future__ import annotations

import numpy as np
from tf2onnx import utils

from ..graph import int64_const, int64_scalar, make_op
from ..plan.schedule import SEGMENTS, SegmentPlan


def segments(g, node, plan: SegmentPlan) -> list:
    """The layer as one node per segment over the ordered rows, gathered back into the node layout."""
    starts, ends, active = _bounds(g, plan)
    order = make_op(g, "Gather", plan.rows, int64_scalar(g, 0), axis=0)
    ordered = make_op(g, "Gather", node.x, order, axis=1)
    states = [make_op(g, "Gather", state, order, axis=0) for (state,) in node.initial]  # one direction
    if states:
        states = [make_op(g, "Unsqueeze", _slice_rows(g, state, active[0], 0), int64_const(g, "axes", [0]))
                  for state in states]
    flat_y, flat_c = [], []
    for index in range(SEGMENTS):
        x = make_op(g, "Slice", ordered, starts[index], ends[index], int64_const(g, "axes", [0, 1]))
        if index and states:
            states = [_slice_rows(g, state, active[index], 1) for state in states]
        inputs = [x, *node.weights, ""] + (states or [""] * node.kind.states) + list(node.extra)
        out = g.make_node(node.kind.op, inputs, output_count=node.kind.outputs, attr=node.attr,
                          name=utils.make_name(f"{node.name}_segment{index}"))
        rows = int64_const(g, "rows", [-1, node.hidden])
        flat_y.append(make_op(g, "Reshape", out.output[0], rows))
        states = list(out.output[1:])
        if node.wants_c:
            flat_c.append(make_op(g, "Reshape", out.output[2], rows))
    zeros = g.make_const(utils.make_name("zero_state"), np.zeros((1, node.hidden), np.float32)).output[0]
    outputs = [make_op(g, "Gather", make_op(g, "Concat", *flat_y, zeros, axis=0), plan.gather_y, axis=0)]
    if node.wants_c:
        gather_c = make_op(g, "Gather", plan.rows, int64_const(g, "second", [1]), axis=0)      # [1, B]
        outputs.append(make_op(g, "Gather", make_op(g, "Concat", *flat_c, zeros, axis=0), gather_c, axis=0))
    return outputs


def _bounds(g, plan: SegmentPlan) -> tuple:
    """The plan's bounds cut, in one Split, into per segment [2] starts, [2] ends and [1] rows."""
    pieces = g.make_node("Split", [plan.bounds, int64_const(g, "sizes", [2] * (2 * SEGMENTS) + [1] * SEGMENTS)],
                         output_count=3 * SEGMENTS, attr={"axis": 0}).output
    return pieces[:SEGMENTS], pieces[SEGMENTS:2 * SEGMENTS], pieces[2 * SEGMENTS:]


def _slice_rows(g, tensor: str, rows: str, axis: int) -> str:
    """The first ``rows`` ([1] int64) entries of ``tensor`` along ``axis``."""
    return make_op(g, "Slice", tensor, int64_const(g, "zero", [0]), rows, int64_const(g, "axis", [axis]))
