#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Probe graph forms for a length-aware LSTM schedule with no ``If``, on onnxruntime and OpenVINO.

Builds the ONNX graphs directly (onnx.helper, opset 17, random float32 weights; input X [T, B, D]
time-major with dynamic T and B, and ``lengths`` [B] int32, post-padded rows) and measures:

facts    what each runtime does with an LSTM node over T=0 steps or B=0 rows, an empty Slice into
         an LSTM, Concat with an empty tensor, Gather with empty indices (each case in its own
         process: a runtime may abort the process)
exact    the no-If segmented forms (and a single-node control) against a numpy LSTM at every
         position of Y, Y_h and Y_c, over a sequence of runs in ONE session / compiled model whose
         shapes grow and shrink from run to run (what broke OpenVINO with the schedule's If)
timing   one thread, interleaved rounds, medians: the single node (no sequence_lens / with it /
         with the same output fix-ups as the segments) against the segmented forms, on full and
         long-tailed batches, plus the fixed per-node cost

The segmented forms (no If): rows sorted by length, longest first (TopK); boundaries at the sorted
lengths at fixed ranks (RANKS_16THS, longest first) and the longest length; segment k runs the
rows valid at its first step (a prefix of the sorted rows, at least one) over its steps, starting
from the previous segment's Y_h/Y_c for those rows; the outputs are stacked (plus a zeros row) and
gathered back into [T, 1, B, H] by indices computed from the lengths. An LSTM's cell state past a
row's length is held by a padding column (1 at padded steps, driving the input gate to 0 and the
forget gate to 1), so that a row's final c can be read from the segment its last valid step is in.

  zero  boundaries = the quantiles themselves (non-decreasing): a segment may have 0 steps (an LSTM
        node over T=0), whose Y_h/Y_c are replaced by its initial states with Where
  pad   boundaries made strictly increasing (b_k = max_{j<=k}(q_j - j) + k) over X padded with S
        zero steps: every segment has >= 1 step and >= 1 row; extra steps are never read

Usage: python tools/probe_schedule_forms.py [--only facts exact timing] [--rounds 40]
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUT, HIDDEN = 64, 128
RANKS_16THS = (12, 8, 4, 2, 1)
PADDING_DRIVE = 1e4
OV_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


# ---------------------------------------------------------------------------------------------
# graph building
# ---------------------------------------------------------------------------------------------

