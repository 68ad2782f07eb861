# SPDX-License-Identifier: Apache-2.0
"""Plugin: how users switch the rewrite on.

* :func:`make_rewriter` builds a tf2onnx custom rewriter (``custom_rewriter=[...]``), which takes
  the layers of every source (:mod:`..sources`) of each graph through the pipeline (:mod:`..pipeline`).
* :func:`enable` / :func:`disable` add it to every tf2onnx conversion in the process, by
  wrapping ``tf2onnx.tfonnx.process_parsed_graph`` (the one place every front end, from
  ``from_keras`` to the command line, passes its custom rewriters through), and install the
  patches Keras 3 models need to convert at all (:mod:`..patches.time_distributed`,
  :mod:`..patches.tf2onnx_keras`), and have every conversion trace Keras's generic recurrent code,
  not cuDNN's (:mod:`..patches.generic_path`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import Optional

from tf2onnx import optimizer, tfonnx

from .. import layer_names, targets
from ..failure import known_wrong
from ..keywords import NOT_GIVEN, renamed
from ..patches import generic_path, keras_export, opaque_ifs, tf2onnx_keras, time_distributed
from ..pipeline import rewrite_graph
from ..pipeline.streaming import cannot_stream, native_nodes, note_frozen_states, stream_native_nodes
from ..plan.masks import MASK_MODES
from ..report import finish_conversion, note_known_wrong
from ..sources import LITERT_OP_SOURCES, SOURCES
from ..sources.litert_lstm import zero_states
from ..sources.tf_while import is_main_graph
from .stock_wrong import empty_rows_lose_their_state, float_equality, lengths_ignored, writes_out_of_step
from .unconverted import unconverted_ops, unconverted_problem

logger = logging.getLogger("masked_lstm_rewriter")

_MARK = "_is_masked_lstm_rewriter"


def _check_mask_mode(mask_mode: str) -> None:
    if mask_mode not in MASK_MODES:
        raise ValueError(f"mask_mode must be one of {MASK_MODES} (or None: the runtime's default), not {mask_mode!r}")


def resolve_mask_mode(mask_mode: Optional[str], runtime: Optional[str], keyword: str = "runtime",
                      warn: bool = True) -> str:
    """The mask mode to use: ``mask_mode`` if given, else the runtime's default (``keyword``: how the
    caller named the runtime argument, for the error).

    OpenVINO's default is ``"any"``: its synchronous single-thread inference drops the
    ``"post"`` guard's error and returns garbage for a pre-padded batch. Asking for ``"post"``
    there anyway is allowed, with a WARNING saying so (unless not ``warn``)."""
    targets.check_runtime(runtime, keyword)
    if mask_mode is None:
        return targets.default_mask_mode(runtime)
    _check_mask_mode(mask_mode)
    guard_note = targets.runtime(runtime).guard_note if runtime else None
    if mask_mode == "post" and guard_note and warn:
        logger.warning("mask_mode='post' for %s: %s", targets.runtime(runtime).title, guard_note)
    return mask_mode


def make_rewriter(mask_mode: Optional[str] = None, runtime: Optional[str] = None, schedule: bool = True, *,
                  keep_wrong: bool = False, streaming: bool = False, target=NOT_GIVEN):
    """A tf2onnx custom rewriter ``(graph, ops) -> ops`` for masked Keras LSTM, GRU and SimpleRNN loops.

    ``mask_mode``: ``"post"`` (post-padded masks, checked at run time), ``"any"`` (every mask),
    or None for the runtime's default (``"any"`` for OpenVINO, else ``"post"``).
    ``runtime``: None for a model any runtime runs exactly where it compiles it; ``"openvino"`` to
    also keep as Loops the layers OpenVINO's native recurrent ops cannot run (their activations);
    ``"onnxruntime"`` for a model meant for onnxruntime only. (``target=``: its deprecated name.)
    ``schedule``: emit the length-aware schedule (:mod:`..plan.schedule`), which runs long-tailed batches
    of 8 rows or more in length-ordered segments where that pays, chosen at run time; on by default.
    False: one native node per layer (what onnxruntime's quantizer needs, :mod:`..quantize`).
    ``keep_wrong``: a graph known to compute other values than its source (a Keras 3
    ``TimeDistributed`` traced without the plugin) fails the conversion with :class:`.KnownWrong`,
    unless this is True: then it is converted as it is, with a WARNING and the report's ``known_wrong``.
    ``streaming``: every recurrent layer made native takes its initial states as graph inputs and
    returns its final states as graph outputs (``<layer>/h_in``, ``<layer>/h_out``, and ``c_in``,
    ``c_out`` for an LSTM), so that the model runs chunk by chunk (:mod:`..pipeline.streaming`). A
    recurrent layer that cannot stream (a backward direction, a layer left as a Loop) would start
    every chunk afresh: the conversion fails on it as on a known-wrong graph, unless ``keep_wrong``."""
    runtime, keyword = renamed("make_rewriter", "runtime", runtime, "target", target)
    return _make_rewriter(mask_mode, runtime, schedule, keyword, keep_wrong, streaming)


def _make_rewriter(mask_mode: Optional[str], runtime: Optional[str], schedule: bool, keyword: str = "runtime",
                   keep_wrong: bool = False, streaming: bool = False, warn: bool = True):
    """:func:`make_rewriter`, its runtime argument given as ``keyword`` (named by its errors); ``warn``:
    False where the same mask mode and runtime are enabled already (their warning said once)."""
    mask_mode = resolve_mask_mode(mask_mode, runtime, keyword, warn)
    emitted_for_litert_ops = set()  # the native nodes rewrite_litert_ops emitted in the conversion under way

    def rewrite_masked_lstm(graph, ops):
        for source in SOURCES:
            source.observe(graph)
        main = is_main_graph(graph)
        # before any node of ours (but those emitted for LiteRT ops)
        stock = native_nodes(graph) - emitted_for_litert_ops if main else set()
        not_streamed = stream_native_nodes(graph, frozenset(emitted_for_litert_ops)) if streaming and main else []
        rewrite_graph(graph, ops, SOURCES, mask_mode, runtime, schedule, streaming)
        if main:
            problems = time_distributed.traced_over_batch(graph, ops) + float_equality(graph, ops) + \
                lengths_ignored(graph, stock, runtime) + writes_out_of_step(graph)
            empty_rows_lose_their_state(graph, stock)
            if streaming:
                problems += not_streamed + cannot_stream()
            else:
                note_frozen_states()
            wrong = known_wrong(problems, keep_wrong)
            finish_conversion()
            emitted_for_litert_ops.clear()
            layer_names.forget()
            if wrong is not None:
                _fail(wrong)
        return graph.get_nodes()

    def rewrite_litert_ops(graph, ops):
        """A rewriter of the LiteRT ops tf2onnx has no ONNX form for (LITERT_OP_SOURCES), for a flatbuffer's
        conversion, where the one above runs on the converted graph."""
        if is_main_graph(graph):
            before = native_nodes(graph)
            rewrite_graph(graph, ops, LITERT_OP_SOURCES, mask_mode, runtime, schedule, streaming)
            emitted_for_litert_ops.clear()
            emitted_for_litert_ops.update(native_nodes(graph) - before)
        return graph.get_nodes()

    setattr(rewrite_masked_lstm, _MARK, True)
    rewrite_masked_lstm.rewrite_litert_ops = rewrite_litert_ops
    rewrite_masked_lstm.mask_mode = mask_mode
    rewrite_masked_lstm.runtime = rewrite_masked_lstm.target = runtime  # .target: the attribute's old name
    rewrite_masked_lstm.schedule = schedule
    rewrite_masked_lstm.keep_wrong = keep_wrong
    rewrite_masked_lstm.streaming = streaming
    return rewrite_masked_lstm


class _Conversion(threading.local):
    """Per thread: is a conversion running through :func:`enable`'s wrapper, and the error it must end with."""

    def __init__(self):
        super().__init__()
        self.wrapped = False
        self.error: Optional[BaseException] = None


_CONVERSION = _Conversion()


def _fail(error: BaseException) -> None:
    """End the conversion with ``error``: after tf2onnx's work when :func:`enable`'s wrapper runs it
    (tf2onnx's Python API would only log an error raised by a rewriter), else here (tf2onnx's
    command line stops on it; its Python API logs it as an ERROR and the report keeps it)."""
    if _CONVERSION.wrapped:
        _CONVERSION.error = error
    else:
        raise error


rewrite_masked_lstm = make_rewriter()


def _is_ours(rewriter) -> bool:
    return getattr(rewriter, _MARK, False)


_original_process_parsed_graph = None
_enabled_rewriter = None


def _with_rewriter(original):
    @functools.wraps(original)
    def process_parsed_graph(g, custom_op_handlers, inputs_as_nchw, outputs_as_nchw, continue_on_error,
                             custom_rewriter, *args, **kwargs):
        rewriters = list(custom_rewriter or [])
        if _enabled_rewriter is not None and not any(_is_ours(r) for r in rewriters):
            rewriters.append(_enabled_rewriter)
        ours = next((rewriter for rewriter in rewriters if _is_ours(rewriter)), None)
        litert = _from_litert(args, kwargs)
        if litert:  # tf2onnx converts the bodies before the rewriters run: ours runs after the conversion
            rewriters = [rewriter for rewriter in rewriters if not _is_ours(rewriter)]
            if ours is not None:  # its ops tf2onnx has no form for are read as its rewriters run
                zero_states(g)
                rewriters.append(ours.rewrite_litert_ops)
        _CONVERSION.wrapped, _CONVERSION.error = True, None
        try:
            graph = original(g, custom_op_handlers, inputs_as_nchw, outputs_as_nchw, continue_on_error,
                             rewriters if rewriters or litert else custom_rewriter, *args, **kwargs)
            if ours is not None and litert and is_main_graph(graph):
                graph = _rewritten_after_conversion(graph, ours)
        finally:
            _CONVERSION.wrapped = False
        if _CONVERSION.error is not None:
            error, _CONVERSION.error = _CONVERSION.error, None
            raise error
        if ours is not None and is_main_graph(graph):  # a body's loops are converted in the main graph's pass
            _check_converted(graph, ours.keep_wrong)
        return graph
    return process_parsed_graph


def _rewritten_after_conversion(graph, rewriter):
    """``graph``, converted by tf2onnx from a LiteRT flatbuffer, rewritten as an ONNX file of it would be:
    where it holds a ``Loop``, first optimized by tf2onnx's optimizers (which fold what it writes before
    them: transposed weights, identities). tf2onnx optimizes the result once more, as every conversion."""
    if any(node.type == "Loop" for node in graph.get_nodes()):
        graph = optimizer.optimize_graph(graph)
    rewriter(graph, graph.get_nodes())
    return graph


def _from_litert(args: tuple, kwargs: dict) -> bool:
    """Is tf2onnx converting a LiteRT flatbuffer (``process_parsed_graph``'s ``is_tflite``, after
    ``initialized_tables``)? Its recurrent layers are read as the ``Loop`` tf2onnx makes of each
    (:mod:`..sources.onnx_loop`): before that, the loop's body is already ONNX and its list ops gone."""
    return bool(kwargs.get("is_tflite", args[1] if len(args) > 1 else False))


def _check_converted(graph, keep_wrong: bool) -> None:
    """Fail (``keep_wrong``: warn) where tf2onnx left TensorFlow ops it has no ONNX form for."""
    ops = unconverted_ops(graph)
    wrong = known_wrong([unconverted_problem(ops)], keep_wrong, note_known_wrong) if ops else None
    if wrong is not None:
        raise wrong


class _Enabled(contextlib.AbstractContextManager):
    """Returned by :func:`enable`; on exit, restores what was in force before."""

    def __init__(self, previous):
        self._previous = previous

    def __exit__(self, *exc):
        if self._previous is None:
            disable()
        else:
            _install(self._previous)
        return False


def enable(mask_mode: Optional[str] = None, runtime: Optional[str] = None, schedule: bool = True, *,
           keep_wrong: bool = False, streaming: bool = False, target=NOT_GIVEN) -> _Enabled:
    """Apply the rewrite in every tf2onnx conversion of this process from now on.

    ``mask_mode``, ``runtime``, ``schedule``, ``keep_wrong`` and ``streaming`` as in :func:`make_rewriter`
    (``target=``: the deprecated name of ``runtime``); the default mask mode is the runtime's (``"any"`` for
    OpenVINO, else ``"post"``). Enabling again changes the mode; the
    rewrite is never applied twice (not even when a caller also passes it in ``custom_rewriter``).
    Use the result as a context manager to restore the previous state on exit. It also applies
    the fixes Keras 3 models need to convert at all (:mod:`.time_distributed`, :mod:`.tf2onnx_keras`),
    and traces Keras's generic recurrent code where a GPU is visible (:mod:`.generic_path`).
    """
    runtime, keyword = renamed("enable", "runtime", runtime, "target", target)
    previous = _enabled_rewriter
    again = previous is not None and previous.runtime == runtime and previous.mask_mode == mask_mode
    _install(_make_rewriter(mask_mode, runtime, schedule, keyword, keep_wrong, streaming, warn=not again))
    return _Enabled(previous)


def _install(rewriter) -> None:
    """Make ``rewriter`` the one every tf2onnx conversion of this process runs."""
    global _original_process_parsed_graph, _enabled_rewriter  # pylint: disable=global-statement
    if _original_process_parsed_graph is None:
        _original_process_parsed_graph = tfonnx.process_parsed_graph
        tfonnx.process_parsed_graph = _with_rewriter(_original_process_parsed_graph)
    _enabled_rewriter = rewriter
    time_distributed.install()
    keras_export.install(rewriter.mask_mode, rewriter.runtime, rewriter.schedule, rewriter.keep_wrong,
                         rewriter.streaming)
    tf2onnx_keras.install()
    opaque_ifs.install()
    generic_path.install()  # after tf2onnx_keras: it wraps the functions in force


def disable() -> None:
    """Undo :func:`enable`: tf2onnx converts as it does without the plugin."""
    global _original_process_parsed_graph, _enabled_rewriter  # pylint: disable=global-statement
    if _original_process_parsed_graph is not None:
        tfonnx.process_parsed_graph = _original_process_parsed_graph
    _original_process_parsed_graph = None
    _enabled_rewriter = None
    generic_path.uninstall()  # before tf2onnx_keras: it gives back tf2onnx_keras's functions
    time_distributed.uninstall()
    keras_export.uninstall()
    tf2onnx_keras.uninstall()
    opaque_ifs.uninstall()


def enabled_mode():
    """The mask mode in force through :func:`enable`, or None."""
    return None if _enabled_rewriter is None else _enabled_rewriter.mask_mode
