# SPDX-License-Identifier: Apache-2.0
"""The ONNX ``Loop``: what tf2onnx or Keras's JAX export wrote for a recurrent layer in an ONNX file
(:mod:`..read.onnx_loop`), and what tf2onnx makes of TF1-style control flow before the rewriter
runs (whose body is still in TensorFlow ops: said so, not read).

A Loop's output may be read only inside another Loop's body (with static shapes tf2onnx drops the
transposes between two stacked layers, and the upper body reads the lower's sequence itself).
tf2onnx's graph of an ONNX file does not index such reads: the source indexes them before reading,
so that they count as uses and rewiring renames them; and where the rewired layer's outputs are
read that way, it keeps their names (an ``Identity``), since the file keeps the bodies it does not
rewrite as they were."""

from __future__ import annotations

from ..emit.rewire import replace_tensor, rewire
from ..failure import Refusal
from ..graph import int64_const, make_op
from ..read.body import is_masked_recurrent_body
from ..read.onnx_loop import loop_layer_name, read_onnx_loop, reads_a_mask
from .source import Candidate, Source, prepare_masks

LOWERED_REASON = ("the graph has TF1-style control flow (e.g. a GraphDef frozen with lowered control flow), "
                  "which tf2onnx turned into a Loop before this rewriter runs; freeze with "
                  "lower_control_flow=False or convert the SavedModel or Keras model")


def candidates(graph, ops) -> list:
    _index_subgraph_reads(graph)
    return [op for op in ops if op.type == "Loop"]


def _index_subgraph_reads(graph) -> None:
    """Index every tensor a subgraph (a Loop's body, an If's branch) reads from a graph around it, as
    tf2onnx does for the graphs it converts, so that ``find_output_consumers`` and
    ``replace_all_inputs`` reach those readers too."""
    for node in graph.get_nodes():
        for body in (node.get_body_graphs() or {}).values():
            inside = {name for inner in body.get_nodes() for name in inner.output} | set(body.input_names)
            for inner in body.get_nodes():
                for name in inner.input:
                    if name and name not in inside:
                        body._register_input_name(name, inner, only_graph=True)  # pylint: disable=protected-access
            _index_subgraph_reads(body)


def connect(graph, layer, outputs, states) -> None:
    """:func:`..emit.rewire.rewire`, then an ``Identity`` naming each new tensor a subgraph now reads after
    the Loop output it replaces: the file keeps what it does not rewrite as it was, that body included
    (where its Loop is rewritten too, nothing reads the Identity and the file leaves it out). Where a
    node of the main graph that stays reads it too, the file gives the new tensor that name already.
    A Loop output that is a graph output keeps its name; one that mirrors another is that one reshaped."""
    held = _hold_graph_outputs(graph, layer.while_node)
    _read_mirrors_reshaped(graph, layer)
    main = [(node, list(node.input)) for node in graph.get_nodes()]
    nested = _subgraph_readers(graph)
    rewire(graph, layer, outputs, states)
    _restore_graph_outputs(graph, held)
    named = {old for old, _ in _renamed([(node, inputs) for node, inputs in main
                                         if graph.get_node_by_name(node.name) is node])}
    for old, new in dict(_renamed(nested)).items():
        if old not in named:
            graph.make_node("Identity", [new], outputs=[old], shapes=[graph.get_shape(new)],
                            dtypes=[graph.get_dtype(new)])


def _hold_graph_outputs(graph, loop) -> dict:
    """{name: an Identity reading it} for each of the Loop's outputs that is a graph output (a conversion
    from LiteRT, once optimized, may return one as it is): rewiring points that reader at the result."""
    return {name: graph.make_node("Identity", [name]) for name in loop.output if name in graph.outputs}


def _restore_graph_outputs(graph, held: dict) -> None:
    """Each graph output :func:`_hold_graph_outputs` held, made again under its own name from what its
    reader reads now."""
    for name, reader in held.items():
        result = reader.input[0]
        graph.remove_node(reader.name)
        if result != name:
            graph.make_node("Identity", [result], outputs=[name], shapes=[graph.get_shape(result)],
                            dtypes=[graph.get_dtype(result)])


def _read_mirrors_reshaped(graph, layer) -> None:
    """What reads a Loop output that mirrors another (:class:`..read.onnx_loop.Mirror`) reads that one
    reshaped instead, which rewiring then points at the emitted result."""
    for mirror in layer.mirrors:
        replace_tensor(graph, mirror.output,
                       make_op(graph, "Reshape", mirror.source, int64_const(graph, "mirror_shape", mirror.shape)))


def _renamed(readers: list) -> list:
    """(old, new) for each input of the ``readers`` (node, its inputs before) that now reads another tensor."""
    return [(old, new) for node, inputs in readers for old, new in zip(inputs, node.input) if old != new]


def _subgraph_readers(graph) -> list:
    """(node, its inputs) for every node of every subgraph nested in ``graph``."""
    readers = []
    for node in graph.get_nodes():
        for body in (node.get_body_graphs() or {}).values():
            readers.extend((inner, list(inner.input)) for inner in body.get_nodes())
            readers.extend(_subgraph_readers(body))
    return readers


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
    """Each layer's input read through a node made before any layer is emitted, so that rewriting the
    layer below renames what it reads: made time-major where the loop reads it projected, an Identity
    where it is another of these Loops' output (the schedule's If branches read it by name); and its
    mask as the planner takes it, [B, T] bool, where the body reads another layout
    (:func:`.source.prepare_masks`)."""
    loops = {layer.while_node.name for layer in layers}
    for layer in layers:
        if layer.x_batch_major is not None:
            layer.x_time_major = make_op(graph, "Transpose", layer.x_batch_major, perm=[1, 0, 2])
        elif layer.x_time_major and getattr(graph.get_node_by_output(layer.x_time_major), "name", None) in loops:
            layer.x_time_major = make_op(graph, "Identity", layer.x_time_major)
    return prepare_masks(graph, layers)


SOURCE = Source(name="ONNX Loop", candidates=candidates, read=read, prepare=prepare, connect=connect)
