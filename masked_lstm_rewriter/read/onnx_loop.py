# SPDX-License-Identifier: Apache-2.0
"""Read a recurrent layer off an ONNX ``Loop``: a file written by tf2onnx (from Keras, a SavedModel or a
LiteRT flatbuffer) or by Keras's JAX export.

The loop's body is one step of the layer:

* it reads step t of a time-major sequence held outside the loop, ``Gather(x, t)``, t the
  iteration number or a counter that starts at 0 and advances by one; a masked layer reads its
  ``[T, B, 1]`` boolean mask the same way;
* the sequence may be the input already projected, ``x @ W + b`` computed before the loop (Keras's
  JAX GRU without a mask): the step's item then reads as that form, and the layer's input is x;
  weights the loop is fed may be computed from constants before it (slices of a bias);
* it computes each cell's new states with the algebra the cell kinds read (:mod:`..cells`);
* a masked layer keeps each state where the mask is off: ``Where(m, new, old)``, or tf2onnx's
  spelling of TensorFlow's select, ``Cast(m) * new + Cast(Not(m)) * old``;
* it returns the step's output as a scan output (through reshapes that give it its own shape back),
  and may carry it as a loop variable too, or a copy of that variable reshaped (:class:`Mirror`:
  how tf2onnx's files made from LiteRT keep a last output);
* it runs exactly T steps (:func:`.onnx_trip.check_loop_trip_count`).

That is read into the same :class:`~..layer.MaskedRecurrentLayer` a While loop gives, or the
:class:`~..failure.Refusal` saying what was not understood and where. A loop whose body reads no
sequence step by step is none of the rewriter's business (None).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np
from onnx import TensorProto

from ..failure import Refusal
from ..graph import (is_increment, is_zero_scalar, is_zeros, next_value, passes_through, producer, rank_of,
                     skip_casts, skip_identity, transpose_perm)
from ..layer import MaskedRecurrentLayer
from .body import CONVOLUTION_REASON, CONVOLUTIONS, multiplies_a_state, read_cells, state_stack
from .linear import LinearForm, LinearReader, Product, declare_known
from .loop import resolve_cells
from .onnx_layout import batch_major_mask, batch_major_source, unreversed
from .onnx_trip import check_loop_trip_count
from .select import read_select
from .time_axis import time_axis_of

STEPS_INPUT_ATTR = "_masked_lstm_rewriter_steps_input"  # on a Loop node: what steps_input read


@dataclasses.dataclass
class LoopLayer(MaskedRecurrentLayer):
    """A layer read from an ONNX Loop: besides the common description, where its input is found."""

    x_batch_major: Optional[str] = None  # the input, batch-major, where the loop reads it projected and
                                         # transposed: the source makes it time-major before emission
    mirrors: tuple = ()                  # (Mirror, ...): Loop outputs that hold another's final value reshaped


@dataclasses.dataclass(frozen=True)
class Mirror:
    """A loop variable the step sets to another's new value reshaped, and reads nowhere: tf2onnx's files
    made from LiteRT keep a layer's last output so, as a one-step list ([1, B, H])."""

    output: str          # the Loop output holding it
    source: str          # the Loop output it is a reshape of
    shape: tuple         # its static shape


@dataclasses.dataclass(frozen=True)
class _Projection:
    """The layer's input ``x`` and its projection ``x @ W + b`` (``form``), which the loop reads instead."""

    x: str
    form: LinearForm
    batch_major: bool        # x is [B, T, F] and the projection is transposed to time-major after it


@dataclasses.dataclass(frozen=True)
class _StepReads:
    """What one step reads of the sequences outside the loop."""

    x: object                # the Gather node reading the step's input
    mask: Optional[object]   # the Gather node reading the step's mask, or None


def loop_layer_name(loop) -> str:
    """The Keras layer path in the Loop's name ("functional_1/lstm_1/while_loop" -> "lstm_1")."""
    parts = [p for p in loop.name.split("/") if p not in ("while", "while_loop", "PartitionedCall",
                                                          "StatefulPartitionedCall")]
    return "/".join(parts[1:]) if len(parts) > 1 else (parts[0] if parts else loop.name)


