# SPDX-License-Identifier: Apache-2.0
"""Emit a layer read from a cuDNN op: its input seen time-major, and its results handed to what read
the op (see :mod:`..read.cudnn`), then the op and Keras's fix-ups around it removed."""

from __future__ import annotations

import dataclasses

from ..graph import make_op
from ..layer import MaskedRecurrentLayer
from ..read.cudnn import CudnnLayer
from .rewire import KerasOutputs, replace_tensor


def with_time_major_input(graph, layer: MaskedRecurrentLayer) -> MaskedRecurrentLayer:
    """``layer`` (an op's: cuDNN's, LiteRT's) reading its batch-major input through a Transpose, as the
    emitter reads every layer. Made before any layer is emitted, so that rewriting the layer below
    renames what it reads."""
    x = make_op(graph, "Transpose", layer.x_source, perm=[1, 0, 2])
    return dataclasses.replace(layer, x_time_major=x)


def rewire_cudnn(g, layer: CudnnLayer, outputs: KerasOutputs, states):
    """Point what read the op's sequence (after go_backwards's reversals) and its squeezed final
    states at the emitted tensors, then remove the op and those nodes. The last output is not
    needed: Keras's cuDNN path returns the final h as the last output."""
    if layer.sequence_result is not None:
        batch_major = outputs.batch_major if outputs.in_time_order is None else None
        batch_major = batch_major or make_op(g, "Transpose", outputs.sequence, perm=[1, 0, 2])
        replace_tensor(g, layer.sequence_result, batch_major)
    (final_h, final_c), = states
    squeezes = []
    for old, new in ((layer.top.final_h, final_h), (layer.top.final_c, final_c)):
        if old is not None:
            replace_tensor(g, old, new)
            squeezes.append(g.get_node_by_output(old))
    for node in (*layer.sequence_chain, *squeezes, layer.while_node):
        g.remove_node(node.name)
