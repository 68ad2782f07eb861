# SPDX-License-Identifier: Apache-2.0
"""Undo a layer's rewrite exactly when it fails half-way: the loop stands as tf2onnx made it."""

from __future__ import annotations


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
