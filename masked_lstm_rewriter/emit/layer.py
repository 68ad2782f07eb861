# SPDX-License-Identifier: Apache-2.0
"""Emit: turn a :class:`~..layer.MaskedRecurrentLayer` into ONNX nodes.

What each mask needs (lengths, the guard or the reorder) comes from :mod:`..plan.masks`.

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
  reversed back the same way (but a pair, :mod:`.bidirectional`: one ``direction="bidirectional"``
  node, whose outputs get the same fix-ups);
* the last output and the final ``h`` are gathered from ``Y`` at each row's last valid step
  (zeros for a row with none), never read from ``Y_h``;
* an LSTM's final cell state can only come from ``Y_c``: when it is used, the input gets one
  more column, 1 at padded steps, whose weights drive the input gate to exactly 0 and the
  forget gate to exactly 1 there, so that ``c`` is carried unchanged over padded steps whatever
  the runtime does with them (this needs a recurrent activation that saturates exactly:
  sigmoid or hard_sigmoid; otherwise :func:`..targets.portability_refusal` keeps the layer a Loop).

Then the fix-ups make every output Keras's at every position:

* at padded steps a plain layer repeats the last valid output (zeros before the first valid
  step): ``Where(mask, Y, last_output)``;
* with ``zero_output_for_mask`` (``Bidirectional``), or in reverse, masked steps are zeros;
* the sequence Keras transposes to batch-major is also given as one ``Gather`` of ``Y`` with a
  zero step appended (or of ``Y`` alone, where the target's nodes write zeros past each row's
  length), which replaces that ``Where`` and the transpose
  (:class:`..plan.masks.BatchMajorRows`; in "any", also the map back from the valid steps moved
  to the front, except for a reversed layer that carries its output);
* a ``go_backwards`` layer returns its sequence in reversed time order; a ``Bidirectional``
  layer reverses it back, so that pair of reversals is skipped;
* a row with no valid step keeps the initial state in Keras: ``Where(length > 0, h, initial_h)``;
* where the carried output starts from the initial state (Keras on JAX), the steps before a row's
  first valid step output the top cell's initial ``h`` instead of zeros.

Only ``Where`` selects values by the mask (never arithmetic): padded inputs may hold anything,
``-inf`` and NaN included.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from onnx import TensorProto

from ..graph import const, filled, gathered_rows, int64_const, int64_scalar, make_op, static_dim
from ..layer import MaskedRecurrentLayer, RecurrentCell
from ..plan.masks import BatchMajorRows, MaskTensors, first_steps
from .node import cell_node, emit_node
from .segments import batch_major_source
from .rewire import KerasOutputs, rewire


@dataclasses.dataclass(frozen=True)
class NodeOutputs:
    """One layer's raw ONNX results, in the node layout (post-padded rows, compacted in "any")."""

    y: str            # [S, B, H]: valid steps in time order (reversed back for a backward layer), over the
                      # steps the node ran (every step T, or up to the longest row: steps_run)
    y_node: str       # [S, B, H]: the node's steps as it ran them (what a stacked cell's node reads)
    h_last: str       # [B, H]: the output at the last valid step, zeros for a row with none
    h_last_step: str  # [1, B, H]: the same, broadcasting over the time axis
    c_last: Optional[str]  # [B, H], LSTM only: the cell state after the last valid step
    zero_row: bool = False  # ``y`` is gathered from rows whose last is zeros (the schedule's If)


def emit_layer(graph, layer: MaskedRecurrentLayer, masks: MaskTensors, connect=rewire) -> None:
    """One ONNX node per cell of ``layer``, each reading the steps of the one below, then the Keras
    outputs (of the top cell) and every cell's final states; finally ``connect`` points the
    source's consumers at them (:func:`.rewire.rewire` for a loop)."""
    x_node, states = layer_input(graph, layer, masks), []
    for cell in layer.cells:
        out = _emit_recurrent_node(graph, layer, cell, masks, x_node)
        states.append(keras_states(graph, cell, masks, out.h_last, out.c_last))
        x_node = out.y_node
    connect(graph, layer, keras_outputs(graph, layer, out, masks), states)


