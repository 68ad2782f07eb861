# SPDX-License-Identifier: Apache-2.0
"""A graph's cuDNN ops (Keras 3 traced with a GPU), each read into a layer and rewritten like a
loop's; or refused, with what to do instead (tf2onnx converts no cuDNN op)."""

from __future__ import annotations

from ..emit.cudnn import rewire_cudnn, with_time_major_input
from ..failure import Refusal
from ..read.cudnn import CUDNN_FIX, CUDNN_OPS, LEFT_AS, cudnn_layer_name, mark_bidirectional, read_cudnn
from .rewrite import refuse, rewrite_layers, vetted


def rewrite_cudnn_ops(graph, ops, mask_mode: str, target, schedule: bool = False) -> None:
    """Rewrite every cuDNN op among ``ops`` that reads and passes the target's veto."""
    layers = []
    for node in (op for op in ops if op.type in CUDNN_OPS):
        layer = vetted(graph, read_cudnn(graph, node), target)
        if isinstance(layer, Refusal):
            refuse(cudnn_layer_name(node), layer, mask_mode, _is_masked(graph, node), LEFT_AS, CUDNN_FIX)
        else:
            layers.append(layer)
    mark_bidirectional(layers)
    rewrite_layers(graph, [with_time_major_input(graph, layer) for layer in layers], mask_mode, target, schedule,
                   connect=rewire_cudnn)


def _is_masked(graph, node) -> bool:
    """Does the op count its rows' lengths from a mask (for the report; an unread op counts as masked)?"""
    lengths = graph.get_node_by_output(node.input[4]) if len(node.input) > 4 else None
    return lengths is None or lengths.type != "Fill"
