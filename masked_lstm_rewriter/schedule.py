# SPDX-License-Identifier: Apache-2.0
"""Stage 2c, schedule: run a layer's recurrent node in time segments over a shrinking set of rows.

onnxruntime's recurrent kernels compute every row up to the batch's longest row. With
long-tailed lengths (text batches that are not bucketed) most of that work is padding. The
schedule makes the cost follow the valid steps (packed sequences):

* once per mask (:func:`plan_segments`), the rows are ordered by length, longest first (``TopK``),
  and the time axis is cut into ``SEGMENTS`` segments at the lengths of the rows at fixed ranks
  (``RANKS``: the median row, the quarter, ...), made strictly increasing and below the longest
  length. Segment k runs only the rows still valid at its first step, a prefix of the ordered
  rows (``active``);
* for each layer (:func:`emit_node`), each segment is one forward node over its slice of the
  ordered input, starting from the states the previous segment ended with for the rows it
  keeps. Those rows are valid at every step of the previous segment, so the states are exact on
  any runtime whatever it does with padded steps (no ``sequence_lens`` is passed): rows that end
  inside a segment are read at their last valid step only, by index, and an LSTM's cell state
  over the padding steps of such a row is held by the padding column (:mod:`.emit`). The
  segments' outputs are stacked, with a zeros row, and gathered back, in one ``Gather``, into
  the [T, B, H] node layout in the caller's row order: what the single node gives at every valid
  step, and past a row's length its last valid output (zeros for an empty row). That is a plain
  forward layer's sequence as Keras gives it, so such a layer skips the fix-up ``Where`` (the
  single node's branch applies it inside the ``If``); the other fix-ups downstream are the same;
* whether it pays is decided at run time: an ``If`` per mask computes the plan only for batches of
  at least ``MIN_BATCH`` rows (else a few constants); in it, a cheap bound (the sum of the
  lengths) first rules out batches where no segments could pay (full or nearly equal rows), then
  an ``If`` nested in it sorts and cuts, and one nested in that computes the gather indices when
  the segments pay. An ``If`` per layer runs the
  segments when the estimated cost (the rows times steps the segments cover, plus a fixed cost
  per segment and per plan) is below ``GAIN`` of the single node's (batch times longest row),
  and the single node otherwise, exactly as without a schedule. With a static batch below
  ``MIN_BATCH`` neither ``If`` is emitted.

Every index is computed in the graph from the lengths; nothing depends on how a runtime treats
padded steps (OpenVINO ignores ``sequence_lens`` with dynamic shapes). Opt-in, and for
onnxruntime only (``make_rewriter(target="onnxruntime", schedule=True)``): OpenVINO 2026.4
computes some layers inside the layer's If wrongly, with no error (``NOT_FOR``;
tests/test_schedule.py pins it). Its stale reads follow its memory reuse around If outputs whose
shapes grow from one run to the next: a copy after the If moves the wrong half from one layer to
another rather than removing it, so no graph form is known to avoid it. onnxruntime is exact.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from onnx import TensorProto, helper
from tf2onnx import utils

# segment boundaries: the lengths of the rows at these ranks (fractions of the batch, in 16ths,
# longest row first) -- chosen with a cost model of onnxruntime's LSTM (per node ~15 us, per step
# ~1.45 us per row, at least ~3 us) over lognormal, uniform and one-long-row batches
RANKS_16THS = (12, 8, 4, 2, 1)
SEGMENTS = len(RANKS_16THS) + 1
MIN_BATCH = 8           # below this many rows the single node always runs (measured: tools/benchmark.py)
SEGMENT_COST = 10       # a segment's fixed cost, in row-steps of the recurrent op
PLAN_COST = 70          # the plan's and the gathers' cost, in row-steps
FIXED_COST = SEGMENT_COST * SEGMENTS + PLAN_COST
GAIN = (3, 4)           # run the segments when their estimated cost is below 3/4 of the single node's
SCHEDULE_NAME = "masked_lstm_rewriter_schedule"   # the If nodes' names start with it (corpus/ops.py)
# the one target a scheduled model is made for (make_rewriter refuses the schedule for any other);
# runtimes that do not run a scheduled layer exactly (measured), and why: its report names them
TARGET = "onnxruntime"
NOT_FOR = {"openvino": "OpenVINO 2026.4 computes some layers inside the schedule's If wrongly, with no error, "
                       "on a run whose shapes outgrow the ones before (a Bidirectional layer's forward half), and "
                       "refuses some layers in mask_mode='any'"}


@dataclasses.dataclass(frozen=True)
class SegmentPlan:
    """Per mask: what every layer sharing it needs to run in segments (the plan If's outputs: few,
    so that a small batch pays little for the If's placeholders)."""

    use: str             # [1] bool: run the layers in segments
    bounds: str          # [5 * S] int64: per segment (first step, 0), then (end step, rows), then the rows
    rows: str            # [2, B] int64: the rows longest first; each row's final cell state in the stacked ones
    gather_y: str        # [T, 1, B] int64: each (t, b) of the node layout's row in the stacked outputs


@dataclasses.dataclass(frozen=True)
class RecurrentNode:
    """One layer's forward ONNX node, as the emitter built its inputs (node layout)."""

    kind: str            # "LSTM", "GRU" or "RNN"
    x: str               # [T, B, I] input in the node layout
    weights: tuple       # (W, R, B or "")
    lengths: str         # [B] int32 sequence_lens (the single node only)
    initial: tuple       # (initial_h, initial_c) as [B, H] tensors, or () for zeros
    attr: dict
    name: str
    hidden: int
    wants_c: bool        # the final cell state is used


def schedulable(graph, mask: str) -> bool:
    """Can a batch of this mask have ``MIN_BATCH`` rows or more (a static batch below cannot)?"""
    shape = graph.get_shape(mask)
    rows = shape[0] if shape else None
    return rows is None or rows < 0 or rows >= MIN_BATCH


def plan_segments(graph, counts: str, guarded: str, time_major: str) -> SegmentPlan:
    """The plan over the lengths ``counts`` ([B] int32, node layout) and the number of steps (axis 0
    of ``time_major``), in one If: for batches of at least ``MIN_BATCH`` rows (the batch size read
    off ``guarded``, the lengths through the "post" guard, so that the guard runs first on every
    path), whether segments could pay at all (:func:`_may_pay`), and where they could, in an If
    nested in it, the segments, whether they pay, and, in an If nested in that, the gather indices
    where they do; else placeholders. One If at the top, so that a small batch pays for one.

    (The layers' nodes are not in it: a node in an If nested in another ran slower, measured in
    onnxruntime 1.31, +7% to +11% for the plugin's models at batch 32.)"""
    batch = _op(graph, "Shape", guarded)                                      # [1]
    big = _op(graph, "GreaterOrEqual", batch, _const(graph, "min_batch", [MIN_BATCH]))  # [1]: an If's condition

    def plan(g):
        lengths = _op(g, "Cast", counts, to=TensorProto.INT64)
        return _if(g, _may_pay(g, lengths, batch), "segments", lambda inner: segments(inner, lengths), placeholders)

    def segments(g, lengths):
        use, order, first, end, active = _compute_segments(g, lengths, batch)
        starts = _pairs(g, first, _const(g, "zeros", [0] * SEGMENTS))
        bounds = _op(g, "Concat", *starts, *_pairs(g, end, active), active, axis=0)
        indices = _if(g, use, "indices", lambda inner: _indices(inner, lengths, time_major, order, first, end, active),
                      _no_indices)
        return [use, bounds, *indices]

    def placeholders(g):
        false = g.make_const(utils.make_name("no_schedule"), np.array([False])).output[0]
        return [false, _const(g, "placeholder", [0] * (5 * SEGMENTS)), *_no_indices(g)]

    use, bounds, rows, gather_y = _if(graph, big, "plan", plan, placeholders)
    return SegmentPlan(use=use, bounds=bounds, rows=rows, gather_y=gather_y)


def _indices(g, lengths: str, time_major: str, order: str, first: str, end: str, active: str) -> list:
    """The plan's ``rows`` and ``gather_y`` (see :class:`SegmentPlan`), from the segments' [S] first
    steps, end steps and rows."""
    steps = _op(g, "Squeeze", _op(g, "Slice", _op(g, "Shape", time_major), _const(g, "zero", [0]),
                                  _const(g, "one", [1])), _const(g, "axes", [0]))
    gather_y, gather_c = _gather_indices(g, lengths, steps, order, first, end, active)
    rows = _op(g, "Concat", *(_op(g, "Unsqueeze", t, _const(g, "axes", [0])) for t in (order, gather_c)), axis=0)
    return [rows, gather_y]


def _no_indices(g) -> list:
    """Placeholders for ``rows`` and ``gather_y`` where the segments do not run."""
    return [_const(g, "placeholder", [[0], [0]]), _const(g, "placeholder", [[[0]]])]


def _if(graph, condition: str, name: str, then_branch, else_branch) -> list:
    """An If on ``condition`` whose branches are built by the two functions (graph -> output tensors)."""
    branches = {}
    for key, build in (("then_branch", then_branch), ("else_branch", else_branch)):
        branches[key] = _branch(graph)
        _set_outputs(branches[key], build(branches[key]))
    inner = branches["then_branch"].outputs
    node = graph.make_node("If", [condition], output_count=len(inner), branches=branches,
                           name=utils.make_name(f"{SCHEDULE_NAME}_{name}"))
    for outer, tensor in zip(node.output, inner):
        graph.set_dtype(outer, branches["then_branch"].get_dtype(tensor))
        graph.set_shape(outer, None)
    return list(node.output)


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

        outputs = _if(graph, plan.use, node.name.replace("/", "_"), lambda g: _segments(g, node, plan), single)
        for output, shape in zip(outputs, ([-1, 1, -1, node.hidden], [1, -1, node.hidden])):
            graph.set_shape(output, shape)  # what the converters of the consumers read (a Concat's axis)
    y = _op(graph, "Squeeze", outputs[0], _const(graph, "axes", [1]))
    return y, (_op(graph, "Squeeze", outputs[1], _const(graph, "axes", [0])) if node.wants_c else None), carried


def _single(g, node: RecurrentNode) -> list:
    """The layer as one node over the whole batch (what the plugin emits without a schedule)."""
    initial = [_op(g, "Unsqueeze", state, _const(g, "axes", [0])) for state in node.initial]
    initial = initial or [""] * (2 if node.kind == "LSTM" else 1)
    out = g.make_node(node.kind, [node.x, *node.weights, node.lengths] + initial,
                      output_count=3 if node.kind == "LSTM" else 2, attr=node.attr, name=utils.make_name(node.name))
    return [out.output[0]] + ([out.output[2]] if node.wants_c else [])


def _segments(g, node: RecurrentNode, plan: SegmentPlan) -> list:
    """The layer as one node per segment over the ordered rows, gathered back into the node layout."""
    def part(at, size):
        return _op(g, "Slice", plan.bounds, _const(g, "at", [at]), _const(g, "to", [at + size]), _const(g, "axis", [0]))

    order = _op(g, "Gather", plan.rows, _scalar(g, 0), axis=0)
    ordered = _op(g, "Gather", node.x, order, axis=1)
    states = [_op(g, "Gather", state, order, axis=0) for state in node.initial]
    active = [part(4 * SEGMENTS + index, 1) for index in range(SEGMENTS)]
    if states:
        states = [_op(g, "Unsqueeze", _slice_rows(g, state, active[0], 0), _const(g, "axes", [0]))
                  for state in states]
    flat_y, flat_c = [], []
    for index in range(SEGMENTS):
        x = _op(g, "Slice", ordered, part(2 * index, 2), part(2 * (SEGMENTS + index), 2), _const(g, "axes", [0, 1]))
        if index and states:
            states = [_slice_rows(g, state, active[index], 1) for state in states]
        inputs = [x, *node.weights, ""] + (states or [""] * (2 if node.kind == "LSTM" else 1))
        out = g.make_node(node.kind, inputs, output_count=3 if node.kind == "LSTM" else 2, attr=node.attr,
                          name=utils.make_name(f"{node.name}_segment{index}"))
        rows = _const(g, "rows", [-1, node.hidden])
        flat_y.append(_op(g, "Reshape", out.output[0], rows))
        states = list(out.output[1:])
        if node.wants_c:
            flat_c.append(_op(g, "Reshape", out.output[2], rows))
    zeros = g.make_const(utils.make_name("zero_state"), np.zeros((1, node.hidden), np.float32)).output[0]
    outputs = [_op(g, "Gather", _op(g, "Concat", *flat_y, zeros, axis=0), plan.gather_y, axis=0)]
    if node.wants_c:
        gather_c = _op(g, "Gather", plan.rows, _const(g, "second", [1]), axis=0)      # [1, B]
        outputs.append(_op(g, "Gather", _op(g, "Concat", *flat_c, zeros, axis=0), gather_c, axis=0))
    return outputs


def _slice_rows(g, tensor: str, rows: str, axis: int) -> str:
    """The first ``rows`` ([1] int64) entries of ``tensor`` along ``axis``."""
    return _op(g, "Slice", tensor, _const(g, "zero", [0]), rows, _const(g, "axis", [axis]))


def _compute_segments(g, lengths: str, batch: str) -> tuple:
    """(use, order, first, end, active) for a batch with these ``lengths`` (see the module's docstring):
    whether the segments pay, the rows longest first, and per segment its first step, its end step
    and the rows it runs ([S] each)."""
    segments = SEGMENTS
    sorted_lengths, order = g.make_node("TopK", [lengths, batch], output_count=2,
                                        attr={"axis": 0, "largest": 1, "sorted": 1}).output
    longest = _op(g, "Slice", sorted_lengths, _const(g, "zero", [0]), _const(g, "one", [1]), _const(g, "axis", [0]))
    # boundary k (k = 1 .. S-1): the length of the row at rank RANKS[k-1], then made strictly
    # increasing from 0 (the largest of q_j - j over j <= k, plus k) and at most longest - (S - k)
    ranks = _op(g, "Div", _op(g, "Mul", batch, _const(g, "ranks", RANKS_16THS)), _const(g, "sixteen", [16]))
    quantiles = _op(g, "Concat", _const(g, "zero", [0]), _op(g, "Gather", sorted_lengths, ranks, axis=0), axis=0)
    index = _const(g, "segment_index", list(range(segments)))
    below = np.triu(np.full((segments, segments), -(1 << 40), np.int64), 1)   # [k, j]: j > k excluded
    lifted = _op(g, "Add", _op(g, "Unsqueeze", _op(g, "Sub", quantiles, index), _const(g, "axes", [0])),
                 g.make_const(utils.make_name("not_before"), below).output[0])
    rising = _op(g, "Add", _reduce_max(g, lifted, 1), index)
    ceiling = _op(g, "Add", longest, _const(g, "ceiling", [k - segments for k in range(segments)]))
    first = _op(g, "Min", rising, ceiling)                                    # [S] first step of each segment
    end = _op(g, "Concat", _op(g, "Slice", first, _const(g, "one", [1]), _const(g, "many", [segments]),
                               _const(g, "axis", [0])), longest, axis=0)  # [S] end step
    column = _op(g, "Unsqueeze", lengths, _const(g, "axes", [1]))             # [B, 1]
    active = _op(g, "ReduceSum", _op(g, "Cast", _op(g, "Greater", column, first), to=TensorProto.INT64),
                 _const(g, "axes", [0]), keepdims=0)                          # [S] rows valid at each first step
    use = _worth_it(g, batch, longest, active, _op(g, "Sub", end, first))
    return use, order, first, end, active


def _may_pay(g, lengths: str, batch: str) -> str:
    """Bool [1]: can the segments pay at all? A necessary condition of :func:`_worth_it`, cheap enough
    to run first, so that a batch of full or nearly equal rows skips the sort and the segments: they
    cover every valid step (their cost is at least the sum of the lengths plus the fixed costs) and
    need a longest row of at least SEGMENTS steps."""
    longest = _reduce_max(g, lengths, 0, keepdims=1)
    least = _op(g, "Add", _op(g, "ReduceSum", lengths, _const(g, "axes", [0]), keepdims=1),
                _const(g, "fixed", [FIXED_COST]))
    return _cheaper(g, least, _op(g, "Mul", batch, longest), longest)


def _worth_it(g, batch: str, longest: str, active: str, length: str) -> str:
    """Bool scalar: every segment has a step (the longest row has at least SEGMENTS steps) and the
    segments' estimated cost is below GAIN of the single node's, in row-steps: a node runs at least
    ~2 rows' worth of work per step, plus SEGMENT_COST per segment and PLAN_COST."""
    rows = _op(g, "Max", active, _const(g, "two", [2]))
    covered = _op(g, "ReduceSum", _op(g, "Mul", rows, length), _const(g, "axes", [0]), keepdims=1)
    cost = _op(g, "Add", covered, _const(g, "fixed", [FIXED_COST]))
    return _cheaper(g, cost, _op(g, "Mul", batch, longest), longest)


def _cheaper(g, cost: str, single: str, longest: str) -> str:
    """Bool [1], an If's condition: ``cost`` is below GAIN of ``single`` (row-steps, [1] each) and the
    longest row has at least SEGMENTS steps (one per segment)."""
    cheaper = _op(g, "Less", _op(g, "Mul", cost, _const(g, "gain_den", [GAIN[1]])),
                  _op(g, "Mul", single, _const(g, "gain_num", [GAIN[0]])))
    long_enough = _op(g, "GreaterOrEqual", longest, _const(g, "segments", [SEGMENTS]))
    return _op(g, "And", cheaper, long_enough)


def _pairs(g, left: str, right: str) -> tuple:
    """Per segment, the [2] tensor (left[k], right[k]) of two [S] tensors."""
    stacked = _op(g, "Concat", _op(g, "Unsqueeze", left, _const(g, "axes", [1])),
                  _op(g, "Unsqueeze", right, _const(g, "axes", [1])), axis=1)
    flat = _op(g, "Reshape", stacked, _const(g, "flat", [-1]))
    return tuple(g.make_node("Split", [flat, _const(g, "twos", [2] * SEGMENTS)], output_count=SEGMENTS,
                             attr={"axis": 0}).output)


def _gather_indices(g, lengths: str, steps: str, order: str, first: str, end: str, active: str) -> tuple:
    """([T, 1, B], [B]) rows of the stacked segment outputs (and final cell states) for each position of
    the node layout, in the caller's row order. Step t of row b is read at t' = min(t, length - 1):
    each valid step where it is, and past a row's length its last valid output, which is what a
    plain layer shows there; an empty row reads the zeros row after the stacked outputs (t' = -1,
    the last entry of the per-step tables). A row's cell state comes from the segment of its last
    valid step, zeros for an empty row.

    What depends on the step only (its segment, the rows the segment runs, where its first row
    sits in the stacked outputs) is computed once per step, [T], and gathered at t'."""
    count = _op(g, "Squeeze", _op(g, "Shape", order), _const(g, "axes", [0]))
    rank = _op(g, "ScatterElements", order, order, _op(g, "Range", _scalar(g, 0), count, _scalar(g, 1)),
               axis=0)                                                         # [B] each row's place in ``order``
    time = _op(g, "Range", _scalar(g, 0), steps, _scalar(g, 1))              # [T]
    later = _op(g, "Slice", first, _const(g, "one", [1]), _const(g, "many", [SEGMENTS]), _const(g, "axis", [0]))

    def segment_of(t):
        """Which segment each step of ``t`` ([N]) falls in: the count of later segments' first steps at
        or before it."""
        at_or_after = _op(g, "GreaterOrEqual", _op(g, "Unsqueeze", t, _const(g, "axes", [1])), later)
        return _op(g, "ReduceSum", _op(g, "Cast", at_or_after, to=TensorProto.INT64), _const(g, "axes", [1]),
                   keepdims=0)

    segment = segment_of(time)                                                # [T]
    rows = _op(g, "Gather", active, segment, axis=0)                          # [T] rows run at each step
    covered = _op(g, "Mul", active, _op(g, "Sub", end, first))                # [S] stacked rows per segment
    offsets = _op(g, "CumSum", covered, _const(g, "axis", [0]), exclusive=1)
    zeros_row = _op(g, "ReduceSum", covered, _const(g, "axes", [0]), keepdims=1)   # [1] after the stacked outputs
    within = _op(g, "Mul", _op(g, "Sub", time, _op(g, "Gather", first, segment, axis=0)), rows)
    step_base = _op(g, "Concat", _op(g, "Add", _op(g, "Gather", offsets, segment, axis=0), within), zeros_row,
                    axis=0)                                                   # [T + 1]: step t's first row
    step_rows = _op(g, "Concat", rows, _const(g, "one", [1]), axis=0)        # [T + 1]
    last = _op(g, "Sub", lengths, _const(g, "one", [1]))                     # [B], -1 for an empty row
    read = _op(g, "Min", _op(g, "Unsqueeze", time, _const(g, "axes", [1])), last)   # [T, B] t'
    column = _op(g, "Min", rank, _op(g, "Sub", _op(g, "Gather", step_rows, read, axis=0), _const(g, "one", [1])))
    gather_y = _op(g, "Add", _op(g, "Gather", step_base, read, axis=0), column)
    gather_y = _op(g, "Unsqueeze", gather_y, _const(g, "axes", [1]))       # [T, 1, B]: Y's layout
    state_offsets = _op(g, "CumSum", active, _const(g, "axis", [0]), exclusive=1)
    stacked = _op(g, "Add", _op(g, "Gather", state_offsets, segment_of(last), axis=0), rank)
    total = _op(g, "ReduceSum", active, _const(g, "axes", [0]), keepdims=1)   # the zeros row
    gather_c = _op(g, "Where", _op(g, "Greater", lengths, _const(g, "zero", [0])), stacked, total)
    return gather_y, gather_c


def _reduce_max(g, tensor: str, axis: int, keepdims: int = 0) -> str:
    """ReduceMax over ``axis`` (its axes became an input in opset 18)."""
    if g.opset >= 18:
        return _op(g, "ReduceMax", tensor, _const(g, "axes", [axis]), keepdims=keepdims)
    return _op(g, "ReduceMax", tensor, axes=[axis], keepdims=keepdims)


def _scalar(g, value: int) -> str:
    return g.make_const(utils.make_name("scalar"), np.array(value, np.int64)).output[0]


def _branch(graph):
    """An empty subgraph of ``graph`` (an If's branch), reading ``graph``'s tensors by name."""
    branch = graph.create_new_graph_with_same_config()
    branch.parent_graph = graph
    return branch


def _set_outputs(branch, tensors: list) -> None:
    """The branch's outputs: the tensors it computes as they are (onnxruntime writes them straight
    into the If's outputs), an Identity of a tensor from outside, of a constant (OpenVINO drops a
    branch output that is an initializer) or of one listed twice."""
    outputs = []
    for tensor in tensors:
        producer = branch.get_node_by_output_in_current_graph(tensor)
        if producer is None or producer.is_const() or tensor in outputs:
            node = branch.make_node("Identity", [tensor])
            branch.set_dtype(node.output[0], branch.get_dtype(tensor) or _outer_dtype(branch, tensor))
            tensor = node.output[0]
        if branch.get_dtype(tensor) is None:
            branch.set_dtype(tensor, _outer_dtype(branch, tensor))
        branch.set_shape(tensor, None)
        outputs.append(tensor)
    branch.outputs = outputs


def _outer_dtype(branch, tensor: str):
    graph = branch.parent_graph
    while graph is not None:
        dtype = graph.get_dtype(tensor)
        if dtype is not None:
            return dtype
        graph = graph.parent_graph
    return None


def _op(g, kind: str, *inputs, **attr) -> str:
    return g.make_node(kind, list(inputs), attr=attr).output[0]


def _const(g, name: str, values) -> str:
    return g.make_const(utils.make_name(name), np.array(values, np.int64)).output[0]
