# SPDX-License-Identifier: Apache-2.0
"""Plan: what each mask needs, emitted once however many layers share it.

* ``sequence_lens``: the count of valid steps per row, and what the fix-ups read off it: the
  position of each row's last valid step, and whether the row has one.
* ``mask_mode="post"``: the post-padding guard. ``sequence_lens`` only describes rows whose
  valid steps all come first, i.e. whose mask never rises. The lengths reach the recurrent ops
  through a one-output Split whose size is the number of falls of the rows framed as
  ``[1, mask, 0]``, the batch size plus the number of rises: any other row makes the Split fail, with the node's name (the problem and the remedy) in the error. The
  ONNX standard makes a split that does not add up an error, and onnxruntime and OpenVINO
  (dynamic and static shapes) both enforce it; OpenVINO does not check a Reshape's element count.
* ``mask_mode="any"``: a :class:`Reorder`. Skipping masked steps is the same as running over
  the valid steps moved to the front, in order, with ``sequence_lens`` their count; the reorder
  holds the gather indices that move them there and the ones that map each output back.
* A mask built as ``sequence_mask(lengths, T)`` is post-padded by construction: neither the guard
  nor the reorder is needed.

Every tensor is emitted eagerly; tf2onnx removes the ones no layer reads after the rewriters.
All index tensors are flat: position (t, b) of a [T, B, ...] tensor is row ``t * B + b`` of its
[T * B, ...] reshape, so one Gather moves whole feature vectors. They are time-major, but the
:class:`BatchMajorRows`, which list rows for each position of a batch-major [B, T] output: one
Gather gives a layer's sequence in the layout Keras returns, in place of a ``Where`` over
[T, B, H] and a ``Transpose`` (``Where`` with a broadcast mask is the slowest node around the
recurrent op, 2-3x a ``Transpose`` of the same tensor on onnxruntime).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from onnx import TensorProto
from tf2onnx import utils

from ..graph import const, filled, int64_const, int64_scalar, make_op, producer, split, static_dim, transpose_perm
from .. import targets
from .schedule import Cuts, SegmentPlan, plan_segments, schedulable


GUARD_MESSAGE = ("masked_lstm_rewriter: the mask is not post-padded (a row has padding before or "
                 "between valid steps); reconvert with mask_mode='any'")


MASK_MODES = ("post", "any")


@dataclasses.dataclass(frozen=True)
class OutputMap:
    """Where each Keras output position reads the compacted outputs, and whether it is kept."""

    index: str   # [T, B] int64, flat row of the compacted [T * B, H] outputs
    keep: str    # [T, B, 1] bool; elsewhere the output is zeros


@dataclasses.dataclass(frozen=True)
class Reorder:
    """mask_mode="any": valid steps moved to the front, and the ways back."""

    gather_input: str        # [S, B] int64, flat row of the input for each compacted position the nodes run
    valid_steps: str         # [T, B, 1] bool, the compacted positions that hold a valid step
    forward_carried: OutputMap   # plain layer: position t shows the output after the valid steps <= t
    forward_zeros: OutputMap     # zero_output_for_mask: the same at valid steps, zeros elsewhere
    reverse_carried: OutputMap   # reversed layer: the output after the valid steps >= t
    reverse_zeros: OutputMap

    def output_map(self, direction: str, carried: bool) -> OutputMap:
        return {("forward", True): self.forward_carried, ("forward", False): self.forward_zeros,
                ("reverse", True): self.reverse_carried, ("reverse", False): self.reverse_zeros}[
                    (direction, carried)]


@dataclasses.dataclass(frozen=True)
class BatchMajorRows:
    """For each position (b, t) of a batch-major [B, T] output, post-padded rows only: the row of the
    node's ``Y`` with one zero step appended ([T + 1, B, H] as [(T + 1) * B, H]) that Keras shows
    there (:func:`batch_major_rows`). Where the node writes zeros past each row's length
    (:attr:`MaskTensors.zeros_past_lengths`), the same indices read ``Y`` [T * B, H] itself: the
    zero step of row b is then its last step, padding in any row with a padded position."""

    carried: str   # [B, T] int64: the last valid step up to t; the zero step for a row with none
    kept: str      # [B, T] int64: step t where it is valid; the zero step elsewhere


@dataclasses.dataclass(frozen=True)
class MaskTensors:
    """Tensors derived from one [B, T] mask, shared by every layer that uses it.

    The recurrent ops run over post-padded rows (the "node layout"): the input as it is in
    "post", its valid steps moved to the front in "any"."""

    lengths: str                 # [B] int32, valid steps per row (through the guard in "post")
    lengths_i64: str             # the same as int64 (ReverseSequence takes no other type)
    # read before the guard: a runtime cannot infer the size of the guard's output (OpenVINO then
    # loses the batch dimension of every tensor after it, and refuses a Squeeze downstream)
    last_step: str               # [B, 1] int32 (as [1, B, 1] over [T, B, H]), length - 1: where each row's
                                 # last valid step is in the node layout (-1 for a row with none, which
                                 # GatherElements reads as the last step: the fix-ups replace it)
    has_steps: str               # [B, 1] bool, length > 0
    mask_tm: str                 # [T, B, 1] bool, time-major mask in the model's time order
    valid_steps: str             # [S, B, 1] bool, step < length: the valid steps in the node layout, over the
                                 # steps the nodes run (S: T, or ``longest``)
    reorder: Optional[Reorder]   # mask_mode="any" on a mask not known to be post-padded
    segments: Optional[SegmentPlan] = None  # the length-ordered schedule (None: a static batch too small)
    batch_major: Optional[BatchMajorRows] = None  # the rows of a batch-major sequence in the node layout (always set
                                                  # by the planner; a default only for the fields' order)
    batch: str = ""              # [1] int64, B, read where no recurrent node's input is, for the nodes' zero
                                 # initial h (emit.node.zero_h; "": none, the op's default)
    longest: str = ""            # [1] int32, the steps the nodes run: the longest row's, at least 1 ("": every step)
    steps_by_concat: bool = False  # the steps the nodes did not run are appended as a Concat of zeros, not a
                                   # Pad (targets.steps_appended_by_concat: a static batch of 1)
    zeros_past_lengths: bool = False  # the nodes' Y is zeros past each row's length: no cut, and the target's
                                      # nodes write zeros there (targets.zeros_past_lengths; the schedule's
                                      # segments do too)


class MaskPlanner:
    """Emits, once per mask tensor, what the layers using it need."""

    def __init__(self, graph, mask_mode: str = "post", schedule: bool = False, cut: bool = False,
                 zeros: bool = False, zero_state: bool = True, cuts: Optional[Cuts] = None, concat_steps: bool = False):
        if mask_mode not in MASK_MODES:
            raise ValueError(f"mask_mode must be one of {MASK_MODES}, not {mask_mode!r}")
        self.graph = graph
        self.mask_mode = mask_mode
        self.schedule = schedule  # emit the length-aware schedule's plan (schedule.py)
        self.cut = cut            # run the nodes only up to the longest row (targets.cut_to_longest)
        self.zeros = zeros        # the nodes write zeros past each row's length (targets.zeros_past_lengths)
        self.zero_state = zero_state  # give the nodes their zero initial h (targets.explicit_zero_state)
        self.cuts = cuts or Cuts(*targets.schedule_cuts(None))  # where the schedule cuts time
        self.concat_steps = concat_steps  # at a static batch of 1 (targets.steps_appended_by_concat)
        self._cache = {}

    def tensors_for(self, mask: str, post_padded: bool, x_tm: str, schedule: bool = True) -> MaskTensors:
        """``post_padded``: the mask is post-padded by construction (no guard, no reorder); ``x_tm``:
        the [T, B, I] input of a layer the mask is for (its steps are the mask's); ``schedule``: the
        layer may have the schedule (with the planner's)."""
        key = (mask, self.schedule and schedule)
        if key not in self._cache:
            self._cache[key] = self._emit(mask, post_padded, x_tm, key[1])
        return self._cache[key]

    def _emit(self, mask: str, post_padded: bool, x_tm: str, schedule: bool) -> MaskTensors:
        """Every count is read off the mask as [B, T, 1], the tensor Keras transposes into the
        time-major mask the fix-ups need (the optimizer merges both with Keras's own): reductions
        over it give the [B] lengths and the [B, 1] ones (which broadcast as [1, B, 1] over
        [T, B, H]) without a Reshape, and the guard's total as a [1] tensor, without a Shape."""
        g = self.graph
        mask_bt1 = make_op(g, "Unsqueeze", mask, int64_const(g, "axes", [2]))
        mask_tm = make_op(g, "Transpose", mask_bt1, perm=[1, 0, 2])
        counts = make_op(g, "Cast", mask_bt1, to=TensorProto.INT32)                 # [B, T, 1]
        lengths = make_op(g, "ReduceSum", counts, int64_const(g, "axes", [1, 2]), keepdims=0)
        lengths_col = make_op(g, "ReduceSum", counts, int64_const(g, "axes", [1]), keepdims=0)
        valid_steps, reorder, guarded = mask_tm, None, lengths
        batch_steps = _batch_and_steps(g, x_tm)
        batch = make_op(g, "Gather", batch_steps, int64_const(g, "first", [0]))
        if self.mask_mode == "post" and not post_padded:
            guarded = self._guard_post_padded(counts, lengths)
        elif self.mask_mode == "any" and not post_padded:
            reorder = self._reorder(make_op(g, "Transpose", mask, perm=[1, 0]))
            valid_steps = reorder.valid_steps
        longest = _longest(g, lengths) if self.cut else ""
        if longest:  # the node layout holds only the steps the nodes run
            valid_steps = first_steps(g, valid_steps, longest, 0)
            reorder = reorder and dataclasses.replace(reorder, gather_input=first_steps(g, reorder.gather_input,
                                                                                          longest, 0))
        # the plan reads the lengths before the guard (as the fix-ups do) and its batch size after it,
        # so that every path still runs the guard first
        segments = None
        if schedule and schedulable(g, mask):
            segments = plan_segments(g, lengths, guarded, _layout_steps(g, mask_tm, longest), self.cuts)
        return MaskTensors(lengths=guarded, lengths_i64=make_op(g, "Cast", guarded, to=TensorProto.INT64),
                           segments=segments,
                           last_step=make_op(g, "Sub", lengths_col, const(g, "one_i32", np.array(1, np.int32))),
                           has_steps=make_op(g, "Greater", lengths_col, const(g, "zero_i32", np.array(0, np.int32))),
                           mask_tm=mask_tm, valid_steps=valid_steps, reorder=reorder,
                           batch_major=batch_major_rows(g, mask, batch_steps, batch),
                           batch=batch if self.zero_state else "", longest=longest,
                           zeros_past_lengths=self.zeros and not longest,
                           steps_by_concat=bool(longest) and self.concat_steps and static_dim(g, mask, 0) == 1)

    def _guard_post_padded(self, counts: str, lengths: str) -> str:
        """``lengths`` routed through a Split that fails unless every row is post-padded.

        Each row framed as ``[1, mask, 0]`` falls (a valid step followed by a padded one) exactly
        once more than its mask rises: once in all when it is post-padded, more often otherwise.
        So the frames of a batch of B rows fall B times in all exactly when every row is
        post-padded, and that total is the size of the one-output Split of the [B] lengths."""
        g = self.graph
        # [B, T + 1, 1]: each frame without its last step, and without its first
        head = make_op(g, "Pad", counts, int64_const(g, "pads", [0, 1, 0, 0, 0, 0]),
                       const(g, "one_i32", np.array(1, np.int32)))
        tail = make_op(g, "Pad", counts, int64_const(g, "pads", [0, 0, 0, 0, 1, 0]),
                       const(g, "zero_i32", np.array(0, np.int32)))
        falls = make_op(g, "Cast", make_op(g, "Greater", head, tail), to=TensorProto.INT64)
        # reduced to a [1] tensor, the Split's size, in one node: each costs ~1-3 us at batch 1
        size = make_op(g, "ReduceSum", falls, int64_const(g, "axes", [0, 1]), keepdims=0)
        # OpenVINO's error names the output tensor, onnxruntime's the node: both carry the message
        name = utils.make_name(GUARD_MESSAGE)
        return split(g, lengths, size, 1, name=name)[0]

    def _reorder(self, mask_tm: str) -> Reorder:
        """Index tensors that compact each row's valid steps to the front and map outputs back.

        With ``upto`` = valid steps at or before t and ``L`` = valid steps in the row, a valid step
        goes to position ``upto - 1``, a masked one after all valid steps, at ``L + t - upto``.
        """
        g = self.graph
        one = int64_scalar(g, 1)
        valid = make_op(g, "Cast", mask_tm, to=TensorProto.INT64)                      # [T, B]
        upto = make_op(g, "CumSum", valid, int64_scalar(g, 0))  # valid steps <= t
        before = make_op(g, "Sub", upto, valid)                                       # valid steps < t
        total = make_op(g, "ReduceSum", valid, int64_const(g, "axes", [0]), keepdims=1)  # [1, B]
        shape = make_op(g, "Shape", mask_tm)
        steps = _scalar(g, shape, 0)
        batch = _scalar(g, shape, 1)
        zero = int64_scalar(g, 0)
        time = make_op(g, "Unsqueeze", make_op(g, "Range", zero, steps, one), int64_const(g, "axes", [1]))  # [T, 1]
        rows = make_op(g, "Range", zero, batch, one)                                  # [B]
        # the sizes tf2onnx cannot infer through Range: with them, a static batch of 1 stays known in the
        # layer's outputs, whose Keras transposes tf2onnx's optimizer then turns into Reshapes (left as
        # Transposes, a Concatenate with the embedding made that optimizer add Reshapes without end)
        dims = _dims(g, mask_tm)
        g.set_shape(time, [dims[0], 1])
        g.set_shape(rows, [dims[1]])

        destination = make_op(g, "Where", make_op(g, "Cast", valid, to=TensorProto.BOOL), make_op(g, "Sub", upto, one),
                              make_op(g, "Add", total, make_op(g, "Sub", time, upto)))
        # destination is a permutation of each column: scattering the step numbers through it
        # lists, for each compacted position, the step that goes there
        source = make_op(g, "ScatterElements", destination, destination, make_op(g, "Expand", time, shape), axis=0)

        def flat(index):
            flat_index = make_op(g, "Add", make_op(g, "Mul", index, batch), rows)
            g.set_shape(flat_index, dims)
            return flat_index

        def keep(condition):
            kept = make_op(g, "Unsqueeze", condition, int64_const(g, "axes", [2]))
            g.set_shape(kept, dims + [1])
            return kept

        is_valid = keep(make_op(g, "Cast", valid, to=TensorProto.BOOL))
        forward_index = flat(make_op(g, "Max", make_op(g, "Sub", upto, one), zero))
        reverse_index = flat(before)
        return Reorder(
            gather_input=flat(source), valid_steps=keep(make_op(g, "Less", time, total)),
            forward_carried=OutputMap(forward_index, keep(make_op(g, "Greater", upto, zero))),
            forward_zeros=OutputMap(forward_index, is_valid),
            reverse_carried=OutputMap(reverse_index, keep(make_op(g, "Less", before, total))),
            reverse_zeros=OutputMap(reverse_index, is_valid))


def batch_major_rows(g, mask: str, batch_steps: str, batch: str) -> BatchMajorRows:
    """The rows of the node's ``Y`` with a zero step appended that each batch-major position shows,
    the [B, T] ``mask`` read with a layer input's [B, T] ``batch_steps`` and [B] ``batch``
    (:func:`_batch_and_steps`): a mask of other steps makes the run fail, as Keras refuses it.

    With ``upto`` the count of valid steps up to t, the last valid step up to t is step ``upto - 1``
    of the node layout (t itself at a valid step of a post-padded row; "any" moves the valid steps
    to the front, in order), row ``upto * B + (b - B)``. For a row with no valid step that is
    ``b - B``, a negative index that counts back from the end to the zero step of row b, which is
    also where a padded position reads zeros."""
    counted = make_op(g, "Cast", mask, to=TensorProto.INT64)
    upto = make_op(g, "CumSum", counted, int64_scalar(g, 1))
    minus_ones = filled(g, batch_steps, np.int64(-1))
    zero_step = make_op(g, "CumSum", minus_ones, int64_scalar(g, 0), reverse=1)  # b - B in row b
    carried = make_op(g, "Add", make_op(g, "Mul", upto, batch), zero_step)
    kept = make_op(g, "Where", mask, carried, zero_step)
    for rows in (carried, kept):  # the sizes tf2onnx cannot infer through CumSum (see _reorder)
        g.set_shape(rows, _dims(g, mask))
    return BatchMajorRows(carried=carried, kept=kept)


def first_steps(g, tensor: str, steps: str, axis: int) -> str:
    """The first ``steps`` ([1] int32) entries of ``tensor`` along ``axis``."""
    return make_op(g, "Slice", tensor, const(g, "step_zero", np.array([0], np.int32)), steps,
                   const(g, "time_axis", np.array([axis], np.int32)))


def _layout_steps(g, mask_tm: str, longest: str) -> str:
    """[] int64: the steps of the node layout, ``longest`` ([1] int32) or else the mask's (axis 0 of
    ``mask_tm``). Read outside the schedule's Ifs: tf2onnx's transpose optimizer fails on a Shape inside
    an If that reads a Transpose outside it (it removes the Shape from the wrong graph)."""
    if longest:
        steps = make_op(g, "Cast", longest, to=TensorProto.INT64)
    else:
        steps = make_op(g, "Gather", make_op(g, "Shape", mask_tm), int64_const(g, "time_axis", [0]))
    return make_op(g, "Squeeze", steps, int64_const(g, "axes", [0]))


def _longest(g, lengths: str) -> str:
    """[1] int32: the longest of the [B] ``lengths``, at least 1 (a node over no step leaves its final
    states unwritten)."""
    longest = make_op(g, "ReduceMax", lengths, keepdims=1)
    return make_op(g, "Max", longest, const(g, "one_step", np.array([1], np.int32)))


def _batch_and_steps(g, x_tm: str) -> str:
    """[B, T] of the [T, B, I] ``x_tm``, read off the batch-major tensor Keras transposed into it
    where there is one, so that the Transpose stays its only reader: OpenVINO folds a Transpose in
    front of a recurrent op only then."""
    node = producer(g, x_tm)
    if node is not None and node.type == "Transpose" and transpose_perm(g, node) == [1, 0, 2]:
        return make_op(g, "Slice", make_op(g, "Shape", node.input[0]), int64_const(g, "zero", [0]),
                       int64_const(g, "two", [2]))
    return make_op(g, "Gather", make_op(g, "Shape", x_tm), int64_const(g, "batch_steps", [1, 0]))


def _dims(graph, tensor: str) -> list:
    """The two dimensions of a [T, B] (or [B, T]) tensor as tf2onnx knows them (-1 where it does not)."""
    shape = graph.get_shape(tensor)
    if shape is None or len(shape) != 2:
        return [-1, -1]
    return [-1 if dim is None or dim < 0 else dim for dim in shape]


def _scalar(graph, shape: str, index: int) -> str:
    """Element ``index`` of a shape tensor, as a scalar."""
    return make_op(graph, "Gather", shape, int64_scalar(graph, index))
