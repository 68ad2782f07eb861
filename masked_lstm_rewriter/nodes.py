# SPDX-License-Identifier: Apache-2.0
"""Making nodes: constants, one-output ops and Splits, spelled as the graph's opset has them.

The stages write every node as opset 13 spells it: ``Squeeze``, ``Unsqueeze`` and ``ReduceSum``
take their axes, ``Split`` its sizes, as inputs; ``GreaterOrEqual`` and an integer ``Max`` or
``Min`` (opset 12) are used. In a graph of opset 11 or 12 (the oldest the emitted nodes support:
``Range`` and ``Pad``'s inputs are opset 11's), :func:`make_op` and :func:`split` make instead:

* axes and constant sizes as the attributes they were before opset 13;
* for a ``Split`` of computed sizes, its input read through a ``Concat`` beside [sum(sizes)] zeros
  (which fails on onnxruntime and OpenVINO, as the ``Split`` would, when the sizes do not add up to
  its length: the mask check is such a ``Split``; OpenVINO does not fail a ``Reshape`` to another
  length) and one ``Slice`` per piece;
* before opset 12, ``Not(Less)`` for ``GreaterOrEqual`` and ``Where`` over a comparison for an
  integer ``Max`` or ``Min``.

Spelled as they are made, the nodes get their shapes inferred as at opset 13, so the stages that
read static shapes decide alike at every opset. Every stage may import this module (through
:mod:`.graph` too); it imports no other module of the package.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import numpy_helper
from tf2onnx import utils

MIN_OPSET = 11  # Range, and Pad with its pads as an input
AXES_AS_INPUTS = 13  # Squeeze, Unsqueeze, ReduceSum and Split take axes and sizes as inputs
ORDERED_INTEGERS = 12  # GreaterOrEqual, LessOrEqual; Max and Min of integers
_AXES_INPUT = ("Squeeze", "Unsqueeze", "ReduceSum")


def make_op(g, kind: str, *inputs, **attr) -> str:
    """The output of a new ``kind`` node of ``g`` over ``inputs`` (spelled as at opset 13), spelled as
    ``g``'s opset has it."""
    return make_node(g, kind, list(inputs), attr).output[0]


def make_node(g, kind: str, inputs: list, attr: Optional[dict] = None, **kwargs):
    """:func:`make_op`'s node; ``kwargs`` as tf2onnx's ``make_node`` takes them (one output)."""
    attr = dict(attr or {})
    if g.opset < AXES_AS_INPUTS and kind in _AXES_INPUT and len(inputs) == 2:
        attr["axes"] = _constant(g, inputs[1], kind)
        inputs = inputs[:1]
    elif g.opset < ORDERED_INTEGERS and kind in ("GreaterOrEqual", "LessOrEqual"):
        strict = g.make_node("Less" if kind == "GreaterOrEqual" else "Greater", inputs).output[0]
        return g.make_node("Not", [strict], **kwargs)
    elif g.opset < ORDERED_INTEGERS and kind in ("Max", "Min") and any(_is_integer(g, t) for t in inputs):
        return _chosen_by_comparison(g, kind, inputs, **kwargs)
    return g.make_node(kind, inputs, attr=attr, **kwargs)


def split(g, tensor: str, sizes: str, count: int, name: Optional[str] = None) -> list:
    """``tensor`` cut along axis 0 into ``count`` pieces of ``sizes`` (a 1-D int64 tensor): the pieces.
    Computed ``sizes`` that do not add up to the length fail at run time, at every opset; with
    ``name``, the failing node is named so (onnxruntime's error names it) and, for one piece, so is
    the piece (OpenVINO's error names it)."""
    outputs = [name] if name is not None and count == 1 else None
    if g.opset >= AXES_AS_INPUTS:
        return list(g.make_node("Split", [tensor, sizes], output_count=count, attr={"axis": 0}, name=name,
                                outputs=outputs).output)
    constant = _constant(g, sizes, "Split", required=False)
    if constant is not None:
        return list(g.make_node("Split", [tensor], output_count=count, attr={"axis": 0, "split": constant},
                                name=name, outputs=outputs).output)
    checked = _checked_length(g, tensor, sizes, name or utils.make_name("split"), outputs)
    if count == 1:
        return [checked]
    ends = make_op(g, "CumSum", sizes, int64_scalar(g, 0))
    starts = make_op(g, "Sub", ends, sizes)
    pieces = []
    for index in range(count):
        at = int64_const(g, "piece", [index])
        bounds = [make_op(g, "Gather", edge, at, axis=0) for edge in (starts, ends)]
        pieces.append(make_op(g, "Slice", checked, *bounds, int64_const(g, "axes", [0])))
    return pieces