def read_onnx_loop(graph, loop) -> Optional[Union[LoopLayer, Refusal]]:
    """The layer ``loop`` computes, the reason it cannot be rewritten, or None when it reads no
    sequence step by step (not a recurrent layer)."""
    body = loop.get_body_graphs().get("body")
    if body is None:
        return None
    try:
        reads = _step_reads(graph, loop, body)
        if reads is None:
            return None
        return _read_layer(graph, loop, body, reads)
    except Refusal as refusal:
        refusal.node = refusal.node or loop  # where it was met, else the Loop itself
        return refusal
    except Exception as error:  # pylint: disable=broad-except  (a graph shape not foreseen)
        return Refusal(f"unexpected loop ({type(error).__name__}: {error})", loop)


def _step_reads(graph, loop, body) -> Optional[_StepReads]:
    """The step's reads of outside sequences, or None when the body is no recurrent step."""
    reads = [n for n in body.get_nodes() if n.type == "Gather" and n.get_attr_value("axis", 0) == 0
             and _is_step_index(graph, loop, body, n.input[1]) and _is_outside(body, n.input[0])]
    floats = [n for n in reads if _dtype(graph, body, n.input[0]) != TensorProto.BOOL]
    masks = [n for n in reads if _dtype(graph, body, n.input[0]) == TensorProto.BOOL]
    convolution = next((n for n in body.get_nodes() if n.type in CONVOLUTIONS), None)
    if floats and masks and convolution is not None:  # a masked ConvLSTM, as in a conversion
        raise Refusal(CONVOLUTION_REASON, convolution)
    if not floats or not multiplies_a_state(body):
        return None
    if len(floats) > 1 or len(masks) > 1:
        raise Refusal(f"the step reads {len(floats)} sequences and {len(masks)} masks (a recurrent layer reads "
                      "one of each at most)", floats[-1])
    return _StepReads(floats[0], masks[0] if masks else None)


def steps_input(graph, loop) -> Optional[str]:
    """The time-major sequence ``loop`` reads step by step, where it provably runs exactly one step per
    element of it (its scan outputs are then as long: a layer stacked on it reads its number of steps
    there), else None. Kept on the node: each layer of a stack asks it of every layer below."""
    if not hasattr(loop, STEPS_INPUT_ATTR):
        setattr(loop, STEPS_INPUT_ATTR, _steps_input(graph, loop))
    return getattr(loop, STEPS_INPUT_ATTR)


def _steps_input(graph, loop) -> Optional[str]:
    body = loop.get_body_graphs().get("body")
    try:
        reads = None if body is None else _step_reads(graph, loop, body)
        if reads is None:
            return None
        x = _outside_name(loop, body, reads.x.input[0])
        variables = range(2, len(body.input_names))
        counters = {i for i in variables if _is_counter(graph, loop, body, i)}
        check_loop_trip_count(graph, loop, body, counters, {i for i in variables if passes_through(body, i)},
                              time_axis_of(graph, [x]))
        return x
    except Refusal:
        return None


def _dtype(graph, body, tensor: str):
    return body.get_dtype(tensor) or graph.get_dtype(tensor)


def _outside_name(loop, body, tensor: str) -> str:
    """The name in the graph around the loop of a tensor the step reads from outside: a loop-invariant
    variable is the Loop's input."""
    return loop.input[body.input_names.index(tensor)] if tensor in body.input_names else tensor


def _is_outside(body, tensor: str) -> bool:
    """Is ``tensor`` the same at every step: from the graph around the loop, or a loop-invariant variable?"""
    if tensor in body.input_names:
        return passes_through(body, body.input_names.index(tensor))
    return producer(body, tensor) is None


def _is_step_index(graph, loop, body, tensor: str) -> bool:
    """Is ``tensor`` the step's number t: the iteration number, or a counter that starts at 0 and
    advances by one (through casts)?"""
    tensor = skip_casts(body, tensor)
    if tensor == body.input_names[0]:
        return True
    return tensor in body.input_names and _is_counter(graph, loop, body, body.input_names.index(tensor))


