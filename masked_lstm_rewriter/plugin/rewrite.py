# SPDX-License-Identifier: Apache-2.0
"""One graph's masked loops, each taken through the stages: read, veto, plan, emit; or refused.

Every refusal reaches the log and the report here, and only here (:func:`refuse`).
"""

from __future__ import annotations

import logging
from typing import Optional

from tf2onnx.tf_loader import find_function

from .. import targets
from ..emit.layer import emit_layer
from ..emit.node import opset_refusal
from ..emit.rewire import rewire
from ..emit.unmasked import emit_unmasked_layer
from ..failure import Refusal
from ..plan.batch import BatchMasks
from ..plan.masks import MaskPlanner
from ..read.body import BODY_MASKED_ATTR, BODY_MATCH_ATTR, is_masked_recurrent_body
from ..read.loop import layer_name, read_loop
from ..read.trip import COND_MATCH_ATTR
from ..report import record
from .snapshot import GraphSnapshot
from .unforeseen import failed_rewrite

logger = logging.getLogger("masked_lstm_rewriter")

LOWERED_REASON = ("the graph has TF1-style control flow (e.g. a GraphDef frozen with lowered control flow), "
                  "which tf2onnx turned into a Loop before this rewriter runs; freeze with "
                  "lower_control_flow=False or convert the SavedModel or Keras model")


def is_main_graph(graph) -> bool:
    """tf2onnx passes loop bodies (function subgraphs) first and the main graph last."""
    return graph.parent_graph is None and not getattr(graph, "_is_subgraph", False)


def refuse(layer: str, refusal: Refusal, mask_mode: str, masked: bool = True, left_as: str = "a Loop",
           remedy: Optional[str] = None) -> None:
    """The layer stays as tf2onnx has it (``left_as``): say why (and ``remedy``, what to do instead),
    in the log (WARNING) and in the report."""
    what = "masked recurrent layer" if masked else "recurrent layer (no mask)"
    said = refusal.reason if remedy is None else f"{refusal.reason}; {remedy}"
    logger.warning("%s '%s' left as %s: %s", what, layer, left_as, said)
    if refusal.where:
        logger.debug("%s '%s': refused at node '%s'", what, layer, refusal.where)
    record(layer, False, said, mask_mode, masked=masked, left_as=left_as)


def report_lowered_loops(graph, loops, mask_mode) -> None:
    """Masked loops that reached us already as ONNX Loops cannot be rewritten: say so."""
    for loop in loops:
        body = loop.get_body_graphs().get("body")
        if body is not None and is_masked_recurrent_body(body):
            refuse(layer_name(loop), Refusal(LOWERED_REASON, loop), mask_mode)


def rewrite_loops(graph, loops, mask_mode: str, target, schedule: bool = False) -> None:
    """Rewrite every recurrent loop among ``loops`` that reads and passes the target's veto."""
    layers = [layer for layer in (_read(graph, loop, mask_mode, target) for loop in loops) if layer is not None]
    rewrite_layers(graph, layers, mask_mode, target, schedule)


def rewrite_layers(graph, layers, mask_mode: str, target, schedule: bool = False, connect=rewire) -> None:
    """Plan and emit each layer read (``connect``: how the source's consumers are pointed at the results)."""
    planner = MaskPlanner(graph, mask_mode, schedule)
    masks = BatchMasks(graph, layers)
    for layer in layers:
        if layer.mask is None:
            _rewrite(graph, layer, GraphSnapshot(graph), lambda layer: _emit_unmasked(graph, layer, target, connect),
                     mask_mode, masked=False)
        else:
            _rewrite(graph, layer, GraphSnapshot(graph, planner, masks),
                     lambda layer: _emit_masked(graph, layer, planner, masks, target, connect), mask_mode)


def vetted(graph, layer, target):
    """``layer`` (or a Refusal) past the opset's and the target's refusals."""
    if isinstance(layer, Refusal):
        return layer
    refused = opset_refusal(graph) or targets.target_refusal(layer, target)
    return Refusal(refused, layer.while_node) if refused else layer


def _read(graph, loop, mask_mode: str, target):
    """The layer a While op holds, or None: not a masked recurrent loop, or refused (then said so)."""
    body_graph = find_function(loop.get_attr_str("body"))
    body = getattr(body_graph, BODY_MATCH_ATTR, None) if body_graph is not None else None
    if body is None:
        return None  # not a recurrent loop: none of our business
    masked = getattr(body_graph, BODY_MASKED_ATTR, True)
    if isinstance(body, Refusal) and not masked:  # a loop of some other kind, most likely: stock's business
        logger.debug("loop '%s' left as tf2onnx made it: %s", layer_name(loop), body.reason)
        return None
    cond_graph = find_function(loop.get_attr_str("cond"))
    condition = getattr(cond_graph, COND_MATCH_ATTR, None) if cond_graph is not None else None
    layer = vetted(graph, body if isinstance(body, Refusal) else read_loop(graph, loop, body, condition), target)
    if isinstance(layer, Refusal):
        refuse(layer_name(loop), layer, mask_mode, masked)
        return None
    return layer


def _emit_masked(graph, layer, planner: MaskPlanner, masks: BatchMasks, target, connect) -> list:
    """Plan the layer's mask and emit the layer; the vetoes of the other runtimes, seeing the plan."""
    tensors = planner.tensors_for(masks.mask_for(layer), layer.mask_post_padded)
    vetoes = targets.not_for(layer, target, scheduled=tensors.segments is not None)
    emit_layer(graph, layer, tensors, connect)
    return vetoes


def _emit_unmasked(graph, layer, target, connect) -> list:
    vetoes = targets.not_for(layer, target, scheduled=False)
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
    what = "masked " if masked else ""
    detail = f"{layer.kinds} direction={layer.direction}"
    logger.info("%s%s rewritten into %s (direction=%s, %s)", what, layer.describe(), _native_ops(layer),
                layer.direction, f"mask_mode={mask_mode}" if masked else "no mask")
    for veto in vetoes:
        logger.info("%s%s%s: for %s, %s (%s)", what, layer.describe(), veto.what, veto.runtime, veto.remedy, veto.reason)
        detail += f"; for {veto.runtime}, {veto.remedy}"
    record(layer.layer, True, detail, mask_mode, tuple(dict.fromkeys(veto.runtime for veto in vetoes)), masked)


def _native_ops(layer) -> str:
    """"a native ONNX LSTM", or for stacked cells "stacked native ONNX LSTM, GRU nodes"."""
    if len(layer.cells) == 1:
        return f"a native ONNX {layer.top.op}"
    return f"stacked native ONNX {', '.join(cell.op for cell in layer.cells)} nodes"