class Builder:
    """A tiny graph builder: ``op`` adds a node and returns its output name(s)."""

    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, value, dtype=np.int64):
        name = self.name("const")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type, *inputs, outputs=1, **attrs):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def model(self, inputs, outputs):
        graph = helper.make_graph(self.nodes, "probe", inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return model


def weights(input_size=INPUT, hidden=HIDDEN, seed=0):
    """W [1, 4H, D], R [1, 4H, H], B [1, 8H] in ONNX's gate order (i, o, f, c)."""
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(hidden)
    return (rng.uniform(-scale, scale, (1, 4 * hidden, input_size)).astype(np.float32),
            rng.uniform(-scale, scale, (1, 4 * hidden, hidden)).astype(np.float32),
            rng.uniform(-scale, scale, (1, 8 * hidden)).astype(np.float32))


def with_padding_column(w):
    """W with one more input column: -DRIVE into the input gate, +DRIVE into the forget gate."""
    hidden = w.shape[1] // 4
    column = np.zeros((1, 4 * hidden, 1), np.float32)
    column[:, 0:hidden] = -PADDING_DRIVE               # i
    column[:, 2 * hidden:3 * hidden] = PADDING_DRIVE   # f
    return np.concatenate([w, column], axis=2)


def io(input_size):
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", input_size]),
              helper.make_tensor_value_info("lengths", TensorProto.INT32, ["B"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")]
    return inputs, outputs


def single_model(wrb, lengths=False):
    """(a) one LSTM node over every step (no sequence_lens), or (b) with ``sequence_lens``."""
    w, r, b = wrb
    g = Builder()
    names = [g.const(w, np.float32), g.const(r, np.float32), g.const(b, np.float32)]
    inputs, outputs = io(w.shape[2])
    g.nodes.append(helper.make_node("LSTM", ["X", *names, "lengths" if lengths else ""], ["Y", "Y_h", "Y_c"],
                                    hidden_size=w.shape[1] // 4))
    return g.model(inputs, outputs)


def fixed_single_model(wrb):
    """(d) the single node with what the project wraps around it (no schedule): padding column,
    sequence_lens, h read from Y at the last valid step, Y past a row's length = its last output."""
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    g = Builder()
    lengths = g.op("Cast", "lengths", to=TensorProto.INT64)
    steps = g.op("Shape", "X", start=0, end=1)
    time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))
    valid = g.op("Less", g.op("Unsqueeze", time_, g.const([1])), lengths)                   # [T, B]
    x = _padding_column(g, "X", valid, width)
    y = g.op("LSTM", x, g.const(with_padding_column(w), np.float32), g.const(r, np.float32),
             g.const(b, np.float32), "lengths", outputs=3, hidden_size=hidden)
    last = g.op("Sub", lengths, g.const(1))
    index = g.op("Expand", g.op("Reshape", g.op("Max", last, g.const(0)), g.const([1, 1, -1, 1])),
                 g.const([1, 1, 1, hidden]))
    has = g.op("Reshape", g.op("Greater", lengths, g.const(0)), g.const([1, -1, 1]))
    y_h = g.op("Where", has, g.op("Squeeze", g.op("GatherElements", y[0], index, axis=0), g.const([0])),
               g.const(0.0, np.float32))                                                 # [1, B, H]
    g.op("Where", g.op("Unsqueeze", valid, g.const([1, 3])), y[0], y_h)
    g.nodes[-1].output[0] = "Y"
    g.op("Identity", y_h)
    g.nodes[-1].output[0] = "Y_h"
    g.op("Where", has, y[2], g.const(0.0, np.float32))
    g.nodes[-1].output[0] = "Y_c"
    inputs, outputs = io(width)
    return g.model(inputs, outputs)


def _padding_column(g, x, valid, width):
    """[T, B, width + 1]: x and 0 at valid steps, [0, ..., 0, 1] at padded ones."""
    padded = g.op("Pad", x, g.const([0, 0, 0, 0, 0, 1]))
    marker = np.zeros(width + 1, np.float32)
    marker[-1] = 1
    return g.op("Where", g.op("Unsqueeze", valid, g.const([2])), padded, g.const(marker, np.float32))


def segmented_model(wrb, form="zero", ranks=RANKS_16THS):
    """(c) the no-If segmented form (see the module docstring)."""
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    segments = len(ranks) + 1
    g = Builder()
    w_name, r_name, b_name = (g.const(with_padding_column(w), np.float32), g.const(r, np.float32),
                              g.const(b, np.float32))
    lengths = g.op("Cast", "lengths", to=TensorProto.INT64)                                # [B]
    batch = g.op("Shape", lengths)                                                       # [1]
    steps = g.op("Shape", "X", start=0, end=1)                                            # [1]
    sorted_, order = g.op("TopK", lengths, batch, outputs=2, axis=0, largest=1, sorted=1)
    longest = g.op("Slice", sorted_, g.const([0]), g.const([1]))                          # [1]
    quantiles = g.op("Gather", sorted_, g.op("Div", g.op("Mul", batch, g.const(ranks)), g.const(16)), axis=0)
    if form == "zero":
        first = g.op("Concat", g.const([0]), quantiles, axis=0)                          # [S]
        end = g.op("Concat", quantiles, longest, axis=0)                                 # [S]
        extra = 0
    elif form == "pad":
        # b_k = max_{j <= k}(q_j - j) + k over q = (0, quantiles, longest): strictly increasing
        q = g.op("Concat", g.const([0]), quantiles, longest, axis=0)                     # [S + 1]
        index = np.arange(segments + 1)
        lifted = g.op("Add", g.op("Unsqueeze", g.op("Sub", q, g.const(index)), g.const([0])),
                      g.const(np.triu(np.full((segments + 1,) * 2, -(1 << 24)), 1)))  # not 1 << 40: OpenVINO
        # computes int64 in int32 (saturating the constant, then wrapping)
        bounds = g.op("Add", g.op("ReduceMax", lifted, axes=[1], keepdims=0), g.const(index))
        first = g.op("Slice", bounds, g.const([0]), g.const([segments]))
        end = g.op("Slice", bounds, g.const([1]), g.const([segments + 1]))
        extra = segments        # X gets this many zero steps more: b_S <= longest + S - 1 (or S)
    else:
        raise ValueError(form)
    seg_steps = g.op("Sub", end, first)                                                  # [S]
    count = g.op("ReduceSum", g.op("Cast", g.op("Greater", g.op("Unsqueeze", lengths, g.const([1])), first),
                                    to=TensorProto.INT64), g.const([0]), keepdims=0)     # [S]
    rows = g.op("Max", count, g.const(1))                                                # [S] rows run

    # input: rows longest first, the padding column (and `extra` padded steps)
    ordered = g.op("Gather", "X", order, axis=1)
    padded = g.op("Pad", ordered, g.const([0, 0, 0, extra, 0, 1]))
    time_all = g.op("Range", g.const(0), g.op("Squeeze", g.op("Add", steps, g.const(extra)), g.const([0])),
                    g.const(1))
    valid = g.op("Unsqueeze", g.op("Less", g.op("Unsqueeze", time_all, g.const([1])), sorted_), g.const([2]))
    marker = np.zeros(width + 1, np.float32)
    marker[-1] = 1
    x = g.op("Where", valid, padded, g.const(marker, np.float32))                        # [T + extra, B, D + 1]

    # per segment: Slice starts (first, 0) and ends (end, rows), and the rows as [1]
    table = g.op("Concat", *(g.op("Unsqueeze", t, g.const([1])) for t in (first, g.const([0] * segments), end, rows)),
                 axis=1)                                                                  # [S, 4]
    pairs = g.op("Split", g.op("Reshape", table, g.const([-1])), g.const([2] * (2 * segments)),
                 outputs=2 * segments, axis=0)
    rows_k = g.op("Split", rows, g.const([1] * segments), outputs=segments, axis=0)
    nonempty = g.op("Split", g.op("Greater", seg_steps, g.const(0)), g.const([1] * segments), outputs=segments,
                    axis=0) if form == "zero" else None
    flat_y, flat_c, states = [], [], None
    for k in range(segments):
        xk = g.op("Slice", x, pairs[2 * k], pairs[2 * k + 1], g.const([0, 1]))
        if states is None:
            initial = ["", ""]
        else:
            initial = [g.op("Slice", s, g.const([0]), rows_k[k], g.const([1])) for s in states]
        out = g.op("LSTM", xk, w_name, r_name, b_name, "", *initial, outputs=3, hidden_size=hidden)
        flat_y.append(g.op("Reshape", out[0], g.const([-1, hidden])))
        flat_c.append(g.op("Reshape", out[2], g.const([-1, hidden])))
        states = [out[1], out[2]]
        if form == "zero" and k < segments - 1:
            # an LSTM over 0 steps leaves Y_h/Y_c unwritten on both runtimes (stale memory)
            initial = initial if k else [g.const(np.zeros((1, 1, hidden)), np.float32)] * 2
            states = [g.op("Where", nonempty[k], s, i) for s, i in zip(states, initial)]

    # gather indices (once per mask in a real model)
    rank = g.op("ScatterElements", order, order,
                g.op("Range", g.const(0), g.op("Squeeze", batch, g.const([0])), g.const(1)), axis=0)  # [B]
    time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))         # [T]
    later = g.op("Slice", first, g.const([1]), g.const([segments]))

    def segment_of(t):
        return g.op("ReduceSum", g.op("Cast", g.op("GreaterOrEqual", g.op("Unsqueeze", t, g.const([1])), later),
                                      to=TensorProto.INT64), g.const([1]), keepdims=0)

    segment = segment_of(time_)                                                          # [T]
    rows_t = g.op("Gather", rows, segment, axis=0)
    covered = g.op("Mul", rows, seg_steps)
    offsets = g.op("CumSum", covered, g.const(0), exclusive=1)
    zeros_row = g.op("ReduceSum", covered, g.const([0]), keepdims=1)
    within = g.op("Mul", g.op("Sub", time_, g.op("Gather", first, segment, axis=0)), rows_t)
    step_base = g.op("Concat", g.op("Add", g.op("Gather", offsets, segment, axis=0), within), zeros_row, axis=0)
    step_rows = g.op("Concat", rows_t, g.const([1]), axis=0)                               # [T + 1]
    last = g.op("Sub", lengths, g.const(1))                                              # [B], -1: empty

    def position(read):
        column = g.op("Min", rank, g.op("Sub", g.op("Gather", step_rows, read, axis=0), g.const(1)))
        return g.op("Add", g.op("Gather", step_base, read, axis=0), column)

    gather_y = position(g.op("Min", g.op("Unsqueeze", time_, g.const([1])), last))         # [T, B]
    gather_h = position(last)                                                            # [B]
    state_offsets = g.op("CumSum", rows, g.const(0), exclusive=1)
    total = g.op("ReduceSum", rows, g.const([0]), keepdims=1)
    gather_c = g.op("Where", g.op("Greater", lengths, g.const(0)),
                    g.op("Add", g.op("Gather", state_offsets, segment_of(last), axis=0), rank), total)
    zeros = g.const(np.zeros((1, hidden)), np.float32)
    stacked_y = g.op("Concat", *flat_y, zeros, axis=0)
    stacked_c = g.op("Concat", *flat_c, zeros, axis=0)
    g.nodes.append(helper.make_node("Gather", [stacked_y, g.op("Unsqueeze", gather_y, g.const([1]))], ["Y"], axis=0))
    g.nodes.append(helper.make_node("Gather", [stacked_y, g.op("Unsqueeze", gather_h, g.const([0]))], ["Y_h"], axis=0))
    g.nodes.append(helper.make_node("Gather", [stacked_c, g.op("Unsqueeze", gather_c, g.const([0]))], ["Y_c"], axis=0))
    inputs, outputs = io(width)
    return g.model(inputs, outputs)


FORMS = {
    "single": lambda wrb: single_model(wrb),                            # (a)
    "single+lens": lambda wrb: single_model(wrb, lengths=True),         # (b)
    "single+fixups": fixed_single_model,                                # (d)
    "seg-zero": lambda wrb: segmented_model(wrb, "zero"),               # (c)
    "seg-pad": lambda wrb: segmented_model(wrb, "pad"),
    "seg-zero-3": lambda wrb: segmented_model(wrb, "zero", (8, 2)),     # fewer segments
    "seg-pad-3": lambda wrb: segmented_model(wrb, "pad", (8, 2)),
}


# ---------------------------------------------------------------------------------------------
# runtimes
# ---------------------------------------------------------------------------------------------

def ort_runner(model, threads=1):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def ov_runner(model, threads=None, path=None):
    """Compiled from the .onnx file (read_model on the path)."""
    import openvino as ov
    path = path or f"/tmp/probe_sched/model_{os.getpid()}_{id(model)}.onnx"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)
    core = ov.Core()
    config = dict(OV_F32, **({"INFERENCE_NUM_THREADS": threads} if threads else {}))
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    request = compiled.create_infer_request()
    outputs = compiled.outputs

    def run(feeds):
        result = request.infer(feeds)
        return [np.array(result[o]) for o in outputs]
    return run


