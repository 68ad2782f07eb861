# SPDX-License-Identifier: Apache-2.0
"""The length-aware schedule's plan: run a layer's recurrent node in time segments over a shrinking set of rows.

onnxruntime's recurrent kernels compute every row up to the batch's longest row. With
long-tailed lengths (text batches that are not bucketed) most of that work is padding. The
schedule makes the cost follow the valid steps (packed sequences):

* once per mask (:func:`plan_segments`), the rows are ordered by length, longest first (``TopK``),
  and the time axis is cut into segments at the lengths of the rows at fixed ranks (:class:`Cuts`,
  per runtime: the median row, the quarter, ...), made strictly increasing and below the longest
  length. Segment k runs only the rows still valid at its first step, a prefix of the ordered
  rows (``active``);
* for each layer (:func:`emit_node`), each segment is one forward node over its slice of the
  ordered input, starting from the states the previous segment ended with for the rows it
  keeps. Those rows are valid at every step of the previous segment, so the states are exact on
  any runtime whatever it does with padded steps (no ``sequence_lens`` is passed): rows that end
  inside a segment are read at their last valid step only, by index, and an LSTM's cell state
  over the padding steps of such a row is held by the padding column (:mod:`.emit`). The
  segments' outputs are stacked, and the plan's ``gather_y`` gives the row of each position of the
  [S, B, H] node layout (S: the steps the single node runs) in the caller's row order: what the
  single node gives at every valid step, and a zero row past each row's length. The layer's
  ``If`` returns those rows (the single node's branch: its bare Y, ``gather_y`` then t * B + b),
  and the fix-ups after it gather from them as without a schedule, composing their indices with
  these;
* whether it pays is decided at run time: an ``If`` per mask computes the plan only for batches of
  at least ``MIN_BATCH`` rows (else a few constants); in it, a cheap bound (the sum of the
  lengths) first rules out batches where no segments could pay (full or nearly equal rows), then
  an ``If`` nested in it sorts, cuts and computes the gather indices. An ``If`` per layer runs the
  segments when the estimated cost (the rows times steps the segments cover, plus a fixed cost
  per segment and per plan) is below ``GAIN`` of the single node's (batch times longest row),
  and the single node otherwise, exactly as without a schedule. With a static batch below
  ``MIN_BATCH`` neither ``If`` is emitted.

Every index is computed in the graph from the lengths; nothing depends on how a runtime treats
padded steps (OpenVINO ignores ``sequence_lens`` with dynamic shapes): the fix-ups read no step
past a row's length where a target's node may write other values than zeros there. Exact on
onnxruntime and OpenVINO (tests/test_schedule.py runs on both; OpenVINO only with the layer If's
outputs read through a Reshape to a shape known at run time: :mod:`..emit.node`). On by default;
``schedule=False`` leaves it out.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import TensorProto

from ..graph import const, int64_const, int64_scalar, make_if, make_op, static_dim

INT64_MAX = np.iinfo(np.int64).max


MIN_BATCH = 8           # below this many rows the single node always runs (measured: tools/benchmark.py)


PLAN_COST = 70          # the plan's and the gathers' cost, in row-steps


@dataclasses.dataclass(frozen=True)
class Cuts:
    """Where the schedule cuts time for a runtime, and what a segment costs it (targets.schedule_cuts)."""

    ranks_16ths: tuple   # segment boundaries: the lengths of the rows at these ranks (fractions of the batch,
                         # in 16ths, longest row first)
    segment_cost: int    # a segment's fixed cost, in row-steps of the recurrent op

    @property
    def segments(self) -> int:
        return len(self.ranks_16ths) + 1

    @property
    def fixed_cost(self) -> int:
        """The segments' and the plan's fixed cost, in row-steps."""
        return self.segment_cost * self.segments + PLAN_COST


GAIN = (3, 4)           # run the segments when their estimated cost is below 3/4 of the single node's


SCHEDULE_NAME = "masked_lstm_rewriter_schedule"   # the If nodes' names start with it (corpus/ops.py)


def schedule_if(graph, condition: str, name: str, then_branch, else_branch) -> list:
    """An If of the schedule (its name starts with ``SCHEDULE_NAME``), branches built by the functions."""
    return make_if(graph, condition, f"{SCHEDULE_NAME}_{name}", then_branch, else_branch)


@dataclasses.dataclass(frozen=True)
class SegmentPlan:
    """Per mask: what every layer sharing it needs to run in segments (the plan If's outputs: few,
    so that a small batch pays little for the If's placeholders)."""

    use: str             # [1] bool: run the layers in segments
    bounds: str          # [5 * S] int64: per segment the shape of its input (steps, rows, -1); then the
                         # row-steps of each segment; then the rows of each
    rows: str            # [2, B] int64: the rows longest first; each row's final cell state in the stacked ones
    gather_y: str        # [T, B] int64: each (t, b) of the node layout's row in the layer If's rows: the
                         # segments' stacked outputs, or the single node's Y (t * B + b)
    gather_x: str        # [N] int64: the segments' inputs one after the other, as rows of the layer's
                         # input seen as [B * T, I] (batch-major)
    segments: int        # how many (Cuts.segments)


def schedulable(graph, mask: str) -> bool:
    """Can a batch of this mask have ``MIN_BATCH`` rows or more (a static batch below cannot)?"""
    rows = static_dim(graph, mask, 0)
    return rows is None or rows >= MIN_BATCH


def plan_segments(graph, counts: str, guarded: str, steps: str, cuts: Cuts) -> SegmentPlan:
    """The plan over the lengths ``counts`` ([B] int32, node layout) and the node layout's ``steps``
    ([] int64: T, or the longest row's where the nodes run only up to it), in one If: for batches of
    at least ``MIN_BATCH`` rows (the batch size read off ``guarded``, the lengths through the "post"
    guard, so that the guard runs first on every path), whether segments could pay at all
    (:func:`_may_pay`), and where they could, in an If nested in it, the segments, whether they pay
    and their gather indices; else placeholders. One If at the top, so that a small batch pays for
    one. (The indices are computed whether or not the segments pay: where they could but do not, an
    If more would save their ~40 small nodes, and cost every batch they pay for an If, about as
    much.) After it, ``gather_y`` is the segments' indices or the single node's own rows.

    (The layers' nodes are not in it: a node in an If nested in another ran slower, measured in
    onnxruntime 1.31, +7% to +11% for the plugin's models at batch 32.)"""
    batch = make_op(graph, "Shape", guarded)                                      # [1]
    big = make_op(graph, "GreaterOrEqual", batch, int64_const(graph, "min_batch", [MIN_BATCH]))  # [1]: an If's condition

    def plan(g):
        lengths = make_op(g, "Cast", counts, to=TensorProto.INT64)
        return schedule_if(g, _may_pay(g, lengths, batch, cuts), "segments", lambda inner: segments(inner, lengths),
                           placeholders)

    def segments(g, lengths):
        use, order, first, end, active = _compute_segments(g, lengths, batch, cuts)
        length = make_op(g, "Sub", end, first)
        covered = make_op(g, "Mul", active, length)                                  # [S] row-steps
        shapes = _interleaved(g, length, active, int64_const(g, "any_width", [-1] * cuts.segments))
        bounds = make_op(g, "Concat", shapes, covered, active, axis=0)
        return [use, bounds, *_indices(g, lengths, steps, order, first, active, covered)]

    def placeholders(g):
        false = const(g, "no_schedule", np.array([False]))
        return [false, int64_const(g, "placeholder", [0] * (5 * cuts.segments)), *_no_indices(g)]

    use, bounds, rows, in_segments, gather_x = schedule_if(graph, big, "plan", plan, placeholders)
    gather_y = make_op(graph, "Where", use, in_segments, _row_numbers(graph, steps, batch))
    return SegmentPlan(use=use, bounds=bounds, rows=rows, gather_y=gather_y, gather_x=gather_x,
                       segments=cuts.segments)


def _row_numbers(g, steps: str, batch: str) -> str:
    """[T, B] int64: t * B + b at each (t, b), the row of each position of a [T, B, ...] tensor seen as
    [T * B, ...], for ``steps`` ([] int64) T and ``batch`` ([1] int64) B."""
    dims = make_op(g, "Concat", make_op(g, "Unsqueeze", steps, int64_const(g, "axes", [0])), batch, axis=0)
    count = make_op(g, "ReduceProd", dims, keepdims=0)
    return make_op(g, "Reshape", make_op(g, "Range", int64_scalar(g, 0), count, int64_scalar(g, 1)), dims)


@dataclasses.dataclass(frozen=True)
class _Steps:
    """What the gather indices need per step of the batch (all of them, [T]) and per row ([B])."""

    time: str            # [T] 0, 1, ...
    step: str            # [T, 1] the same, as a column
    segment: str         # [T] the segment each step is in
    rows: str            # [T] the rows that segment runs
    rank: str            # [B] 0, 1, ...


def _indices(g, lengths: str, steps: str, order: str, first: str, active: str, covered: str) -> list:
    """The plan's ``rows``, ``gather_y`` and ``gather_x`` (see :class:`SegmentPlan`), from the number of
    ``steps`` and the segments' [S] first steps, rows and row-steps."""
    time = make_op(g, "Range", int64_scalar(g, 0), steps, int64_scalar(g, 1))
    segment = _segment_of(g, time, make_op(g, "Slice", first, int64_const(g, "one", [1]),
                                           int64_const(g, "end", [INT64_MAX]), int64_const(g, "axis", [0])))
    count = make_op(g, "Squeeze", make_op(g, "Shape", order), int64_const(g, "axes", [0]))
    tables = _Steps(time=time, step=make_op(g, "Unsqueeze", time, int64_const(g, "axes", [1])), segment=segment,
                    rows=make_op(g, "Gather", active, segment, axis=0),
                    rank=make_op(g, "Range", int64_scalar(g, 0), count, int64_scalar(g, 1)))
    total = make_op(g, "ReduceSum", covered, int64_const(g, "axes", [0]), keepdims=1)   # [1] row-steps run
    gather_y, gather_c = _gather_indices(g, lengths, order, first, active, covered, total, tables)
    rows = make_op(g, "Concat", *(_row(g, t) for t in (order, gather_c)), axis=0)
    return [rows, gather_y, _source_indices(g, steps, order, total, tables)]


def _no_indices(g) -> list:
    """Placeholders for ``rows``, ``gather_y`` and ``gather_x`` where the segments do not run."""
    return [int64_const(g, "placeholder", [[0], [0]]), int64_const(g, "placeholder", [[0]]),
            int64_const(g, "placeholder", [0])]


def _row(g, tensor: str) -> str:
    """[1, N]: the [N] ``tensor`` as one row."""
    return make_op(g, "Unsqueeze", tensor, int64_const(g, "axes", [0]))


def _source_indices(g, steps: str, order: str, total: str, tables: _Steps) -> str:
    """[N] (``gather_x``): for each of the ``total`` row-steps of the segments' inputs, one after the
    other, its row in the layer's input seen as [B * T, I]. Segment k runs its steps over the first
    ``active[k]`` rows of ``order``, time-major, and the segments follow each other in time: so these
    are the (step, row) of the [T, B] grid, row-major, whose rank is below the rows of the step's
    segment, up to the longest row (the steps after it count as the last segment's: cut off)."""
    source = make_op(g, "Add", make_op(g, "Mul", _row(g, order), steps), tables.step)          # [T, B]
    run = make_op(g, "Less", _row(g, tables.rank), make_op(g, "Unsqueeze", tables.rows, int64_const(g, "axes", [1])))
    flat = int64_const(g, "flat", [-1])
    kept = make_op(g, "Compress", make_op(g, "Reshape", source, flat), make_op(g, "Reshape", run, flat), axis=0)
    return make_op(g, "Slice", kept, int64_const(g, "zero", [0]), total, int64_const(g, "axis", [0]))


def _segment_of(g, t: str, later: str) -> str:
    """Which segment each of ``t`` ([N], steps or row-steps) falls in: the count of the later segments'
    starts (``later``, [S - 1]) at or before it."""
    at_or_after = make_op(g, "GreaterOrEqual", make_op(g, "Unsqueeze", t, int64_const(g, "axes", [1])), later)
    return make_op(g, "ReduceSum", make_op(g, "Cast", at_or_after, to=TensorProto.INT64), int64_const(g, "axes", [1]),
                   keepdims=0)


def _compute_segments(g, lengths: str, batch: str, cuts: Cuts) -> tuple:
    """(use, order, first, end, active) for a batch with these ``lengths`` (see the module's docstring):
    whether the segments pay, the rows longest first, and per segment its first step, its end step
    and the rows it runs ([S] each)."""
    segments = cuts.segments
    sorted_lengths, order = g.make_node("TopK", [lengths, batch], output_count=2,
                                        attr={"axis": 0, "largest": 1, "sorted": 1}).output
    longest = make_op(g, "Slice", sorted_lengths, int64_const(g, "zero", [0]), int64_const(g, "one", [1]), int64_const(g, "axis", [0]))
    # boundary k (k = 1 .. S-1): the length of the row at rank ranks_16ths[k-1], then made strictly
    # increasing from 0 (the largest of q_j - j over j <= k, plus k) and at most longest - (S - k)
    ranks = make_op(g, "Div", make_op(g, "Mul", batch, int64_const(g, "ranks", cuts.ranks_16ths)),
                    int64_const(g, "sixteen", [16]))
    quantiles = make_op(g, "Concat", int64_const(g, "zero", [0]), make_op(g, "Gather", sorted_lengths, ranks, axis=0), axis=0)
    index = int64_const(g, "segment_index", list(range(segments)))
    # [k, j]: j > k excluded, by a value within int32 (OpenVINO computes int64 as int32)
    below = np.triu(np.full((segments, segments), -(1 << 30), np.int64), 1)
    lifted = make_op(g, "Add", make_op(g, "Unsqueeze", make_op(g, "Sub", quantiles, index), int64_const(g, "axes", [0])),
                 const(g, "not_before", below))
    rising = make_op(g, "Add", _reduce_max(g, lifted, 1), index)
    ceiling = make_op(g, "Add", longest, int64_const(g, "ceiling", [k - segments for k in range(segments)]))
    first = make_op(g, "Min", rising, ceiling)                                    # [S] first step of each segment
    end = make_op(g, "Concat", make_op(g, "Slice", first, int64_const(g, "one", [1]), int64_const(g, "many", [segments]),
                               int64_const(g, "axis", [0])), longest, axis=0)  # [S] end step
    column = make_op(g, "Unsqueeze", lengths, int64_const(g, "axes", [1]))             # [B, 1]
    active = make_op(g, "ReduceSum", make_op(g, "Cast", make_op(g, "Greater", column, first), to=TensorProto.INT64),
                 int64_const(g, "axes", [0]), keepdims=0)                          # [S] rows valid at each first step
    use = _worth_it(g, batch, longest, active, make_op(g, "Sub", end, first), cuts)
    return use, order, first, end, active


def _may_pay(g, lengths: str, batch: str, cuts: Cuts) -> str:
    """Bool [1]: can the segments pay at all? A necessary condition of :func:`_worth_it`, cheap enough
    to run first, so that a batch of full or nearly equal rows skips the sort and the segments: they
    cover every valid step (their cost is at least the sum of the lengths plus the fixed costs) and
    need a longest row of at least one step per segment."""
    longest = _reduce_max(g, lengths, 0, keepdims=1)
    least = make_op(g, "Add", make_op(g, "ReduceSum", lengths, int64_const(g, "axes", [0]), keepdims=1),
                    int64_const(g, "fixed", [cuts.fixed_cost]))
    return _cheaper(g, least, make_op(g, "Mul", batch, longest), longest, cuts)


def _worth_it(g, batch: str, longest: str, active: str, length: str, cuts: Cuts) -> str:
    """Bool scalar: every segment has a step (the longest row has at least one step per segment) and
    the segments' estimated cost is below GAIN of the single node's, in row-steps: a node runs at least
    ~2 rows' worth of work per step, plus the cuts' fixed cost."""
    rows = make_op(g, "Max", active, int64_const(g, "two", [2]))
    covered = make_op(g, "ReduceSum", make_op(g, "Mul", rows, length), int64_const(g, "axes", [0]), keepdims=1)
    cost = make_op(g, "Add", covered, int64_const(g, "fixed", [cuts.fixed_cost]))
    return _cheaper(g, cost, make_op(g, "Mul", batch, longest), longest, cuts)


def _cheaper(g, cost: str, single: str, longest: str, cuts: Cuts) -> str:
    """Bool [1], an If's condition: ``cost`` is below GAIN of ``single`` (row-steps, [1] each) and the
    longest row has at least one step per segment."""
    cheaper = make_op(g, "Less", make_op(g, "Mul", cost, int64_const(g, "gain_den", [GAIN[1]])),
                  make_op(g, "Mul", single, int64_const(g, "gain_num", [GAIN[0]])))
    long_enough = make_op(g, "GreaterOrEqual", longest, int64_const(g, "segments", [cuts.segments]))
    return make_op(g, "And", cheaper, long_enough)


def _interleaved(g, *parts: str) -> str:
    """[n * S]: (parts[0][0], parts[1][0], ..., parts[0][1], ...) of n [S] tensors."""
    stacked = make_op(g, "Concat", *(make_op(g, "Unsqueeze", part, int64_const(g, "axes", [1])) for part in parts),
                      axis=1)
    return make_op(g, "Reshape", stacked, int64_const(g, "flat", [-1]))


def _gather_indices(g, lengths: str, order: str, first: str, active: str, covered: str, zeros_row: str,
                    tables: _Steps) -> tuple:
    """([T, B], [B]) rows of the stacked segment outputs (and final cell states) for each position of
    the node layout, in the caller's row order (``zeros_row``: the row after them). Step t of row b
    is row ``rank[b]`` of step t's block in its segment's output, where t is valid (a row valid at t
    is valid at its segment's first step, so among the rows the segment runs), and the zeros row past
    the row's length, as onnxruntime's single node writes them. A row's cell state comes from the
    segment of its last valid step, zeros for an empty row."""
    rank = make_op(g, "ScatterElements", order, order, tables.rank, axis=0)      # [B] each row's place in ``order``
    offsets = make_op(g, "CumSum", covered, int64_const(g, "axis", [0]), exclusive=1)  # [S] where each one starts
    within = make_op(g, "Mul", make_op(g, "Sub", tables.time, make_op(g, "Gather", first, tables.segment, axis=0)),
                     tables.rows)
    # [T]: where step t's rows start in the stacked outputs
    step_base = make_op(g, "Add", make_op(g, "Gather", offsets, tables.segment, axis=0), within)
    valid = make_op(g, "Less", tables.step, lengths)                                       # [T, B]
    read = make_op(g, "Add", make_op(g, "Unsqueeze", step_base, int64_const(g, "axes", [1])), rank)
    gather_y = make_op(g, "Where", valid, read, zeros_row)
    state_offsets = make_op(g, "CumSum", active, int64_const(g, "axis", [0]), exclusive=1)
    # an empty row's last step, -1, reads the last step's segment: the Where replaces it
    last = make_op(g, "Sub", lengths, int64_const(g, "one", [1]))                          # [B], -1 for an empty row
    last_segment = make_op(g, "Gather", tables.segment, last, axis=0)
    stacked = make_op(g, "Add", make_op(g, "Gather", state_offsets, last_segment, axis=0), rank)
    total = make_op(g, "ReduceSum", active, int64_const(g, "axes", [0]), keepdims=1)   # the zeros row
    gather_c = make_op(g, "Where", make_op(g, "Greater", lengths, int64_const(g, "zero", [0])), stacked, total)
    return gather_y, gather_c


def _reduce_max(g, tensor: str, axis: int, keepdims: int = 0) -> str:
    """ReduceMax over ``axis`` (its axes became an input in opset 18)."""
    if g.opset >= 18:
        return make_op(g, "ReduceMax", tensor, int64_const(g, "axes", [axis]), keepdims=keepdims)
    return make_op(g, "ReduceMax", tensor, axes=[axis], keepdims=keepdims)
