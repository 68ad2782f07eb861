# SPDX-License-Identifier: Apache-2.0
"""Stage 3, plugin: how users switch the rewrite on.

* :func:`make_rewriter` builds a tf2onnx custom rewriter (``custom_rewriter=[...]``).
* :func:`enable` / :func:`disable` add it to every tf2onnx conversion in the process, by
  wrapping ``tf2onnx.tfonnx.process_parsed_graph`` (the one place every front end, from
  ``from_keras`` to the command line, passes its custom rewriters through).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Optional

from tf2onnx import tfonnx
from tf2onnx.tf_loader import find_function

from . import tf2onnx_keras, time_distributed
from .batch import batch_root, same_batch
from .emit import TARGETS, check_target, emit_layer, target_refusal
from .masks import MASK_MODES, MaskPlanner, broadcast_mask
from .report import finish_conversion, record
from .schedule import NOT_FOR as SCHEDULE_NOT_FOR
from .schedule import TARGET as SCHEDULE_TARGET
from .match import BODY_MATCH_ATTR, NoMatch, is_masked_recurrent_body, layer_name, match_body, match_loop
from .trip import COND_MATCH_ATTR, is_loop_condition, read_condition

logger = logging.getLogger("masked_lstm_rewriter")

_MARK = "_is_masked_lstm_rewriter"


def _check_mask_mode(mask_mode: str) -> None:
    if mask_mode not in MASK_MODES:
        raise ValueError(f"mask_mode must be one of {MASK_MODES} (or None: the runtime's default), not {mask_mode!r}")


# measured with OpenVINO 2026.4 (tests/test_openvino.py pins it)
OPENVINO_GUARD_NOTE = ("OpenVINO enforces the \"post\" guard except in synchronous inference compiled with "
                       "INFERENCE_NUM_THREADS=1, which drops every runtime error and returns empty or stale outputs: "
                       "there, use mask_mode='any' (exact for any mask) or start_async() + wait()")
# the mode a conversion gets when none is asked for: "any" where the runtime can drop the guard's error
DEFAULT_MASK_MODES = {None: "post", "onnxruntime": "post", "openvino": "any"}


def resolve_mask_mode(mask_mode: Optional[str], target: Optional[str]) -> str:
    """The mask mode to use: ``mask_mode`` if given, else the target runtime's default.

    OpenVINO's default is ``"any"``: its synchronous single-thread inference drops the
    ``"post"`` guard's error and returns garbage for a pre-padded batch. Asking for ``"post"``
    there anyway is allowed, with a WARNING saying so."""
    check_target(target)
    if mask_mode is None:
        return DEFAULT_MASK_MODES[target]
    _check_mask_mode(mask_mode)
    if target == "openvino" and mask_mode == "post":
        logger.warning("mask_mode='post' for OpenVINO: %s", OPENVINO_GUARD_NOTE)
    return mask_mode


def make_rewriter(mask_mode: Optional[str] = None, target: Optional[str] = None, schedule: bool = False):
    """A tf2onnx custom rewriter ``(graph, ops) -> ops`` for masked Keras LSTM, GRU and SimpleRNN loops.

    ``mask_mode``: ``"post"`` (post-padded masks, checked at run time), ``"any"`` (every mask),
    or None for the target's default (``"any"`` for OpenVINO, else ``"post"``).
    ``target``: None for a model any runtime runs exactly where it compiles it; ``"openvino"`` to
    also keep as Loops the layers OpenVINO's native recurrent ops cannot run (their activations);
    ``"onnxruntime"`` for a model meant for onnxruntime only.
    ``schedule``: emit the length-aware schedule (:mod:`.schedule`), which runs long-tailed batches
    of 8 rows or more in length-ordered segments, chosen at run time. Off by default, and only with
    ``target="onnxruntime"``: OpenVINO 2026.4 computes some layers inside its ``If`` wrongly, with
    no error (``schedule.NOT_FOR``), so a scheduled model is made for onnxruntime on request only,
    and each scheduled layer's report names OpenVINO in ``not_for``."""
    mask_mode = resolve_mask_mode(mask_mode, target)
    if schedule and target != SCHEDULE_TARGET:
        raise ValueError(f"schedule=True needs target={SCHEDULE_TARGET!r} (not {target!r}): the schedule is exact on "
                         f"onnxruntime only ({'; '.join(SCHEDULE_NOT_FOR.values())})")

    def rewrite_masked_lstm(graph, ops):
        if is_masked_recurrent_body(graph):
            setattr(graph, BODY_MATCH_ATTR, _match_body_safely(graph))
        elif not _is_main_graph(graph) and is_loop_condition(graph):
            setattr(graph, COND_MATCH_ATTR, _read_condition_safely(graph))
        loops = [op for op in ops if op.type in ("While", "StatelessWhile")]
        if loops:
            _rewrite_loops(graph, loops, mask_mode, target, schedule)
        _report_lowered_loops(graph, [op for op in ops if op.type == "Loop"], mask_mode)
        if _is_main_graph(graph):
            time_distributed.warn_traced_over_batch(graph, ops)
            finish_conversion()
        return graph.get_nodes()

    setattr(rewrite_masked_lstm, _MARK, True)
    rewrite_masked_lstm.mask_mode = mask_mode
    rewrite_masked_lstm.target = target
    rewrite_masked_lstm.schedule = schedule
    return rewrite_masked_lstm