def _is_counter(graph, loop, body, index: int) -> bool:
    """Does loop variable ``index`` start at 0 and advance by one each step?"""
    new = next_value(body, index)
    return new is not None and index >= 2 and is_increment(producer(body, skip_identity(body, new)),
                                                          body.input_names[index]) \
        and is_zero_scalar(graph, loop.input[index])


def _same_value(graph, tensor: str) -> str:
    """``tensor`` through Identity, casts to float32 of what is float32 already (jax2onnx writes one
    after each state's select) and reshapes that give it back its own shape (tf2onnx's files made from
    LiteRT write each step as ``Squeeze(Reshape(h, [1, B, H]))``)."""
    node = producer(graph, tensor)
    while node is not None:
        if node.type == "Identity" or (node.type == "Cast" and node.get_attr_value("to") == TensorProto.FLOAT
                                       and graph.get_dtype(node.input[0]) == TensorProto.FLOAT):
            tensor = node.input[0]
        else:
            source = _reshaped_from(graph, tensor)
            if source is None:
                return tensor
            tensor = source
        node = producer(graph, tensor)
    return tensor


RESHAPES = ("Reshape", "Squeeze", "Unsqueeze")


def _reshaped_from(graph, tensor: str) -> Optional[str]:
    """The tensor that a chain of reshapes ends in ``tensor`` from, where both shapes are known, static
    and equal (a reshape keeps the elements' order: the same value), else None."""
    start = _unreshaped(graph, tensor)
    shape = graph.get_shape(tensor)
    if start == tensor or shape is None or any(d is None or d < 0 for d in shape):
        return None
    return start if graph.get_shape(start) == shape else None


def _read_layer(graph, loop, body, reads: _StepReads) -> LoopLayer:
    """:func:`read_onnx_loop` for a loop that reads a sequence step by step; raises a Refusal."""
    x_tm, x_reversed = unreversed(graph, _outside_name(loop, body, reads.x.input[0]))
    if _dtype(graph, body, x_tm) != TensorProto.FLOAT:
        raise Refusal("the input is not float32", reads.x)
    x_item = reads.x.output[0]
    mask_item = None if reads.mask is None else reads.mask.output[0]
    variables = range(2, len(body.input_names))
    counters = {i for i in variables if _is_counter(graph, loop, body, i)}
    invariants = {i for i in variables if passes_through(body, i)}
    projection = _declare_outer_values(graph, loop, body, invariants, x_tm, x_item)
    mirrors = _mirrors(graph, loop, body, [i for i in variables if i not in counters | invariants])
    carried, zero_output = _carried(graph, loop, body,
                                    [i for i in variables if i not in counters | invariants | set(mirrors)], mask_item)
    sequence, out_select, h_top = _read_output(graph, loop, body, carried, mask_item)
    output_index = zero_output if zero_output is not None else \
        _output_variable(graph, loop, body, carried, h_top, out_select)
    states = {i: new for i, new in carried.items() if i != output_index or _is_state(carried, i)}
    stack = state_stack(body, states, h_top, x_item)
    cells = resolve_cells(graph, loop, read_cells(body, x_item, stack, states), lambda i: loop.output[i - 2])
    output_carried, starts_from_state = _output_carried(graph, loop, body, carried, out_select, h_top, cells[-1],
                                                        sequence, zero_output is not None)
    roles = set(states) | {output_index} - {None}
    if any(mirror.source not in {loop.output[i - 2] for i in roles} for mirror in mirrors.values()):
        raise Refusal("a loop output mirrors a loop variable that is neither a state nor the output", loop)
    sequence_output = _check_outputs_used(graph, loop, body, roles | set(mirrors), sequence)
    time_axis = time_axis_of(graph, [x_tm, _outside_name(loop, body, reads.x.input[0])])
    check_loop_trip_count(graph, loop, body, counters, invariants, time_axis)
    mask, mask_layout = None, "batch"
    if reads.mask is not None:
        mask_tm, mask_reversed = unreversed(graph, _outside_name(loop, body, reads.mask.input[0]))
        if mask_reversed != x_reversed and time_axis.steps != 1:  # one step: a reversal changes nothing
            raise Refusal("only one of the input and the mask is reversed in time", reads.mask)
        mask, mask_layout = batch_major_mask(graph, mask_tm, time_axis)
    if starts_from_state and x_reversed:
        raise Refusal("a backward layer's output at masked steps repeats a state that starts from a given "
                      "initial state", loop)
    return LoopLayer(
        layer=loop_layer_name(loop), while_node=loop, cells=cells, direction="reverse" if x_reversed else "forward",
        x_reader=reads.x, mask=mask, mask_post_padded=False, output_carried=output_carried,
        output_starts_from_state=starts_from_state,
        sequence_outputs=[] if sequence_output is None else [sequence_output], writes_sequence=sequence is not None,
        last_output=None if output_index is None else loop.output[output_index - 2], mask_layout=mask_layout,
        mirrors=tuple(mirrors.values()),
        **_layer_input(graph, x_tm, x_tm if x_reversed or x_tm != reads.x.input[0] else None, projection))


