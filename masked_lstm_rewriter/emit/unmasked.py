# SPDX-License-Identifier: Apache-2.0
"""Emit an unmasked layer: one native node per cell over every step, and no mask machinery.

Every row runs every step, so the native node's outputs are Keras's as they are: no lengths, no
guard, no fix-ups. A backward layer (``go_backwards``, a ``Bidirectional``'s backward half) runs
forward over its input reversed in time and returns its sequence in that order, as Keras does.
"""

from __future__ import annotations

from ..layer import MaskedRecurrentLayer
from .layer import add_time_axis, reverse_time, time_step
from .node import cell_node, emit_node
from .rewire import KerasOutputs, rewire


def emit_unmasked_layer(graph, layer: MaskedRecurrentLayer, connect=rewire) -> None:
    """One forward node per cell of ``layer`` (each over the sequence of the one below), then the
    source's consumers pointed at the top cell's outputs and every cell's final states (``connect``:
    :func:`.rewire.rewire` for a loop)."""
    x = reverse_time(graph, layer.x) if layer.direction == "reverse" else layer.x
    states = []
    for cell in layer.cells:
        x, c_last = emit_node(graph, cell_node(graph, cell, x, "", f"{layer.layer}/{cell.kind.lower()}"), None)
        states.append((time_step(graph, x, -1), c_last))
    last_h = states[-1][0]
    sequence = x if layer.writes_sequence else add_time_axis(graph, last_h)
    # what a Bidirectional reads where it reverses a backward sequence back: one Slice instead of two
    in_time_order = reverse_time(graph, x) if layer.direction == "reverse" and layer.writes_sequence else None
    connect(graph, layer, KerasOutputs(sequence, in_time_order, last_h), states)
