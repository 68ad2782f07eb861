# SPDX-License-Identifier: Apache-2.0
"""The pipeline: every source's layers in a graph, each taken through the stages: read, veto, plan,
emit, connect; or refused. In a streaming conversion the veto also plans each layer's state inputs
and outputs (:mod:`.streaming`). The plan pairs a forward and a backward layer into one
bidirectional node where that is exact (:mod:`..plan.pairs`); a pair whose emission fails is
rolled back and emitted as two layers.

Every refusal reaches the log and the report here, and only here (:func:`refuse`). A layer whose
rewrite fails half-way is rolled back (:mod:`.snapshot`) and refused with what failed where
(:mod:`.unforeseen`).
"""

from __future__ import annotations

import logging
from typing import Optional

from .. import targets
from ..layer_names import keras_path
from ..emit.bidirectional import emit_pair, emit_unmasked_pair
from ..emit.layer import emit_layer
from ..emit.node import opset_refusal
from ..emit.rewire import rewire
from ..emit.unmasked import emit_unmasked_layer
from ..failure import Refusal
from ..plan.batch import BatchMasks
from ..plan.masks import MaskPlanner
from ..plan.order import bottom_up
from ..plan.pairs import DirectionPair, pair_directions
from ..plan.schedule import Cuts
from ..report import record
from .origin import as_computed_there
from .snapshot import GraphSnapshot
from .streaming import as_streamed, returning_states, streamable
from .unforeseen import failed_rewrite

logger = logging.getLogger("masked_lstm_rewriter")


def refuse(layer: str, refusal: Refusal, mask_mode: str, masked: bool = True, left_as: str = "a Loop",
           remedy: Optional[str] = None) -> None:
    """The layer stays as tf2onnx has it (``left_as``): say why (and ``remedy``, what to do instead),
    in the log (WARNING) and in the report."""
    what = "masked recurrent layer" if masked else "recurrent layer (no mask)"
    layer = keras_path(layer)
    said = refusal.reason if remedy is None else f"{refusal.reason}; {remedy}"
    logger.warning("%s '%s' left as %s: %s", what, layer, left_as, said)
    if refusal.where:
        logger.debug("%s '%s': refused at node '%s'", what, layer, refusal.where)
    record(layer, False, said, mask_mode, masked=masked, left_as=left_as)


def rewrite_graph(graph, ops, sources, mask_mode: str, target, schedule: bool = False,
                  streaming: bool = False) -> None:
    """Rewrite every layer the ``sources`` find among ``ops`` that reads and passes the target's veto;
    say why of every other one they find. ``streaming``: each layer rewritten takes its initial states
    as graph inputs and returns its final states as graph outputs (:mod:`.streaming`)."""
    schedule = schedule and _schedule_allowed(graph, target)
    for source in sources:
        layers = []
        for found in _read_bottom_up(graph, source, ops):
            layer = vetted(graph, found.layer, target, streaming)
            if isinstance(layer, Refusal):
                refuse(found.name, layer, mask_mode, found.masked, source.left_as, source.remedy)
            else:
                layers.append(layer)
        if layers:
            connect = returning_states(source.connect) if streaming else source.connect
            rewrite_layers(graph, source.prepare(graph, layers), mask_mode, target, schedule, connect)


def _schedule_allowed(graph, target) -> bool:
    """No runtime of ``target`` vetoes the schedule for ``graph`` (:func:`..targets.schedule_veto`; said at INFO)."""
    veto = targets.schedule_veto(graph, target)
    if veto is not None:
        logger.info("the length-aware schedule is left out: %s; a model converted with runtime='onnxruntime' "
                    "has it", veto)
    return veto is None


def _stack_allowed(layer, schedule: bool, target) -> bool:
    """Can ``layer`` have the schedule as far as its cells go (:func:`..targets.schedules_cell_stacks`;
    a stack of cells left out is said at INFO)?"""
    if len(layer.cells) == 1 or targets.schedules_cell_stacks(target):
        return True
    if schedule:
        logger.info("layer '%s' (stacked cells): the length-aware schedule is left out, OpenVINO fails to compile "
                    "it with static shapes; a model converted with runtime='onnxruntime' has it",
                    keras_path(layer.layer))
    return False


