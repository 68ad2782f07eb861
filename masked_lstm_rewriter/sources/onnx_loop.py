# SPDX-License-Identifier: Apache-2.0
"""The ONNX ``Loop``: what tf2onnx or Keras's JAX export wrote for a recurrent layer in an ONNX file
(:mod:`..read.onnx_loop`), and what tf2onnx makes of TF1-style control flow before the rewriter
runs (whose body is still in TensorFlow ops: said so, not read)."""

from __future__ import annotations

from ..failure import Refusal
from ..graph import make_op
from ..read.body import is_masked_recurrent_body
from ..read.onnx_loop import loop_layer_name, read_onnx_loop, reads_a_mask
from .source import Candidate, Source, prepare_masks

LOWERED_REASON = ("the graph has TF1-style control flow (e.g. a GraphDef frozen with lowered control flow), "
                  "which tf2onnx turned into a Loop before this rewriter runs; freeze with "
                  "lower_control_flow=False or convert the SavedModel or Keras model")


def candidates(graph, ops) -> list:  # pylint: disable=unused-argument
    return [op for op in ops if op.type == "Loop"]


def read(graph, loop):
    """The layer a Loop holds, why it cannot be rewritten, or None (not a recurrent layer)."""
    layer = read_onnx_loop(graph, loop)
    body = loop.get_body_graphs().get("body")
    if layer is None and body is not None and is_masked_recurrent_body(body):
        layer = Refusal(LOWERED_REASON, loop)
    if layer is None:
        return None
    masked = layer.mask is not None if not isinstance(layer, Refusal) else \
        reads_a_mask(graph, loop) or is_masked_recurrent_body(body)
    return Candidate(loop_layer_name(loop), masked, layer)


def prepare(graph, layers) -> list:
    """Each layer's input made time-major where the loop reads it projected (made before any layer is
    emitted, so that rewriting the layer below renames what this Transpose reads); and its mask as
    the planner takes it, [B, T] bool, where the body reads another layout (:func:`.source.prepare_masks`)."""
    for layer in layers:
        if layer.x_batch_major is not None:
            layer.x_time_major = make_op(graph, "Transpose", layer.x_batch_major, perm=[1, 0, 2])
    return prepare_masks(graph, layers)


SOURCE = Source(name="ONNX Loop", candidates=candidates, read=read, prepare=prepare)
