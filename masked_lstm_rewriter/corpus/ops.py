# SPDX-License-Identifier: Apache-2.0
"""What an ONNX model is made of: op counts over every graph, and its native recurrent nodes."""

from __future__ import annotations

import collections

RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def walk_nodes(graph):
    """Every node of ``graph`` and of its subgraphs (a Loop's body, an If's branches)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from walk_nodes(sub)


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
