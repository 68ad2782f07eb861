# SPDX-License-Identifier: Apache-2.0
"""Small masked recurrent loops in raw TensorFlow, their numpy oracle, and conversion helpers.

The fast tier (``tests/unit``) needs no Keras: instead of building a Keras layer, :func:`masked_loop`
writes the loop Keras writes for a masked ``LSTM``, ``GRU`` or ``SimpleRNN`` layer (Keras 3's
``backend.tensorflow.rnn``), directly as a ``tf.function``:

* the batch-major input ``x`` [B, T, F] is transposed to time-major and unstacked into a
  TensorArray (``TensorListFromTensor``); the [B, T] bool mask becomes
  ``transpose(expand_dims(mask, -1), [1, 0, 2])`` [T, B, 1] and is unstacked the same way;
* ``tf.while_loop`` over ``time < T`` (with ``maximum_iterations=T``, as Keras 3 passes it) carries
  the step counter, the output TensorArray (reserved with T elements), the previous output
  (starting as zeros) and the states;
* each step reads ``x_t`` and ``mask_t``, computes the cell, selects ``tf.where(mask_t, new, old)``
  for the output and every state (``SelectV2``), and writes the output at ``time`` (one
  ``TensorListSetItem``);
* after the loop the outputs are stacked and transposed back to batch-major.

With ``time_major=True`` (tf_keras's ``time_major=True``: Keras's ``backend.rnn`` with that flag) the
input is [T, B, F] and the mask [T, B] (``Masking`` over that input computes it so; ``lengths`` is
fed as ``transpose(sequence_mask(lengths, T))``), unstacked as they are, without the transposes, and
the stacked outputs are returned time-major.

Weights are ``tf.constant`` s created in the function before the loop (so the While gets them as
constant loop inputs, as a converted Keras model does), in Keras's layouts: LSTM gate blocks
``i, f, c, o``, GRU ``z, r, h`` with a [2, 3H] bias (input and recurrent bias) when
``reset_after=True``, SimpleRNN one block. Each knob of :class:`Loop` turns one thing the reader
checks into something it must refuse (an activation, the dtype, the stop condition, weights
passed in as inputs...).

:func:`reference` is the same masked recurrence in numpy, written independently of the graph:
a masked step keeps the states and repeats the previous output (zeros before the first valid
step), as Keras does; a backward loop runs over the time-reversed input and mask and returns its
sequence in that reversed order.

:class:`WhileLoop` is the While source's case for the shared verbs of ``_harness.py``
(``check_rewrites``, ``check_refuses``): its references are :func:`reference` and the Loop stock
tf2onnx makes of the same function, on post-padded batches and, in ``"any"``, pre-padded and holed
ones (:data:`LAYOUTS`); refused, it stays that one Loop. :class:`FunctionCase`, its base, serves
other sources traced from a ``tf.function`` (the cuDNN op's, in ``test_read_cudnn.py``).

The library's internal names (the body reader) are imported here and nowhere else in the tier,
so that a restructuring of the package changes one import block (it accepts both the flat
layout and the read/ plan/ emit/ subpackages).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np
import onnxruntime as ort
import tensorflow as tf
import tf2onnx

import masked_lstm_rewriter as mlr
from _harness import runner

# the library's internals the reader-level tests use (the body reader): the only such import of the tier
from masked_lstm_rewriter.corpus.ops import walk_nodes
from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.read.body import is_masked_recurrent_body, read_body

OPSET = 15
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
NATIVE_OPS = ("LSTM", "GRU", "RNN")

ACTIVATIONS = {  # name -> (TensorFlow, numpy)
    "tanh": (tf.tanh, np.tanh),
    "relu": (tf.nn.relu, lambda v: np.maximum(v, 0)),
    "sigmoid": (tf.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    "swish": (lambda v: v * tf.sigmoid(v), lambda v: v / (1 + np.exp(-v))),  # x * sigmoid(x): no ONNX activation
    "softplus": (tf.nn.softplus, lambda v: np.log1p(np.exp(v))),
    "softsign": (tf.nn.softsign, lambda v: v / (1 + np.abs(v))),
}


@dataclasses.dataclass(frozen=True)
class Loop:
    """One masked recurrent loop, as Keras writes it unless a knob says otherwise.

    ``mask``: ``"input"`` (a [B, T] bool argument), ``"masking"`` (``Masking``: any non-zero feature),
    ``"lengths"`` (``tf.sequence_mask(lengths, T)`` of an int32 [B] argument) or ``"none"`` (an
    unmasked loop, as Keras writes one: the states are carried as computed, and no output is).
    ``stop``: ``"T"`` (Keras) or ``"T-1"`` (a loop that stops one step early).
    ``weights``: ``"const"`` or ``"inputs"`` (the kernel is a function argument: not a constant).
    ``outputs``: which of ``seq``, ``last``, ``h``, ``c`` the function returns (``c``: LSTM only).
    """

    kind: str = "LSTM"                 # "LSTM", "GRU" or "RNN" (the ONNX op; Keras SimpleRNN)
    units: int = 2
    features: int = 3
    reset_after: bool = True           # GRU: r * (h R + Rb); False: (r * h) R
    activation: str = "tanh"
    recurrent_activation: str = "sigmoid"
    dtype: str = "float32"
    stop: str = "T"
    weights: str = "const"
    mask: str = "input"
    backward: bool = False             # go_backwards: input and mask reversed in time
    time_major: bool = False           # x [T, B, F], mask [T, B], outputs [T, B, H] (tf_keras's time_major=True)
    sequence: bool = True              # False: the output list has one slot, written at 0 (Keras's
                                       # return_sequences=False), and "seq" is not returned
    outputs: tuple = ("seq", "last", "h", "c")
    seed: int = 0
    select: str = "where"              # "arithmetic": mask * new + (1 - mask) * old, no tf.where (a custom loop)

    @property
    def returned(self) -> tuple:
        return tuple(o for o in self.outputs if (o != "c" or self.kind == "LSTM") and (o != "seq" or self.sequence))


def weights_of(spec: Loop) -> dict:
    """Small random weights in Keras's layouts (scaled so that no gate saturates)."""
    rng = np.random.default_rng(spec.seed)
    blocks, units = GATES[spec.kind], spec.units
    w = {"kernel": rng.normal(size=(spec.features, blocks * units)),
         "recurrent": rng.normal(size=(units, blocks * units))}
    if spec.kind == "GRU" and spec.reset_after:
        w["bias"] = rng.normal(size=(2, blocks * units))
    else:
        w["bias"] = rng.normal(size=(blocks * units,))
    return {k: (0.5 * v).astype(spec.dtype) for k, v in w.items()}


