# SPDX-License-Identifier: Apache-2.0
"""Does a layer's mask provably have its input's batch size?

Keras lets a ``[1, T]`` mask stand for every row (its ``where`` broadcasts), while ``sequence_lens``
must have one length per row. A mask computed from the layer's own input (``Masking``), or from
the token ids an ``Embedding`` looked up, has the input's batch by construction; a mask fed as a
model input of its own may have one row at run time whatever its declared shape. Such a mask
is broadcast to the input's batch in the graph (:func:`masked_lstm_rewriter.masks.broadcast_mask`,
three nodes); a provable one costs nothing.

:func:`batch_root` follows a tensor's batch axis back through ops that provably keep its size
(casts, elementwise ops of operands with one root, reductions and reshapes of other axes, an
embedding lookup, a transpose, and the loops of other masked layers being rewritten) to the
first tensor it cannot see through. Two tensors with the same root have the same batch size; a
tensor with no known producer (a model input) is its own root, so a mask input is never proven
equal to another input.
"""

from __future__ import annotations

from .cell import producer

_SAME_SHAPE = {"Identity", "Cast", "LogicalNot", "Neg", "Abs", "Sigmoid", "Tanh", "Relu", "Relu6", "Elu", "Selu",
               "Softsign", "Softplus", "Exp", "Log", "Sqrt", "Square", "ReverseV2", "StopGradient", "BiasAdd"}
_ELEMENTWISE = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Equal", "NotEqual", "Greater",
                "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr", "SelectV2"}
_REDUCTIONS = {"Any", "All", "Sum", "Max", "Min", "Mean", "Prod"}


def same_batch(graph, mask: str, x_tm: str, outputs: dict) -> bool:
    """Does the [B', T] ``mask`` provably have the batch size B of the time-major input ``x_tm``?

    ``outputs``: tensor -> (its batch axis, the time-major input of the masked layer it is an
    output of), for the layers being rewritten (their outputs have their input's batch)."""
    static = [_dim(graph, mask, 0), _dim(graph, x_tm, 1)]
    if None not in static and static[0] == static[1]:
        return True
    return batch_root(graph, mask, 0, outputs) == batch_root(graph, x_tm, 1, outputs)


def batch_root(graph, tensor: str, axis: int, outputs: dict) -> tuple:
    """(tensor, axis) whose size provably equals axis ``axis`` of ``tensor``, as far back as the graph
    shows: where the walk stops, the size is that tensor's own (trivially)."""
    while True:
        if tensor in outputs and outputs[tensor][0] == axis:
            tensor, axis = outputs[tensor][1], 1
            continue
        node = producer(graph, tensor)
        step = None if node is None else _step_back(graph, node, tensor, axis, outputs)
        if step is None or step == (tensor, axis):
            return tensor, axis
        tensor, axis = step


def _step_back(graph, node, tensor, axis, outputs):
    """The (input, axis) of ``node`` that ``axis`` of its output ``tensor`` provably comes from, or
    None (the walk stops at ``tensor``)."""
    kind = node.type
    if kind in _SAME_SHAPE:
        return node.input[0], axis
    if kind in _ELEMENTWISE:
        return _same_root(graph, node.input, tensor, axis, outputs)
    if kind == "ConcatV2":  # a Bidirectional's merge_mode="concat", along the features
        rank, along = rank_of(graph, tensor), _const(graph, node.input[-1])
        if rank is None or not isinstance(along, int) or along % rank == axis:
            return None
        return _same_root(graph, node.input[:-1], tensor, axis, outputs)
    if kind in ("MatMul", "BatchMatMulV2") and graph.is_const(node.input[1]) and rank_of(graph, node.input[1]) == 2 \
            and not any(node.get_attr_value(a, 0) for a in ("transpose_a", "adj_x")):
        rank = rank_of(graph, tensor)  # x @ W (a Dense layer): the leading axes are x's
        return (node.input[0], axis) if rank is not None and axis < rank - 1 else None
    if kind in _REDUCTIONS:
        return _reduction(graph, node, axis)
    if kind == "Squeeze":
        return _squeeze(graph, node, axis)
    if kind == "ExpandDims":
        inserted = _axis(_const(graph, node.input[1]), rank_of(graph, tensor))
        return None if inserted is None or inserted == axis else (node.input[0], axis - (inserted < axis))
    if kind == "Transpose":
        perm = _const(graph, node.input[1])
        return None if perm is None else (node.input[0], int(perm[axis]))
    if kind == "Reshape":  # to a shape whose element ``axis`` is read off another tensor (tf.tensordot)
        return _shape_element(graph, node.input[1], axis)
    if kind == "GatherV2":  # an embedding lookup: params[indices], the indices' axes first
        rank = rank_of(graph, node.input[1])
        if _const(graph, node.input[2]) in (0, [0]) and node.get_attr_value("batch_dims", 0) == 0 \
                and rank is not None and axis < rank:
            return node.input[1], axis
    return None


