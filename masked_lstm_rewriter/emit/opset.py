# SPDX-License-Identifier: Apache-2.0
"""The emitted nodes, spelled for a model below opset 13.

The emitter writes every node as opset 13 spells it: ``Squeeze``, ``Unsqueeze`` and ``ReduceSum``
take their axes, ``Split`` its sizes, as inputs; ``GreaterOrEqual`` and an integer ``Max`` or
``Min`` (opset 12) are used. :func:`spelled_for_opset` respells the nodes made inside it, in place,
for a graph of opset 11 or 12 (the oldest the emitter supports: ``Range`` and ``Pad``'s inputs are
opset 11's):

* axes and constant sizes become the attributes they were before opset 13;
* a ``Split`` whose sizes are computed becomes its input checked against the sizes' sum by a
  ``Concat`` (which fails, as the ``Split`` would, when they do not add up to its length: the guard
  is such a ``Split``) and one ``Slice`` per piece;
* before opset 12, ``GreaterOrEqual`` becomes ``Not(Less)``, and an integer ``Max`` or ``Min`` a
  ``Where`` over a comparison.

Nodes spelled as their opset allows are not touched.
"""

from __future__ import annotations

import contextlib

import numpy as np
from onnx import TensorProto
from tf2onnx import utils

from ..graph import const_value, filled, int64_const, make_op, outer_const, producer

MIN_OPSET = 11  # Range, and Pad with its pads as an input
AXES_AS_INPUTS = 13  # Squeeze, Unsqueeze, ReduceSum and Split take axes and sizes as inputs
ORDERED_INTEGERS = 12  # GreaterOrEqual, LessOrEqual; Max and Min of integers
_AXES_INPUT = ("Squeeze", "Unsqueeze", "ReduceSum")
_INTEGERS = (TensorProto.INT32, TensorProto.INT64, TensorProto.INT8, TensorProto.INT16, TensorProto.UINT8,
             TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64)


@contextlib.contextmanager
def spelled_for_opset(graph):
    """Respell, at the end of the block, the nodes made in ``graph`` inside it (and the graphs nested
    in them) that ``graph``'s opset does not have. Only those: the graph also holds TensorFlow's ops
    while tf2onnx converts a model, whose ``Split`` and ``Max`` mean something else."""
    before = {id(node) for node in graph.get_nodes()}
    yield
    if graph.opset < AXES_AS_INPUTS:
        _lower(graph, [node for node in graph.get_nodes() if id(node) not in before])


def _lower(graph, nodes) -> None:
    for node in nodes:
        for body in (node.get_body_graphs() or {}).values():
            _lower(body, list(body.get_nodes()))
        if node.type in _AXES_INPUT and len(node.input) == 2:
            _axes_as_attribute(graph, node, "axes")
        elif node.type == "Split" and len(node.input) == 2:
            _lower_split(graph, node)
        elif graph.opset < ORDERED_INTEGERS and node.type in ("GreaterOrEqual", "LessOrEqual"):
            _not_of_strict(graph, node)
        elif graph.opset < ORDERED_INTEGERS and node.type in ("Max", "Min") and _integer(graph, node):
            _where_of_comparison(graph, node)


def _constant(graph, tensor: str):
    """The value of a constant of ``graph`` or of a graph around it, as a list, else None."""
    value = const_value(graph, tensor)
    if value is None:
        node = outer_const(graph, tensor)
        value = None if node is None else node.get_tensor_value()
    return value


def _axes_as_attribute(graph, node, name: str) -> None:
    values = _constant(graph, node.input[1])
    if values is None:
        raise ValueError(f"opset {graph.opset}: {node.type} '{node.name}' has computed {name}, which an "
                         f"attribute cannot hold before opset {AXES_AS_INPUTS}")
    graph.replace_inputs(node, [node.input[0]])
    node.set_attr(name, [int(v) for v in values])