def _layer_input(graph, x_tm: str, read_time_major: Optional[str], projection: Optional[_Projection]) -> dict:
    """The layer's input fields: ``x_time_major`` (``read_time_major``: where the loop reads other than
    the time-major input itself, else None), ``x_source``, and ``x_batch_major`` where the input the
    loop reads projected is batch-major (:class:`LoopLayer`)."""
    if projection is None:
        return {"x_time_major": read_time_major, "x_source": batch_major_source(graph, x_tm)}
    if projection.batch_major:
        return {"x_time_major": None, "x_source": projection.x, "x_batch_major": projection.x}
    return {"x_time_major": projection.x, "x_source": batch_major_source(graph, projection.x)}


def _declare_outer_values(graph, loop, body, invariants: set, x_tm: str, x_item: str) -> Optional[_Projection]:
    """Tell the body's readers what the graph around the loop computes from constants before it
    (:func:`~.linear.declare_known`): each loop-invariant input that is no constant itself, and the
    step input where the loop reads the layer's input projected (then returned, else None)."""
    outside = LinearReader(graph, None, None)
    for index in invariants:
        ref = None if graph.is_const(loop.input[index]) else outside.const_ref(loop.input[index])
        if ref is not None and ref.resolve(lambda _: None) is not None:
            declare_known(body, body.input_names[index], ref)
    projection = _projected_input(graph, body, x_tm, x_item)
    if projection is not None:
        declare_known(body, x_item, projection.form)
    return projection


def _projected_input(graph, body, sequence: str, x_item: str) -> Optional[_Projection]:
    """The layer's input, where the loop reads its projection instead (Keras's JAX GRU without a mask
    computes ``x @ W + b`` before its loop, and its step only slices the item it reads):
    ``sequence`` is ``Transpose(x @ W + b, [1, 0, 2])`` or ``x_tm @ W + b``, W and b constants of
    the main graph, x of rank 3, and no product of the step reads the item (one that does reads
    the layer's input itself, whatever computed it: a Dense layer before an LSTM). Else None."""
    transpose = producer(graph, sequence)
    batch_major = transpose is not None and transpose.type == "Transpose" and \
        transpose_perm(graph, transpose) == [1, 0, 2]
    projected = transpose.input[0] if batch_major else sequence
    products = [item for _, item in LinearReader(graph, None, None).sum_terms(projected) if isinstance(item, Product)]
    if len(products) != 1 or _multiplies(body, x_item) or (not batch_major and rank_of(graph, products[0].a) != 3):
        return None
    form = LinearReader(graph, products[0].a, None).try_read(projected)
    if form is None or form.kernel is None or form.recurrent is not None or \
            any(ref is not None and ref.resolve(lambda _: None) is None for ref in (form.kernel, form.bias)):
        return None  # not x @ W + b, or W or b not values of the main graph
    return _Projection(products[0].a, form, batch_major)


def _multiplies(body, x_item: str) -> bool:
    """Does a product of the step (``MatMul``, ``Gemm``) read ``x_item``?"""
    reader = LinearReader(body, x_item, None)
    return any(isinstance(item, Product) and reader.step_source(item.a) == "x"
               for node in body.get_nodes() for _, item in reader.addends(node) or ())


