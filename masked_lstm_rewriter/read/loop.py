# SPDX-License-Identifier: Apache-2.0
"""Read a masked recurrent layer off a While op of the main graph whose body was read.

:func:`read_loop` checks how the loop is fed and consumed (its input and mask lists, the time
axis and the trip count, its output list, the outputs used outside it), resolves the weights,
and returns one :class:`~..layer.MaskedRecurrentLayer`, or the :class:`~..failure.Refusal` that
says why not. A loop whose input and mask lists are reversed in time (``go_backwards``, the
backward half of a ``Bidirectional``) is read as ``direction="reverse"`` over the unreversed ones.
A tf_keras layer with ``time_major=True`` unstacks its [T, B, F] input and its [T, B] mask as they
are, without Keras's transposes: the same loop, read with its mask in the "time" layout.
"""

from __future__ import annotations

from typing import Union

from onnx import TensorProto

from ..cells import kind_of
from ..failure import Refusal
from ..graph import const_value, is_zero_scalar, is_zeros, producer, skip_identity, transpose_perm
from ..layer import MaskedRecurrentLayer, RecurrentCell
from .body import BodyMatch
from .time_axis import TimeAxis, time_axis_of
from .trip import check_trip_count, is_step_count
from .weights import resolve_constants, resolve_weights


def layer_name(while_node) -> str:
    """Keras layer path from the While op's name ("model/lstm/PartitionedCall/while" -> "lstm")."""
    parts = [p for p in while_node.name.split("/")
             if p not in ("while", "PartitionedCall", "StatefulPartitionedCall")]
    return "/".join(parts[1:]) if len(parts) > 1 else (parts[0] if parts else while_node.name)


def read_loop(graph, while_node, body: BodyMatch, condition=None) -> Union[MaskedRecurrentLayer, Refusal]:
    """Check how the While op is fed and consumed, resolve weights, describe the layer; or say why
    not (a graph shape not foreseen included).

    ``condition``: what :func:`.trip.read_condition` read off the loop's condition graph."""
    try:
        return _read_layer(graph, while_node, body, condition)
    except Refusal as refusal:
        return refusal
    except Exception as error:  # pylint: disable=broad-except
        return Refusal(f"unexpected loop wiring ({type(error).__name__}: {error})", while_node)


def _read_layer(graph, while_node, body: BodyMatch, condition) -> MaskedRecurrentLayer:
    """:func:`read_loop`; raises a Refusal."""
    refused = body.refused  # an activation the native ops compute wrongly (one of REFUSED_ACTIVATION_REASONS)
    if refused:
        raise Refusal(refused, while_node)
    x_list = while_node.input[body.x_list_index]
    x, x_reversed = _list_source(graph, x_list)
    if x is None:
        raise Refusal("the input list is not built from a tensor")
    if graph.get_dtype(x) != TensorProto.FLOAT:
        raise Refusal("the input is not float32")
    mask, mask_layout, mask_reversed = _read_mask(graph, while_node, body, x, x_reversed)
    if not is_zero_scalar(graph, while_node.input[body.time_index]):
        raise Refusal("the loop does not start at step 0")
    list_tensor = producer(graph, while_node.input[body.x_list_index]).input[0]  # x, or x reversed in time
    time_axis = time_axis_of(graph, [x, list_tensor])
    check_trip_count(graph, while_node, condition, body.counters, body.invariants, time_axis)
    if not _reserves_one_element_per_output(graph, while_node.input[body.output_list_index], body, time_axis):
        raise Refusal(OUTPUT_LIST_REASON)
    if body.masked and not is_zeros(graph, while_node.input[body.masked_output_index]):
        raise Refusal("the output at masked steps does not start as zeros")

    cells = resolve_cells(graph, while_node, body.cells, lambda index: while_node.output[index])

    used = _consumed_outputs(graph, while_node)
    roles = {body.output_list_index, body.output_index, *body.state_indices}
    unexpected = sorted(set(used) - roles)
    if unexpected:
        raise Refusal(f"loop outputs {unexpected} are consumed outside the layer")
    list_out = while_node.output[body.output_list_index]
    stacks = graph.find_output_consumers(list_out)
    if any(n.type != "TensorListStack" for n in stacks):
        raise Refusal("the output list is read other than by TensorListStack")

    return MaskedRecurrentLayer(
        layer=layer_name(while_node), while_node=while_node, cells=cells,
        direction="reverse" if x_reversed or mask_reversed else "forward",
        x_reader=_list_reader(graph, x_list, x_reversed),
        x_source=_batch_major_source(graph, x), mask=mask, mask_layout=mask_layout,
        mask_post_padded=mask_layout == "batch" and _is_sequence_mask_over_time(graph, mask, time_axis),
        output_carried=body.output_carried,
        sequence_outputs=[n.output[0] for n in stacks], writes_sequence=body.writes_sequence,
        last_output=while_node.output[body.output_index])