def _read_bottom_up(graph, source, ops) -> list:
    """The source's candidates read (not the nodes that are no recurrent layer), the layers in the order
    :func:`..plan.order.bottom_up` gives them (the refusals where they were): streamed layers' state
    inputs and outputs, the report and the shared mask plan follow it."""
    found = [item for item in (source.read(graph, node) for node in source.candidates(graph, ops)) if item is not None]
    read = {id(item.layer): item for item in found}
    ordered = iter(bottom_up(graph, [item.layer for item in found if not isinstance(item.layer, Refusal)]))
    return [item if isinstance(item.layer, Refusal) else read[id(next(ordered))] for item in found]


def rewrite_layers(graph, layers, mask_mode: str, target, schedule: bool = False, connect=rewire) -> None:
    """Plan and emit each layer read (``connect``: how the source's consumers are pointed at the results)."""
    planner = MaskPlanner(graph, mask_mode, schedule, cut=targets.cut_to_longest(target),
                          zeros=targets.zeros_past_lengths(target), zero_state=targets.explicit_zero_state(target),
                          cuts=Cuts(*targets.schedule_cuts(target)),
                          concat_steps=targets.steps_appended_by_concat(target))
    masks = BatchMasks(graph, layers)
    for planned in pair_directions(layers, mask_mode, target, schedule):
        if isinstance(planned, DirectionPair) and _rewrite_pair(graph, planned, planner, masks, target, connect,
                                                                mask_mode):
            continue
        for layer in planned.halves if isinstance(planned, DirectionPair) else (planned,):
            if layer.mask is None:
                _rewrite(graph, layer, GraphSnapshot(graph),
                         lambda layer: _emit_unmasked(graph, layer, target, connect), mask_mode, masked=False)
            else:
                _rewrite(graph, layer, GraphSnapshot(graph, planner, masks),
                         lambda layer: _emit_masked(graph, layer, planner, masks, target, connect), mask_mode)


def _rewrite_pair(graph, pair: DirectionPair, planner: MaskPlanner, masks: BatchMasks, target, connect,
                  mask_mode: str) -> bool:
    """Emit ``pair`` as one bidirectional node; on any failure, restore the graph and say so (the caller
    then emits each half alone). Whether it was emitted."""
    forward, backward = pair.halves
    masked = forward.mask is not None
    snapshot = GraphSnapshot(graph, planner, masks)
    try:
        if masked:
            tensors = planner.tensors_for(masks.mask_for(forward), forward.mask_post_padded, forward.x)
            emit_pair(graph, pair, tensors, connect)
        else:
            emit_unmasked_pair(graph, pair, connect)
    except Exception as error:  # pylint: disable=broad-except
        snapshot.restore()
        logger.warning("%s and %s: not one bidirectional node, each emitted alone: %s", forward.describe(),
                       backward.describe(), failed_rewrite(error, forward.while_node).reason)
        return False
    for layer, other in ((forward, backward), (backward, forward)):
        _rewritten(layer, targets.not_for(layer, target, bidirectional=True), mask_mode, masked,
                   partner=other)
    return True


def vetted(graph, layer, target, streaming: bool = False):
    """``layer`` (or a Refusal) past the opset's and the target's refusals, and when ``streaming``,
    reading its initial states from graph inputs (planned first: a streamed LSTM carries its cell
    state, which the target's veto must see)."""
    layer = as_computed_there(layer)
    if streaming and not isinstance(layer, Refusal):
        layer = streamable(graph, layer)
    if isinstance(layer, Refusal):
        return layer
    refused = opset_refusal(graph) or targets.target_refusal(layer, target)
    if refused:
        return Refusal(refused, layer.while_node)
    return as_streamed(graph, layer) if streaming else layer