def _mirrors(graph, loop, body, variables: list) -> dict:
    """{loop variable: Mirror} of the ``variables`` that mirror another (:class:`Mirror`): the step reads
    it nowhere and sets it to another variable's new value reshaped to another static shape (a variable
    that takes that value itself is the layer's, :func:`_output_variable`); and both start as zeros,
    so that it is that reshape after any number of steps, none included."""
    mirrors = {}
    for i in variables:
        new = next_value(body, i)
        source = _same_value(body, _unreshaped(body, new))
        if body.find_output_consumers(body.input_names[i]) or not is_zeros(graph, loop.input[i]) or \
                not _same_size(body, new, source) or body.get_shape(new) == body.get_shape(source):
            continue
        j = next((j for j in variables if j != i and _same_value(body, next_value(body, j)) == source
                  and is_zeros(graph, loop.input[j])), None)
        if j is not None:
            mirrors[i] = Mirror(loop.output[i - 2], loop.output[j - 2], tuple(body.get_shape(new)))
    return mirrors


def _same_size(graph, tensor: str, other: str) -> bool:
    """Have both tensors static shapes with as many elements?"""
    shapes = [graph.get_shape(t) for t in (tensor, other)]
    if any(not shape or any(d is None or d <= 0 for d in shape) for shape in shapes):
        return False
    return int(np.prod(shapes[0])) == int(np.prod(shapes[1]))


def _unreshaped(graph, tensor: str) -> str:
    """``tensor`` back through Reshape, Squeeze, Unsqueeze and Identity (the same elements in the same order)."""
    node = producer(graph, tensor)
    while node is not None and node.type in RESHAPES + ("Identity",):
        tensor = node.input[0]
        node = producer(graph, tensor)
    return tensor


def _carried(graph, loop, body, variables: list, mask_item) -> tuple:
    """(loop variable -> its new value at a valid step, for the variables the step computes; the
    variable carrying an output that is zeros at masked steps, or None). A masked layer must keep
    each state at masked steps (``Where(mask, new, old)``)."""
    carried, zero_output = {}, None
    for i in variables:
        new = _same_value(body, next_value(body, i))
        if mask_item is None:
            carried[i] = new
            continue
        select = read_select(body, new, mask_item)
        kept = select is not None and skip_identity(body, select.old) == body.input_names[i]
        if not kept and select is not None and zero_output is None and \
                _is_zeros_in_body(graph, loop, body, skip_identity(body, select.old)):
            zero_output = i  # Keras's zero_output_for_mask (a Bidirectional's halves)
            continue
        if not kept:
            raise Refusal(f"loop variable {body.input_names[i]} is not kept at masked steps (Where(mask, new, old))",
                          producer(body, new))
        carried[i] = select.new
    return carried, zero_output


def _output_carried(graph, loop, body, carried: dict, out_select, h_top: str, top, sequence,
                    zero_output: bool) -> tuple:
    """(does a masked step output the last output, else zeros (Keras's ``zero_output_for_mask``, which
    a loop variable the step sets to zeros at masked steps says where the loop returns no sequence:
    ``zero_output``); does that output start from the top cell's initial h, which the loop carries as
    the output (Keras on JAX), rather than from zeros). An output carried apart from the states must
    start as zeros."""
    if out_select is None:
        return not zero_output, False
    names, old = body.input_names, skip_identity(body, out_select.old)
    if old in names and names.index(old) in carried:
        index = names.index(old)
        if _same_value(body, carried[index]) != _same_value(body, h_top):
            raise Refusal("the output at masked steps repeats another value than the layer's output "
                          f"({old}: the state of a lower cell?)", loop)
        if not _is_state(carried, index) and not is_zeros(graph, loop.input[index]):
            raise Refusal("the output at masked steps does not start as zeros", loop)
        return True, _is_state(carried, index) and not top.zero_initial_state
    if _is_zeros_in_body(graph, loop, body, old):
        return False, False
    raise Refusal("the output at masked steps is computed in an unrecognised way", producer(body, sequence))


