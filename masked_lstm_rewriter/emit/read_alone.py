# SPDX-License-Identifier: Apache-2.0
"""Give each native node an input of its own where a runtime would scramble a shared one.

OpenVINO's CPU plugin (2026.4, ``OptimizeSequenceTransposes``) folds the Transpose it puts in
front of a recurrent op into a Reshape, and does so for every reader of that Transpose: when a
dimension of the input is static, the other readers get the steps scrambled, with no error
(stock tf2onnx's unmasked LSTMs included). :func:`read_alone` puts ``Max(x, x)`` nodes in between
where that could happen (``targets.shared_swaps_scrambled``).
"""

from __future__ import annotations

from ..cells import NATIVE_OPS
from ..graph import make_op, producer

_NATIVE = frozenset(NATIVE_OPS)


def read_alone(g, x: str) -> str:
    """``x`` as the node should read it: through ``Max(x, x)`` nodes of its own where OpenVINO would
    otherwise give the node, or other readers of its input, scrambled steps.

    OpenVINO's CPU plugin (2026.4, ``OptimizeSequenceTransposes``) folds the Transpose it puts in
    front of a recurrent op into a Reshape, and does so for every reader of that Transpose: when a
    dimension of the input is static, the other readers get the steps scrambled, with no error
    (stock tf2onnx's unmasked LSTMs included). So no node may read a swap that another node reads:

    * a layer over another layer's sequence that is also used elsewhere (a Concatenate, an
      attention, a residual Add) reads it through a Max of its own;
    * two nodes over the same input (parallel layers; tf2onnx merges duplicate nodes, so the same
      computation counts as the same tensor) read it through a chain of Maxes, one more each.

    ``Max`` because OpenVINO removes an Identity, an ``Add`` of 0 or a ``Mul`` by 1."""
    if _may_read_a_shared_swap(g, x):
        x = make_op(g, "Max", x, x)
    known = {}
    read = {_computation(g, node.input[0], known) for node in g.get_nodes() if node.type in _NATIVE}
    computation = _computation(g, x, known)
    while computation in read:
        x = make_op(g, "Max", x, x)
        computation = _computation(g, x, known)
    return x


def _computation(g, tensor: str, known: dict, depth: int = 0):
    """A key that two tensors share when they compute the same thing (as tf2onnx's merging of
    duplicate nodes sees it): the producer's op, attributes and inputs' keys; a small constant's
    value; past a few steps, the same for all (two keys may then be equal when the tensors are
    not, which costs a Max at most). ``known`` holds the keys already worked out."""
    if depth > 8:
        return "..."
    if (tensor, depth) not in known:
        node = producer(g, tensor)
        if node is None:
            key = tensor
        elif node.is_const():
            value = node.get_tensor_value(as_list=False)
            key = ("const", str(value.dtype), value.shape, value.tobytes()) if value.size <= 1024 else tensor
        else:
            attrs = tuple(sorted((name, attr.SerializeToString()) for name, attr in node.attr.items()))
            inputs = tuple(_computation(g, name, known, depth + 1) for name in node.input)
            key = node.type, attrs, inputs, list(node.output).index(tensor)
        known[tensor, depth] = key
    return known[tensor, depth]


def _may_read_a_shared_swap(g, x: str) -> bool:
    """Time-major ``x`` is what the node reads; the runtime swaps it to batch-major. Either ``x`` is a
    swap of a batch-major tensor, and the two cancel: the node then reads that tensor, which may be a
    shared swap itself (or become one); or the runtime's swap of ``x`` merges with another node's.
    ``x``'s own readers are not counted: until this rewrite they include the loop's."""
    node = producer(g, x)
    if _swaps_first_axes(g, node):
        derived, shared = _swap_derived(g, node.input[0], {})
        return derived and shared
    return any(_swaps_first_axes(g, reader) for reader in _data_readers(g, x))


def _swap_derived(g, tensor: str, known: dict, depth: int = 0) -> tuple:
    """(derived, shared): can tf2onnx's transpose optimizer turn ``tensor`` into a swap of the first
    two axes (it is one, or every non-constant input of its producer is one, recursively: the
    optimizer moves swaps down through element-wise ops and concatenations), and does a tensor on
    the way have other readers than one swap? Unsure past a few steps: (True, True). ``known``
    holds the answers already worked out."""
    if depth > 8:
        return True, True
    if tensor not in known:
        known[tensor] = _swap_derived_here(g, tensor, known, depth)
    return known[tensor]


def _swap_derived_here(g, tensor: str, known: dict, depth: int) -> tuple:
    """:func:`_swap_derived` worked out at ``tensor``."""
    node = producer(g, tensor)
    readers = _data_readers(g, tensor)
    swaps = [reader for reader in readers if _swaps_first_axes(g, reader)]
    shared = len(readers) - len(swaps) + bool(swaps) > 1  # equal swaps merge (a Bidirectional's two halves)
    if node is None or node.type in _NATIVE:  # no optimizer moves a swap through a recurrent op
        return False, shared
    if _swaps_first_axes(g, node):
        return True, shared
    inputs = [name for name in node.input if _computed(g, name)]
    if not inputs:
        return False, shared
    below = [_swap_derived(g, name, known, depth + 1) for name in inputs]
    return all(d for d, _ in below), shared or any(s for _, s in below)


def _computed(g, tensor: str) -> bool:
    """Is ``tensor`` an input that is computed: not an omitted optional input (``""``, as a native
    node's unused initial states, bias or lengths are), nor a constant?"""
    node = producer(g, tensor) if tensor else None
    return tensor != "" and (node is None or not node.is_const())


def _data_readers(g, tensor: str) -> list:
    """The nodes that read ``tensor``'s values, not only its shape (Keras reads a layer input's batch size)."""
    return [node for node in g.find_output_consumers(tensor) if node.type not in ("Shape", "Size")]


def _swaps_first_axes(g, node) -> bool:
    """Is ``node`` a Transpose with ``perm=[1, 0, 2]`` (TensorFlow's, as an input, or ONNX's)?"""
    if node is None or node.type != "Transpose":
        return False
    perm = node.get_attr_value("perm")
    if perm is None and len(node.input) > 1 and g.is_const(node.input[1]):
        perm = g.get_tensor_value(node.input[1])
    return perm is not None and list(perm) == [1, 0, 2]
