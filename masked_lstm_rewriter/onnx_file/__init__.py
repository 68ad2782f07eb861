# SPDX-License-Identifier: Apache-2.0
"""One call for an ONNX file whose recurrent layers are ``Loop``\\ s (written by stock tf2onnx, or by
Keras 3's ``export(format="onnx")`` on the JAX backend): each becomes the native op.

    import masked_lstm_rewriter as mlr
    onnx_model, report = mlr.rewrite_onnx("model.onnx", "native.onnx")

The model is read into tf2onnx's graph (:mod:`.model_io`), its Loops go through the pipeline
(:mod:`..pipeline`, the ONNX Loop source of :mod:`..sources`), and what the pipeline changed is
applied to the original model, every other node left as it was (:mod:`.splice`).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from .. import output_file
from ..conversion import Converted
from ..failure import known_wrong
from ..pipeline import rewrite_graph
from ..pipeline.streaming import cannot_stream, native_nodes, stream_native_nodes
from ..plugin import resolve_mask_mode
from ..plugin.stock_wrong import empty_rows_lose_their_state, lengths_ignored
from ..quantize import check_quantize, quantize_converted, schedule_for
from ..report import ConversionReport, finish_conversion, start_conversion
from ..sources import ONNX_FILE_SOURCES
from .model_io import ModelError, load, save, to_graph
from .splice import splice

logger = logging.getLogger("masked_lstm_rewriter")
__all__ = ["rewrite_onnx", "ModelError"]


def rewrite_onnx(model, output_path=None, *, mask_mode: Optional[str] = None, runtime: Optional[str] = None,
                 schedule: Optional[bool] = None, streaming: bool = False, keep_wrong: bool = False,
                 quantize: Optional[str] = None) -> Converted:
    """Rewrite the recurrent ``Loop``\\ s of an ONNX model into native ``LSTM``, ``GRU`` and ``RNN`` ops.

    ``model``: an ``onnx.ModelProto`` or the path of an ``.onnx`` file (its external data is read
    from beside it). ``output_path``: where to write the result (only if the rewrite succeeded; a
    model past 2 GB is written with its tensors in ``<name>.data`` beside it). ``mask_mode``,
    ``runtime``, ``schedule``, ``streaming``, ``keep_wrong`` and ``quantize`` as in :func:`..convert` (a
    streamed layer's states are named after the layer the Loop's names give). Returns the model and the
    report of every recurrent layer found: rewritten, or left as the Loop it was (with the reason). Every node
    that is not part of a rewritten Loop, the graph's inputs and outputs and the model's metadata
    stay as they were; the given ``ModelProto`` is not changed.
    """
    if output_path is not None:
        output_file.check_writable(output_path)
    mask_mode = resolve_mask_mode(mask_mode, runtime)
    check_quantize(quantize, runtime, schedule)
    schedule = schedule_for(schedule, quantize)
    original = load(model)
    start_conversion()
    graph = to_graph(original)
    stock = native_nodes(graph)
    not_streamed = stream_native_nodes(graph) if streaming else []  # before any node of ours
    rewrite_graph(graph, list(graph.get_nodes()), ONNX_FILE_SOURCES, mask_mode, runtime, schedule, streaming)
    problems = lengths_ignored(graph, stock, runtime) + (not_streamed + cannot_stream() if streaming else [])
    empty_rows_lose_their_state(graph, stock)
    wrong = known_wrong(problems, keep_wrong)
    report = finish_conversion()
    if wrong is not None:
        raise wrong
    rewritten = splice(original, graph) if report.rewritten or streaming else _copy(original)
    if quantize is not None:
        rewritten, report = quantize_converted(rewritten, report, quantize)
    if output_path is not None:
        with output_file.atomic_path(output_path) as partial:
            save(rewritten, partial, os.fspath(output_path))
        logger.info("ONNX model written to %s", os.fspath(output_path))
    return Converted(rewritten, report or ConversionReport())


def _copy(model):
    copied = type(model)()
    copied.CopyFrom(model)
    return copied
