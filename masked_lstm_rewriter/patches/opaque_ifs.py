# SPDX-License-Identifier: Apache-2.0
"""tf2onnx's optimizers pass over the rewriter's ``If`` nodes without entering their branches.

Why. tf2onnx's ``optimize_graph`` runs about 24 optimizer passes, each on a deep copy of the whole
graph (its undo point when a pass fails) and each descending into every ``If`` branch. The
length-aware schedule's branches hold four times the nodes of the rest of a typical model: copying
and walking them took most of a scheduled conversion's time (a one-LSTM model: 1.0 s against 0.4 s),
and the passes change nothing in them (the branches are built by the rewriter, already folded).

What. While the plugin is enabled, :func:`optimize_graph` first turns each of the rewriter's ``If``
nodes (named with :data:`PREFIX`) into an opaque node of the rewriter's domain whose inputs are the
condition and every tensor the branches read from outside, and keeps the branches aside. The passes
see a node they do not know that reads those tensors: they keep the tensors, never move a
``Transpose`` through it, never merge two of them (each carries its own key), and where a pass renames
a tensor it reads (folded constants, removed ``Identity`` nodes), the node's input says so. After the
passes each node gets its branches back, with the renamed tensors renamed in them, and is the ``If``
it was. A node a pass removed (its outputs unused) leaves its branches unused.
"""

from __future__ import annotations

import dataclasses

from tf2onnx import optimizer

from ..plan.schedule import SCHEDULE_NAME as PREFIX  # the rewriter's If nodes are named with it


DOMAIN = "masked_lstm_rewriter"


OPAQUE = "OpaqueIf"


_original = None


@dataclasses.dataclass
class _Hidden:
    """What an opaque node stands for: its branches, and the outer tensors they read, in input order."""

    branches: dict
    reads: list


def install() -> None:
    """Replace tf2onnx's ``optimizer.optimize_graph`` (idempotent; :func:`uninstall` restores it)."""
    global _original  # pylint: disable=global-statement
    if _original is None:
        _original = optimizer.optimize_graph
        optimizer.optimize_graph = optimize_graph


def uninstall() -> None:
    global _original  # pylint: disable=global-statement
    if _original is not None:
        optimizer.optimize_graph = _original
        _original = None


def optimize_graph(graph, *args, **kwargs):
    """tf2onnx's ``optimize_graph`` with the rewriter's ``If`` branches kept out of its passes."""
    hidden = {node.name: _hide(graph, node) for node in list(graph.get_nodes()) if _is_ours(node)}
    graph = (_original or optimizer.optimize_graph)(graph, *args, **kwargs)
    for node in list(graph.get_nodes()):
        if node.type == OPAQUE and node.domain == DOMAIN:
            _restore(graph, node, hidden[node.name])
    return graph


def _is_ours(node) -> bool:
    return node.type == "If" and node.name.startswith(PREFIX) and bool(node.get_body_graphs())


def _hide(graph, node) -> _Hidden:
    """Make ``node`` an opaque node reading its condition and its branches' outer tensors."""
    reads = sorted(node.get_implicit_inputs())
    branches = dict(graph.contained_graphs.pop(node.name))
    for branch in branches.values():
        _forget_reads(graph, branch)
    for name in branches:
        node.attr.pop(name, None)  # the branches' protos, written by an earlier update_proto
    graph.replace_inputs(node, [node.input[0]] + reads)
    node.type, node.domain = OPAQUE, DOMAIN
    node.set_attr("key", node.name)  # no two opaque nodes are ever equal to a pass merging duplicates
    return _Hidden(branches, reads)


def _restore(graph, node, hidden: _Hidden) -> None:
    """Give ``node`` its branches back, the outer tensors renamed as its inputs now name them."""
    condition, *reads = node.input
    for old, new in zip(hidden.reads, reads):
        if old != new:
            for branch in hidden.branches.values():
                branch.replace_all_inputs(old, new, ops=branch.get_nodes())
    del node.attr["key"]
    node.type, node.domain = "If", ""
    graph.replace_inputs(node, [condition])
    for name, branch in hidden.branches.items():
        node.set_body_graph_as_attr(name, branch)
        _register_reads(branch)


def _forget_reads(graph, branch) -> None:
    """Drop ``graph``'s record that ``branch`` reads its tensors (a rename would reach it; a copy would copy it)."""
    for graphs in graph._input_to_graph.values():  # pylint: disable=protected-access
        graphs.pop(id(branch), None)


def _register_reads(branch) -> None:
    """Record again, in the graphs around ``branch``, which of their tensors it (and its own branches) read."""
    for inner in branch.get_nodes():
        for tensor in inner.input:
            branch._register_input_name(tensor, inner)  # pylint: disable=protected-access
        for nested in (inner.get_body_graphs() or {}).values():
            _register_reads(nested)
