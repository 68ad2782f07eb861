# SPDX-License-Identifier: Apache-2.0
"""The floor of tools/benchmark.py: the unmasked model plus the fewest nodes that make it what the
masked Keras model computes, for a post-padded mask, on every runtime the plugin names.

Built by hand from the unmasked model's ONNX (same weights; the embedding's nodes kept as they are),
for a forward recurrent node whose sequence Keras returns (``Squeeze -> Transpose`` after it):

  lengths   Equal(tokens, 0) -> Not is Keras's mask; Unsqueeze -> Cast -> ReduceSum its row lengths
  guard     a Split of the lengths whose size is the count of the mask's falls in ``[1, mask, 0]``
            frames, B exactly when every row is post-padded: the run fails otherwise (six nodes, as
            the plugin's: a mask Keras would read with padding first or between gives other values)
  node      the unmasked node with those lengths as ``sequence_lens`` and no initial states (zeros)
  outputs   Keras's value at every position, one Gather of ``Y`` with a zero step appended: at a
            padded step the row's last valid output, zeros for a row with none (OpenVINO writes
            other values than zeros past the lengths with dynamic shapes, so the zero step is
            needed for a model every runtime runs); the row read is ``upto * B + (b - B)``, ``upto``
            the valid steps up to t

Left out, as exactness does not need them: running the node only up to the longest row (what makes
OpenVINO's masked model fast with padding), an explicit zero initial state (what lets OpenVINO fold
the Transpose in front of its node). ``floor_model`` raises ``ValueError`` on any other graph.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def floor_model(unmasked: onnx.ModelProto, tokens: str = "tokens") -> onnx.ModelProto:
    """The floor of ``unmasked`` (see the module's docstring), a new model."""
    model = onnx.ModelProto()
    model.CopyFrom(unmasked)
    graph = model.graph
    node = _recurrent_node(graph)
    output = graph.output[0].name
    transpose = _producer(graph, output)
    squeeze = _producer(graph, transpose.input[0]) if transpose is not None else None
    if transpose is None or transpose.op_type != "Transpose" or squeeze is None or squeeze.op_type != "Squeeze" \
            or squeeze.input[0] != node.output[0]:
        raise ValueError(f"floor: the output {output!r} is not Transpose(Squeeze(Y)) of {node.op_type} {node.name!r}")
    hidden = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "hidden_size")
    nodes, consts = _Nodes(), {}

    def const(name, value):
        consts[name] = numpy_helper.from_array(np.asarray(value), f"floor/{name}")
        return consts[name].name

    valid = nodes("Not", nodes("Equal", tokens, const("zero_token", np.array(0, np.int32))))
    counts = nodes("Cast", nodes("Unsqueeze", valid, const("axis2", np.array([2], np.int64))), to=TensorProto.INT32)
    lengths = nodes("ReduceSum", counts, const("axes12", np.array([1, 2], np.int64)), keepdims=0)
    head = nodes("Pad", counts, const("pad_head", np.array([0, 1, 0, 0, 0, 0], np.int64)),
                 const("one_i32", np.array(1, np.int32)))
    tail = nodes("Pad", counts, const("pad_tail", np.array([0, 0, 0, 0, 1, 0], np.int64)),
                 const("zero_i32", np.array(0, np.int32)))
    falls = nodes("Cast", nodes("Greater", head, tail), to=TensorProto.INT64)
    size = nodes("ReduceSum", falls, const("axes01", np.array([0, 1], np.int64)), keepdims=0)
    guarded = nodes("Split", lengths, size, axis=0, name="floor: the mask is not post-padded")

    shape = nodes("Shape", tokens)
    batch = nodes("Slice", shape, const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64)))
    minus_ones = nodes("ConstantOfShape", shape, value=numpy_helper.from_array(np.array([-1], np.int64)))
    zero_step = nodes("CumSum", minus_ones, const("axis0", np.array(0, np.int64)), reverse=1)  # b - B in row b
    upto = nodes("CumSum", nodes("Cast", valid, to=TensorProto.INT64), const("axis1", np.array(1, np.int64)))
    rows = nodes("Add", nodes("Mul", upto, batch), zero_step)
    padded = nodes("Pad", squeeze.output[0], const("zero_step", np.array([0, 0, 0, 1, 0, 0], np.int64)))
    flat = nodes("Reshape", padded, const("rows_shape", np.array([-1, hidden], np.int64)))
    nodes("Gather", flat, rows, axis=0, outputs=[output])

    inputs = (list(node.input) + [""] * 5)[:4] + [guarded]  # sequence_lens; no initial states: zeros
    del node.input[:]
    node.input.extend(inputs)
    graph.node.remove(transpose)
    graph.node.extend(nodes.made)
    graph.initializer.extend(consts.values())
    _prune(graph)
    _sort(graph)
    onnx.checker.check_model(model)
    return model


class _Nodes:
    """Makes nodes with fresh output names; ``made`` lists them in order."""

    def __init__(self):
        self.made, self.count = [], 0

    def __call__(self, op: str, *inputs, outputs=None, name=None, **attrs):
        self.count += 1
        outputs = outputs or [f"floor/{op}_{self.count}"]
        made = helper.make_node(op, list(inputs), outputs, name=name or f"floor/{op}_{self.count}", **attrs)
        self.made.append(made)
        return made.output[0]


def _recurrent_node(graph):
    found = [node for node in graph.node if node.op_type in RECURRENT_OPS]
    if len(found) != 1:
        raise ValueError(f"floor: {len(found)} recurrent nodes, not one")
    direction = next((helper.get_attribute_value(a).decode() for a in found[0].attribute if a.name == "direction"),
                     "forward")
    if direction != "forward":
        raise ValueError(f"floor: a {direction} {found[0].op_type} node, not a forward one")
    return found[0]


def _producer(graph, tensor: str):
    return next((node for node in graph.node if tensor in node.output), None)


def _prune(graph) -> None:
    """Removes the nodes and initializers nothing reads (the unmasked model's zero initial states)."""
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if not any(name in read for name in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = {name for node in graph.node for name in node.input}
    for initializer in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(initializer)


def _sort(graph) -> None:
    """Orders the nodes so that each comes after what it reads."""
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [node for node in pending if all(name in known for name in node.input)]
        if not ready:
            raise ValueError("floor: the graph has a cycle")
        for node in ready:
            ordered.append(node)
            known.update(node.output)
            pending.remove(node)
    copies = [onnx.NodeProto() for _ in ordered]
    for copy, node in zip(copies, ordered):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