def _match_body_safely(graph):
    """The matcher only reads the graph; a graph shape it did not foresee is a reason, not a crash."""
    try:
        return match_body(graph)
    except Exception as error:  # pylint: disable=broad-except
        return NoMatch(f"unexpected loop body ({type(error).__name__}: {error})")


def _read_condition_safely(graph):
    try:
        return read_condition(graph)
    except Exception as error:  # pylint: disable=broad-except
        reason = f"unexpected loop condition ({type(error).__name__}: {error})"
        return reason


def _match_loop_safely(graph, loop, body, condition):
    try:
        return match_loop(graph, loop, body, condition)
    except Exception as error:  # pylint: disable=broad-except
        return NoMatch(f"unexpected loop wiring ({type(error).__name__}: {error})")


def _is_main_graph(graph) -> bool:
    """tf2onnx passes loop bodies (function subgraphs) first and the main graph last."""
    return graph.parent_graph is None and not getattr(graph, "_is_subgraph", False)


LOWERED_REASON = ("the graph has TF1-style control flow (e.g. a GraphDef frozen with lowered control flow), "
                  "which tf2onnx turned into a Loop before this rewriter runs; freeze with "
                  "lower_control_flow=False or convert the SavedModel or Keras model")


def _report_lowered_loops(graph, loops, mask_mode):
    """Masked loops that reached us already as ONNX Loops cannot be rewritten: say so."""
    for loop in loops:
        body = loop.get_body_graphs().get("body")
        if body is not None and is_masked_recurrent_body(body):
            logger.warning("masked recurrent layer '%s' left as a Loop: %s", layer_name(loop), LOWERED_REASON)
            record(layer_name(loop), False, LOWERED_REASON, mask_mode)


MIN_OPSET = 13  # Split and Squeeze take their sizes and axes as inputs, as the emitted nodes give them


def opset_refusal(graph):
    """Why no layer of ``graph`` can be rewritten at its opset, or None."""
    if graph.opset < MIN_OPSET:
        return (f"opset {graph.opset}: the native form is emitted for opset {MIN_OPSET} and later; "
                f"convert with opset {MIN_OPSET} or later for a native op")
    return None


