# SPDX-License-Identifier: Apache-2.0
"""Streaming: a model that runs chunk by chunk, each recurrent layer's state carried between chunks
by the caller.

Every layer made native takes each cell's initial states as graph inputs and returns its final
states as graph outputs, named after the Keras layer: ``<layer>/h_in`` and ``<layer>/h_out`` (and
``c_in``, ``c_out`` for an LSTM cell); a layer of stacked cells names its cells after the first
``<layer>/cell_<i>/h_in`` (``i`` counting from 0 at the bottom cell). Feeding zeros gives the model
without streaming; feeding the states a chunk returned continues the sequence exactly where it
stopped, as Keras's one call over the whole sequence computes it:

* a row with no valid step in a chunk keeps its state (the emitter's ``Where(length > 0, ...)``);
* at a masked step before a row's first valid step in the chunk, a layer that repeats its last
  output shows the incoming ``h``: the last output of the earlier chunks (zeros before any), so
  the layer is emitted with ``output_starts_from_state``;
* an LSTM's final cell state past each row's length is held by the padding column, forced on.

What cannot stream is refused (the layer stays a Loop, and the conversion fails unless
``keep_wrong``, :func:`cannot_stream`): a backward direction, which needs the end of the sequence
first; a layer whose initial state the model computes (``initial_state=``), which would start
each chunk from it again; a layer inside another loop of the model. A stateful Keras layer's
state, which tf2onnx freezes as constants, becomes the inputs. Layers stock tf2onnx already made
native nodes (unmasked, forward) get the same inputs and outputs (:func:`stream_native_nodes`). A
layer inside ``TimeDistributed`` runs afresh at each step, as in Keras: it is left as it is.
"""

from __future__ import annotations

import logging
from typing import Optional

from onnx import TensorProto

from .. import layer_names
from ..cells import NATIVE_OPS, kind_of
from ..failure import Refusal
from ..graph import before_unsqueeze, int64_const, is_zeros, make_op, producer, skip_identity
from ..report import pending_layers, record_stream
from ..sources.tf_while import is_main_graph

logger = logging.getLogger("masked_lstm_rewriter")

BACKWARD_REASON = ("a backward direction (go_backwards, the backward half of a Bidirectional) needs the future of "
                   "the sequence, which a chunk does not have: it cannot run chunk by chunk")
COMPUTED_STATE_REASON = ("its initial state is computed by the model (initial_state=): run chunk by chunk, it would "
                         "start each chunk from it again, not from the state the previous chunk ended with")
NESTED_REASON = ("it runs inside another loop of the model (a subgraph), whose steps cannot take its state "
                 "as model inputs")
FOLDED_STATE_REASON = "its zero initial state is folded into the op, with no tensor a state input could replace"
NATIVE_WITH_LENGTHS = ("tf2onnx made it a native node with sequence lengths, whose final state for a row of "
                       "length 0 ONNX leaves undefined")
NATIVE_WITHOUT_STATES = "tf2onnx made it a native node that does not return its final states"


def streamable(graph, layer):
    """``layer`` with the names of its state inputs and outputs planned (no graph change yet), or a
    Refusal saying why it cannot stream. A layer inside ``TimeDistributed`` is left as it is."""
    if layer_names.inside_time_distributed(layer.layer):
        _log_per_step(layer.layer)
        return layer
    if layer.direction != "forward":
        return Refusal(BACKWARD_REASON, layer.while_node)
    if not is_main_graph(graph):
        return Refusal(NESTED_REASON, layer.while_node)
    for cell in layer.cells:
        if cell.h_at is None or (kind_of(cell.kind).states == 2 and cell.c_at is None):
            return Refusal(FOLDED_STATE_REASON, layer.while_node)
        if not cell.zero_initial_state and not all(_is_constant(graph, state) for state in cell.initial_states):
            return Refusal(COMPUTED_STATE_REASON, layer.while_node)
    prefix = _free_prefix(graph, layer_names.keras_path(layer.layer), layer.layer)
    for index, cell in enumerate(layer.cells):
        cell.streamed_states = state_names(prefix if index == 0 else f"{prefix}/cell_{index}",
                                           kind_of(cell.kind).state_names)
    return layer