def _lower_split(graph, node) -> None:
    """A ``Split`` with constant sizes keeps them as its ``split`` attribute; with computed ones (1-D,
    axis 0) it becomes its input checked against the sizes' sum and one ``Slice`` per piece."""
    if _constant(graph, node.input[1]) is not None:
        _axes_as_attribute(graph, node, "split")
        return
    if node.get_attr_value("axis", 0) != 0:
        raise ValueError(f"opset {graph.opset}: Split '{node.name}' of computed sizes along axis "
                         f"{node.get_attr_value('axis')}; only axis 0 is respelled before opset {AXES_AS_INPUTS}")
    tensor, sizes = node.input
    outputs, name, dtype = list(node.output), node.name, graph.get_dtype(node.output[0])
    graph.remove_node(name)
    checked = _checked_length(graph, tensor, sizes, name, outputs[0] if len(outputs) == 1 else None, dtype)
    if len(outputs) == 1:
        return
    ends = make_op(graph, "CumSum", sizes, int64_const(graph, "axis", 0))
    starts = make_op(graph, "Sub", ends, sizes)
    for index, output in enumerate(outputs):
        at = int64_const(graph, "piece", [index])
        graph.make_node("Slice", [checked, make_op(graph, "Gather", starts, at, axis=0),
                                  make_op(graph, "Gather", ends, at, axis=0), int64_const(graph, "axes", [0])],
                        outputs=[output])
        graph.set_dtype(output, dtype)


def _checked_length(graph, tensor: str, sizes: str, name: str, output, dtype) -> str:
    """``tensor`` [N] itself, read through a ``Concat`` of it with [sum(sizes)] zeros side by side,
    which fails on onnxruntime and OpenVINO unless the sizes add up to N, as the ``Split`` would
    (OpenVINO does not fail a ``Reshape`` to another length). The ``Concat`` is named ``name``:
    onnxruntime's error names the failing node, OpenVINO's its output."""
    total = make_op(graph, "ReduceSum", sizes, axes=[0], keepdims=1)
    zeros = filled(graph, make_op(graph, "Concat", total, int64_const(graph, "one", [1]), axis=0),
                   np.zeros((), utils.map_onnx_to_numpy_type(dtype)))
    column = make_op(graph, "Unsqueeze", tensor, axes=[1])
    pair = graph.make_node("Concat", [column, zeros], attr={"axis": 1}, name=name,
                           outputs=[utils.make_name(name)]).output[0]
    result = graph.make_node("Gather", [pair, int64_const(graph, "first", 0)], attr={"axis": 1},
                             outputs=None if output is None else [output]).output[0]
    graph.set_dtype(result, dtype)
    return result


def _not_of_strict(graph, node) -> None:
    """``a >= b`` as ``not (a < b)``; ``a <= b`` as ``not (a > b)``."""
    strict = "Less" if node.type == "GreaterOrEqual" else "Greater"
    output, inputs = node.output[0], list(node.input)
    graph.remove_node(node.name)
    graph.make_node("Not", [make_op(graph, strict, *inputs)], outputs=[output])
    graph.set_dtype(output, TensorProto.BOOL)


def _integer(graph, node) -> bool:
    return any(graph.get_dtype(tensor) in _INTEGERS or _integer_constant(graph, tensor) for tensor in node.input)


def _integer_constant(graph, tensor: str) -> bool:
    node = producer(graph, tensor) or outer_const(graph, tensor)
    return node is not None and node.is_const() and node.get_tensor_value(as_list=False).dtype.kind in "iu"


def _where_of_comparison(graph, node) -> None:
    """An integer ``Max`` or ``Min`` of its inputs, two at a time, as ``Where(a > b, a, b)`` (``<`` for Min)."""
    compare = "Greater" if node.type == "Max" else "Less"
    output, inputs = node.output[0], list(node.input)
    dtype = next((graph.get_dtype(tensor) for tensor in inputs if graph.get_dtype(tensor)), None)
    graph.remove_node(node.name)
    result = inputs[0]
    for index, other in enumerate(inputs[1:], start=2):
        outputs = [output] if index == len(inputs) else None
        result = graph.make_node("Where", [make_op(graph, compare, result, other), result, other],
                                 outputs=outputs).output[0]
    if len(inputs) == 1:
        graph.make_node("Identity", [result], outputs=[output])
    graph.set_dtype(output, dtype)
