# SPDX-License-Identifier: Apache-2.0
"""Plan the order the layers are emitted in: each after every layer whose outputs it reads.

What a mask's layers share (lengths, guard, the batch size read off a layer's input) is emitted
once, with the first of them. Read off an upper layer's input, it would sit below the lower
layer's new nodes that it feeds, and rewiring the lower layer would close a cycle. A source may
list a stack's layers top first (tf2onnx's graph of an ONNX file does), so the pipeline orders
them here.
"""

from __future__ import annotations

from ..graph import producer


def bottom_up(graph, layers: list) -> list:
    """``layers`` in their order, but each after every layer of the list whose outputs its input or
    mask is computed from."""
    below = {id(layer): _layers_upstream(graph, layer, layers) for layer in layers}
    ordered, placed = [], set()
    while len(ordered) < len(layers):
        layer = next((layer for layer in layers if id(layer) not in placed and below[id(layer)] <= placed),
                     None)
        if layer is None:  # not expected: a loop reads another's outputs and that one its own
            return ordered + [layer for layer in layers if id(layer) not in placed]
        ordered.append(layer)
        placed.add(id(layer))
    return ordered


def _layers_upstream(graph, layer, layers: list) -> set:
    """ids of the other ``layers`` whose node (a While loop, a cuDNN op, a Loop) computes, through any
    chain of nodes, what the node of ``layer`` reads: its inputs, and the layer's input (``x_source``:
    x, or the tensor it is transposed from) and mask, which an ONNX Loop's body reads from outside."""
    nodes = {id(other.while_node): id(other) for other in layers if other is not layer}
    pending = [name for name in [*layer.while_node.input, layer.x_source, layer.mask] if name]
    seen, found = set(), set()
    while pending:
        node = producer(graph, pending.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in nodes:
            found.add(nodes[id(node)])
        pending.extend(name for name in node.input if name)
    return found