def _tf_cell(spec: Loop, w: dict, x_t, h, c):
    """(new h, new c or None): one step of the cell, written as Keras 3's cells write it."""
    act, rec = ACTIVATIONS[spec.activation][0], ACTIVATIONS[spec.recurrent_activation][0]
    if spec.kind == "LSTM":
        z = tf.matmul(x_t, w["kernel"]) + tf.matmul(h, w["recurrent"]) + w["bias"]
        z0, z1, z2, z3 = tf.split(z, 4, axis=1)
        i, f, o = rec(z0), rec(z1), rec(z3)
        c_new = f * c + i * act(z2)
        return o * act(c_new), c_new
    if spec.kind == "GRU":
        units = spec.units
        if spec.reset_after:  # Keras 3: bias [2, 3H] split into the input and the recurrent bias
            input_bias, recurrent_bias = (tf.squeeze(e, axis=0) for e in tf.split(w["bias"], 2, axis=0))
        else:
            input_bias, recurrent_bias = w["bias"], None
        x_z, x_r, x_h = tf.split(tf.matmul(x_t, w["kernel"]) + input_bias, 3, axis=-1)
        if spec.reset_after:
            matrix_inner = tf.matmul(h, w["recurrent"]) + recurrent_bias
        else:
            matrix_inner = tf.matmul(h, w["recurrent"][:, :2 * units])
        rec_z, rec_r = matrix_inner[:, :units], matrix_inner[:, units:2 * units]
        z, r = rec(x_z + rec_z), rec(x_r + rec_r)
        if spec.reset_after:
            hh = act(x_h + r * matrix_inner[:, 2 * units:])
        else:
            hh = act(x_h + tf.matmul(r * h, w["recurrent"][:, 2 * units:]))
        return z * h + (1 - z) * hh, None
    return act(tf.matmul(x_t, w["kernel"]) + tf.matmul(h, w["recurrent"]) + w["bias"]), None


