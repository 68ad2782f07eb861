# SPDX-License-Identifier: Apache-2.0
"""A LiteRT (TensorFlow Lite) flatbuffer's loop, ``TFL_WHILE``, as tf2onnx hands it to the rewriters
it is given: its body is already converted, its list ops gone, and tf2onnx makes the ``Loop`` only
after them. So it is not read here: :func:`..plugin.enable` (the command line, the environment
switch) reads that ``Loop`` after the conversion (:mod:`.onnx_loop`); a rewriter passed to tf2onnx
as ``custom_rewriter`` alone says so, rather than report no layer."""

from __future__ import annotations

from onnx import TensorProto

from ..failure import Refusal
from ..read.onnx_loop import loop_layer_name
from .source import Candidate, Source

LITERT_LOOP = "TFL_WHILE"
REASON = "a LiteRT loop, which tf2onnx converts after the rewriters it is given run"
REMEDY = ("convert with the plugin enabled (masked_lstm_rewriter.enable(), python -m masked_lstm_rewriter "
          "--tflite), or rewrite the ONNX file (python -m masked_lstm_rewriter rewrite)")


def candidates(graph, ops) -> list:  # pylint: disable=unused-argument
    return [op for op in ops if op.type == LITERT_LOOP]


def read(graph, node) -> Candidate:
    """The loop, refused with the reason; masked where it carries a boolean sequence (a mask)."""
    masked = any(graph.get_dtype(name) == TensorProto.BOOL for name in node.input)
    return Candidate(loop_layer_name(node), masked, Refusal(REASON, node))


SOURCE = Source(name="LiteRT loop", candidates=candidates, read=read, remedy=REMEDY)
