# SPDX-License-Identifier: Apache-2.0
"""Emit a layer read from LiteRT's fused LSTM op (:mod:`..read.litert_lstm`): its sequence handed to what
read the op, in the op's layout, then the op removed."""

from __future__ import annotations

from ..graph import make_op
from ..read.litert_lstm import LiteRTLayer
from .rewire import KerasOutputs, replace_tensor


def rewire_litert(g, layer: LiteRTLayer, outputs: KerasOutputs, states):  # pylint: disable=unused-argument
    """Point what read the op's sequence at the emitted one (the op has no state outputs), then remove the op."""
    sequence = outputs.sequence
    if layer.batch_major:
        sequence = outputs.batch_major or make_op(g, "Transpose", sequence, perm=[1, 0, 2])
    replace_tensor(g, layer.while_node.output[0], sequence)
    g.remove_node(layer.while_node.name)
