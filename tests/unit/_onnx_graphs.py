# SPDX-License-Identifier: Apache-2.0
"""Small ONNX graphs built by hand (``onnx.helper``), loaded into tf2onnx's graph the way the package
loads a file (:func:`masked_lstm_rewriter.onnx_file.model_io.to_graph`): the ONNX readers' tests
(``test_read_select.py``, ``test_read_onnx_trip.py``, ``test_read_linear_onnx.py``, ``test_graph_onnx.py``).

:func:`loop_model` writes one ``Loop`` whose body is given as nodes: the body's inputs are
``iter``, ``cond`` and the loop variables, its outputs the condition, each variable's next value
and the scan outputs (``probes``: body tensors the test reads, each returned through an Identity
of its own so that its name stays the one the test gave). :func:`load` gives tf2onnx's graph,
the Loop node and its body graph; :func:`run` runs the model on onnxruntime (the oracle of the
linear reader's tests: a probe's value at step 0).

Loading renames the producer of every graph output (tf2onnx puts an Identity in front of it):
tests name the tensors they read inside a graph, never its outputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter.onnx_file import model_io

OPSET = 15
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
IR_VERSION = 8  # what onnxruntime runs (onnx.helper would write its newest)
INT_MAX = 2 ** 63 - 1  # an ONNX Slice's "to the end"

node = helper.make_node


def info(name: str, dtype: int, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, value, dtype=None):
    """An initializer (int lists become int64, floats float32, unless ``dtype`` says)."""
    array = np.asarray(value)
    if dtype is not None:
        array = array.astype(dtype)
    elif array.dtype.kind == "i":
        array = array.astype(np.int64)
    elif array.dtype.kind == "f":
        array = array.astype(np.float32)
    return numpy_helper.from_array(array, name)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = OPSET, exposed=()) -> onnx.ModelProto:
    """A checked model of one graph; each ``exposed`` (name, dtype, shape) is also returned, through an
    Identity of its own (``name__out``), so that loading leaves the tensor's own name alone."""
    nodes = list(nodes) + [node("Identity", [name], [f"{name}__out"]) for name, _, _ in exposed]
    outputs = list(outputs) + [info(f"{name}__out", dtype, shape) for name, dtype, shape in exposed]
    graph = helper.make_graph(nodes, "main", list(inputs), outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


@dataclasses.dataclass(frozen=True)
class Var:
    """A loop variable: its body input ``name``, type, the outer tensor it starts from, and the body
    tensor it takes next (``name`` itself: loop-invariant)."""

    name: str
    dtype: int
    shape: tuple
    initial: str
    next: str = ""


def loop_model(body_nodes, variables, *, trip: str = "", start: str = "", condition: str = "cond",
               probes=(), body_initializers=(), outer_nodes=(), inputs=(), initializers=(),
               opset: int = OPSET) -> onnx.ModelProto:
    """One ``Loop(trip, start, initial values...)`` over a body of ``body_nodes``; ``condition`` is the
    body tensor the body returns as its condition (``cond``: the one it was given), ``probes`` the
    (name, dtype[, rank: 2 unless said]) of body tensors returned as scan outputs."""
    body_outputs = [info(condition, BOOL, [])]
    for var in variables:
        body_outputs.append(info(var.next or var.name, var.dtype, list(var.shape)))
    probes = [(p[0], p[1], p[2] if len(p) > 2 else 2) for p in probes]
    scans = []
    for name, dtype, rank in probes:
        scans.append(node("Identity", [name], [f"{name}__scan"]))
        body_outputs.append(info(f"{name}__scan", dtype))
    body = helper.make_graph(
        list(body_nodes) + scans, "body",
        [info("iter", INT64, []), info("cond", BOOL, [])] + [info(v.name, v.dtype, list(v.shape)) for v in variables],
        body_outputs, initializer=list(body_initializers))
    finals = [f"{v.name}__final" for v in variables] + [f"{name}__scanned" for name, _, _ in probes]
    loop = node("Loop", [trip, start] + [v.initial for v in variables], finals, body=body, name="loop")
    outputs = [info(f"{v.name}__final", v.dtype, list(v.shape)) for v in variables] + \
        [info(f"{name}__scanned", dtype, [None] * (rank + 1)) for name, dtype, rank in probes]
    return make_model(list(outer_nodes) + [loop], inputs, outputs, initializers, opset)


def load(model: onnx.ModelProto):
    """(tf2onnx's graph of ``model``, its Loop node or None, the Loop's body graph or None)."""
    graph = model_io.to_graph(model)
    loops = [n for n in graph.get_nodes() if n.type == "Loop"]
    if not loops:
        return graph, None, None
    return graph, loops[0], loops[0].get_body_graphs()["body"]


def run(model: onnx.ModelProto, feeds: dict) -> dict:
    """Every output of ``model`` on onnxruntime, by name."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def initializer_values(model: onnx.ModelProto) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