def _rewrite_loops(graph, loops, mask_mode, target, schedule=False):
    layers = []
    for loop in loops:
        body_graph = find_function(loop.get_attr_str("body"))
        body = getattr(body_graph, BODY_MATCH_ATTR, None) if body_graph is not None else None
        if body is None:
            continue  # not a masked recurrent loop: none of our business
        cond_graph = find_function(loop.get_attr_str("cond"))
        condition = getattr(cond_graph, COND_MATCH_ATTR, None) if cond_graph is not None else None
        layer = _match_loop_safely(graph, loop, body, condition) if not isinstance(body, NoMatch) else body
        refusal = None if isinstance(layer, NoMatch) else opset_refusal(graph) or target_refusal(layer, target)
        if refusal:
            layer = NoMatch(refusal)
        if isinstance(layer, NoMatch):
            logger.warning("masked recurrent layer '%s' left as a Loop: %s", layer_name(loop), layer.reason)
            record(layer_name(loop), False, layer.reason, mask_mode)
        else:
            layers.append(layer)
    planner = MaskPlanner(graph, mask_mode, schedule)
    masks = BatchMasks(graph, layers)
    for layer in layers:
        not_for = {other: (reason, f"convert with target={other!r}") for other in TARGETS
                   if other != target and (reason := target_refusal(layer, other))}
        snapshot = GraphSnapshot(graph, planner, masks)
        try:
            tensors = planner.tensors_for(masks.mask_for(layer), layer.mask_post_padded)
            emit_layer(graph, layer, tensors)
        except Exception as error:  # pylint: disable=broad-except
            snapshot.restore()  # the loop stands exactly as tf2onnx made it
            reason = f"rewrite failed: {type(error).__name__}: {error}"
            logger.warning("masked recurrent layer '%s' left as a Loop: %s", layer.layer, reason)
            record(layer.layer, False, reason, mask_mode)
            continue
        detail = f"{layer.kinds} direction={layer.direction}"
        logger.info("masked %s rewritten into %s (direction=%s, mask_mode=%s)", layer.describe(),
                    _native_ops(layer), layer.direction, mask_mode)
        for other, (reason, remedy) in not_for.items():
            logger.info("masked %s: for %s, %s (%s)", layer.describe(), other, remedy, reason)
            detail += f"; for {other}, {remedy}"
        if tensors.segments is not None:  # made for onnxruntime on request (make_rewriter)
            remedy = "convert without schedule=True"
            for other, reason in SCHEDULE_NOT_FOR.items():
                logger.info("masked %s has the length-aware schedule, exact on onnxruntime only: for %s, %s (%s)",
                            layer.describe(), other, remedy, reason)
                detail += f"; for {other}, {remedy}"
                not_for.setdefault(other, (reason, remedy))
        record(layer.layer, True, detail, mask_mode, tuple(not_for))


def _native_ops(layer) -> str:
    """"a native ONNX LSTM", or for stacked cells "stacked native ONNX LSTM, GRU nodes"."""
    if len(layer.cells) == 1:
        return f"a native ONNX {layer.top.kind}"
    return f"stacked native ONNX {', '.join(cell.kind for cell in layer.cells)} nodes"


class BatchMasks:
    """The mask each layer's node reads: its own where it provably has the input's batch
    (:mod:`.batch`), else broadcast to it (Keras broadcasts a [1, T] mask), once per mask and
    input batch (the layers of a stack share one). The broadcast reads the batch size off the
    root of the input's batch axis, upstream of every layer sharing it (the first layer emitted
    may sit on top of another one)."""

    def __init__(self, graph, layers):
        self.graph = graph
        outputs = {}
        for layer in layers:
            outputs.update({t: (1, layer.x) for t in layer.sequence_outputs})
            outputs.update({t: (0, layer.x) for t in [layer.last_output] + [
                state for cell in layer.cells for state in (cell.final_h, cell.final_c)] if t})
        self._keys = {id(layer): self._key(layer, outputs) for layer in layers}
        self._cache = {}

    def _key(self, layer, outputs):
        """None: no broadcast; else what the broadcast is cached by (the mask, the input's batch)."""
        try:
            if same_batch(self.graph, layer.mask, layer.x, outputs):
                return None
            return layer.mask, batch_root(self.graph, layer.x, 1, outputs)
        except Exception:  # pylint: disable=broad-except  (a graph shape not foreseen: broadcast, always right)
            return layer.mask, (layer.x, 1)

    def mask_for(self, layer) -> str:
        key = self._keys[id(layer)]
        if key is None:
            return layer.mask
        if key not in self._cache:
            mask, (like, axis) = key
            self._cache[key] = broadcast_mask(self.graph, mask, like, axis)
        return self._cache[key]


