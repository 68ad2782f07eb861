# SPDX-License-Identifier: Apache-2.0
"""Where an ONNX ``Loop`` layer's input and mask come from, outside the loop: a sequence reversed in
time for a backward layer, the batch-major tensor a time-major one is transposed from, and the
[B, T] boolean mask behind the time-major one the body reads (:mod:`.onnx_loop`)."""

from __future__ import annotations

from typing import Optional

from onnx import TensorProto

from ..failure import Refusal
from ..graph import const_value, producer, shape_element
from .time_axis import TimeAxis, time_axis_of


def unreversed(graph, tensor: str) -> tuple:
    """(the time-major tensor ``tensor`` reverses in time, True) when it is tf2onnx's whole-sequence
    reversal ``ReverseSequence(t, lengths = T for every row)`` (go_backwards, a Bidirectional's
    backward half), else (``tensor``, False)."""
    node = producer(graph, tensor)
    if node is None or node.type != "ReverseSequence" or node.get_attr_value("time_axis", 0) != 0 or \
            node.get_attr_value("batch_axis", 1) != 1:
        return tensor, False
    source = node.input[0]
    if not _every_row_whole(graph, node.input[1], time_axis_of(graph, [source])):
        raise Refusal("the input is reversed by lengths other than the number of steps", node)
    return source, True


def _every_row_whole(graph, lengths: str, steps: TimeAxis) -> bool:
    """Are the ``lengths`` a ReverseSequence reverses by the number of steps for every row: T expanded
    to the batch (``Expand(shape(t)[0:1], ...)``), or, shapes being static, a constant of T's (as
    onnx-simplifier folds it)?"""
    node = producer(graph, lengths)
    if node is not None and node.type == "Expand":
        return shape_element(graph, node.input[0], 0) in steps.dims and \
            (graph.get_shape(node.input[0]) or [None]) == [1]
    value = const_value(graph, lengths)
    return steps.steps is not None and isinstance(value, list) and bool(value) and set(value) == {steps.steps}


def batch_major_source(graph, x_tm: str) -> str:
    """The tensor a ``Transpose(perm=[1, 0, 2])`` made ``x_tm`` of, else ``x_tm`` itself."""
    node = producer(graph, x_tm)
    if node is not None and node.type == "Transpose" and node.get_attr_value("perm") == [1, 0, 2]:
        return node.input[0]
    return x_tm


def batch_major_mask(graph, mask_tm: str, time_axis: TimeAxis) -> tuple:
    """(the mask, its layout): the [B, T] bool mask behind the time-major one the body reads, "batch";
    else the [B, T, 1] column it transposes, "column", or ``mask_tm`` itself, "time" (the source
    makes the [B, T] mask of those). Read: ``Transpose(m, [1, 0, 2])`` of ``m`` [B, T, 1] (an
    ``Unsqueeze`` or ``Reshape`` of the [B, T] mask), possibly expanded over the features
    (jax2onnx's broadcast); a mask that may differ across the features is refused."""
    transpose = producer(graph, mask_tm)
    if transpose is not None and transpose.type == "Transpose" and transpose.get_attr_value("perm") == [1, 0, 2]:
        mask = _column_source(graph, transpose.input[0], time_axis)
        if mask is not None:
            return mask, "batch"
        column = _row_column(graph, transpose.input[0])
        if column is not None:
            mask = _column_source(graph, column, time_axis)
            return (mask, "batch") if mask is not None else (column, "column")
    shape = graph.get_shape(mask_tm)
    if shape is None or len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] != 1):
        raise Refusal(f"the mask may differ across the features (shape {shape}), which no native op takes")
    return mask_tm, "time"


def _row_column(graph, tensor: str) -> Optional[str]:
    """``tensor`` [B, T, 1], or the [B, T, 1] tensor an ``Expand`` over the last axis broadcasts, else None."""
    node = producer(graph, tensor)
    if node is not None and node.type == "Expand" and (graph.get_shape(node.input[0]) or [None])[-1] == 1:
        return node.input[0]
    shape = graph.get_shape(tensor)
    return tensor if shape is not None and len(shape) == 3 and shape[2] == 1 else None


def _column_source(graph, column: str, time_axis: TimeAxis) -> Optional[str]:
    """The [B, T] bool mask a [B, T, 1] ``column`` is made of: ``Unsqueeze`` on the last axis, or a
    ``Reshape`` whose second size is provably T (the first is then B), else None."""
    node = producer(graph, column)
    if node is None or node.type not in ("Unsqueeze", "Reshape"):
        return None
    mask = node.input[0]
    shape = graph.get_shape(mask)
    if graph.get_dtype(mask) not in (TensorProto.BOOL, None) or (shape is not None and len(shape) != 2):
        return None
    if node.type == "Unsqueeze":  # rank 2 when the shape is unknown: the Transpose after it has three axes
        axes = const_value(graph, node.input[1]) if len(node.input) > 1 else node.get_attr_value("axes")
        return mask if axes in ([2], [-1], 2, -1) and graph.get_dtype(mask) == TensorProto.BOOL else None
    if shape is None:
        return None
    steps = shape_element(graph, node.input[1], 1)
    return mask if steps is not None and (steps in time_axis.dims or steps == (mask, 1)) else None