def _checked_length(g, tensor: str, sizes: str, name: str, outputs) -> str:
    """``tensor`` [N] itself, read through a ``Concat`` (named ``name``) of it and [sum(sizes)] zeros
    side by side, which fails unless the sizes add up to N."""
    total = make_op(g, "ReduceSum", sizes, int64_const(g, "axes", [0]), keepdims=1)
    zeros = filled(g, make_op(g, "Concat", total, int64_const(g, "one", [1]), axis=0),
                   np.zeros((), utils.map_onnx_to_numpy_type(dtype_of(g, tensor))))
    column = make_op(g, "Unsqueeze", tensor, int64_const(g, "axes", [1]))
    pair = g.make_node("Concat", [column, zeros], attr={"axis": 1}, name=name, outputs=[utils.make_name(name)])
    return g.make_node("Gather", [pair.output[0], int64_scalar(g, 0)], attr={"axis": 1}, outputs=outputs).output[0]


def _chosen_by_comparison(g, kind: str, inputs: list, **kwargs):
    """An integer ``Max`` or ``Min`` of ``inputs``, two at a time, as ``Where(a > b, a, b)`` (``<`` for Min)."""
    if len(inputs) == 1:
        return g.make_node("Identity", inputs, **kwargs)
    compare = "Greater" if kind == "Max" else "Less"
    result = inputs[0]
    for index, other in enumerate(inputs[1:], start=2):
        chosen = g.make_node("Where", [make_op(g, compare, result, other), result, other],
                             **(kwargs if index == len(inputs) else {}))
        result = chosen.output[0]
    return chosen


def _constant(g, tensor: str, kind: str, required: bool = True):
    """The values of a constant of ``g`` or of a graph around it, as a list of ints."""
    node = g.get_node_by_output(tensor)  # tf2onnx looks in the graphs around ``g`` too
    if node is not None and node.is_const():
        return [int(v) for v in np.asarray(node.get_tensor_value(as_list=False)).reshape(-1)]
    if required:
        raise ValueError(f"opset {g.opset}: a {kind} of computed axes, which an attribute cannot hold before "
                         f"opset {AXES_AS_INPUTS}")
    return None


def dtype_of(g, tensor: str):
    """``tensor``'s element type, as ``g`` or a graph around it knows it."""
    graph = g
    while graph is not None:
        dtype = graph.get_dtype(tensor)
        if dtype is not None:
            return dtype
        graph = graph.parent_graph
    return None


def _is_integer(g, tensor: str) -> bool:
    dtype = dtype_of(g, tensor)
    return dtype is not None and np.issubdtype(utils.map_onnx_to_numpy_type(dtype), np.integer)


def const(g, name: str, value) -> str:
    """A new constant holding ``value`` (a numpy array, its dtype kept), named after ``name``."""
    return g.make_const(utils.make_name(name), value).output[0]


def int64_const(g, name: str, values) -> str:
    """A new int64 constant (named after ``name``)."""
    return g.make_const(utils.make_name(name), np.array(values, np.int64)).output[0]


def int64_scalar(g, value: int) -> str:
    return g.make_const(utils.make_name("scalar"), np.array(value, np.int64)).output[0]


def filled(g, shape: str, value) -> str:
    """A tensor of ``shape`` (a 1-D int64 tensor) holding ``value`` (a numpy scalar: its dtype is the tensor's)."""
    return make_op(g, "ConstantOfShape", shape, value=numpy_helper.from_array(np.array([value])))