def masked_loop(spec: Loop):
    """(tf.function, input_signature, weights): the masked loop ``spec`` describes."""
    weights = weights_of(spec)
    dtype = tf.as_dtype(spec.dtype)
    signature = [tf.TensorSpec([None, None, spec.features], dtype, name="x")]
    if spec.mask == "input":
        signature.append(tf.TensorSpec([None, None], tf.bool, name="mask"))
    elif spec.mask == "lengths":
        signature.append(tf.TensorSpec([None], tf.int32, name="lengths"))
    if spec.weights == "inputs":
        signature.append(tf.TensorSpec(weights["kernel"].shape, dtype, name="kernel"))

    def fn(x, *args):
        args = list(args)
        if spec.mask == "input":
            mask = args.pop(0)
        elif spec.mask == "lengths":
            mask = tf.sequence_mask(args.pop(0), tf.shape(x)[0 if spec.time_major else 1])
            mask = tf.transpose(mask) if spec.time_major else mask
        else:
            mask = tf.reduce_any(tf.not_equal(x, 0), axis=-1)
        w = {k: tf.constant(v) for k, v in weights.items()}
        if spec.weights == "inputs":
            w["kernel"] = args.pop(0)
        x_tm = x if spec.time_major else tf.transpose(x, [1, 0, 2])
        mask_tm = tf.expand_dims(mask, -1)
        mask_tm = mask_tm if spec.time_major else tf.transpose(mask_tm, [1, 0, 2])
        if spec.backward:
            x_tm, mask_tm = tf.reverse(x_tm, [0]), tf.reverse(mask_tm, [0])
        steps = tf.shape(x_tm)[0]
        x_ta = tf.TensorArray(dtype, size=steps).unstack(x_tm)
        mask_ta = tf.TensorArray(tf.bool, size=steps).unstack(mask_tm)
        out_ta = tf.TensorArray(dtype, size=steps if spec.sequence else 1)
        zeros = tf.zeros(tf.stack([tf.shape(x_tm)[1], spec.units]), dtype)
        bound = steps if spec.stop == "T" else steps - 1

        if spec.mask == "none":
            return _unmasked_outputs(spec, w, x_ta, steps, bound, zeros)

        def select(mask_t, new, old):
            if spec.select == "where":
                return tf.where(mask_t, new, old)
            kept = tf.cast(mask_t, new.dtype)
            return kept * new + (1 - kept) * old

        def body(time, out_ta, prev_out, h, c):
            x_t, mask_t = x_ta.read(time), mask_ta.read(time)
            h_new, c_new = _tf_cell(spec, w, x_t, h, c)
            out = select(mask_t, h_new, prev_out)
            h = select(mask_t, h_new, h)
            if c_new is not None:
                c = select(mask_t, c_new, c)
            return time + 1, out_ta.write(time if spec.sequence else 0, out), out, h, c

        with tf.name_scope(spec.kind.lower()):
            _, out_ta, last, h, c = tf.while_loop(
                lambda time, *_: time < bound, body, (tf.constant(0), out_ta, tf.zeros_like(zeros), zeros, zeros),
                maximum_iterations=steps)
        found = {"seq": _stacked(spec, out_ta) if spec.sequence else None,
                 "last": last, "h": h, "c": c}
        return tuple(found[name] for name in spec.returned)

    return tf.function(fn, input_signature=signature, autograph=False), signature, weights


def _np_cell(spec: Loop, w: dict, x_t, h, c):
    act, rec = ACTIVATIONS[spec.activation][1], ACTIVATIONS[spec.recurrent_activation][1]
    n = spec.units
    if spec.kind == "LSTM":
        z = x_t @ w["kernel"] + h @ w["recurrent"] + w["bias"]
        i, f, g, o = (z[:, k * n:(k + 1) * n] for k in range(4))
        c_new = rec(f) * c + rec(i) * act(g)
        return rec(o) * act(c_new), c_new
    if spec.kind == "GRU":
        gate = lambda m, k: m[..., k * n:(k + 1) * n]  # noqa: E731
        kernel, recurrent = w["kernel"], w["recurrent"]
        b_in, b_rec = (w["bias"][0], w["bias"][1]) if spec.reset_after else (w["bias"], np.zeros_like(w["bias"]))
        z = rec(x_t @ gate(kernel, 0) + gate(b_in, 0) + h @ gate(recurrent, 0) + gate(b_rec, 0))
        r = rec(x_t @ gate(kernel, 1) + gate(b_in, 1) + h @ gate(recurrent, 1) + gate(b_rec, 1))
        if spec.reset_after:
            hh = act(x_t @ gate(kernel, 2) + gate(b_in, 2) + r * (h @ gate(recurrent, 2) + gate(b_rec, 2)))
        else:
            hh = act(x_t @ gate(kernel, 2) + gate(b_in, 2) + (r * h) @ gate(recurrent, 2))
        return z * h + (1 - z) * hh, c
    return act(x_t @ w["kernel"] + h @ w["recurrent"] + w["bias"]), c


