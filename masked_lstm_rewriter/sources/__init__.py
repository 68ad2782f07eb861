# SPDX-License-Identifier: Apache-2.0
"""The sources of recurrent layers: one module each, listed once in :data:`SOURCES`.

A source finds its candidates in a graph, reads each into the typed layer description of
:mod:`..layer` (or a :class:`~..failure.Refusal` carrying its reason and node), and says how what
read it is pointed at the emitted results (:class:`~.source.Source`). The pipeline
(:mod:`..pipeline`) takes every source's layers through vet, plan, emit and connect alike.
Adding a source is a new module defining a ``SOURCE`` and one line here.
"""

from __future__ import annotations

from . import cudnn, litert, litert_lstm, onnx_loop, tf_while
from .source import Candidate, Source

SOURCES = (tf_while.SOURCE, cudnn.SOURCE, onnx_loop.SOURCE, litert.SOURCE)
ONNX_FILE_SOURCES = (onnx_loop.SOURCE,)  # an ONNX file holds no TensorFlow op
# read as tf2onnx's rewriters run on the graph of a LiteRT flatbuffer, before its ops become ONNX (plugin.enable)
LITERT_OP_SOURCES = (litert_lstm.SOURCE,)
__all__ = ["SOURCES", "ONNX_FILE_SOURCES", "LITERT_OP_SOURCES", "Candidate", "Source"]
