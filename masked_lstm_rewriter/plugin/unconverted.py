# SPDX-License-Identifier: Apache-2.0
"""TensorFlow ops tf2onnx has no ONNX form for: it logs "Unsupported ops" and writes them into the model
as they are, which no ONNX runtime then loads (string preprocessing such as ``TextVectorization`` in the
model). A conversion through the plugin fails on them as on any model known to be wrong."""

from __future__ import annotations

import onnx

LITERT_PREFIX = "TFL_"  # how tf2onnx names a LiteRT flatbuffer's ops
ONNX_DOMAINS = ("", "ai.onnx")  # ops of other domains are custom ones (--custom-ops, --extra_opset)


def unconverted_ops(graph) -> list:
    """The sorted op types of ``graph`` (tf2onnx's main graph, after its conversion) and its subgraphs
    that are no ONNX op, among the nodes its outputs depend on (tf2onnx's optimizer removes the others)."""
    found = set()
    for node in _live(graph):
        if node.is_const() or node.is_graph_input():
            continue  # tf2onnx's own node types, written as initializers and graph inputs
        if (node.domain or "") in ONNX_DOMAINS and not onnx.defs.has(node.type, node.domain or ""):
            found.add(node.type)
        for body in (node.get_body_graphs() or {}).values():
            found.update(unconverted_ops(body))
    return sorted(found)


def _live(graph) -> list:
    """The nodes of ``graph`` its outputs depend on, through the tensors its subgraphs read from it too."""
    live, pending = {}, list(graph.outputs)
    while pending:
        node = graph.get_node_by_output(pending.pop(), search_in_parent_graphs=False)
        if node is None or node.name in live:
            continue
        live[node.name] = node
        pending.extend(name for name in node.input if name)
        for body in (node.get_body_graphs() or {}).values():
            pending.extend(name for inner in body.get_nodes() for name in inner.input if name)
    return list(live.values())


def unconverted_problem(ops: list) -> str:
    """What the report and the error say of ``ops``, with what to do instead where the ops show it."""
    if any(op.startswith("TensorList") for op in ops):
        hint = ("the loops' lists of a graph frozen with lowered (TF1-style) control flow: freeze with "
                "lower_control_flow=False, or convert the SavedModel or Keras model")
    elif any(op.startswith(("String", "Regex", "StaticRegex")) for op in ops):
        hint = ("string preprocessing (TextVectorization): compute it outside the model and convert the model "
                "that takes its output")
    elif all(op.startswith(LITERT_PREFIX) for op in ops):
        hint = "the plugin's warning above says why it did not read them; convert the Keras model instead"
    else:
        hint = "compute them outside the model, or map them with tf2onnx's custom_ops"
    origin = "LiteRT" if all(op.startswith(LITERT_PREFIX) for op in ops) else "TensorFlow"
    return (f"tf2onnx has no ONNX form for {origin} op(s) {', '.join(ops)}, left in the model as they are "
            f"(no ONNX runtime loads it): {hint}")