def _same_root(graph, operands, tensor, axis, outputs):
    """Broadcasting (or concatenating along another axis): every operand that has the axis has one
    root there, or is a constant of size 1 there."""
    rank = rank_of(graph, tensor)
    if rank is None:
        return None
    roots = set()
    for operand in operands:
        operand_rank = rank_of(graph, operand)
        if operand_rank is None:
            return None
        operand_axis = axis - (rank - operand_rank)
        if operand_axis < 0:
            continue  # broadcast from the right: the operand does not have that axis
        if graph.is_const(operand):
            if graph.get_tensor_value(operand, as_list=False).shape[operand_axis] != 1:
                return None
            continue
        roots.add(batch_root(graph, operand, operand_axis, outputs))
    return roots.pop() if len(roots) == 1 else None


def _shape_element(graph, tensor, index, depth=8):
    """(t, k) when element ``index`` of the 1-D int tensor ``tensor`` is provably ``shape(t)[k]``:
    a Shape, a Gather or slice of one, a concatenation or stack of those (how ``tf.tensordot``,
    which Dense layers use on sequences, writes its output shape)."""
    node = producer(graph, tensor)
    if node is None or depth == 0:
        return None
    if node.type == "Shape":
        return node.input[0], index
    if node.type == "ConcatV2" and _const(graph, node.input[-1]) in (0, -1):
        for part in node.input[:-1]:
            shape = graph.get_shape(part)
            if shape is None or len(shape) != 1 or shape[0] is None or shape[0] < 0:
                return None
            if index < shape[0]:
                return _shape_element(graph, part, index, depth - 1)
            index -= shape[0]
        return None
    if node.type == "GatherV2" and _const(graph, node.input[2]) == 0:
        indices = _const(graph, node.input[1])
        indices = indices if isinstance(indices, list) else [indices]
        return None if indices[index] is None else _shape_element(graph, node.input[0], indices[index], depth - 1)
    if node.type == "Pack" and node.get_attr_value("axis", 0) == 0 and index < len(node.input):
        return shape_dim_of(graph, node.input[index])
    return None


def shape_dim_of(graph, scalar):
    """(t, k) when the scalar ``scalar`` is ``shape(t)[k]`` (a StridedSlice that picks one element)."""
    node = producer(graph, scalar)
    if node is None or node.type != "StridedSlice" or node.get_attr_value("shrink_axis_mask", 0) != 1:
        return None
    begin, end, strides = (_const(graph, t) for t in node.input[1:4])
    if strides != [1] or not isinstance(begin, list) or len(begin) != 1 or end != [begin[0] + 1]:
        return None
    return _shape_element(graph, node.input[0], begin[0], 1)


def _reduction(graph, node, axis):
    rank = rank_of(graph, node.input[0])
    axes = _const(graph, node.input[1])
    if rank is None or axes is None:
        return None
    reduced = sorted({a % rank for a in (axes if isinstance(axes, list) else [axes])})
    if node.get_attr_value("keep_dims", 0):
        return None if axis in reduced else (node.input[0], axis)
    kept = [a for a in range(rank) if a not in reduced]
    return (node.input[0], kept[axis]) if axis < len(kept) else None


def _squeeze(graph, node, axis):
    rank = rank_of(graph, node.input[0])
    dims = node.get_attr_value("squeeze_dims", []) or node.get_attr_value("axis", [])
    if rank is None or not dims:
        return None  # squeezing every axis of size 1 may remove the batch axis itself
    kept = [a for a in range(rank) if a not in {d % rank for d in dims}]
    return (node.input[0], kept[axis]) if axis < len(kept) else None


def _axis(value, rank):
    """ExpandDims' inserted axis, as a position in its output."""
    if rank is None or value is None:
        return None
    value = value[0] if isinstance(value, list) and len(value) == 1 else value
    return value % rank if isinstance(value, int) else None


def rank_of(graph, tensor):
    shape = graph.get_shape(tensor)
    return None if shape is None else len(shape)


def _dim(graph, tensor, axis):
    shape = graph.get_shape(tensor)
    return shape[axis] if shape is not None and len(shape) > axis and shape[axis] is not None \
        and shape[axis] > 0 else None


def _const(graph, tensor):
    return graph.get_tensor_value(tensor) if graph.is_const(tensor) else None