def layer_input(g, layer: MaskedRecurrentLayer, masks: MaskTensors) -> str:
    """The layer's input [T, B, I] in the node layout: each row's valid steps first ("any" moves
    them there), reversed within the row's length for a backward layer; only the steps the nodes
    run (:func:`steps_run`)."""
    if masks.reorder is not None:
        x = _gather_steps(g, layer.x, masks.reorder.gather_input, layer.input_size)
    else:
        x = steps_run(g, layer.x, masks)
    if layer.direction == "reverse":
        if masks.segments is not None:  # the segments read the reversed steps from where x comes from
            x = _as_gathered_rows(g, x)
        x = _reverse_valid_steps(g, x, masks)
    return x


def _emit_recurrent_node(g, layer: MaskedRecurrentLayer, cell: RecurrentCell, masks: MaskTensors,
                         x: str) -> NodeOutputs:
    """The forward ONNX LSTM, GRU or RNN node of ``cell`` over ``x``, its input in the node layout."""
    padding_column = cell.carries_cell_state  # saturating: targets.portability_refusal() let it through
    if padding_column:
        x = with_padding_column(g, x, masks.valid_steps, cell.input_size)
    node = cell_node(g, cell, x, masks.lengths, f"{layer.layer}/masked_{cell.kind.lower()}", padding_column,
                     masks.batch)
    # in segments, an LSTM's final cell state past its row's length is held by the padding column
    zero_row = masks.segments is not None and not masks.zeros_past_lengths
    y, c_last = emit_node(g, node, masks.segments, pad_rows=zero_row)
    y_node = y
    h_last_step = last_valid_step(g, y, masks, cell.hidden_size)
    if layer.direction == "reverse":
        y = _reverse_valid_steps(g, y, masks)
    return NodeOutputs(y=y, y_node=y_node, h_last=drop_time_axis(g, h_last_step),
                       h_last_step=h_last_step, c_last=c_last, zero_row=zero_row)


def steps_run(g, x_tm: str, masks: MaskTensors) -> str:
    """A layer's input ``x_tm`` [T, B, I] cut to the steps the nodes run (``masks.longest``; all of them
    without). A Keras Transpose in front is cut before, on the batch-major tensor, and made anew:
    OpenVINO folds the Transpose in front of a recurrent node into it."""
    if not masks.longest:
        return x_tm
    x_bm = batch_major_source(g, x_tm)
    if x_bm:
        return make_op(g, "Transpose", first_steps(g, x_bm, masks.longest, 1), perm=[1, 0, 2])
    return first_steps(g, x_tm, masks.longest, 0)


def all_steps(g, y: str, masks: MaskTensors, zero_row: bool = False) -> str:
    """``y`` [steps run, B, H] with zeros for the steps the nodes did not run, [T, B, H] as the mask (``y``
    itself where they ran every step): what the fix-ups that select by the time-major mask read.
    ``zero_row``: see :func:`_zero_steps_appended`."""
    if not masks.longest:
        return y
    steps = make_op(g, "Gather", make_op(g, "Shape", masks.mask_tm), int64_const(g, "time_axis", [0]))
    missing = make_op(g, "Sub", steps, make_op(g, "Cast", masks.longest, to=TensorProto.INT64))
    return _zero_steps_appended(g, y, missing, zero_row, masks.steps_by_concat)


def _zero_steps_appended(g, y: str, count, zero_row: bool = False, by_concat: bool = False) -> str:
    """``y`` [S, B, H] with ``count`` (an int, or a [1] int64 tensor) steps of zeros after its own (a Pad, or
    where ``by_concat``, a Concat of them: :attr:`..plan.masks.MaskTensors.steps_by_concat`); of a ``y``
    gathered from rows (:func:`..graph.gathered_rows`), ``count`` steps of the last row appended to the
    Gather's index, a zero row: the rows' own where ``zero_row`` (the schedule's, :class:`NodeOutputs`),
    else one appended to them. The fix-ups then still compose their indices with it (one copy either way)."""
    gathered = gathered_rows(g, y)
    if gathered is None and by_concat:
        others = make_op(g, "Slice", make_op(g, "Shape", y), int64_const(g, "one", [1]), int64_const(g, "three", [3]))
        return make_op(g, "Concat", y, filled(g, make_op(g, "Concat", count, others, axis=0), np.float32(0)), axis=0)
    if gathered is None:
        return make_op(g, "Pad", y, _step_pads(g, count, 3))
    rows, index = gathered
    width = g.get_shape(rows)[-1]
    if not zero_row:
        rows = make_op(g, "Concat", rows, const(g, "zero_output", np.zeros((1, width), np.float32)), axis=0)
    return _gather_rows(g, rows, make_op(g, "Pad", index, _step_pads(g, count, 2), int64_scalar(g, -1)), width)


