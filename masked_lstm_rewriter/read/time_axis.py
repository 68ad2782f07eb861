# SPDX-License-Identifier: Apache-2.0
"""Where a layer's number of time steps can be read off the main graph (a :class:`TimeAxis`).

The native op runs over every time step of its input, so the trip count of the loop
(:mod:`.trip`) and the length of its output list must provably be the input's number of steps.
:func:`time_axis_of` collects every ``(tensor, axis)`` provably as long as the input's time axis,
going back through the ops that keep that axis (and through a lower layer's ONNX ``Loop``, which
runs one step per step of its input), and the static number of steps when the graph knows it
(from shapes, or the size a lower layer's output list was reserved with).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf2onnx.tf_loader import find_function

from ..graph import axis_source, concatenated_beside, const_value, constant_element, producer, rank_of, static_dim
from .body import BODY_MATCH_ATTR, BodyMatch


@dataclasses.dataclass(frozen=True)
class TimeAxis:
    """Where a layer's number of time steps T can be read off: ``(tensor, axis)`` pairs whose
    ``axis`` provably has T elements, and T itself when the graph knows it statically."""

    dims: frozenset
    steps: Optional[int] = None


def time_axis_of(graph, time_major: list) -> TimeAxis:
    """Every ``(tensor, axis)`` provably as long as the time axis of the ``time_major`` tensors (all
    the same length, on axis 0), found going back through the ops that keep that axis (casts,
    transposes, reversals, an Embedding lookup, a Dense layer's tensordot and bias:
    :func:`..graph.axis_source`) and concatenations along another axis; and the static number of
    steps, from those tensors' shapes or the length of a recurrent layer's stacked outputs."""
    dims, pending = set(), [(t, 0) for t in time_major]
    while pending:
        tensor, axis = pending.pop()
        if (tensor, axis) in dims:
            continue
        dims.add((tensor, axis))
        node = producer(graph, tensor)
        pending.extend(_same_axis_inputs(graph, node, axis, tensor) if node is not None else ())
    static = {_static_length(graph, tensor, axis) for tensor, axis in dims} - {None}
    return TimeAxis(frozenset(dims), static.pop() if len(static) == 1 else None)


def _same_axis_inputs(graph, node, axis: int, tensor: Optional[str] = None) -> list:
    """The ``(input, axis)`` pairs whose axis is as long as axis ``axis`` of ``node``'s output
    (``tensor``, where ``node`` has several): each part of a concatenation along another axis, the
    ids of Keras 3's Embedding wraparound, the input of a lower recurrent layer's ``Loop`` whose
    scan output ``tensor`` is, or the one input :func:`..graph.axis_source` names."""
    if node.type == "Loop":
        return _loop_input_axis(graph, node, tensor) if axis == 0 else []
    if node.type in ("ConcatV2", "Concat"):
        return [(t, axis) for t in concatenated_beside(graph, node, axis) or ()]
    if node.type == "SelectV2" and _is_id_wraparound(graph, node):
        return [(node.input[2], axis)]
    source = axis_source(graph, node, node.output[0], axis)
    return [source] if source is not None else []


def _loop_input_axis(graph, loop, tensor: Optional[str]) -> list:
    """``[(x, 0)]`` when ``tensor`` is a scan output of an ONNX ``Loop`` that provably runs one step per
    step of its time-major input x (a lower recurrent layer: its scan outputs are as long as x), else []."""
    from .onnx_loop import steps_input  # pylint: disable=import-outside-toplevel  (it reads its own axis here)
    carried = len(loop.input) - 2
    if tensor not in list(loop.output)[carried:]:
        return []
    x = steps_input(graph, loop)
    return [] if x is None else [(x, 0)]


ELEMENTWISE = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum")  # what Bidirectional's merges use


def _static_length(graph, tensor: str, axis: int) -> Optional[int]:
    """The static length of ``tensor``'s ``axis``: from its shape, a reshape's constant size there, or
    for a recurrent layer's stacked outputs (whose shape TensorFlow leaves unknown), from the size its
    output list was reserved with,
    going back through the ops that keep the axis and through elementwise merges (a Bidirectional
    layer's sum, average or product of its halves)."""
    known = static_dim(graph, tensor, axis)
    if known is not None:
        return known
    node = producer(graph, tensor)
    if node is None:
        return None
    if node.type == "TensorListStack":
        size = _stacked_list_size(graph, node.input[0]) if axis == 0 else None
        value = const_value(graph, size) if size is not None else None
        return value if isinstance(value, int) else None
    if node.type in ELEMENTWISE:
        return _broadcast_length(graph, node, axis)
    if node.type == "Reshape":
        size = constant_element(graph, node.input[1], axis)
        if size is not None and size > 0:
            return size
    lengths = {_static_length(graph, t, a) for t, a in _same_axis_inputs(graph, node, axis, tensor)} - {None}
    return lengths.pop() if len(lengths) == 1 else None


def _broadcast_length(graph, node, axis: int) -> Optional[int]:
    """The static length of axis ``axis`` of a broadcasting elementwise op's output: an operand's
    length above 1 is the output's (any other operand has it or 1); 1 only when every operand has 1.
    Operands of another rank (a bias, a scalar) are left aside only when it is known."""
    rank = rank_of(graph, node.output[0])
    lengths = set()
    for operand in node.input:
        operand_rank = rank_of(graph, operand)
        if operand_rank is None or rank is None:
            return None
        if operand_rank == rank:
            lengths.add(_static_length(graph, operand, axis))
        elif operand_rank >= rank - axis:  # a lower-rank operand aligned to the last axes reaches it
            return None
    above_one = {n for n in lengths if n is not None and n > 1}
    if len(above_one) == 1:
        return above_one.pop()
    return 1 if lengths == {1} else None


def _stacked_list_size(graph, output_list: str) -> Optional[str]:
    """The number of elements of a masked recurrent loop's output list after the loop: the size it
    was reserved with, since the body (a :class:`BodyMatch`) only writes into it in place."""
    loop = producer(graph, output_list)
    if loop is None or loop.type not in ("While", "StatelessWhile"):
        return None
    body_graph = find_function(loop.get_attr_str("body"))
    body = getattr(body_graph, BODY_MATCH_ATTR, None) if body_graph is not None else None
    index = list(loop.output).index(output_list)
    if not isinstance(body, BodyMatch) or body.output_list_index != index:
        return None
    reserve = producer(graph, loop.input[index])
    return reserve.input[1] if reserve is not None and reserve.type == "TensorListReserve" else None


def _is_id_wraparound(graph, select) -> bool:
    """Keras 3's Embedding: ``select(ids < 0, ids + n, ids)``, elementwise over ``ids``."""
    ids = select.input[2]
    less, add = producer(graph, select.input[0]), producer(graph, select.input[1])
    return (less is not None and less.type == "Less" and less.input[0] == ids and graph.is_const(less.input[1])
            and add is not None and add.type in ("Add", "AddV2") and add.input[0] == ids
            and graph.is_const(add.input[1]))