RUNNERS = {"ort": lambda m: ort_runner(m, 1), "ort-default": lambda m: ort_runner(m, None),
           "ov": lambda m: ov_runner(m), "ov-1thread": lambda m: ov_runner(m, 1)}


# ---------------------------------------------------------------------------------------------
# 1. facts
# ---------------------------------------------------------------------------------------------

def fact_cases():
    d, h = 4, 3
    w, r, b = weights(d, h, seed=1)

    def lstm_model(initial, pre=()):
        g = Builder()
        names = [g.const(w, np.float32), g.const(r, np.float32), g.const(b, np.float32)]
        ins = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", d])]
        x = "X"
        for node in pre:
            x = node(g, x)
            ins += getattr(node, "inputs", [])
        states = []
        if initial:
            ins += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "B", h]) for n in ("h0", "c0")]
            states = ["h0", "c0"]
        g.nodes.append(helper.make_node("LSTM", [x, *names, "", *states], ["Y", "Y_h", "Y_c"], hidden_size=h))
        return g.model(ins, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")])

    def slicer(g, x):
        return g.op("Slice", x, "starts", "ends", g.const([0, 1]))
    slicer.inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [2]) for n in ("starts", "ends")]

    def one(op, **attrs):
        g = Builder()
        g.nodes.append(helper.make_node(op, ["A", "E"], ["Y"], **attrs))
        e_type = TensorProto.INT64 if op == "Gather" else TensorProto.FLOAT
        e_shape = ["e"] if op == "Gather" else ["e", h]
        return g.model([helper.make_tensor_value_info("A", TensorProto.FLOAT, ["a", h]),
                        helper.make_tensor_value_info("E", e_type, e_shape)],
                       [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])

    f32 = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    x = np.random.default_rng(2).normal(size=(5, 3, d)).astype(np.float32)
    states = {"h0": np.full((1, 3, h), 0.5, np.float32), "c0": np.full((1, 3, h), 0.7, np.float32)}
    return {
        "LSTM T=0, initial h/c 0.5/0.7": (lambda: lstm_model(True), dict(X=x[:0], **states)),
        "LSTM T=0, no initial states": (lambda: lstm_model(False), dict(X=x[:0])),
        "LSTM T=1 (control), initial": (lambda: lstm_model(True), dict(X=x[:1], **states)),
        "LSTM B=0, initial (0 rows)": (lambda: lstm_model(True), dict(X=x[:, :0], h0=f32(1, 0, h), c0=f32(1, 0, h))),
        "LSTM B=0, no initial states": (lambda: lstm_model(False), dict(X=x[:, :0])),
        "LSTM T=0 and B=0": (lambda: lstm_model(False), dict(X=x[:0, :0])),
        "Slice T-empty -> LSTM": (lambda: lstm_model(False, [slicer]),
                                  dict(X=x, starts=np.array([2, 0]), ends=np.array([2, 3]))),
        "Slice B-empty -> LSTM": (lambda: lstm_model(False, [slicer]),
                                  dict(X=x, starts=np.array([0, 0]), ends=np.array([5, 0]))),
        "Concat [2,H] + [0,H]": (lambda: one("Concat", axis=0), dict(A=np.ones((2, h), np.float32), E=f32(0, h))),
        "Gather [2,H] by [] (empty idx)": (lambda: one("Gather", axis=0), dict(A=np.ones((2, h), np.float32),
                                                                               E=np.zeros(0, np.int64))),
        "Gather [0,H] by []": (lambda: one("Gather", axis=0), dict(A=f32(0, h), E=np.zeros(0, np.int64))),
    }