def _step_pads(g, count, rank: int) -> str:
    """A Pad's pads that append ``count`` (an int, or a [1] int64 tensor) entries to axis 0 of a tensor of ``rank``."""
    if isinstance(count, int):
        return int64_const(g, "pads", [0] * rank + [count] + [0] * (rank - 1))
    return make_op(g, "Concat", int64_const(g, "before", [0] * rank), count, int64_const(g, "after", [0] * (rank - 1)),
                   axis=0)


def _as_gathered_rows(g, x_tm: str) -> str:
    """``x_tm`` [T, B, I] as a Gather of rows, where Keras transposes it from a batch-major tensor:
    a reordering of its steps then composes into the Gather (one copy, where the Transpose and the
    reordering were two), and the length-aware schedule's segments read the batch-major rows."""
    x_bm = batch_major_source(g, x_tm)
    if not x_bm:
        return x_tm
    shape = make_op(g, "Shape", x_bm)
    batch, steps = (make_op(g, "Gather", shape, int64_scalar(g, axis), axis=0) for axis in (0, 1))
    step = make_op(g, "Unsqueeze", make_op(g, "Range", int64_scalar(g, 0), steps, int64_scalar(g, 1)),
                   int64_const(g, "axes", [1]))                                               # [T, 1]
    row = make_op(g, "Range", int64_scalar(g, 0), batch, int64_scalar(g, 1))                  # [B]
    index = make_op(g, "Add", make_op(g, "Mul", row, steps), step)                           # [T, B]: b * T + t
    width = (g.get_shape(x_tm) or [-1])[-1]
    return _gather_rows(g, make_op(g, "Flatten", x_bm, axis=2), index, width)


def _gather_rows(g, rows: str, index: str, width: int) -> str:
    """``Gather(rows, index)`` along axis 0: [T, B, width] from rows [N, width] at [T, B] ``index``,
    shaped so that :func:`..graph.gathered_rows` sees it."""
    g.set_shape(rows, [-1, width])
    g.set_shape(index, [-1, -1])
    gathered = make_op(g, "Gather", rows, index, axis=0)
    g.set_shape(gathered, [-1, -1, width])
    return gathered


def _gather_steps(g, tensor: str, flat_index: str, width: int) -> str:
    """``tensor`` [T, B, width] re-ordered: position (t, b) takes row ``flat_index[t, b]`` of it. Where
    ``tensor`` is itself gathered from rows (:func:`..graph.gathered_rows`), the indices are composed: one copy."""
    gathered = gathered_rows(g, tensor)
    if gathered is not None:
        rows, index = gathered
        flat = make_op(g, "Reshape", index, int64_const(g, "flat", [-1]))
        return make_op(g, "Gather", rows, make_op(g, "Gather", flat, flat_index, axis=0), axis=0)
    rows = make_op(g, "Reshape", tensor, int64_const(g, "rows_shape", [-1, width]))
    return make_op(g, "Gather", rows, flat_index, axis=0)


def _reverse_valid_steps(g, tensor: str, masks: MaskTensors) -> str:
    """[T, B, ...] with each row's valid steps (the first ``length``) in reverse order, the rest in place;
    of a tensor gathered from rows (:func:`..graph.gathered_rows`), the same rows at its reversed
    indices."""
    gathered = gathered_rows(g, tensor)
    if gathered is not None:
        rows, index = gathered
        reversed_index = make_op(g, "ReverseSequence", index, masks.lengths_i64, batch_axis=1, time_axis=0)
        return _gather_rows(g, rows, reversed_index, g.get_shape(rows)[-1])
    return make_op(g, "ReverseSequence", tensor, masks.lengths_i64, batch_axis=1, time_axis=0)


def with_padding_column(g, x: str, valid_steps: str, width: int) -> str:
    """[T, B, width + 1]: ``x`` and a column of zeros at valid steps; ``[0, ..., 0, 1]`` at padded ones
    (whatever ``x`` held there: -inf and NaN would not stay out of a carried state otherwise)."""
    padded = make_op(g, "Pad", x, int64_const(g, "pads", [0, 0, 0, 0, 0, 1]))
    marker = np.zeros(width + 1, np.float32)
    marker[-1] = 1
    return make_op(g, "Where", valid_steps, padded, const(g, "padding_marker", marker))