class GraphSnapshot:
    """What rewriting one layer can change, copied so that a failure half-way can be undone exactly.

    tf2onnx has no transactions: emitting adds nodes, ``replace_all_inputs`` rewires consumers (in
    subgraphs too) and ``remove_node`` drops the loop, each updating the graph's private indices.
    The snapshot copies those indices and every node's input list, for the graph and every graph
    nested in it, plus the caches of the mask planner and of ``states`` (their tensors would be
    gone after a restore).
    """

    _INDICES = ("_nodes", "_nodes_by_name", "_output_to_node_name", "_output_to_consumers", "_input_to_graph",
                "_dtypes", "_output_shapes", "outputs", "inputs", "contained_graphs")

    def __init__(self, graph, planner=None, *states):
        self._graphs = [(g, {name: _copy_index(getattr(g, name)) for name in self._INDICES},
                         [(node, list(node.input)) for node in g.get_nodes()]) for g in _graph_tree(graph)]
        self._states = [(state, {key: _copy_index(value) for key, value in vars(state).items()})
                        for state in (planner,) + states if state is not None]

    def restore(self) -> None:
        for g, indices, nodes in self._graphs:
            for name, value in indices.items():
                setattr(g, name, _copy_index(value))
            for node, inputs in nodes:
                node.graph = g
                node.input = inputs
        for state, saved in self._states:
            vars(state).update({key: _copy_index(value) for key, value in saved.items()})


def _graph_tree(graph):
    """``graph`` and every subgraph nested in it (the bodies of its Loop and If nodes)."""
    graphs = [graph]
    for attributes in graph.contained_graphs.values():
        for subgraph in attributes.values():
            graphs.extend(_graph_tree(subgraph))
    return graphs


def _copy_index(value):
    """A copy deep enough that later edits of the graph do not reach it (the nodes themselves are shared)."""
    if isinstance(value, dict):
        return {key: (set(item) if isinstance(item, set) else dict(item) if isinstance(item, dict) else item)
                for key, item in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


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
        return original(g, custom_op_handlers, inputs_as_nchw, outputs_as_nchw, continue_on_error,
                        rewriters or custom_rewriter, *args, **kwargs)
    return process_parsed_graph


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


def enable(mask_mode: Optional[str] = None, target: Optional[str] = None, schedule: bool = False) -> _Enabled:
    """Apply the rewrite in every tf2onnx conversion of this process from now on.

    ``mask_mode`` and ``target`` as in :func:`make_rewriter`; the default mask mode is the
    target's (``"any"`` for OpenVINO, else ``"post"``). Enabling again changes the mode; the
    rewrite is never applied twice (not even when a caller also passes it in ``custom_rewriter``).
    Use the result as a context manager to restore the previous state on exit. It also applies
    the fixes Keras 3 models need to convert at all (:mod:`.time_distributed`, :mod:`.tf2onnx_keras`).
    """
    previous = _enabled_rewriter
    _install(make_rewriter(mask_mode, target, schedule))
    return _Enabled(previous)


def _install(rewriter) -> None:
    """Make ``rewriter`` the one every tf2onnx conversion of this process runs."""
    global _original_process_parsed_graph, _enabled_rewriter  # pylint: disable=global-statement
    if _original_process_parsed_graph is None:
        _original_process_parsed_graph = tfonnx.process_parsed_graph
        tfonnx.process_parsed_graph = _with_rewriter(_original_process_parsed_graph)
    _enabled_rewriter = rewriter
    time_distributed.install()
    tf2onnx_keras.install()


def disable() -> None:
    """Undo :func:`enable`: tf2onnx converts as it does without the plugin."""
    global _original_process_parsed_graph, _enabled_rewriter  # pylint: disable=global-statement
    if _original_process_parsed_graph is not None:
        tfonnx.process_parsed_graph = _original_process_parsed_graph
    _original_process_parsed_graph = None
    _enabled_rewriter = None
    time_distributed.uninstall()
    tf2onnx_keras.uninstall()


def enabled_mode():
    """The mask mode in force through :func:`enable`, or None."""
    return None if _enabled_rewriter is None else _enabled_rewriter.mask_mode
