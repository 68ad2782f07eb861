# SPDX-License-Identifier: Apache-2.0
"""Keras 3's cuDNN op (``CudnnRNNV3``), what a model traced on a machine with a GPU holds
(:mod:`..read.cudnn`); tf2onnx converts no cuDNN op, so one not rewritten says what to do instead."""

from __future__ import annotations

from ..emit.cudnn import rewire_cudnn, with_time_major_input
from ..read.cudnn import CUDNN_FIX, CUDNN_OPS, LEFT_AS, cudnn_layer_name, mark_bidirectional, read_cudnn
from .source import Candidate, Source


def candidates(graph, ops) -> list:  # pylint: disable=unused-argument
    return [op for op in ops if op.type in CUDNN_OPS]


def read(graph, node) -> Candidate:
    return Candidate(cudnn_layer_name(node), _is_masked(graph, node), read_cudnn(graph, node))


def prepare(graph, layers) -> list:
    """A Bidirectional's halves told apart, and each layer's input seen time-major."""
    mark_bidirectional(layers)
    return [with_time_major_input(graph, layer) for layer in layers]


def _is_masked(graph, node) -> bool:
    """Does the op count its rows' lengths from a mask (for the report; an unread op counts as masked)?"""
    lengths = graph.get_node_by_output(node.input[4]) if len(node.input) > 4 else None
    return lengths is None or lengths.type != "Fill"


SOURCE = Source(name="cuDNN op", candidates=candidates, read=read, prepare=prepare, connect=rewire_cudnn,
                left_as=LEFT_AS, remedy=CUDNN_FIX)