def last_valid_step(g, y: str, masks: MaskTensors, hidden: int) -> str:
    """[1, B, H]: ``y`` [T, B, H] at each row's last valid step, zeros for a row with none (its index,
    -1, reads the last step, which the Where then replaces)."""
    composed = gathered_rows(g, y)
    if composed is not None:
        rows, index = composed
        at_last = make_op(g, "Reshape", masks.last_step, int64_const(g, "one_row", [1, -1]))   # [1, B]
        gathered = make_op(g, "Gather", rows, make_op(g, "GatherElements", index, at_last, axis=0), axis=0)
    else:
        index = make_op(g, "Expand", masks.last_step, int64_const(g, "hidden_shape", [1, 1, hidden]))
        gathered = make_op(g, "GatherElements", y, index, axis=0)
    return make_op(g, "Where", masks.has_steps, gathered, zero(g))


def keras_outputs(g, layer: MaskedRecurrentLayer, out: NodeOutputs, masks: MaskTensors) -> KerasOutputs:
    """The layer's outputs as Keras has them, from the top cell's node."""
    last_output = out.h_last  # the carried output: zeros for a row with no valid step
    in_time_order = batch_major = None
    y_all = all_steps(g, out.y, masks, out.zero_row)
    if masks.reorder is not None:
        # mask_mode="any": the node ran over the valid steps moved to the front; map back
        where = masks.reorder.output_map(layer.direction, layer.output_carried)
        mapped = _gather_steps(g, y_all, where.index, layer.top.hidden_size)
        in_time_order = make_op(g, "Where", where.keep, mapped, zero(g))
        batch_major = _batch_major(g, out, masks, _compacted_rows(layer, masks.batch_major), layer.top.hidden_size)
        if layer.direction == "reverse":
            sequence = reverse_time(g, in_time_order)
            last_output = last_output if layer.output_carried else time_step(g, in_time_order, 0)
        else:
            sequence, in_time_order = in_time_order, None
            last_output = last_output if layer.output_carried else time_step(g, sequence, -1)
    elif layer.direction == "reverse":
        # Keras ran forward over the reversed rows, whose padding comes first: those steps output
        # zeros (the carried output starts at zeros); its last step saw the row's first step.
        in_time_order = make_op(g, "Where", masks.mask_tm, y_all, zero(g))
        sequence = reverse_time(g, in_time_order)
        batch_major = _batch_major(g, out, masks, masks.batch_major.kept,
                                   layer.top.hidden_size)  # of in_time_order
    elif layer.output_carried:
        # padded steps repeat the last output: the output at the last valid step, zeros if none
        sequence = make_op(g, "Where", masks.mask_tm, y_all, out.h_last_step)
        batch_major = _batch_major(g, out, masks, masks.batch_major.carried, layer.top.hidden_size)
    else:
        # masked steps output zeros (zero_output_for_mask)
        sequence = make_op(g, "Where", masks.mask_tm, y_all, zero(g))
        # the last step's output: a row valid there ran every step, so it is the node's last
        last_output = make_op(g, "Where", time_step(g, masks.mask_tm, -1), time_step(g, out.y, -1), zero(g))
        batch_major = _batch_major(g, out, masks, masks.batch_major.kept, layer.top.hidden_size)
    if layer.output_starts_from_state and not layer.top.zero_initial_state:
        sequence, last_output = _from_initial_state(g, layer.top, masks, sequence, last_output)
        batch_major = None
    if not layer.writes_sequence:
        sequence = in_time_order = add_time_axis(g, last_output)
        batch_major = None
    return KerasOutputs(sequence, in_time_order, last_output, batch_major)


def _compacted_rows(layer: MaskedRecurrentLayer, rows: BatchMajorRows) -> Optional[str]:
    """The rows of the compacted outputs ("any") that show the sequence in time order, batch-major:
    a valid step t shows compacted step ``upto - 1`` in every direction, and a masked one the step
    before it (a forward layer carrying its output) or zeros. A reversed layer carrying its output
    shows the step after it there: None (the time-major map stays)."""
    if layer.direction == "forward" and layer.output_carried:
        return rows.carried
    return None if layer.output_carried else rows.kept


