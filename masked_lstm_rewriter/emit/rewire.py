# SPDX-License-Identifier: Apache-2.0
"""Point the loop's consumers at the emitted tensors, then remove the loop."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ..graph import make_op, transpose_perm
from ..layer import MaskedRecurrentLayer


class KerasOutputs(NamedTuple):
    """A layer's outputs as Keras has them: its sequences time-major, and batch-major where one node gives
    that layout directly."""

    sequence: str                       # [T, B, H] in Keras's order ([1, B, H]: the last output alone)
    in_time_order: Optional[str]        # a reversed sequence in the model's time order, where emitted
    last_output: str                    # [B, H]
    batch_major: Optional[str] = None   # [B, T, H], where one node gives it: in_time_order where that
                                        # is given, else the sequence


def rewire(g, layer: MaskedRecurrentLayer, outputs: KerasOutputs, states):
    """Point every consumer of the loop at the new tensors (``states``: each cell's final h and c),
    then remove the loop."""
    for stacked in layer.sequence_outputs:
        if outputs.in_time_order is not None and layer.writes_sequence:
            _skip_reversal_back(g, stacked, outputs.in_time_order, outputs.batch_major)
        elif outputs.batch_major is not None:
            _skip_transpose(g, stacked, outputs.batch_major)
        replace_tensor(g, stacked, outputs.sequence)
    replace_tensor(g, layer.last_output, outputs.last_output)
    for cell, (final_h, final_c) in zip(layer.cells, states):
        replace_tensor(g, cell.final_h, final_h)
        if final_c is not None:  # else nothing reads it (carries_cell_state)
            replace_tensor(g, cell.final_c, final_c)
    removed = {g.get_node_by_output(stacked).name for stacked in layer.sequence_outputs} | {layer.while_node.name}
    for name in removed:  # an ONNX Loop returns its sequence itself
        g.remove_node(name)


def replace_tensor(g, old: Optional[str], new: Optional[str]) -> None:
    """Consumers of ``old`` read ``new``, which takes on ``old``'s shape where tf2onnx knew it and not
    ``new``'s: a layer stacked above reads its static sizes (the number of steps its loop runs)."""
    if old is None:
        return
    if g.get_shape(new) is None and g.get_shape(old) is not None:
        g.set_shape(new, g.get_shape(old))
    g.replace_all_inputs(old, new)


def _skip_transpose(g, stacked, batch_major):
    """Hand what reads Keras's batch-major transpose of the sequence (every layer that is not
    time-major has one) the ``batch_major`` sequence instead, and remove the transpose: in an ONNX
    file it would otherwise stay, reading a tensor that is gone."""
    for consumer in g.find_output_consumers(stacked):
        if consumer.type == "Transpose" and transpose_perm(g, consumer) == [1, 0, 2] and \
                consumer.output[0] not in g.outputs:
            replace_tensor(g, consumer.output[0], batch_major)
            g.remove_node(consumer.name)


def _skip_reversal_back(g, stacked, in_time_order, batch_major=None):
    """Where Keras reverses a reversed sequence back (``Bidirectional``: ``reverse(transpose(s))``
    over the time axis, or ``reverse(s, 0)`` of a time-major layer's ``s``), hand the consumers the
    sequence in time order instead of reversing twice (``batch_major``: that sequence as
    [B, T, H], where one node gives it)."""
    for consumer in g.find_output_consumers(stacked):
        if _reverses_axis(g, consumer, 0):  # time-major (tf_keras's time_major=True)
            replace_tensor(g, consumer.output[0], in_time_order)
        if consumer.type != "Transpose" or transpose_perm(g, consumer) != [1, 0, 2]:
            continue
        for reverse in g.find_output_consumers(consumer.output[0]):
            if _reverses_axis(g, reverse, 1):
                batch_major = batch_major or make_op(g, "Transpose", in_time_order, perm=[1, 0, 2])
                replace_tensor(g, reverse.output[0], batch_major)


def _reverses_axis(g, node, axis: int) -> bool:
    """Is ``node`` TensorFlow's ``ReverseV2`` over ``axis`` alone?"""
    return node.type == "ReverseV2" and g.is_const(node.input[1]) and g.get_tensor_value(node.input[1]) in (axis, [axis])
