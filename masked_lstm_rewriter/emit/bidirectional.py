# SPDX-License-Identifier: Apache-2.0
"""Emit a pair of layers (:mod:`..plan.pairs`): one native node with ``direction="bidirectional"``,
then each half's outputs as Keras has them.

The node's ``Y`` is [T, 2, B, H]: ``Y[:, 0]`` the forward half, ``Y[:, 1]`` the backward half in the
model's time order, each row run over its first ``sequence_lens`` steps (every step without a mask).
So the backward half reads no reversed input and its outputs need no reversal back, and the rest
is what a single layer gets:

* masked, each half's :class:`.layer.NodeOutputs` go through the same fix-ups (:func:`.layer.keras_outputs`,
  :func:`.layer.keras_states`): the forward half's last output is its ``Y`` at each row's last valid
  step, the backward half's its ``Y`` at step 0 (zeros for a row with no valid step); an LSTM whose
  final cell state is used gets the padding column in both directions;
* without a mask, the forward half's last output is its last step, the backward half's its first,
  and its sequence is handed over in both orders, so that a ``Bidirectional``'s reversal back is
  skipped (:func:`.rewire.rewire`).
"""

from __future__ import annotations

from ..graph import int64_const, make_op
from ..plan.masks import MaskTensors
from ..plan.pairs import DirectionPair
from .layer import NodeOutputs, add_time_axis, drop_time_axis, keras_outputs, keras_states, last_valid_step, layer_input, \
    reverse_time, time_step, with_padding_column, zero
from .node import directions_node, emit_directions
from .rewire import KerasOutputs, rewire


def emit_pair(graph, pair: DirectionPair, masks: MaskTensors, connect=rewire) -> None:
    """The masked ``pair`` as one bidirectional node over its rows' valid steps, then each half's Keras
    outputs and final states; ``connect`` points the source's consumers at each half's."""
    forward, _ = pair.halves
    x, cells = layer_input(graph, forward, masks), tuple(layer.top for layer in pair.halves)
    padding_column = any(cell.carries_cell_state for cell in cells)  # both directions read the same input
    if padding_column:
        x = with_padding_column(graph, x, masks.valid_steps, forward.input_size)
    node = directions_node(graph, cells, x, masks.lengths, _name(pair, "masked_bidirectional"), padding_column,
                           masks.batch)
    for layer, (y, c_last) in zip(pair.halves, emit_directions(graph, node)):
        step = last_valid_step(graph, y, masks, node.hidden) if layer.direction == "forward" else \
            _first_step(graph, y, masks)
        out = NodeOutputs(y=y, y_node=y, h_last=drop_time_axis(graph, step),
                          h_last_step=step, c_last=c_last)
        states = [keras_states(graph, layer.top, masks, out.h_last, out.c_last)]
        connect(graph, layer, keras_outputs(graph, layer, out, masks), states)


def emit_unmasked_pair(graph, pair: DirectionPair, connect=rewire) -> None:
    """The unmasked ``pair`` as one bidirectional node over every step; ``connect`` as :func:`emit_pair`."""
    forward, _ = pair.halves
    node = directions_node(graph, tuple(layer.top for layer in pair.halves), forward.x, "",
                           _name(pair, "bidirectional"))
    for layer, (y, c_last) in zip(pair.halves, emit_directions(graph, node)):
        backward = layer.direction != "forward"
        last_h = time_step(graph, y, 0 if backward else -1)
        sequence, in_time_order = (reverse_time(graph, y), y) if backward else (y, None)
        if not layer.writes_sequence:
            sequence, in_time_order = add_time_axis(graph, last_h), None
        connect(graph, layer, KerasOutputs(sequence, in_time_order, last_h), [(last_h, c_last)])


def _first_step(g, y: str, masks: MaskTensors) -> str:
    """[1, B, H]: ``y`` [T, B, H] at step 0, zeros for a row with no valid step."""
    first = make_op(g, "Slice", y, int64_const(g, "starts", [0]), int64_const(g, "ends", [1]),
                    int64_const(g, "axes", [0]))
    return make_op(g, "Where", masks.has_steps, first, zero(g))


def _name(pair: DirectionPair, what: str) -> str:
    """The node's name: the forward half's layer, what it is, the op ("bi/forward_lstm/masked_bidirectional_lstm")."""
    return f"{pair.forward.layer}/{what}_{pair.forward.top.kind.lower()}"