def _emit_masked(graph, layer, planner: MaskPlanner, masks: BatchMasks, target, connect) -> list:
    """Plan the layer's mask and emit the layer; the vetoes of the other runtimes."""
    tensors = planner.tensors_for(masks.mask_for(layer), layer.mask_post_padded, layer.x,
                                  schedule=_stack_allowed(layer, planner.schedule, target))
    vetoes = targets.not_for(layer, target)
    emit_layer(graph, layer, tensors, connect)
    return vetoes


def _emit_unmasked(graph, layer, target, connect) -> list:
    vetoes = targets.not_for(layer, target)
    emit_unmasked_layer(graph, layer, connect)
    return vetoes


def _rewrite(graph, layer, snapshot: GraphSnapshot, emit, mask_mode: str, masked: bool = True) -> None:
    """Emit one layer (``emit(layer)`` -> the other runtimes' vetoes); on any failure, restore the
    graph and refuse the layer."""
    try:
        vetoes = emit(layer)
    except Exception as error:  # pylint: disable=broad-except
        snapshot.restore()  # the loop stands exactly as tf2onnx made it
        refuse(layer.layer, failed_rewrite(error, layer.while_node), mask_mode,
               masked, layer.left_as, layer.remedy)
        return
    _rewritten(layer, vetoes, mask_mode, masked)


def _rewritten(layer, vetoes: list, mask_mode: str, masked: bool, partner=None) -> None:
    """Log and record a rewritten layer (``partner``: the other half of its bidirectional node)."""
    what = "masked " if masked else ""
    detail = f"{layer.kinds}, {emitted(layer, masked, partner)}"
    logger.info("%s%s rewritten into %s (%s; %s)", what, layer.describe(), _native_ops(layer, partner),
                emitted(layer, masked, partner), f"mask_mode={mask_mode}" if masked else "no mask")
    for veto in vetoes:
        logger.info("%s%s%s: for %s, %s (%s)", what, layer.describe(), veto.what, veto.runtime, veto.remedy, veto.reason)
        detail += f"; for {veto.runtime}, {veto.remedy}"
    if layer.note:
        logger.info("%s%s: %s", what, layer.describe(), layer.note)
        detail += f"; {layer.note}"
    record(keras_path(layer.layer), True, detail, mask_mode, tuple(dict.fromkeys(veto.runtime for veto in vetoes)),
           masked)


def emitted(layer, masked: bool = True, partner=None) -> str:
    """What the native nodes run over: "forward", or for a backward layer (``go_backwards``, a
    ``Bidirectional``'s backward half) "backward: a forward node over each row reversed within its
    length" (no mask: over the sequence reversed in time): a layer alone is emitted with ONNX's
    ``direction="forward"``, for a masked layer ``"reverse"`` would start each row in its padding.
    A half of a bidirectional node (``partner``: the other half) says which direction it is and with
    whom: "backward: the reverse direction of a bidirectional node, with 'forward_lstm'"."""
    if partner is not None:
        side = ("forward", "forward") if layer.direction == "forward" else ("backward", "reverse")
        return f"{side[0]}: the {side[1]} direction of a bidirectional node, with '{keras_path(partner.layer)}'"
    if layer.direction == "forward":
        return "forward"
    nodes = "a forward node" if len(layer.cells) == 1 else "forward nodes"
    over = "each row reversed within its length" if masked else "the sequence reversed in time"
    return f"backward: {nodes} over {over}"


def _native_ops(layer, partner=None) -> str:
    """"a native ONNX LSTM", for a half of a pair "one native ONNX LSTM, direction=bidirectional", or
    for stacked cells "stacked native ONNX LSTM, GRU nodes"."""
    if partner is not None:
        return f"one native ONNX {layer.top.op}, direction=bidirectional"
    if len(layer.cells) == 1:
        return f"a native ONNX {layer.top.op}"
    return f"stacked native ONNX {', '.join(cell.op for cell in layer.cells)} nodes"