def _unmasked_outputs(spec: Loop, w: dict, x_ta, steps, bound, zeros) -> tuple:
    """The loop without a mask, as Keras writes it: (time, outputs, h[, c]) as loop variables."""
    def body(time, out_ta, h, c):
        h, c_new = _tf_cell(spec, w, x_ta.read(time), h, c)
        return time + 1, out_ta.write(time if spec.sequence else 0, h), h, (c if c_new is None else c_new)

    out_ta = tf.TensorArray(zeros.dtype, size=steps if spec.sequence else 1)
    with tf.name_scope(spec.kind.lower()):
        _, out_ta, h, c = tf.while_loop(lambda time, *_: time < bound, body, (tf.constant(0), out_ta, zeros, zeros),
                                        maximum_iterations=steps)
    found = {"seq": _stacked(spec, out_ta) if spec.sequence else None, "last": h, "h": h, "c": c}
    return tuple(found[name] for name in spec.returned)


def _stacked(spec: Loop, out_ta):
    """The output list stacked [T, B, H], made batch-major unless the layer is time-major."""
    return out_ta.stack() if spec.time_major else tf.transpose(out_ta.stack(), [1, 0, 2])


def reference(spec: Loop, weights: dict, x: np.ndarray, mask: np.ndarray) -> dict:
    """The masked recurrence in numpy (float64): each output the function returns, by name. ``x`` is
    in the function's layout ([T, B, F] when time-major), ``mask`` batch-major [B, T]."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    x, mask = x.astype(np.float64), mask.astype(bool)
    if spec.time_major:
        x = x.transpose(1, 0, 2)
    if spec.backward:
        x, mask = x[:, ::-1], mask[:, ::-1]
    batch, steps = mask.shape
    h = np.zeros((batch, spec.units))
    c, out = np.zeros_like(h), np.zeros_like(h)
    seq = np.zeros((batch, steps, spec.units))
    for t in range(steps):
        h_new, c_new = _np_cell(spec, w, x[:, t], h, c)
        valid = mask[:, t:t + 1]
        out = np.where(valid, h_new, out)
        h, c = np.where(valid, h_new, h), np.where(valid, c_new, c)
        seq[:, t] = out
    found = {"seq": seq.transpose(1, 0, 2) if spec.time_major else seq, "last": out, "h": h, "c": c}
    return {name: found[name] for name in spec.returned}


# --- batches -----------------------------------------------------------------------------------

POST_PADDED = np.array([[1, 1, 1, 1, 1],   # a full row
                        [1, 1, 1, 0, 0],
                        [0, 0, 0, 0, 0],   # an empty row
                        [1, 0, 0, 0, 0]], bool)
NOT_POST_PADDED = np.array([[0, 0, 1, 1, 1],   # pre-padded
                            [1, 0, 1, 0, 1],   # holes
                            [0, 0, 0, 0, 0],
                            [1, 1, 1, 1, 1]], bool)


def batch(spec: Loop, mask: np.ndarray, seed: int = 1) -> tuple:
    """(feeds for the function's inputs, by name; the mask the loop sees, batch-major [B, T]). Padded
    steps hold non-zero values (garbage) unless the mask is computed from the input (``Masking``).
    A time-major function is fed x [T, B, F] and mask [T, B]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=mask.shape + (spec.features,)).astype(spec.dtype)
    feeds = {"x": x}
    if spec.mask == "none":
        mask = np.ones_like(mask)
    elif spec.mask == "input":
        feeds["mask"] = mask
    elif spec.mask == "lengths":
        lengths = mask.sum(axis=1).astype(np.int32)
        assert (mask == (np.arange(mask.shape[1]) < lengths[:, None])).all(), "lengths need a post-padded mask"
        feeds["lengths"] = lengths
    else:
        x[~mask] = 0.0
    if spec.time_major:
        feeds.update({name: np.swapaxes(feeds[name], 0, 1) for name in ("x", "mask") if name in feeds})
    return feeds, mask