def _check_outputs_used(graph, loop, body, variables: set, sequence) -> Optional[str]:
    """The Loop output holding the layer's sequence (None without one), after checking that no other
    output than it and the final values of ``variables`` is used outside the loop."""
    scans = len(body.input_names) - 2
    roles = {i - 2 for i in variables}
    position = None if sequence is None else scans + list(body.outputs[scans + 1:]).index(sequence)
    used = {i for i, out in enumerate(loop.output) if _is_used(graph, out)}
    unexpected = sorted(used - roles - {position})
    if unexpected:
        raise Refusal(f"loop outputs {unexpected} are used outside the layer", loop)
    return None if position is None else loop.output[position]


def _is_used(graph, tensor: str) -> bool:
    """Does a node read ``tensor``, or is it a graph output?"""
    return bool(graph.find_output_consumers(tensor)) or tensor in graph.outputs


def _read_output(graph, loop, body, carried: dict, mask_item) -> tuple:
    """(the scan output holding the step's output, or None; its select, or None; the top cell's new h)."""
    scans = len(body.input_names) - 2
    used = [tensor for k, tensor in enumerate(body.outputs[scans + 1:])
            if _is_used(graph, loop.output[scans + k])]
    if len(used) > 1:
        raise Refusal(f"the loop returns {len(used)} sequences (a recurrent layer returns one)", loop)
    if used:
        sequence = used[0]
        if mask_item is None:
            return sequence, None, _same_value(body, sequence)
        select = read_select(body, _same_value(body, sequence), mask_item)
        if select is None:
            raise Refusal("the step's output is not selected by the mask", producer(body, sequence))
        return sequence, select, select.new
    last = [new for new in set(carried.values())
            if not any(new in _computed_from(body, other) for other in set(carried.values()) - {new})]
    if len(last) != 1:
        raise Refusal("could not tell the layer's output among the loop variables", loop)
    return None, None, last[0]


def _computed_from(body, tensor: str) -> set:
    """The tensors of the step ``tensor`` is computed from."""
    seen, pending = set(), [tensor]
    while pending:
        node = producer(body, pending.pop())
        for name in () if node is None else node.input:
            if name not in seen:
                seen.add(name)
                pending.append(name)
    return seen


def _output_variable(graph, loop, body, carried: dict, h_top: str, out_select) -> Optional[int]:
    """The loop variable carrying the step's output (its final value is the layer's last output):
    the one the output's select keeps at masked steps, else one that takes the top cell's new h.
    Where the cell's own h variable takes it too, the output is the one the new h is not computed
    from (both may start at zeros: an encoder whose only outputs are its final states), and it
    must start at zeros, as the emitted last output of a row without a valid step does."""
    names = body.input_names
    if out_select is not None:
        old = skip_identity(body, out_select.old)
        if old in names and names.index(old) in carried:
            return names.index(old)
    taking = [i for i, new in carried.items() if new == h_top]
    if len(taking) < 2:
        return taking[0] if taking else None
    read_by_step = _computed_from(body, h_top)
    unread = [i for i in taking if names[i] not in read_by_step]
    if len(unread) != 1:
        raise Refusal("could not tell the layer's output among the loop variables", loop)
    if not is_zeros(graph, loop.input[unread[0]]):
        raise Refusal("the output at masked steps does not start as zeros", loop)
    return unread[0]


def _is_state(carried: dict, index: int) -> bool:
    """Is the output variable ``index`` also the top cell's h (no other variable takes its new value)?"""
    return sum(new == carried[index] for new in carried.values()) == 1


def _is_zeros_in_body(graph, loop, body, tensor: str) -> bool:
    """Zeros at every step: a zero constant of the body or around it, or a loop-invariant variable
    that starts at zeros."""
    if tensor in body.input_names:
        index = body.input_names.index(tensor)
        return passes_through(body, index) and is_zeros(graph, loop.input[index])
    node = producer(body, tensor)
    if node is None:
        return is_zeros(graph, tensor)
    return is_zeros(body, tensor)


def reads_a_mask(graph, loop) -> bool:
    """Does the loop's body read a boolean sequence step by step (for the report, of a loop not read)?"""
    body = loop.get_body_graphs().get("body")
    return body is not None and any(
        n.type == "Gather" and _dtype(graph, body, n.input[0]) == TensorProto.BOOL for n in body.get_nodes())