def as_streamed(graph, layer):
    """``layer`` (planned by :func:`streamable`) starting from its state inputs, made graph inputs
    ``[batch, H]``; its final states become graph outputs when it is connected (:func:`returning_states`)."""
    if not layer.top.streamed_states:
        return layer  # inside TimeDistributed
    for cell in layer.cells:
        names = [state_in for state_in, _ in cell.streamed_states]
        for at, name in zip((cell.h_at, cell.c_at), names):
            graph.add_graph_input(name, graph.get_dtype(_read_at(at)) or TensorProto.FLOAT,
                                  [_batch_size(graph), cell.hidden_size])
            node, index = at
            graph.replace_input(node, node.input[index], name, index)
        cell.zero_initial_state = False
    layer.output_starts_from_state = layer.output_carried
    return layer


def state_names(prefix: str, states: tuple) -> tuple:
    """((h input, h output), and (c input, c output) for a cell with two states) under ``prefix``
    (``states``: the kind's :attr:`~..cells.CellKind.state_names`)."""
    return tuple((f"{prefix}/{state}_in", f"{prefix}/{state}_out") for state in states)


def returning_states(connect):
    """``connect`` (a source's, :func:`..emit.rewire.rewire`'s arguments), then each streamed cell's
    final states made the graph outputs it planned."""
    def connect_returning_states(graph, layer, outputs, states):
        connect(graph, layer, outputs, states)
        for cell, finals in zip(layer.cells, states):
            for (_, name), final in zip(cell.streamed_states, finals):
                _graph_output(graph, name, final, cell.hidden_size)
        names = [name for cell in layer.cells for pair in cell.streamed_states for name in pair]
        if names:
            _log_streamed(layer.layer, names)
    return connect_returning_states


def note_frozen_states() -> None:
    """Say which state a conversion without streaming froze: each stateful layer of the Keras model
    traced for it (:mod:`..layer_names`) keeps the state it held, as tf2onnx's constants."""
    for name in layer_names.stateful_layers():
        logger.info("stateful layer '%s': its state is frozen as the constants it held when converted (every "
                    "call starts from them); convert with streaming=True to take it as inputs and return it", name)


def cannot_stream() -> list:
    """One sentence per recurrent layer of the conversion under way that stays a Loop (or a cuDNN op):
    it would start every chunk from its initial state again."""
    left = [(entry.layer, entry.detail) for entry in pending_layers() if not entry.rewritten]
    return [_cannot(name, reason) for name, reason in left if not layer_names.inside_time_distributed(name)]


def native_nodes(graph) -> set:
    """The names of the native recurrent nodes of ``graph``."""
    return {node.name for node in graph.get_nodes() if node.type in NATIVE_OPS}


def stream_native_nodes(graph, ours: frozenset = frozenset()) -> list:
    """Give each native node stock tf2onnx made (before the plugin emits any; ``ours``: the names of
    those it emitted already, for a LiteRT file's ops) the state inputs and outputs of a streamed
    layer; a sentence per node that cannot stream."""
    problems = []
    for node in [n for n in graph.get_nodes() if n.type in NATIVE_OPS and n.name not in ours]:
        scope = _stock_scope(graph, node)
        refused = _stock_refusal(graph, node)
        if layer_names.inside_time_distributed(scope):
            _log_per_step(scope)
        elif refused:
            problems.append(_cannot(scope, refused))
        else:
            _stream_stock_node(graph, node, scope)
    return problems


def _log_per_step(scope: str) -> None:
    """A layer inside ``TimeDistributed`` runs over an inner axis of each step, from zeros at every
    step as in Keras: nothing to carry between chunks (known through the traced Keras model only)."""
    logger.info("layer '%s' runs inside TimeDistributed, afresh at each step: no state to stream",
                layer_names.keras_path(scope))


def _cannot(scope: str, reason: str) -> str:
    return f"layer '{layer_names.keras_path(scope)}' cannot stream: {reason}"


def _is_constant(graph, tensor: str) -> bool:
    """A constant initial state: zeros of a static batch, or a stateful layer's state as tf2onnx froze it."""
    return graph.is_const(skip_identity(graph, tensor))


def _read_at(at) -> str:
    node, index = at
    return node.input[index]


def _free_prefix(graph, path: str, scope: str) -> str:
    """``path``, or where its names are taken (a Keras 3 layer called twice), ``scope``, else ``path_<n>``."""
    candidates = [path, scope] + [f"{path}_{n}" for n in range(2, 1000)]
    return next(prefix for prefix in candidates if _is_free(graph, f"{prefix}/h_in"))


