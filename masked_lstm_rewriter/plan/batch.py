# SPDX-License-Identifier: Apache-2.0
"""Plan each layer's mask: does it provably have its input's batch size, else broadcast it.

Keras lets a ``[1, T]`` mask stand for every row (its ``where`` broadcasts), while ``sequence_lens``
must have one length per row. A mask computed from the layer's own input (``Masking``), or from
the token ids an ``Embedding`` looked up, has the input's batch by construction; a mask fed as a
model input of its own may have one row at run time whatever its declared shape. Such a mask
is broadcast to the input's batch in the graph (:func:`broadcast_mask`, four nodes, once per mask
and batch: :class:`BatchMasks`); a provable one costs nothing.

:func:`batch_root` follows a tensor's batch axis back through ops that provably keep its size
(casts, elementwise ops of operands with one root, reductions and reshapes of other axes, an
embedding lookup, a transpose, and the loops of other masked layers being rewritten) to the
first tensor it cannot see through. Two tensors with the same root have the same batch size; a
tensor with no known producer (a model input) is its own root, so a mask input is never proven
equal to another input.
"""

from __future__ import annotations

from tf2onnx import utils

from ..graph import (axis_source, concatenated_beside, const_value, int64_const, make_op, producer, rank_of,
                     static_dim)


_ELEMENTWISE = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Equal", "NotEqual", "Greater",
                "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr", "SelectV2",
                "Div", "GreaterOrEqual", "LessOrEqual", "And", "Or"}  # not Where: TensorFlow's Where gives the
# coordinates of true elements


_REDUCTIONS = {"Any", "All", "Sum", "Max", "Min", "Mean", "Prod"}  # TensorFlow's: they carry keep_dims


_ONNX_VARIADIC = {"Max", "Min", "Sum", "Mean"}  # ONNX's elementwise ops of TensorFlow's reductions' names


def same_batch(graph, mask: str, x_tm: str, outputs: dict) -> bool:
    """Does the [B', T] ``mask`` provably have the batch size B of the time-major input ``x_tm``?

    ``outputs``: tensor -> (its batch axis, the time-major input of the masked layer it is an
    output of), for the layers being rewritten (their outputs have their input's batch)."""
    static = [static_dim(graph, mask, 0), static_dim(graph, x_tm, 1)]
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
    if kind in _REDUCTIONS and "keep_dims" in node.attr:
        return _reduction(graph, node, axis)
    if kind in _ELEMENTWISE or kind in _ONNX_VARIADIC:
        return _same_root(graph, node.input, tensor, axis, outputs)
    if kind in ("ConcatV2", "Concat"):  # a Bidirectional's merge_mode="concat", along the features
        parts = concatenated_beside(graph, node, axis)
        return None if parts is None else _same_root(graph, parts, tensor, axis, outputs)
    return axis_source(graph, node, tensor, axis)


def _same_root(graph, operands, tensor, axis, outputs):
    """Broadcasting (or concatenating along another axis): every operand that has the axis has one
    root there, or is a constant of size 1 there."""
    rank = rank_of(graph, tensor)
    if rank is None:
        return None
    roots = set()
    for operand in operands:
        operand_rank = rank_of(graph, operand)
        if operand_rank is None or operand_rank > rank:  # more axes than the result: no broadcast
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


def _reduction(graph, node, axis):
    rank = rank_of(graph, node.input[0])
    axes = const_value(graph, node.input[1])
    if rank is None or axes is None:
        return None
    reduced = sorted({a % rank for a in (axes if isinstance(axes, list) else [axes])})
    if node.get_attr_value("keep_dims", 0):
        return None if axis in reduced else (node.input[0], axis)
    kept = [a for a in range(rank) if a not in reduced]
    return (node.input[0], kept[axis]) if axis < len(kept) else None


class BatchMasks:
    """The mask each layer's node reads: its own where it provably has the input's batch
    (:func:`same_batch`), else broadcast to it (Keras broadcasts a [1, T] mask), once per mask and
    input batch (the layers of a stack share one). The broadcast reads the batch size off the
    root of the input's batch axis, upstream of every layer sharing it (the first layer emitted
    may sit on top of another one).

    ``layers``: every layer being rewritten, masked or not. The walk to a root steps over each
    one's outputs (they have its input's batch), so that no root is a tensor that rewriting one
    of them removes (an unmasked layer under a masked one: its stacked outputs)."""

    def __init__(self, graph, layers):
        self.graph = graph
        outputs = {}
        for layer in layers:
            outputs.update({tensor: (axis, layer.x) for tensor, axis in layer.batch_axes().items()})
        self._keys = {id(layer): self._key(layer, outputs) for layer in layers if layer.mask is not None}
        self._cache = {}

    def _key(self, layer, outputs):
        """None: no broadcast; else what the broadcast is cached by (the mask, the root of the input's
        batch), or (the mask, the layer's id) where no root was found: then the layer's own input, read
        when it is emitted (rewriting the layer below renames it)."""
        try:
            if same_batch(self.graph, layer.mask, layer.x, outputs):
                return None
            return layer.mask, batch_root(self.graph, layer.x, 1, outputs)
        except Exception:  # pylint: disable=broad-except  (a graph shape not foreseen: broadcast, always right)
            return layer.mask, id(layer)

    def mask_for(self, layer) -> str:
        key = self._keys[id(layer)]
        if key is None:
            return layer.mask
        if key not in self._cache:
            mask, root = key
            like, axis = (layer.x, 1) if isinstance(root, int) else root
            self._cache[key] = broadcast_mask(self.graph, mask, like, axis)
        return self._cache[key]


BROADCAST_NAME = "masked_lstm_rewriter_mask_broadcast"  # the Expand's name, for tests and readers of the graph


def broadcast_mask(graph, mask: str, like: str, axis: int) -> str:
    """``mask`` [B', T] expanded to B rows, B the size of axis ``axis`` of ``like`` (the layer's
    input, or a tensor upstream of it that provably has its batch).

    Keras's ``where`` broadcasts a one-row mask over the batch; ``sequence_lens`` and the reorder
    need a row per batch row. ``Expand`` to [B, 1] leaves a [B, T] mask as it is, repeats a [1, T]
    one, and fails at run time for any other B' (as Keras does). Four nodes, for masks that do not
    provably have the input's batch already (a mask model input). (``Shape``'s start/end
    attributes would save the Gather, but the rewriter's nodes still go through tf2onnx's
    TensorFlow handlers, whose ``Shape`` does not keep them.)
    """
    g = graph
    batch = make_op(g, "Gather", make_op(g, "Shape", like), int64_const(g, "batch_axis", [axis]))
    target = make_op(g, "Concat", batch, int64_const(g, "one", [1]), axis=0)
    return g.make_node("Expand", [mask, target], name=utils.make_name(BROADCAST_NAME)).output[0]