# --- conversion and running --------------------------------------------------------------------

@dataclasses.dataclass
class Converted:
    model: object          # onnx.ModelProto
    report: object         # mlr.last_report() right after the conversion (None without the rewriter)
    outputs: tuple         # the names of the returned outputs, in order

    def ops(self, graph=None) -> list:
        """Op types of the main graph's nodes, in order."""
        return [n.op_type for n in (graph or self.model.graph).node]

    def nodes(self, op_type: str) -> list:
        return [n for n in self.model.graph.node if n.op_type == op_type]

    def native_nodes(self) -> list:
        """The native recurrent nodes, a scheduled layer's counted once: its single node."""
        return [n for n in walk_nodes(self.model.graph) if n.op_type in NATIVE_OPS]

    def run(self, feeds: dict) -> dict:
        session = ort.InferenceSession(self.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        got = session.run(None, {name: feeds[name.split(":")[0]] for name in names})
        return dict(zip(self.outputs, got))


def convert(fn, signature, mode: Optional[str] = "post", opset: int = OPSET, runtime=None, returned=(),
            schedule: bool = False) -> Converted:
    """Convert ``fn`` with the plugin's rewriter (``mode=None``: stock tf2onnx, no rewriter)."""
    rewriters = [] if mode is None else [mlr.make_rewriter(mode, runtime=runtime, schedule=schedule)]
    model, _ = tf2onnx.convert.from_function(fn, input_signature=signature, opset=opset,
                                             custom_rewriter=rewriters)
    return Converted(model, mlr.last_report() if mode is not None else None, tuple(returned))


@functools.lru_cache(maxsize=None)
def convert_loop(spec: Loop, mode: Optional[str] = "post", opset: int = OPSET, runtime=None,
                 schedule: bool = False) -> tuple:
    """(Converted, weights) for the loop ``spec`` describes (cached: tests only read the result)."""
    fn, signature, weights = masked_loop(spec)
    return convert(fn, signature, mode, opset=opset, runtime=runtime, returned=spec.returned,
                   schedule=schedule), weights


def reasons(converted: Converted) -> list:
    """The report's reasons for the layers left as Loops."""
    return [layer.detail for layer in converted.report.left_as_loop]


def assert_matches_reference(spec: Loop, converted: Converted, weights: dict, mask: np.ndarray, atol=1e-5):
    """Every output the ONNX model gives equals numpy's at every position, padded ones too."""
    feeds, mask = batch(spec, mask)
    expected = reference(spec, weights, feeds["x"], mask)
    got = converted.run(feeds)
    assert set(got) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=atol, rtol=1e-5, err_msg=f"output {name!r}")


# --- the cases of the shared verbs (_harness.py) -------------------------------------------------

LAYOUTS = {"post": POST_PADDED, "pre": POST_PADDED[:, ::-1].copy(), "holes": NOT_POST_PADDED}  # full and empty rows
SEEDS = (1, 7)  # two batches of each layout


class FunctionCase:
    """A ``tf.function`` holding one recurrent layer, for ``check_rewrites`` / ``check_refuses``: its
    reference is numpy's masked recurrence; refused, what it holds stays (one ``replaces`` op, no
    native node, one layer reported). Subclasses convert it."""

    replaces = "Loop"
    atol, rtol = 1e-5, 1e-5

    def __init__(self, spec: Loop):
        self.spec = spec
        self.weights = weights_of(spec)

    def convert(self, mode: Optional[str]) -> Converted:
        raise NotImplementedError

    def rewrite(self, mode: str) -> tuple:
        converted = self.convert(mode)
        return converted.model, converted.report

    def batches(self, layout: str) -> list:
        """Two batches of ``LAYOUTS[layout]`` (none but post-padded ones for a mask made from lengths)."""
        if self.spec.mask == "lengths" and layout != "post":
            return []
        return [self._with_references(*batch(self.spec, LAYOUTS[layout], seed)) for seed in SEEDS]

    def _with_references(self, feeds: dict, mask: np.ndarray) -> tuple:
        expected = reference(self.spec, self.weights, feeds["x"], mask)
        return feeds, {"numpy's masked recurrence": [expected[name] for name in self.spec.returned]}

    def assert_kept(self, model, report) -> None:
        ops = [node.op_type for node in model.graph.node]
        assert ops.count(self.replaces) == 1 and not set(NATIVE_OPS) & set(ops), ops
        assert len(report.layers) == 1, str(report)