def describe(outputs):
    parts = []
    for array in outputs:
        if array.size == 0:
            parts.append(f"{list(array.shape)} empty")
        elif np.all(array == 0):
            parts.append(f"{list(array.shape)} zeros")
        elif np.unique(array).size <= 2:
            parts.append(f"{list(array.shape)} {'/'.join(f'{v:g}' for v in np.unique(array))}")
        else:
            finite = array[np.isfinite(array)]
            parts.append(f"{list(array.shape)} {array.size - finite.size} non-finite, |max| "
                         f"{np.abs(finite).max() if finite.size else 0:.3g}")
    return "; ".join(parts)


def run_fact(name, runtime):
    make, feeds = fact_cases()[name]
    try:
        results = [RUNNERS[runtime](make())(feeds) for _ in range(2)]
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(*results))
        print(f"ok: {describe(results[0])}{'' if same else ' (second run differs)'}")
    except Exception as error:  # pylint: disable=broad-except
        print(f"error: {(str(error).strip().splitlines() or [repr(error)])[0][:110]}")


def facts():
    print("\n== 1. runtime facts (each case in its own process; second identical run compared) ==")
    for name in fact_cases():
        for runtime in ("ort", "ort-default", "ov", "ov-1thread"):
            proc = subprocess.run([sys.executable, __file__, "--fact", name, runtime], capture_output=True,
                                  text=True, timeout=120, check=False)
            out = proc.stdout.strip().splitlines()
            text = out[-1] if out and proc.returncode == 0 else (
                f"PROCESS ABORTED (rc {proc.returncode}): {(proc.stderr.strip().splitlines() or [''])[-1][:70]}")
            print(f"  {name:32s} {runtime:10s} {text}")


