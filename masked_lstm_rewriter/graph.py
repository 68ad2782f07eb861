# SPDX-License-Identifier: Apache-2.0
"""Small questions about tf2onnx graphs that every stage asks: who produces a tensor, is it a constant.

Every stage may import this module; it imports no stage.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from tf2onnx import utils


def producer(graph, tensor: str):
    """The node of ``graph`` (not of a graph it is nested in) that computes ``tensor``, or None."""
    return graph.get_node_by_output(tensor, search_in_parent_graphs=False)


def skip_identity(graph, tensor: str) -> str:
    """Follow Identity ops (ReadVariableOp becomes one) back to the real producer."""
    node = producer(graph, tensor)
    while node is not None and node.type == "Identity":
        tensor = node.input[0]
        node = producer(graph, tensor)
    return tensor


def passes_through(graph, index: int) -> bool:
    """Is loop variable ``index`` of a While body loop-invariant (the body returns its input unchanged)?"""
    return index < len(graph.outputs) and skip_identity(graph, graph.outputs[index]) == graph.input_names[index]


def scalar_value(graph, tensor: str) -> Optional[float]:
    """The value of a scalar (or one-element) constant, else None."""
    node = producer(graph, skip_identity(graph, tensor))
    if node is None or not node.is_const():
        return None
    value = node.get_tensor_value(as_list=False)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def const_value(graph, tensor: str):
    """The value of a constant tensor as a list (or a number), else None."""
    return graph.get_tensor_value(tensor) if graph.is_const(tensor) else None


def is_zero_scalar(graph, tensor: str) -> bool:
    node = producer(graph, skip_identity(graph, tensor))
    return node is not None and node.is_const() and np.all(node.get_tensor_value(as_list=False) == 0)


def is_zeros(graph, tensor: str) -> bool:
    """A tensor that is zeros by construction (ZerosLike, Fill(…, 0), or a zero constant)."""
    node = producer(graph, tensor)
    if node is None:
        return False
    if node.type == "ZerosLike":
        return True
    if node.type == "Fill":
        return is_zero_scalar(graph, node.input[1])
    return node.is_const() and not np.any(node.get_tensor_value(as_list=False))


def is_increment(node, tensor: str) -> bool:
    """Is ``node`` ``tensor + 1``?"""
    if node is None or node.type not in ("Add", "AddV2"):
        return False
    others = [t for t in node.input if t != tensor]
    if len(others) != 1:
        return False
    one = producer(node.graph, skip_identity(node.graph, others[0]))
    return one is not None and one.is_const() and np.all(one.get_tensor_value(as_list=False) == 1)


def mul_operands(graph, tensor: str) -> Optional[list]:
    """The two inputs of the Mul computing ``tensor``, else None."""
    node = producer(graph, tensor)
    if node is None or node.type != "Mul":
        return None
    return list(node.input)


def rank_of(graph, tensor: str) -> Optional[int]:
    shape = graph.get_shape(tensor)
    return None if shape is None else len(shape)


def shape_element(graph, tensor, index, depth=8):
    """(t, k) when element ``index`` of the 1-D int tensor ``tensor`` is provably ``shape(t)[k]``:
    a Shape, a Gather or slice of one, a concatenation or stack of those (how ``tf.tensordot``,
    which Dense layers use on sequences, writes its output shape)."""
    node = producer(graph, tensor)
    if node is None or depth == 0:
        return None
    if node.type == "Shape":
        return node.input[0], index
    if node.type == "ConcatV2" and const_value(graph, node.input[-1]) in (0, -1):
        for part in node.input[:-1]:
            shape = graph.get_shape(part)
            if shape is None or len(shape) != 1 or shape[0] is None or shape[0] < 0:
                return None
            if index < shape[0]:
                return shape_element(graph, part, index, depth - 1)
            index -= shape[0]
        return None
    if node.type == "GatherV2" and const_value(graph, node.input[2]) == 0:
        indices = const_value(graph, node.input[1])
        indices = indices if isinstance(indices, list) else [indices]
        if index >= len(indices) or indices[index] is None:
            return None
        return shape_element(graph, node.input[0], indices[index], depth - 1)
    if node.type == "Pack" and node.get_attr_value("axis", 0) == 0 and index < len(node.input):
        return shape_dim_of(graph, node.input[index])
    return None


def shape_dim_of(graph, scalar):
    """(t, k) when the scalar ``scalar`` is ``shape(t)[k]`` (a StridedSlice that picks one element)."""
    node = producer(graph, scalar)
    if node is None or node.type != "StridedSlice" or node.get_attr_value("shrink_axis_mask", 0) != 1:
        return None
    begin, end, strides = (const_value(graph, t) for t in node.input[1:4])
    if strides != [1] or not isinstance(begin, list) or len(begin) != 1 or end != [begin[0] + 1]:
        return None
    return shape_element(graph, node.input[0], begin[0], 1)



# building: used by the planner and the emitter alike

def make_op(g, kind: str, *inputs, **attr) -> str:
    """The output of a new ``kind`` node of ``g`` over ``inputs``."""
    return g.make_node(kind, list(inputs), attr=attr).output[0]


def int64_const(g, name: str, values) -> str:
    """A new int64 constant (named after ``name``)."""
    return g.make_const(utils.make_name(name), np.array(values, np.int64)).output[0]


def int64_scalar(g, value: int) -> str:
    return g.make_const(utils.make_name("scalar"), np.array(value, np.int64)).output[0]


def make_if(graph, condition: str, name: str, then_branch, else_branch) -> list:
    """An If (named after ``name``) on ``condition`` whose branches are built by the two functions
    (graph -> output tensors)."""
    branches = {}
    for key, build in (("then_branch", then_branch), ("else_branch", else_branch)):
        branches[key] = _branch(graph)
        _set_outputs(branches[key], build(branches[key]))
    inner = branches["then_branch"].outputs
    node = graph.make_node("If", [condition], output_count=len(inner), branches=branches,
                           name=utils.make_name(name))
    for outer, tensor in zip(node.output, inner):
        graph.set_dtype(outer, branches["then_branch"].get_dtype(tensor))
        graph.set_shape(outer, None)
    return list(node.output)


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
