# SPDX-License-Identifier: Apache-2.0
"""The TensorFlow While loop in tf2onnx's graph: the loop Keras writes for a recurrent layer.

tf2onnx hands the rewriter each loop body and condition as a graph of its own before the main
graph: :func:`observe` reads them then (:mod:`..read.body`, :mod:`..read.trip`), and :func:`read`
reads the While op of the main graph with them (:mod:`..read.loop`).
"""

from __future__ import annotations

import logging

from tf2onnx.tf_loader import find_function

from ..failure import Refusal
from ..read.body import (BODY_MASKED_ATTR, BODY_MATCH_ATTR, is_masked_recurrent_body, is_unmasked_recurrent_body,
                         multiplies_a_state, read_body)
from ..read.loop import layer_name, read_loop
from ..read.trip import COND_MATCH_ATTR, is_loop_condition, read_condition
from .source import Candidate, Source

logger = logging.getLogger("masked_lstm_rewriter")

WHILE_OPS = ("While", "StatelessWhile")


def is_main_graph(graph) -> bool:
    """tf2onnx passes loop bodies (function subgraphs) first and the main graph last."""
    return graph.parent_graph is None and not getattr(graph, "_is_subgraph", False)


def observe(graph) -> None:
    """Read a loop body or condition as tf2onnx hands it over, for :func:`read` to find by name."""
    masked = is_masked_recurrent_body(graph)
    if masked or is_unmasked_recurrent_body(graph):
        setattr(graph, BODY_MATCH_ATTR, read_body(graph))
        setattr(graph, BODY_MASKED_ATTR, masked)
    elif not is_main_graph(graph) and is_loop_condition(graph):
        setattr(graph, COND_MATCH_ATTR, read_condition(graph))


def candidates(graph, ops) -> list:  # pylint: disable=unused-argument
    return [op for op in ops if op.type in WHILE_OPS]


def read(graph, loop):
    """The layer a While op holds, why it cannot be rewritten, or None when it is no recurrent loop.
    An unmasked step that could not be read counts as a layer where it multiplies its state (a cell
    the reader does not know); else it is a loop of another kind (``tf.map_fn``), stock tf2onnx's business."""
    body_graph = find_function(loop.get_attr_str("body"))
    body = getattr(body_graph, BODY_MATCH_ATTR, None) if body_graph is not None else None
    if body is None:
        return None
    masked = getattr(body_graph, BODY_MASKED_ATTR, True)
    if isinstance(body, Refusal) and not masked and not multiplies_a_state(body_graph):
        logger.debug("loop '%s' left as tf2onnx made it: %s", layer_name(loop), body.reason)
        return None
    cond_graph = find_function(loop.get_attr_str("cond"))
    condition = getattr(cond_graph, COND_MATCH_ATTR, None) if cond_graph is not None else None
    layer = body if isinstance(body, Refusal) else read_loop(graph, loop, body, condition)
    return Candidate(layer_name(loop), masked, layer)


SOURCE = Source(name="TensorFlow While loop", candidates=candidates, read=read, observe=observe)