def _read_mask(graph, while_node, body: BodyMatch, x: str, x_reversed: bool) -> tuple:
    """(the bool mask in the model's time order, its layout (see :func:`_mask_of_list`), whether its
    list is reversed in time), or (None, "batch", ``x_reversed``) for an unmasked loop."""
    if not body.masked:
        return None, "batch", x_reversed
    mask_list_source, mask_reversed = _list_source(graph, while_node.input[body.mask_list_index])
    mask, layout = _mask_of_list(graph, mask_list_source)
    if x_reversed != mask_reversed and (graph.get_shape(x) or [-1])[0] != 1:
        raise Refusal("only one of the input and the mask is reversed in time")
    # over one step (static), reversing is the identity, and TensorFlow drops one ReverseV2 or both
    return mask, layout, mask_reversed


MASK_LIST_REASON = ("the mask list is built neither from a [B, T] mask made time-major nor from a time-major "
                    "[T, B] mask (time_major=True) as Keras builds them")


def _mask_of_list(graph, mask_list_source) -> tuple:
    """(the rank-2 bool mask behind the [T, B, 1] tensor a mask list is made of, its layout).

    A batch-major layer unstacks ``transpose(expand_dims(mask, -1), [1, 0, 2])`` of its [B, T] mask:
    "batch". A time-major one (tf_keras, ``time_major=True``) unstacks ``expand_dims(mask, -1)`` of
    the [T, B] mask Keras hands it (a ``Masking`` or an ``Embedding`` over the [T, B, ...] input
    computes it that way round): "time", unless that mask is itself a transposed [B, T] one, which
    is then read instead ("batch")."""
    node = producer(graph, mask_list_source) if mask_list_source else None
    if node is not None and node.type == "Transpose":
        if const_value(graph, node.input[1]) != [1, 0, 2]:
            raise Refusal("the mask is not of the form Keras builds (rank-2 mask expanded to [T, B, 1])")
        return _expanded_mask(graph, node.input[0]), "batch"
    if node is None or node.type != "ExpandDims":
        raise Refusal(MASK_LIST_REASON)
    mask_tm = _expanded_mask(graph, mask_list_source)
    transpose = producer(graph, mask_tm)
    if transpose is not None and transpose.type == "Transpose" and transpose_perm(graph, transpose) == [1, 0]:
        return transpose.input[0], "batch"
    return mask_tm, "time"


def _expanded_mask(graph, column: str) -> str:
    """The rank-2 bool mask ``column`` is ``expand_dims(mask, -1)`` of (Keras's spelling)."""
    expand = producer(graph, column)
    if expand is None or expand.type != "ExpandDims":
        raise Refusal("the mask is not of the form Keras builds (rank-2 mask expanded to [T, B, 1])")
    axis = const_value(graph, expand.input[1])
    mask = expand.input[0]
    shape = graph.get_shape(mask)
    if axis not in (-1, 2, [-1], [2]) or (shape is not None and len(shape) != 2):
        raise Refusal(f"the mask has an unexpected rank (shape {shape})")
    if graph.get_dtype(mask) != TensorProto.BOOL:
        raise Refusal("the mask is not boolean")
    return mask


