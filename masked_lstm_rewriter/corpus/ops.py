# SPDX-License-Identifier: Apache-2.0
"""What an ONNX model is made of: op counts over every graph, and its native recurrent nodes; and
the model without the plugin's guard, to measure what it costs."""

from __future__ import annotations

import collections

RECURRENT_OPS = ("LSTM", "GRU", "RNN")  # cells.NATIVE_OPS, spelled out: this module imports no TensorFlow
# the plugin's length-ordered schedule (masked_lstm_rewriter/plan/schedule.py, emit/segments.py): an If per layer whose
# else branch is the layer's node and whose then branch runs the same layer in segments
SCHEDULE_PREFIX = "masked_lstm_rewriter_schedule"


def walk_nodes(graph, segments: bool = False):
    """Every node of ``graph`` and of its subgraphs (a Loop's body, an If's branches). A layer the
    plugin schedules counts once, as its single node: the segments' branch is walked only with
    ``segments=True``."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if not segments and node.op_type == "If" and node.name.startswith(SCHEDULE_PREFIX) \
                    and attr.name == "then_branch":
                continue
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from walk_nodes(sub, segments)


def scheduled_layers(model_proto) -> int:
    """How many layers carry the length-ordered schedule (an If choosing segments or the single node)."""
    return sum(1 for node in walk_nodes(model_proto.graph) if node.op_type == "If"
               and node.name.startswith(SCHEDULE_PREFIX) and any(
                   n.op_type in RECURRENT_OPS for a in node.attribute if a.name == "else_branch" for n in a.g.node))


def op_counts(model_proto) -> collections.Counter:
    """Op types over the main graph and every subgraph (a Loop's body included)."""
    return collections.Counter(node.op_type for node in walk_nodes(model_proto.graph))


def native_ops(model_proto) -> dict:
    """The native recurrent nodes: op type -> the sorted ``direction`` of each node of that type
    (``{"LSTM": ["bidirectional"], "GRU": ["forward", "forward"]}``); types with no node are left out."""
    found = collections.defaultdict(list)
    for node in walk_nodes(model_proto.graph):
        if node.op_type in RECURRENT_OPS:
            direction = next((attr.s.decode() for attr in node.attribute if attr.name == "direction"), "forward")
            found[node.op_type].append(direction)
    return {op: sorted(found[op]) for op in RECURRENT_OPS if op in found}


def describe_native(native: dict) -> str:
    """``{"LSTM": ["forward", "reverse"]}`` -> ``"2 LSTM (forward, reverse)"``; ``"none"`` when empty."""
    return ", ".join(f"{len(directions)} {op} ({', '.join(directions)})" for op, directions in native.items()) or "none"


def without_guard(onnx_model, guard_message: str):
    """Copy of the model with the guard (a Split named by ``guard_message``) bypassed and the nodes
    only it used removed, or None when the model has no guard: timing both shows what the guard costs."""
    import onnx  # pylint: disable=import-outside-toplevel
    model = onnx.ModelProto()
    model.CopyFrom(onnx_model)
    graph = model.graph
    guards = [n for n in graph.node if n.name.startswith(guard_message)]
    if not guards:
        return None
    for guard in guards:
        for node in walk_nodes(graph, segments=True):  # If branches read outer tensors by name too
            for i, name in enumerate(node.input):
                if name == guard.output[0]:
                    node.input[i] = guard.input[0]
        graph.node.remove(guard)
    while True:  # prune the nodes nothing reads any more, then the initializers
        used = {name for n in walk_nodes(graph, segments=True) for name in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)
    return model