# ---------------------------------------------------------------------------------------------
# 2. exactness over changing shapes
# ---------------------------------------------------------------------------------------------

def reference(x, lengths, wrb):
    """numpy float64 LSTM per row: Y[t] = h_t for t < len, the last valid h after (zeros for an
    empty row); final h and c at the last valid step."""
    w, r, b = (a[0].astype(np.float64) for a in wrb)
    hidden = r.shape[1]
    steps, batch, _ = x.shape
    h = np.zeros((batch, hidden))
    c = np.zeros((batch, hidden))
    y = np.zeros((steps, batch, hidden))
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for t in range(steps):
        gates = x[t].astype(np.float64) @ w.T + h @ r.T + b[:4 * hidden] + b[4 * hidden:]
        i, o, f, g = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h_new = sigmoid(o) * np.tanh(c_new)
        valid = (t < lengths)[:, None]
        c = np.where(valid, c_new, c)
        h = np.where(valid, h_new, h)
        y[t] = h
    return y[:, None], h[None], c[None]


def lengths_for(kind, batch, steps, rng):
    if kind == "lognormal":
        lengths = np.clip(np.rint(rng.lognormal(np.log(0.2 * steps), 0.75, batch)), 1, steps)
        lengths[rng.integers(batch)] = steps
    elif kind == "full":
        lengths = np.full(batch, steps)
    elif kind == "equal":
        lengths = np.full(batch, max(1, steps // 2))
    elif kind == "one-long":
        lengths = np.r_[steps, rng.integers(1, max(2, steps // 8), batch - 1)]
        rng.shuffle(lengths)
    elif kind == "some-empty":
        lengths = rng.integers(0, steps + 1, batch)
        lengths[rng.random(batch) < 0.4] = 0
    elif kind == "all-empty":
        lengths = np.zeros(batch)
    elif kind == "short-in-long-T":
        lengths = rng.integers(0, max(1, steps // 4) + 1, batch)
    elif kind == "uniform":
        lengths = rng.integers(0, steps + 1, batch)
    else:
        raise ValueError(kind)
    return lengths.astype(np.int32)


def run_sequence(seed=0):
    """(batch, steps, kind) runs: batches and steps growing and shrinking."""
    rng = np.random.default_rng(seed)
    fixed = [(1, 1, "full"), (3, 7, "lognormal"), (8, 50, "lognormal"), (32, 100, "lognormal"), (5, 13, "some-empty"),
             (64, 100, "full"), (2, 3, "all-empty"), (32, 100, "one-long"), (1, 100, "full"), (64, 60, "equal"),
             (3, 1, "all-empty"), (40, 100, "short-in-long-T"), (1, 1, "all-empty"), (33, 77, "uniform"),
             (64, 100, "lognormal"), (2, 2, "full"), (17, 100, "some-empty"), (64, 5, "lognormal"),
             (7, 100, "one-long"), (64, 100, "all-empty"), (1, 50, "equal"), (16, 6, "full")]
    kinds = ["lognormal", "full", "equal", "one-long", "some-empty", "all-empty", "short-in-long-T", "uniform"]
    randomised = [(int(rng.choice([1, 2, 3, 5, 8, 13, 32, 48, 64])), int(rng.choice([1, 2, 6, 7, 13, 50, 99, 100])),
                   str(rng.choice(kinds))) for _ in range(26)]
    return fixed + randomised + fixed[::-1]


def exactness(forms, runtimes, sizes):
    print("\n== 2. exactness: one session / compiled model per (form, runtime), a sequence of "
          f"{len(run_sequence())} runs with changing B and T; max |diff| vs numpy (Y every position, Y_h, Y_c) ==")
    for input_size, hidden in sizes:
        wrb = weights(input_size, hidden, seed=3)
        runs = []
        for index, (batch, steps, kind) in enumerate(run_sequence()):
            rng = np.random.default_rng(1000 + index)
            lengths = lengths_for(kind, batch, steps, rng)
            x = rng.normal(size=(steps, batch, input_size)).astype(np.float32)
            padded = np.arange(steps)[:, None] >= lengths[None, :]
            # padded steps hold garbage (NaN on every third run): nothing may read them
            x[padded] = np.nan if index % 3 == 0 else 1e3
            runs.append(((batch, steps, kind), {"X": x, "lengths": lengths}, reference(x, lengths, wrb)))
        for form in forms:
            model = FORMS[form](wrb)
            for runtime in runtimes:
                run = RUNNERS[runtime](model)
                worst, where, errors = np.zeros(3), ["", "", ""], 0
                for repeat in range(2):
                    for shape, feeds, expected in runs:
                        try:
                            got = run(feeds)
                        except Exception as error:  # pylint: disable=broad-except
                            errors += 1
                            if errors == 1:
                                print(f"    {form} {runtime} {shape}: {str(error).splitlines()[0][:100]}")
                            continue
                        for k, (g_, e_) in enumerate(zip(got, expected)):
                            diff = np.inf if g_.shape != e_.shape else np.nan_to_num(np.abs(g_ - e_).max(initial=0),
                                                                                  nan=np.inf)
                            if diff > worst[k]:
                                worst[k], where[k] = diff, f"{shape}#{repeat}"
                verdict = "EXACT" if worst.max() < 1e-4 and not errors else "WRONG"
                print(f"  D={input_size:<3} H={hidden:<4} {form:14s} {runtime:11s} {verdict}  "
                      f"Y {worst[0]:.2e}  Y_h {worst[1]:.2e}  Y_c {worst[2]:.2e}  errors {errors}"
                      + ("" if verdict == "EXACT" else f"  worst at {where}"))


# ---------------------------------------------------------------------------------------------
# 3. timing
# ---------------------------------------------------------------------------------------------

def timing(forms, rounds, steps=100):
    wrb = weights(INPUT, HIDDEN, seed=5)
    cases = {"full B=1": (1, "full"), "full B=32": (32, "full"), "lognormal B=32": (32, "lognormal")}
    print(f"\n== 3. timing: LSTM {INPUT}->{HIDDEN}, T={steps}, 1 thread, median ms over {rounds} interleaved rounds; "
          "ratio = (a) single / form (>1: faster than the single node) ==")
    for runtime in ("ort", "ov-1thread"):
        runners = {form: RUNNERS[runtime](FORMS[form](wrb)) for form in forms}
        feeds = {}
        for case, (batch, kind) in cases.items():
            rng = np.random.default_rng(100 * batch + steps + 7)
            lengths = lengths_for(kind, batch, steps, rng)
            feeds[case] = {"X": rng.normal(size=(steps, batch, INPUT)).astype(np.float32), "lengths": lengths}
        times = {(f, c): [] for f in forms for c in cases}
        for round_ in range(rounds + 3):
            for case, feed in feeds.items():
                for form in forms:
                    start = time.perf_counter()
                    runners[form](feed)
                    if round_ >= 3:
                        times[form, case].append(time.perf_counter() - start)
        print(f"  {runtime}:")
        for case in cases:
            fill = feeds[case]["lengths"].sum() / (steps * len(feeds[case]["lengths"]))
            base = np.median(times["single", case])
            cells = [f"{form} {1000 * np.median(times[form, case]):.3f} ({base / np.median(times[form, case]):.2f}x)"
                     for form in forms]
            print(f"    {case:15s} fill {fill:.2f}: " + ", ".join(cells))
    node_overhead(rounds)


def node_overhead(rounds):
    """The fixed cost of a node: a 1-step LSTM at batch 1, an LSTM over 0 steps, a Slice."""
    wrb = weights(INPUT, HIDDEN, seed=5)
    print(f"\n  fixed costs (us, median of {rounds * 20}): one LSTM node over 1 step at B=1; over 0 steps "
          "(T=0); the model with 6 such 1-step nodes chained minus one")
    for runtime in ("ort", "ov-1thread"):
        one, chain = RUNNERS[runtime](single_model(wrb)), RUNNERS[runtime](_chain(wrb, 6))
        x1 = np.random.default_rng(0).normal(size=(1, 1, INPUT)).astype(np.float32)
        feeds = {"one 1-step": (one, {"X": x1, "lengths": np.ones(1, np.int32)}),
                 "one 0-step": (one, {"X": x1[:0], "lengths": np.zeros(1, np.int32)}),
                 "six 1-step": (chain, {"X": x1, "lengths": np.ones(1, np.int32)})}
        times = {k: [] for k in feeds}
        for round_ in range(rounds * 20 + 20):
            for k, (run, feed) in feeds.items():
                start = time.perf_counter()
                run(feed)
                if round_ >= 20:
                    times[k].append(time.perf_counter() - start)
        med = {k: 1e6 * np.median(v) for k, v in times.items()}
        print(f"    {runtime:11s} 1-step node {med['one 1-step']:.1f}, 0-step node {med['one 0-step']:.1f}, "
              f"per extra chained 1-step node {(med['six 1-step'] - med['one 1-step']) / 5:.1f}")


def _chain(wrb, count):
    w, r, b = wrb
    g = Builder()
    names = [g.const(w, np.float32), g.const(r, np.float32), g.const(b, np.float32)]
    h, c = "", ""
    for k in range(count):
        out = g.op("LSTM", "X", *names, "", h, c, outputs=3, hidden_size=w.shape[1] // 4)
        h, c = out[1], out[2]
        if k == count - 1:
            g.nodes[-1].output[:] = ["Y", "Y_h", "Y_c"]
    inputs, outputs = io(w.shape[2])
    return g.model(inputs, outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=["facts", "exact", "timing"], default=["facts", "exact", "timing"])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    parser.add_argument("--fact", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fact:
        run_fact(*args.fact)
        return
    import onnxruntime
    import openvino
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, openvino {openvino.__version__}")
    if "facts" in args.only:
        facts()
    if "exact" in args.only:
        exactness([f for f in args.forms if f not in ("single", "single+lens")],
                  ["ort", "ort-default", "ov", "ov-1thread"], [(INPUT, HIDDEN), (5, 8)])
    if "timing" in args.only:
        timing(args.forms, args.rounds)


if __name__ == "__main__":
    main()