def resolve_cells(graph, loop, matches, final_of) -> tuple:
    """Each cell's :class:`RecurrentCell`, bottom to top, or why not: its weights are resolved, and
    a stacked cell must read as many inputs as the cell below has units.

    ``loop``: the While or Loop op, whose input i feeds loop variable i; ``matches``: the cells read
    off its body (:class:`~.body.CellMatch`); ``final_of(i)``: the op's output holding variable i's
    final value."""
    cells, while_node = [], loop
    for cell in matches:
        kernel, recurrent, bias, recurrent_bias = resolve_weights(graph, while_node, cell.kind, cell.cell.gates)
        states = [i for i in (cell.h_index, cell.c_index) if i is not None]
        cells.append(RecurrentCell(
            kind=cell.kind, hidden_size=recurrent[kind_of(cell.kind).keras_gates[0]].shape[0], kernel=kernel,
            recurrent=recurrent, bias=bias, recurrent_bias=recurrent_bias, activations=cell.cell.activations,
            attributes=cell.cell.attributes,
            graph=graph, h_at=(while_node, cell.h_index), c_at=None if cell.c_index is None else (while_node, cell.c_index),
            zero_initial_state=all(is_zeros(graph, while_node.input[i]) for i in states),
            final_h=final_of(cell.h_index),
            final_c=None if cell.c_index is None else final_of(cell.c_index),
            constants=resolve_constants(graph, while_node, cell.cell.constants)))
        if len(cells) > 1 and cells[-1].input_size != cells[-2].hidden_size:
            raise Refusal("a stacked cell's kernel does not take the units of the cell below as its input")
    return tuple(cells)


def _list_source(graph, tensor) -> tuple:
    """(time-major tensor a TensorList is made of, whether it was first reversed in time)."""
    node = producer(graph, tensor)
    if node is None or node.type != "TensorListFromTensor":
        return None, False
    source = producer(graph, node.input[0])
    if source is not None and source.type == "ReverseV2" and const_value(graph, source.input[1]) in (0, [0]):
        return source.input[0], True
    return node.input[0], False


def _list_reader(graph, tensor, reversed_in_time):
    """The node that reads the tensor a TensorList ``tensor`` is made of (see :func:`_list_source`)."""
    node = producer(graph, tensor)
    return producer(graph, node.input[0]) if reversed_in_time else node


def _batch_major_source(graph, x_tm: str) -> str:
    """The tensor Keras transposed into ``x_tm`` (each layer transposes on its own)."""
    node = producer(graph, x_tm)
    if node is not None and node.type == "Transpose" and const_value(graph, node.input[1]) == [1, 0, 2]:
        return node.input[0]
    return x_tm


def _is_sequence_mask_over_time(graph, mask: str, time_axis: TimeAxis) -> bool:
    """Is ``mask`` ``sequence_mask(lengths, T)`` with T provably the layer's number of steps?

    ``Less(Range(0, maxlen, 1), lengths[:, None])`` is post-padded by construction; the proof
    needs maxlen to be the length of a tensor's time axis (the layer's input, what an Embedding
    looked up...), or a constant equal to a known static length.
    """
    less = producer(graph, mask)
    if less is None or less.type != "Less":
        return False
    steps = producer(graph, less.input[0])
    if steps is None or steps.type != "Range" or not is_zero_scalar(graph, steps.input[0]) or \
            const_value(graph, steps.input[2]) != 1:
        return False
    lengths = producer(graph, skip_identity(graph, less.input[1]))
    if lengths is not None and lengths.type == "Cast":
        lengths = producer(graph, lengths.input[0])
    if lengths is None or lengths.type != "ExpandDims" or const_value(graph, lengths.input[1]) not in (-1, 1):
        return False
    return is_step_count(graph, steps.input[1], time_axis)


OUTPUT_LIST_REASON = "the output list does not hold exactly one element per time step (or one, for the last output)"


def _reserves_one_element_per_output(graph, output_list: str, body: BodyMatch, time_axis: TimeAxis) -> bool:
    """Is the list the loop writes its outputs to reserved with T elements (one per step; Keras's
    ``return_sequences=True``) or with one (the last output only)? Else the stacked list is longer
    than what the native op returns."""
    reserve = producer(graph, output_list)
    if reserve is None or reserve.type != "TensorListReserve":
        return False
    size = reserve.input[1]
    if body.writes_sequence:
        return is_step_count(graph, size, time_axis)
    return const_value(graph, size) in (1, [1])


def _consumed_outputs(graph, while_node) -> list:
    return [i for i, out in enumerate(while_node.output) if graph.find_output_consumers(out)]
