# SPDX-License-Identifier: Apache-2.0
"""Plan: which forward and backward layers become one native node with ``direction="bidirectional"``.

A ``Bidirectional`` layer is read as two layers, a forward half and a backward one (``direction=
"reverse"``) over the same input and mask. ONNX's reverse direction over every step is exactly
Keras's backward half, and over each row's first ``sequence_lens`` steps too on every runtime that
honours them in both directions: then the two halves are one node, which runtimes run as one kernel,
and the backward half needs no reversal of its input and outputs (``ReverseSequence`` or ``Slice``).
Every other layer is emitted alone, as before.
"""

from __future__ import annotations

import dataclasses

from .. import targets
from ..cells import kind_of
from ..layer import MaskedRecurrentLayer


@dataclasses.dataclass(frozen=True)
class DirectionPair:
    """A forward and a backward layer emitted as one ``direction="bidirectional"`` node."""

    forward: MaskedRecurrentLayer
    backward: MaskedRecurrentLayer

    @property
    def halves(self) -> tuple:
        """The layers in the node's order of directions: forward, then backward."""
        return self.forward, self.backward


def pair_directions(layers, mask_mode: str, target, schedule: bool = False) -> list:
    """``layers`` in their order, the first of each forward and backward layer that qualify replaced by
    their :class:`DirectionPair` (and the other dropped from its own place); every other layer as it is.

    A forward and a backward layer qualify when they read the same input (``x_source``) with the same
    mask (or both none), and their single cells have one kind, size, input size, activations and
    attributes (a GRU's ``linear_before_reset``), both start from zeros or both from given states, and
    stream no state; and no runtime of ``target`` runs that node slower than two forward nodes
    (:func:`..targets.bidirectional_slow`: onnxruntime's LSTM and GRU, OpenVINO's every one). Masked, also:

    * each row's valid steps stay in place and in order, so that ``sequence_lens`` describes them:
      ``mask_mode="post"``, or a mask post-padded by construction (``"any"`` moves them: not paired);
    * no length-aware schedule (``schedule``), whose segments are forward nodes;
    * ``target`` (None: every runtime) honours a bidirectional node's ``sequence_lens`` for the op
      (:func:`..targets.bidirectional_veto`: OpenVINO ignores a bidirectional RNN's).
    """
    taken, found = set(), []
    for layer in layers:
        if id(layer) in taken:
            continue
        partner = next((other for other in layers if id(other) not in taken and other is not layer
                        and _qualify(layer, other, mask_mode, target, schedule)), None)
        if partner is None:
            found.append(layer)
            continue
        taken.update((id(layer), id(partner)))
        found.append(DirectionPair(layer, partner) if layer.direction == "forward" else DirectionPair(partner, layer))
    return found


def _qualify(one: MaskedRecurrentLayer, other: MaskedRecurrentLayer, mask_mode: str, target, schedule: bool) -> bool:
    """Can ``one`` and ``other`` be one bidirectional node (see :func:`pair_directions`)?"""
    if {one.direction, other.direction} != {"forward", "reverse"} or one.x_source != other.x_source \
            or one.mask != other.mask or len(one.cells) != 1 or len(other.cells) != 1:
        return False
    if not _same_cell(one.top, other.top) or _starts(one.top) != _starts(other.top) \
            or one.top.streamed_states or other.top.streamed_states:
        return False
    masked = one.mask is not None
    named = [activation.name for activation in one.top.activations] \
        if names_activations((one.top, other.top), masked) else []
    if targets.bidirectional_slow(one.top.op, target, named):
        return False
    if not masked:
        return True
    in_place = mask_mode == "post" or (one.mask_post_padded and other.mask_post_padded)
    return in_place and not schedule and targets.bidirectional_veto(one.top.op, target) is None


def names_activations(cells: tuple, masked: bool) -> bool:
    """Does the node of ``cells`` (one per direction) carry an ``activations`` attribute? Always but on
    an unmasked bidirectional node whose activations are the op's defaults: a masked one names them,
    since OpenVINO honours a bidirectional node's ``sequence_lens`` only then, and an unmasked one does
    not, since OpenVINO runs a bidirectional LSTM or GRU node with the attribute 2-10x slower."""
    if masked or len(cells) == 1:
        return True
    defaults = kind_of(cells[0].kind).default_activations
    return any((activation.name, activation.alpha, activation.beta) != (default, None, None)
               for cell in cells for activation, default in zip(cell.activations, defaults, strict=True))


def _starts(cell) -> tuple:
    """What a cell starts from: zeros, or which of its states are given (a node takes all or none)."""
    return (True,) if cell.zero_initial_state else (False, cell.initial_h is None, cell.initial_c is None)


def _same_cell(one, other) -> bool:
    """Do two cells make one node's two directions: one op, size, input size, activations, attributes?"""
    return (one.kind, one.hidden_size, one.input_size, tuple(one.activations), tuple(one.attributes)) == \
        (other.kind, other.hidden_size, other.input_size, tuple(other.activations), tuple(other.attributes))
