# SPDX-License-Identifier: Apache-2.0
"""Small questions about tf2onnx graphs that every stage asks: who produces a tensor, is it a constant.

Every stage may import this module; it imports no stage.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import numpy_helper
from tf2onnx import utils

# the stages import these from here
from .nodes import const, dtype_of, filled, int64_const, int64_scalar, make_op, split  # noqa: F401


def producer(graph, tensor: str):
    """The node of ``graph`` (not of a graph it is nested in) that computes ``tensor``, or None."""
    return graph.get_node_by_output(tensor, search_in_parent_graphs=False)


def before_unsqueeze(graph, tensor: str) -> str:
    """The tensor an ``Unsqueeze`` made ``tensor`` of (a [B, H] state tf2onnx made a native node's
    [1, B, H] initial state), or ``tensor`` itself."""
    node = producer(graph, tensor)
    return node.input[0] if node is not None and node.type == "Unsqueeze" else tensor


def skip_identity(graph, tensor: str) -> str:
    """Follow Identity ops (ReadVariableOp becomes one) back to the real producer."""
    node = producer(graph, tensor)
    while node is not None and node.type == "Identity":
        tensor = node.input[0]
        node = producer(graph, tensor)
    return tensor


def skip_casts(graph, tensor: str) -> str:
    """Follow Identity and Cast ops back (a step counter compared as a float, a mask cast to numbers)."""
    node = producer(graph, tensor)
    while node is not None and node.type in ("Identity", "Cast"):
        tensor = node.input[0]
        node = producer(graph, tensor)
    return tensor


def is_onnx_loop_body(graph) -> bool:
    """Is ``graph`` the body of an ONNX ``Loop`` (inputs: iteration, condition, loop variables;
    outputs: condition, loop variables, scan outputs), not a TensorFlow While body (the loop
    variables in, the same variables out)?"""
    parent = graph.parent_graph
    if parent is None:
        return False
    return any(branches.get("body") is graph and getattr(parent.get_node_by_name(name), "type", None) == "Loop"
               for name, branches in parent.contained_graphs.items())


def next_value(graph, index: int) -> Optional[str]:
    """The tensor a loop body gives loop variable ``index`` (an input's index) for the next step, or None."""
    position = index - 1 if is_onnx_loop_body(graph) else index
    return graph.outputs[position] if 0 <= position < len(graph.outputs) else None


def passes_through(graph, index: int) -> bool:
    """Is loop variable ``index`` of a loop body loop-invariant (the body returns its input unchanged)?"""
    new = next_value(graph, index)
    return new is not None and skip_identity(graph, new) == graph.input_names[index]


def outer_const(graph, tensor: str):
    """The constant node of an enclosing graph that ``tensor`` names (a loop body reads the weights of
    the graph around it by name), else None."""
    if producer(graph, tensor) is not None or tensor in graph.input_names:
        return None
    outer = graph.parent_graph
    while outer is not None:
        node = producer(outer, skip_identity(outer, tensor))
        if node is not None:
            return node if node.is_const() else None
        outer = outer.parent_graph
    return None


def scalar_value(graph, tensor: str) -> Optional[float]:
    """The value of a scalar (or one-element) constant (of ``graph`` or a graph around it), else None."""
    node = producer(graph, skip_identity(graph, tensor)) or outer_const(graph, tensor)
    if node is None or not node.is_const():
        return None
    value = node.get_tensor_value(as_list=False)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def const_value(graph, tensor: str):
    """The value of a constant tensor as a list (or a number), else None."""
    return graph.get_tensor_value(tensor) if graph.is_const(tensor) else None


def is_zero_scalar(graph, tensor: str) -> bool:
    return is_constant_of(graph, tensor, 0)


def is_constant_of(graph, tensor: str, value) -> bool:
    """A constant (through Identity ops) whose every element is ``value``."""
    node = producer(graph, skip_identity(graph, tensor))
    return node is not None and node.is_const() and bool(np.all(node.get_tensor_value(as_list=False) == value))


def is_zeros(graph, tensor: str) -> bool:
    """A tensor that is zeros by construction (:func:`is_filled_with`)."""
    return is_filled_with(graph, tensor, 0)


def is_ones(graph, tensor: str) -> bool:
    """A tensor that is ones by construction: what inference-time dropout multiplies by (:func:`is_filled_with`)."""
    return is_filled_with(graph, tensor, 1)


LIKE_OPS = {0: "ZerosLike", 1: "OnesLike"}


def is_filled_with(graph, tensor: str, value: int) -> bool:
    """A tensor whose every element is ``value`` (0 or 1) by construction: ZerosLike or OnesLike,
    Fill(..., value), a constant, or as ONNX spells them, ConstantOfShape (of 0 without its value) and
    Expand of such a constant."""
    node = producer(graph, skip_identity(graph, tensor))
    if node is None:
        return False
    if node.type == LIKE_OPS[value]:
        return True
    if node.type in ("Fill", "Expand"):
        return is_constant_of(graph, node.input[1 if node.type == "Fill" else 0], value)
    if node.type == "ConstantOfShape":
        return bool(_fill_value(node) == value)
    return is_constant_of(graph, tensor, value)


def _fill_value(node) -> np.ndarray:
    """The one value a ConstantOfShape fills with (0.0 without its ``value``)."""
    filled = node.get_attr_value("value", None)
    return numpy_helper.to_array(filled).reshape(-1)[0] if filled is not None else np.float32(0)


def filled_array(graph, node) -> Optional[np.ndarray]:
    """The array ``node`` makes when it is a ConstantOfShape of a constant shape (jax2onnx's zero bias of a
    layer without one), else None."""
    shape = const_value(graph, node.input[0]) if node.type == "ConstantOfShape" else None
    if not isinstance(shape, list):
        return None
    fill = _fill_value(node)
    return np.full(shape, fill, fill.dtype)


def is_increment(node, tensor: str) -> bool:
    """Is ``node`` ``tensor + 1``?"""
    if node is None or node.type not in ("Add", "AddV2"):
        return False
    others = [t for t in node.input if t != tensor]
    if len(others) != 1:
        return False
    return is_constant_of(node.graph, others[0], 1)


def mul_operands(graph, tensor: str) -> Optional[list]:
    """The two inputs of the Mul computing ``tensor``, else None."""
    node = producer(graph, tensor)
    if node is None or node.type != "Mul":
        return None
    return list(node.input)


def transpose_perm(graph, node) -> Optional[list]:
    """A Transpose's permutation: TensorFlow's second input, or ONNX's ``perm`` attribute."""
    if len(node.input) > 1:
        perm = const_value(graph, node.input[1])
        return perm if isinstance(perm, list) else None
    perm = node.get_attr_value("perm", None)
    return list(perm) if perm is not None else None


def gathered_rows(graph, tensor: str) -> Optional[tuple]:
    """(rows [N, W], index [T, B]) where ``tensor`` [T, B, W] is ``Gather(rows, index)`` along axis 0 (the
    scheduled node's outputs, "any" mode's input), else None: a gather from it can gather from
    ``rows`` at composed indices instead, with one copy."""
    node = producer(graph, tensor)
    if node is None or node.type != "Gather" or node.get_attr_value("axis", 0) != 0:
        return None
    if rank_of(graph, node.input[0]) != 2 or rank_of(graph, node.input[1]) != 2:
        return None
    return node.input[0], node.input[1]


def rank_of(graph, tensor: str) -> Optional[int]:
    shape = graph.get_shape(tensor)
    return None if shape is None else len(shape)


def static_dim(graph, tensor: str, axis: int) -> Optional[int]:
    """The length of ``tensor``'s ``axis`` where the graph knows it, else None."""
    shape = graph.get_shape(tensor)
    return shape[axis] if shape is not None and len(shape) > axis and shape[axis] is not None \
        and shape[axis] >= 0 else None


def shape_element(graph, tensor, index, depth=8):
    """(t, k) when element ``index`` of the 1-D int tensor ``tensor`` is provably ``shape(t)[k]``:
    a Shape, a Gather or slice of one, a concatenation or stack of those (how ``tf.tensordot``,
    which Dense layers use on sequences, writes its output shape)."""
    node = producer(graph, tensor)
    if node is None or depth == 0:
        return None
    if node.type == "Shape" and not node.get_attr_value("start", 0):
        return node.input[0], index
    if node.type == "Cast":
        return shape_element(graph, node.input[0], index, depth - 1)
    if node.type in ("ConcatV2", "Concat"):
        part = _concatenated_element(graph, node, index)
        return None if part is None else shape_element(graph, *part, depth - 1)
    if (node.type == "GatherV2" and const_value(graph, node.input[2]) == 0) or \
            (node.type == "Gather" and node.get_attr_value("axis", 0) == 0):
        indices = const_value(graph, node.input[1])
        indices = indices if isinstance(indices, list) else [indices]
        if index >= len(indices) or indices[index] is None or indices[index] < 0:
            return None  # a negative index counts from an end the walk does not know
        return shape_element(graph, node.input[0], indices[index], depth - 1)
    if node.type == "Pack" and node.get_attr_value("axis", 0) == 0 and index < len(node.input):
        return shape_dim_of(graph, node.input[index])
    return None


def constant_element(graph, tensor, index, depth=8) -> Optional[int]:
    """The value of element ``index`` of the 1-D int tensor ``tensor`` where it is a constant: of a
    constant, or of a concatenation with a constant there (a reshape's target shape made of a
    Shape's elements and constant sizes, as Keras 3's ``RepeatVector`` writes it)."""
    value = const_value(graph, tensor)
    if isinstance(value, list):
        return value[index] if index < len(value) and isinstance(value[index], int) else None
    node = producer(graph, tensor)
    if node is None or depth == 0:
        return None
    if node.type == "Cast":
        return constant_element(graph, node.input[0], index, depth - 1)
    if node.type in ("ConcatV2", "Concat"):
        part = _concatenated_element(graph, node, index)
        return None if part is None else constant_element(graph, *part, depth - 1)
    return None


def _concatenated_element(graph, node, index) -> Optional[tuple]:
    """(part, its element) that element ``index`` of a 1-D concatenation ``node`` is, where every part
    before it has a static length."""
    if node.type == "ConcatV2":
        along, parts = const_value(graph, node.input[-1]), node.input[:-1]
    else:
        along, parts = node.get_attr_value("axis", None), node.input
    if along not in (0, -1):
        return None
    for part in parts:
        shape = graph.get_shape(part)
        if shape is None or len(shape) != 1 or shape[0] is None or shape[0] < 0:
            return None
        if index < shape[0]:
            return part, index
        index -= shape[0]
    return None


# ops whose output has the shape of their first input, under the same name in TensorFlow and ONNX
# (not Max, Min, Sum or Mean: reductions in TensorFlow, elementwise over several inputs in ONNX)
SAME_SHAPE = frozenset({"Identity", "Cast", "LogicalNot", "Not", "Neg", "Abs", "Sigmoid", "Tanh", "Relu", "Relu6",
                        "Elu", "Selu", "Softsign", "Softplus", "Exp", "Log", "Sqrt", "Square", "ReverseV2",
                        "ReverseSequence", "StopGradient", "BiasAdd"})


def axis_source(graph, node, tensor: str, axis: int) -> Optional[tuple]:
    """The ``(input, axis)`` whose length axis ``axis`` of ``node``'s output ``tensor`` provably has,
    where the op takes that axis from one input: a shape-keeping op, a transpose, a squeeze or an
    expansion of other axes, ``x @ W`` (a Dense layer), a reshape to a shape read off another tensor
    (``tf.tensordot``), an embedding lookup. None for any other op: elementwise ops and
    concatenations take it from several inputs (:func:`concatenated_beside`), which each walk over
    axes judges its own way."""
    kind, rank = node.type, rank_of(graph, tensor)
    if kind in SAME_SHAPE:
        return node.input[0], axis
    if kind == "Transpose":
        perm = transpose_perm(graph, node)
        return (node.input[0], int(perm[axis])) if perm is not None and axis < len(perm) else None
    if kind == "Squeeze":
        return _squeezed_axis(graph, node, axis)
    if kind in ("ExpandDims", "Unsqueeze"):
        added = const_value(graph, node.input[1]) if len(node.input) > 1 else node.get_attr_value("axes", None)
        added = added[0] if isinstance(added, list) and len(added) == 1 else added
        inserted = added % rank if isinstance(added, int) and rank is not None else None
        return None if inserted is None or inserted == axis else (node.input[0], axis - (inserted < axis))
    if kind in ("MatMul", "BatchMatMulV2") and graph.is_const(node.input[1]) and rank_of(graph, node.input[1]) == 2 \
            and not any(node.get_attr_value(a, 0) for a in ("transpose_a", "adj_x")):
        return (node.input[0], axis) if rank is not None and axis < rank - 1 else None  # the leading axes are x's
    if kind == "Reshape":
        before = _axis_before_reshape(graph, node, axis)
        if before is not None:
            return node.input[0], before
        return shape_element(graph, node.input[1], axis) if rank is not None and axis < rank else None
    if kind in ("GatherV2", "Gather"):  # params[indices] along axis 0: the indices' axes come first
        along = const_value(graph, node.input[2]) if kind == "GatherV2" else node.get_attr_value("axis", 0)
        indices_rank = rank_of(graph, node.input[1])
        if along in (0, [0]) and node.get_attr_value("batch_dims", 0) == 0 and indices_rank is not None \
                and axis < indices_rank:
            return node.input[1], axis
    return None


def _axis_before_reshape(graph, node, axis: int) -> Optional[int]:
    """The input axis that axis ``axis`` of a Reshape's output is, where the Reshape only adds, drops or
    moves axes of size 1 (how tf2onnx writes a transpose of a batch of 1): a constant shape whose other
    axes are the input's, in order, each of a static size, and -1 (or the same static size) at ``axis``."""
    target, shape = const_value(graph, node.input[1]), graph.get_shape(node.input[0])
    if not isinstance(target, list) or shape is None or axis >= len(target) or target[axis] == 1:
        return None
    kept_out = [i for i, size in enumerate(target) if size != 1]
    kept_in = [i for i, size in enumerate(shape) if size != 1]
    if len(kept_out) != len(kept_in):
        return None
    for out, into in zip(kept_out, kept_in):
        same = shape[into] is not None and target[out] == shape[into] > 0
        if not (same or (out == axis and target[out] == -1)):
            return None
    return kept_in[kept_out.index(axis)]


def concatenated_beside(graph, node, axis: int) -> Optional[list]:
    """The parts of ``node`` when it concatenates them along another axis than ``axis`` of its output
    (TensorFlow's ConcatV2 or ONNX's Concat: each part then has that axis whole), else None."""
    if node.type == "ConcatV2":
        along, parts = const_value(graph, node.input[-1]), node.input[:-1]
    elif node.type == "Concat":
        along, parts = node.get_attr_value("axis", None), node.input
    else:
        return None
    rank = rank_of(graph, node.output[0])
    if not rank or not isinstance(along, int) or along % rank == axis:
        return None
    return list(parts)


def _squeezed_axis(graph, node, axis: int) -> Optional[tuple]:
    """The input axis a Squeeze's output axis ``axis`` is; None where the squeezed axes are not named
    (squeezing every axis of size 1 may remove the one followed)."""
    rank = rank_of(graph, node.input[0])
    dims = node.get_attr_value("squeeze_dims", []) or node.get_attr_value("axis", []) or \
        node.get_attr_value("axes", []) or (const_value(graph, node.input[1]) if len(node.input) > 1 else [])
    dims = dims if isinstance(dims, list) else [dims]
    if rank is None or not dims:
        return None
    kept = [a for a in range(rank) if a not in {d % rank for d in dims}]
    return (node.input[0], kept[axis]) if axis < len(kept) else None


def shape_dim_of(graph, scalar):
    """(t, k) when the scalar ``scalar`` is ``shape(t)[k]``: a StridedSlice that picks one element,
    or as ONNX spells it, a Squeeze of a one-element Slice, or a Gather of one index."""
    node = producer(graph, scalar)
    if node is not None and node.type == "Gather" and node.get_attr_value("axis", 0) == 0:
        index = const_value(graph, node.input[1])
        return shape_element(graph, node.input[0], index) if isinstance(index, int) and index >= 0 else None
    if node is not None and node.type == "Squeeze":
        inner = producer(graph, node.input[0])
        if inner is not None and inner.type == "Gather" and inner.get_attr_value("axis", 0) == 0:
            index = const_value(graph, inner.input[1])
            return shape_element(graph, inner.input[0], index[0]) \
                if isinstance(index, list) and len(index) == 1 and index[0] >= 0 else None
        return _one_element_slice(graph, inner)
    if node is None or node.type != "StridedSlice" or node.get_attr_value("shrink_axis_mask", 0) != 1:
        return None
    begin, end, strides = (const_value(graph, t) for t in node.input[1:4])
    if strides != [1] or not isinstance(begin, list) or len(begin) != 1 or end != [begin[0] + 1]:
        return None
    return shape_element(graph, node.input[0], begin[0], 1)



def _one_element_slice(graph, node):
    """(t, k) when ``node`` is ONNX's ``Slice(shape(t), [k], [k + 1])`` (on axis 0, step 1)."""
    if node is None or node.type != "Slice":
        return None
    starts, ends = (const_value(graph, t) for t in node.input[1:3])
    axes = const_value(graph, node.input[3]) if len(node.input) > 3 and node.input[3] else [0]
    steps = const_value(graph, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
    if not isinstance(starts, list) or len(starts) != 1 or starts[0] < 0 or ends != [starts[0] + 1] or axes != [0] \
            or steps != [1]:
        return None
    return shape_element(graph, node.input[0], starts[0])


# building: an If; the plain nodes are :mod:`.nodes`'s

def make_if(graph, condition: str, name: str, then_branch, else_branch) -> list:
    """An If (named after ``name``) on ``condition`` whose branches are built by the two functions
    (graph -> output tensors)."""
    branches = {}
    for key, build in (("then_branch", then_branch), ("else_branch", else_branch)):
        branches[key] = _branch(graph)
        _set_outputs(branches[key], build(branches[key]))
    then, other = branches["then_branch"], branches["else_branch"]
    shapes = [_common_rank(then.get_shape(tensor), other.get_shape(tensor_else))
              for tensor, tensor_else in zip(then.outputs, other.outputs)]
    # given, not inferred: tf2onnx's inference would copy both branches into a model of their own
    node = graph.make_node("If", [condition], output_count=len(then.outputs), branches=branches,
                           name=utils.make_name(name), dtypes=[then.get_dtype(t) for t in then.outputs],
                           shapes=shapes, infer_shape_dtype=False)
    return list(node.output)


def _common_rank(shape, other):
    """``shape`` (rank only, as the branches' outputs have) where both branches give that rank, else None."""
    return shape if shape is not None and other is not None and len(shape) == len(other) else None


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
            branch.set_dtype(node.output[0], dtype_of(branch, tensor))
            tensor = node.output[0]
        if branch.get_dtype(tensor) is None:
            branch.set_dtype(tensor, dtype_of(branch.parent_graph, tensor))
        branch.set_shape(tensor, _rank_only(branch.get_shape(tensor)))
        outputs.append(tensor)
    branch.outputs = outputs


def _rank_only(shape):
    """``shape`` with every dimension unknown: the branches of an If may differ in each dimension."""
    return None if shape is None else [-1] * len(shape)
