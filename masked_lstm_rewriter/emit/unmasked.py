# SPDX-License-Identifier: Apache-2.0
"""Emit an unmasked layer: one native node per cell over every step, and no mask machinery.

Every row runs every step, so the native node's outputs are Keras's as they are: no lengths, no
guard, no fix-ups. A backward layer (``go_backwards``, a ``Bidirectional``'s backward half) runs
forward over its input reversed in time and returns its sequence in that order, as Keras does.
"""

from __future__ import annotations

import numpy as np
from tf2onnx import utils
from tf2onnx.graph_builder import GraphBuilder

from .. import targets
from ..cells import kind_of
from ..layer import MaskedRecurrentLayer
from .node import RecurrentNode, emit_node, node_attributes
from .read_alone import read_alone
from .rewire import rewire


def emit_unmasked_layer(graph, layer: MaskedRecurrentLayer) -> None:
    """One forward node per cell of ``layer`` (each over the sequence of the one below), then the loop's
    consumers pointed at the top cell's outputs and every cell's final states."""
    gb = GraphBuilder(graph)
    x = _reverse_time(gb, layer.x) if layer.direction == "reverse" else layer.x
    states = []
    for cell in layer.cells:
        x, last = _emit_cell(graph, layer, cell, x)
        states.append(last)
    last_h = states[-1][0]
    sequence = x if layer.writes_sequence else gb.make_unsqueeze({"data": last_h, "axes": [0]})
    rewire(graph, layer, sequence, None, last_h, states)


def _emit_cell(g, layer: MaskedRecurrentLayer, cell, x: str) -> tuple:
    """(the cell's sequence [T, B, H], (its final h, its final c or None)) from its node over ``x``."""
    kind = kind_of(cell.kind)
    w, r, b = kind.onnx_weights(cell)
    bias = _const(g, "B", b) if cell.bias is not None or cell.recurrent_bias else ""
    initial = () if cell.zero_initial_state else tuple(
        state for state in (cell.initial_h, cell.initial_c) if state is not None)
    node = RecurrentNode(kind=kind, x=read_alone(g, x) if targets.shared_swaps_scrambled() else x,
                         weights=(_const(g, "W", w), _const(g, "R", r), bias), lengths="", initial=initial,
                         attr=node_attributes(cell), name=f"{layer.layer}/{cell.kind.lower()}",
                         hidden=cell.hidden_size, wants_c=cell.carries_cell_state,
                         extra=tuple(_const(g, name, value) for name, value in kind.extra_inputs(cell)))
    y, c_last, _ = emit_node(g, node, None)
    gb = GraphBuilder(g)
    last_step = gb.make_slice({"data": y, "starts": [-1], "ends": [np.iinfo(np.int64).max], "axes": [0]})
    return y, (gb.make_squeeze({"data": last_step, "axes": [0]}), c_last)


def _reverse_time(gb, tensor: str) -> str:
    return gb.make_slice({"data": tensor, "starts": [-1], "ends": [np.iinfo(np.int64).min], "axes": [0],
                          "steps": [-1]})


def _const(graph, name, value):
    return graph.make_const(utils.make_name(name), value).output[0]