class WhileLoop(FunctionCase):
    """The While source's case: the loop ``spec`` describes (:func:`convert_loop`, cached), referenced
    by numpy's masked recurrence and by the Loop stock tf2onnx makes of it."""

    def __init__(self, spec: Loop, opset: int = OPSET, runtime=None, schedule: bool = False):
        super().__init__(spec)
        self.opset, self.runtime, self.schedule = opset, runtime, schedule
        self._stock = None

    def convert(self, mode: Optional[str]) -> Converted:
        if mode is None:
            return convert_loop(self.spec, None, opset=self.opset)[0]
        return convert_loop(self.spec, mode, opset=self.opset, runtime=self.runtime, schedule=self.schedule)[0]

    def _with_references(self, feeds: dict, mask: np.ndarray) -> tuple:
        feeds, expected = super()._with_references(feeds, mask)
        if self._stock is None:
            stock = self.convert(None)
            assert "Loop" in stock.ops() and not stock.native_nodes(), stock.ops()
            self._stock = runner(stock.model, "onnxruntime")
        expected["stock tf2onnx's Loop"] = self._stock(feeds)
        return feeds, expected


# --- the reader (internal) -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BodyRead:
    """What the body reader made of a While body: the reason it refused, or the cell it read."""

    reason: Optional[str] = None
    kind: Optional[str] = None
    activations: tuple = ()          # ONNX names, in the op's order
    linear_before_reset: int = 0
    writes_sequence: bool = False
    output_carried: bool = False
    cells: int = 0


def read_bodies(fn, signature) -> list:
    """A :class:`BodyRead` for each masked-looking While body tf2onnx hands a custom rewriter
    (the reader alone: nothing is rewritten)."""
    found = []

    def capture(graph, ops):
        if is_masked_recurrent_body(graph):
            found.append(_body_read(read_body(graph)))
        return ops

    tf2onnx.convert.from_function(fn, input_signature=signature, opset=OPSET, custom_rewriter=[capture])
    return found


def _body_read(body) -> BodyRead:
    if isinstance(body, Refusal):
        return BodyRead(reason=body.reason)
    return BodyRead(reason=body.refused, kind=body.top.kind,
                    activations=tuple(a.name for a in body.top.cell.activations),
                    linear_before_reset=body.top.cell.linear_before_reset, writes_sequence=body.writes_sequence,
                    output_carried=body.output_carried, cells=len(body.cells))


# --- reading the emitted graph -------------------------------------------------------------------

def producers(model) -> dict:
    """Main-graph tensor name -> the node producing it."""
    return {out: node for node in model.graph.node for out in node.output}


def sequence_chain(converted) -> list:
    """The ops from a converted layer's sequence output (the first graph output) back to the native node."""
    by_output, chain = producers(converted.model), []
    node = by_output[converted.model.graph.output[0].name]
    while node.op_type not in ("LSTM", "GRU", "RNN"):
        chain.append(node.op_type)
        node = by_output[node.input[0]]
    return chain


def initializers(model) -> dict:
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def attributes(node) -> dict:
    from onnx import helper  # pylint: disable=import-outside-toplevel
    found = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: ([s.decode() for s in v] if isinstance(v, list) and v and isinstance(v[0], bytes)
                else v.decode() if isinstance(v, bytes) else v) for k, v in found.items()}


# Keras's gate blocks, and their order in the ONNX op's W, R and B
KERAS_GATES = {"LSTM": ("i", "f", "c", "o"), "GRU": ("z", "r", "h"), "RNN": ("h",)}
ONNX_GATES = {"LSTM": ("i", "o", "f", "c"), "GRU": ("z", "r", "h"), "RNN": ("h",)}


def keras_blocks(kind: str, array: np.ndarray, units: int) -> dict:
    """Gate name -> its block of the last axis of a Keras weight."""
    return {g: array[..., k * units:(k + 1) * units] for k, g in enumerate(KERAS_GATES[kind])}


def onnx_blocks(kind: str, array: np.ndarray, units: int) -> dict:
    """Gate name -> its block of the first axis of an ONNX W, R (direction squeezed) or B half."""
    return {g: array[k * units:(k + 1) * units] for k, g in enumerate(ONNX_GATES[kind])}
