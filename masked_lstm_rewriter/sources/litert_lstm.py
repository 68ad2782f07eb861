# SPDX-License-Identifier: Apache-2.0
"""LiteRT's fused LSTM op (:mod:`..read.litert_lstm`), which tf2onnx has no ONNX form for, read as tf2onnx's
rewriters run on a ``.tflite`` file's graph (:func:`..plugin.enable`). Its state tensors are LiteRT's
variable tensors, which no node makes: before tf2onnx's rewriters sort the graph, they are made the
zeros LiteRT starts them from (:func:`zero_states`)."""

from __future__ import annotations

import numpy as np

from ..emit.cudnn import with_time_major_input
from ..emit.litert import rewire_litert
from ..read.litert_lstm import LEFT_AS, LITERT_LSTM, litert_layer_name, read_litert_lstm, state_shape
from .source import Candidate, Source

REMEDY = "convert the Keras model instead (python -m masked_lstm_rewriter model.keras)"


def candidates(graph, ops) -> list:  # pylint: disable=unused-argument
    return [op for op in ops if op.type == LITERT_LSTM]


def read(graph, node) -> Candidate:
    return Candidate(litert_layer_name(node), False, read_litert_lstm(graph, node))


def zero_states(graph) -> None:
    """The inputs of the ops read here that no node makes (LiteRT's variable tensors: the states; a graph
    input has its Placeholder), made constants of zeros, where their shape is static."""
    for node in candidates(graph, graph.get_nodes()):
        shape = state_shape(graph, node)
        for name in node.input:
            if shape and graph.get_node_by_output(name) is None:
                graph.make_const(name, np.zeros(shape, np.float32))


def prepare(graph, layers) -> list:
    """Each layer's batch-major input seen time-major, as the emitter reads every layer."""
    return [with_time_major_input(graph, layer) if layer.batch_major else layer for layer in layers]


SOURCE = Source(name="LiteRT fused LSTM op", candidates=candidates, read=read, prepare=prepare,
                connect=rewire_litert, left_as=LEFT_AS, remedy=REMEDY)