def _is_free(graph, name: str) -> bool:
    return graph.get_node_by_output(name) is None and name not in graph.outputs


def _graph_output(graph, name: str, tensor: str, hidden: int) -> None:
    graph.make_node("Identity", [tensor], outputs=[name])
    graph.add_graph_output(name, graph.get_dtype(tensor) or TensorProto.FLOAT, [-1, hidden])


def _log_streamed(scope: str, names: list) -> None:
    """One INFO line per streamed layer, a stateful one's saying that its state is no longer frozen; the
    layer's state inputs and outputs in the report."""
    record_stream(layer_names.keras_path(scope), names[0::2], names[1::2])
    if layer_names.is_stateful(scope):
        logger.info("stateful layer '%s': its state is taken as inputs and returned as outputs (%s), not frozen as "
                    "the constants it held", layer_names.keras_path(scope), ", ".join(names))
    else:
        logger.info("layer '%s' streams: its states are the inputs and outputs %s", layer_names.keras_path(scope),
                    ", ".join(names))


# --- native nodes stock tf2onnx made (unmasked forward LSTM and GRU layers) ---------------------

_INITIAL_H = 5  # ONNX LSTM, GRU and RNN: X, W, R, B, sequence_lens, initial_h (, initial_c for an LSTM)


def _stock_refusal(graph, node) -> Optional[str]:
    """Why a native node stock tf2onnx made cannot stream, or None."""
    states = kind_of(node.type).states
    reversed_input = producer(graph, node.input[0])
    if node.get_attr_value("direction", b"forward") not in (b"forward", "forward") or \
            (reversed_input is not None and reversed_input.type in ("ReverseV2", "ReverseSequence")):
        return BACKWARD_REASON
    if len(node.input) > 4 and node.input[4]:
        return NATIVE_WITH_LENGTHS
    if len(node.output) < 1 + states:
        return NATIVE_WITHOUT_STATES
    initial = [before_unsqueeze(graph, node.input[i]) for i in range(_INITIAL_H, _INITIAL_H + states)
               if i < len(node.input) and node.input[i]]
    if not all(is_zeros(graph, state) or _is_constant(graph, state) for state in initial):
        return COMPUTED_STATE_REASON
    return None


def _batch_size(graph) -> int:
    """The batch size of the model's first input where it is fixed (a stateful Keras model's), else -1."""
    shape = graph.get_shape(graph.input_names[0]) if graph.input_names else None
    return shape[0] if shape and shape[0] is not None and shape[0] > 0 else -1


def _stream_stock_node(graph, node, scope: str) -> None:
    """The node starts from new state inputs and returns its final states ``Y_h`` (and ``Y_c``) as outputs:
    it runs every step of every row (no sequence_lens), so they are the states after the chunk."""
    hidden = node.get_attr_value("hidden_size")
    names = state_names(_free_prefix(graph, layer_names.keras_path(scope), scope), kind_of(node.type).state_names)
    inputs = list(node.input) + [""] * max(0, _INITIAL_H + len(names) - len(node.input))
    for offset, (state_in, state_out) in enumerate(names):
        graph.add_graph_input(state_in, TensorProto.FLOAT, [_batch_size(graph), hidden])
        inputs[_INITIAL_H + offset] = make_op(graph, "Unsqueeze", state_in, int64_const(graph, "axes", [0]))
        final = make_op(graph, "Squeeze", node.output[1 + offset], int64_const(graph, "axes", [0]))
        _graph_output(graph, state_out, final, hidden)
    graph.replace_inputs(node, inputs)
    _log_streamed(scope, [name for pair in names for name in pair])


def _stock_scope(graph, node) -> str:
    """The scope of the Keras layer a stock native node was made of, read off the tensors it reads
    (Keras's transpose of the input, the zeros it starts from), else the node's name."""
    states = [before_unsqueeze(graph, t) for t in node.input[_INITIAL_H:_INITIAL_H + 2] if t]
    for tensor in [node.input[0]] + states:
        scope = _scope_of_tensor(tensor)
        if scope:
            return scope
    return node.name


def _scope_of_tensor(tensor: str) -> str:
    """"model/lstm/PartitionedCall/transpose:0" -> "lstm": the scopes between the model's and the op's."""
    parts = [part for part in tensor.split(":")[0].split("/")[:-1]
             if part not in ("PartitionedCall", "StatefulPartitionedCall", "while", "ConstantFolding")]
    return "/".join(parts[1:])