def _batch_major(g, out: NodeOutputs, masks: MaskTensors, rows: Optional[str], hidden: int) -> Optional[str]:
    """[B, T, H]: a sequence in Keras's batch-major layout, by one Gather of ``out.y`` [T, B, H] with a
    zero step appended (``y`` itself where it is zeros past each row's length), at ``rows`` (from
    :class:`..plan.masks.BatchMajorRows`; None: no rows show it, then None). The time-major form
    stays for other readers (the one nothing reads is removed)."""
    if rows is None:
        return None
    y = out.y if masks.zeros_past_lengths else _zero_steps_appended(g, out.y, 1, out.zero_row)
    sequence = _gather_steps(g, y, rows, hidden)
    if g.get_shape(rows):
        g.set_shape(sequence, g.get_shape(rows) + [hidden])
    return sequence


def _from_initial_state(g, top: RecurrentCell, masks: MaskTensors, sequence: str, last_output: str) -> tuple:
    """(sequence, last output) of a forward layer whose output starts from the top cell's initial h:
    that h at each step before a row's first valid step (every step of an empty row), where the
    carried output starts from zeros. A step is before the first valid one while the running count
    of valid steps is 0."""
    counted = make_op(g, "Cast", masks.mask_tm, to=TensorProto.INT32)
    running = make_op(g, "CumSum", counted, const(g, "time_axis", np.array(0, np.int32)))
    before_first = make_op(g, "Equal", running, const(g, "no_step", np.array(0, np.int32)))
    sequence = make_op(g, "Where", before_first, top.initial_h, sequence)
    last_output = make_op(g, "Where", masks.has_steps, last_output, top.initial_h)
    return sequence, last_output


def time_step(g, sequence: str, index: int) -> str:
    """Time step ``index`` of a [T, B, H] sequence, as [B, H]."""
    end = np.iinfo(np.int64).max if index == -1 else index + 1
    step = make_op(g, "Slice", sequence, int64_const(g, "starts", [index]), int64_const(g, "ends", [end]),
                   int64_const(g, "axes", [0]))
    return drop_time_axis(g, step)


def drop_time_axis(g, tensor: str) -> str:
    """``tensor`` [1, ...] without its time axis."""
    return make_op(g, "Squeeze", tensor, int64_const(g, "axes", [0]))


def add_time_axis(g, tensor: str) -> str:
    """[1, ...]: ``tensor`` as a sequence of one step."""
    return make_op(g, "Unsqueeze", tensor, int64_const(g, "axes", [0]))


def zero(g) -> str:
    """A float scalar 0, what masked positions of a sequence hold."""
    return const(g, "zero_f32", np.array(0, np.float32))


def reverse_time(g, tensor: str) -> str:
    """[T, ...] ``tensor`` with its time axis (0) in reverse order: where T is static, a Gather at the
    steps' numbers backwards, which tf2onnx's transpose optimizer leaves where it is (it moves a Slice
    past the transposes around it, and OpenVINO 2026.4 computes a recurrent node wrongly over a static
    Transpose -> reversing Slice -> Transpose of a transposed tensor); else a Slice."""
    steps = static_dim(g, tensor, 0)
    if steps is not None:
        return make_op(g, "Gather", tensor, int64_const(g, "backwards", list(range(steps - 1, -1, -1))), axis=0)
    return make_op(g, "Slice", tensor, int64_const(g, "starts", [-1]), int64_const(g, "ends", [np.iinfo(np.int64).min]),
                   int64_const(g, "axes", [0]), int64_const(g, "steps", [-1]))


def keras_states(g, cell: RecurrentCell, masks: MaskTensors, h_last, c_last):
    """(final h, final c) of ``cell`` as Keras has them: a row with no valid step keeps the initial state.

    With a zero initial state that is zeros, which ``h_last`` already is there (and ``c_last``:
    the padding column holds it, and runtimes that skip such a row return zeros)."""
    if cell.zero_initial_state:
        return h_last, c_last
    final_h = make_op(g, "Where", masks.has_steps, h_last, cell.initial_h)
    final_c = None if c_last is None else make_op(g, "Where", masks.has_steps, c_last, cell.initial_c)
    return final_h, final_c
