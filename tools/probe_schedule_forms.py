#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Probe graph forms for a length-aware LSTM schedule with no ``If``, on onnxruntime and OpenVINO.

Builds the ONNX graphs directly (onnx.helper, opset 17, random float32 weights; input X [T, B, D]
time-major with dynamic T and B, and ``lengths`` [B] int32, post-padded rows) and measures:

facts    what each runtime does with an LSTM node over T=0 steps or B=0 rows, an empty Slice into
         an LSTM, Concat with an empty tensor, Gather with empty indices (each case in its own
         process: onnxruntime aborts the process on an LSTM over 0 rows)
exact    the no-If segmented forms (and the single node with the project's fix-ups, as a control)
         against a float64 numpy LSTM at every position of Y, Y_h and Y_c, over a sequence of runs
         in ONE session / compiled model whose shapes grow and shrink from run to run (what broke
         OpenVINO with the schedule's If), one and two stacked layers; OpenVINO also compiled per
         input shape (static shapes)
timing   one thread, medians of interleaved rounds: the single node (a: no sequence_lens, b: with
         it, d: with the project's fix-ups) against the segmented forms, on full and long-tailed
         batches, one and two layers; the fixed cost of a node and of a run
branch   (only with --only branch) a run-time choice between the segments (zero+c) and (d) with
         no If, by Loops of trip count 1 whose condition is the decision (see branch_model): what
         each runtime does with a Loop that runs 0 times, exactness over the run sequence and over
         one alternating between the branches, timing against (a) and (d)

The segmented forms (no If): rows sorted by length, longest first (TopK); boundaries at the sorted
lengths at fixed ranks (RANKS_16THS of the batch, longest first) and the longest length; segment k
runs the rows valid at its first step (a prefix of the sorted rows; at least one row, since
onnxruntime aborts on 0) over its steps, starting from the previous segment's Y_h/Y_c for those
rows; the outputs are stacked (plus a zeros row) and gathered back into [T, 1, B, H] by indices
computed from the lengths (a row past its length reads its last valid step, an empty row zeros).

  zero  boundaries = the quantiles themselves (non-decreasing): a segment may have 0 steps (an LSTM
        node over T=0; both runtimes leave its Y_h/Y_c unwritten, so they are replaced by its
        initial states with Where; "zero unguarded" shows what happens without)
  pad   boundaries made strictly increasing (b_k = max_{j<=k}(q_j - j) + k), reading up to S steps
        past T (clamped indices): every segment has >= 1 step and >= 1 row; extra steps never read

A segment's input is one Gather from X flattened to [T * B, D] by a [steps, rows] grid of flat
indices (computed once per mask, in the plan); "reorder" forms instead Gather the rows into sorted
order and Slice per segment. With "+c", Y_c is exact too: X gets a padding column (1 at padded
steps, driving the input gate to 0 and the forget gate to 1) and padded positions of the grid read
a marker row [0, ..., 0, 1], so that a row's final c is held to the end of the segment its last
valid step is in; without, padded positions read whatever X holds (NaN included): only rows past
their length see it, and nothing reads those. "lens": each segment node gets an explicit
sequence_lens (the segment's steps for every row), which OpenVINO needs with static input shapes.
"chained" (stacked layers): a layer's segment k reads the previous layer's segment k output as it
is; only the top layer gathers back.

Usage: python tools/probe_schedule_forms.py [--only facts exact timing] [--rounds 25] [--seeds 1] [--thorough]
       python tools/probe_schedule_forms.py --only branch [--branch-parts facts exact timing] [--branch-forms ...]
"""

import argparse
import os
import statistics
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

    def __init__(self, prefix=""):
        self.nodes, self.initializers, self.count, self.prefix = [], [], 0, prefix   # prefix: a subgraph's

    def name(self, stem):
        self.count += 1
        return f"{self.prefix}{stem}_{self.count}"

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


def single_stack_model(layers):
    """(a) for stacked layers: one plain LSTM node per layer (no sequence_lens), Y and Y_h."""
    g = Builder()
    x = "X"
    for index, (w, r, b) in enumerate(layers):
        out = g.op("LSTM", x, g.const(w, np.float32), g.const(r, np.float32), g.const(b, np.float32), outputs=3,
                   hidden_size=w.shape[1] // 4)
        if index == len(layers) - 1:
            g.nodes[-1].output[:] = ["Y", "Y_h", "Y_c"]
        else:
            x = g.op("Squeeze", out[0], g.const([1]))
    inputs, outputs = io(layers[0][0].shape[2])
    return g.model(inputs, outputs[:2])


def fixed_single_model(wrb, with_c=True):
    """(d) the single node with what the project wraps around it (no schedule): sequence_lens, h read
    from Y at the last valid step, Y past a row's length = its last output; ``with_c``: the padding
    column (and Y_c as an output)."""
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    g = Builder()
    lengths = g.op("Cast", "lengths", to=TensorProto.INT64)
    steps = g.op("Shape", "X", start=0, end=1)
    time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))
    valid = g.op("Less", g.op("Unsqueeze", time_, g.const([1])), lengths)                   # [T, B]
    x = _padding_column(g, "X", valid, width) if with_c else "X"
    y = g.op("LSTM", x, g.const(with_padding_column(w) if with_c else w, np.float32), g.const(r, np.float32),
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
    if with_c:
        g.op("Where", has, y[2], g.const(0.0, np.float32))
        g.nodes[-1].output[0] = "Y_c"
    inputs, outputs = io(width)
    return g.model(inputs, outputs[:3 if with_c else 2])


def _padding_column(g, x, valid, width):
    """[T, B, width + 1]: x and 0 at valid steps, [0, ..., 0, 1] at padded ones."""
    padded = g.op("Pad", x, g.const([0, 0, 0, 0, 0, 1]))
    marker = np.zeros(width + 1, np.float32)
    marker[-1] = 1
    return g.op("Where", g.op("Unsqueeze", valid, g.const([2])), padded, g.const(marker, np.float32))


def segmented_model(wrb, form="zero", ranks=RANKS_16THS, layers=None, with_c=True, x_by="grid", marker="concat",
                    plan_only=False, chain=False, seq_lens=False, guard=True):
    """(c) the no-If segmented form (see the module docstring).

    ``layers``: a list of (W, R, B), stacked, sharing one plan (default: the one layer ``wrb``);
    ``with_c``: compute Y_c exactly (padding column) and output it, else outputs Y and Y_h only;
    ``x_by``: how a segment's input is made: "reorder" (Gather the rows into sorted order, Pad the
    padding column, Where the marker at padded steps, then Slice per segment) or "grid" (one Gather
    per segment from the flattened X by a [steps, rows] grid of flat indices computed in the plan;
    with ``with_c``, padded positions index a marker row appended to X, by ``marker``: "concat"
    (Pad the column, Concat the row) or "scatter" (Pad both, ScatterND the marker's 1));
    ``plan_only``: only the plan's gather indices as outputs (for its cost); ``chain`` (stacked
    layers, without c): a layer's segment k reads the previous layer's segment k output as it is
    (rows sorted, only the segment's steps), so that only the top layer gathers back; ``seq_lens``:
    give each segment node an explicit sequence_lens (all rows: the segment's steps); ``guard``
    (zero form): replace a 0-step segment's Y_h/Y_c by its initial states (Where); "after-first":
    not the first segment's (whose initial states are zeros: exact if a runtime wrote zeros)."""
    assert not (chain and with_c), "chain: a padded step's input would need the padding column's marker"
    layers = layers or [wrb]
    width = layers[0][0].shape[2]
    g = Builder()
    p = plan(g, "lengths", "X", form, ranks, x_by, with_c)
    p["guard"] = guard
    names = ("Y", "Y_h", "Y_c") if with_c else ("Y", "Y_h")
    if plan_only:   # every index the layers use: the gather indices and the per-segment grids
        values = [p["gather_y"], p["gather_h"]] + ([p["gather_c"]] if with_c else [])
        values = values + [g.op("Concat", *(g.op("Reshape", t, g.const([-1])) for t in p["grids"]), axis=0)]
        names = names + ("grids",)
        outputs = [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in names]
    else:
        x, inputs = "X", None
        for index, layer_wrb in enumerate(layers):
            last = index == len(layers) - 1
            values, ys = segmented_layer(g, p, x, layer_wrb, with_c, x_by, marker, inputs,
                                         gather_back=last or not chain, seq_lens=seq_lens)
            if not last:
                if chain:   # the next layer's segment k reads this layer's segment k: no gathers
                    inputs = [g.op("Squeeze", y, g.const([1])) for y in ys]
                else:
                    x = g.op("Squeeze", values[0], g.const([1]))
        outputs = io(width)[1][:len(names)]
    renames = dict(zip(values, names))
    for node in g.nodes:   # name the graph outputs after their producers (an Identity would copy)
        node.output[:] = [renames.get(o, o) for o in node.output]
        node.input[:] = [renames.get(i, i) for i in node.input]
    return g.model(io(width)[0], outputs)


def plan(g, lengths_name, x_name, form, ranks, x_by="grid", with_c=True):
    """Per mask, once: the rows longest first, the segments, and the gather indices (no If)."""
    segments = len(ranks) + 1
    p = {"segments": segments, "form": form}
    lengths = g.op("Cast", lengths_name, to=TensorProto.INT64)                            # [B]
    batch = g.op("Shape", lengths)                                                       # [1]
    steps = g.op("Shape", x_name, start=0, end=1)                                         # [1]
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
        extra = segments        # up to this many steps past T: b_S <= longest + S - 1 (or S)
    else:
        raise ValueError(form)
    seg_steps = g.op("Sub", end, first)                                                  # [S]
    count = g.op("ReduceSum", g.op("Cast", g.op("Greater", g.op("Unsqueeze", lengths, g.const([1])), first),
                                    to=TensorProto.INT64), g.const([0]), keepdims=0)     # [S]
    rows = g.op("Max", count, g.const(1))                                                # [S] rows run
    p.update(order=order, extra=extra, first=first, end=end, count=count, seg_steps=seg_steps, longest=longest,
             batch=batch, sorted=sorted_)

    # per segment: Slice starts (first, 0) and ends (end, rows), and the rows as [1]
    table = g.op("Concat", *(g.op("Unsqueeze", t, g.const([1])) for t in (first, g.const([0] * segments), end, rows)),
                 axis=1)                                                                  # [S, 4]
    p["pairs"] = pairs = g.op("Split", g.op("Reshape", table, g.const([-1])), g.const([2] * (2 * segments)),
                              outputs=2 * segments, axis=0)
    p["rows_k"] = g.op("Split", rows, g.const([1] * segments), outputs=segments, axis=0)
    p["nonempty"] = g.op("Split", g.op("Greater", seg_steps, g.const(0)), g.const([1] * segments), outputs=segments,
                         axis=0) if form == "zero" else None
    # explicit sequence_lens (every row the segment's steps): without it, OpenVINO with static input
    # shapes fails its LSTMSequence batch check (it makes the lengths from the input's bounded batch)
    steps_k = g.op("Split", seg_steps, g.const([1] * segments), outputs=segments, axis=0)
    p["seq_lens"] = [g.op("Cast", g.op("Expand", steps_k[k], p["rows_k"][k]), to=TensorProto.INT32)
                     for k in range(segments)]
    time_all = g.op("Range", g.const(0), g.op("Squeeze", g.op("Add", steps, g.const(extra)), g.const([0])),
                    g.const(1)) if extra else None
    time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))         # [T]
    time_all = time_all or time_
    if x_by == "reorder":
        p["valid"] = g.op("Unsqueeze", g.op("Less", g.op("Unsqueeze", time_all, g.const([1])), sorted_), g.const([2]))
    else:
        # [T + extra, B] flat index into X [T * B, D] of step t of the row at rank r; the steps
        # past T (pad form) read step T - 1 (never used); with c, padded steps read the marker row
        clamped = g.op("Min", time_all, g.op("Sub", steps, g.const([1]))) if extra else time_all
        grid = g.op("Add", g.op("Unsqueeze", g.op("Mul", clamped, batch), g.const([1])),
                    g.op("Add", order, g.const(1)) if with_c else order)
        if with_c:   # the marker row is row 0
            grid = g.op("Where", g.op("Less", g.op("Unsqueeze", time_all, g.const([1])), sorted_), grid, g.const(0))
        p["grids"] = [g.op("Slice", grid, pairs[2 * k], pairs[2 * k + 1], g.const([0, 1])) for k in range(segments)]

    # gather indices
    rank = g.op("ScatterElements", order, order,
                g.op("Range", g.const(0), g.op("Squeeze", batch, g.const([0])), g.const(1)), axis=0)  # [B]
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

    p["gather_y"] = g.op("Unsqueeze", position(g.op("Min", g.op("Unsqueeze", time_, g.const([1])), last)),
                         g.const([1]))                                                    # [T, 1, B]
    p["gather_h"] = g.op("Unsqueeze", position(last), g.const([0]))                       # [1, B]
    if with_c:
        state_offsets = g.op("CumSum", rows, g.const(0), exclusive=1)
        total = g.op("ReduceSum", rows, g.const([0]), keepdims=1)
        p["gather_c"] = g.op("Unsqueeze", g.op("Where", g.op("Greater", lengths, g.const(0)), g.op(
            "Add", g.op("Gather", state_offsets, segment_of(last), axis=0), rank), total), g.const([0]))  # [1, B]
    return p


def segmented_layer(g, p, x_name, wrb, with_c=True, x_by="grid", marker="concat", inputs=None, gather_back=True,
                    seq_lens=False):
    """One layer as one LSTM node per segment over the sorted rows, gathered back: ([Y [T, 1, B, H],
    Y_h (and Y_c) [1, B, H]] in the caller's row order, or None without ``gather_back``; the
    segments' own Y). ``inputs``: the segments' inputs as they are (else made from ``x_name``)."""
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    segments = p["segments"]
    w_name, r_name, b_name = (g.const(with_padding_column(w) if with_c else w, np.float32), g.const(r, np.float32),
                              g.const(b, np.float32))
    column = np.zeros(width + 1, np.float32)
    column[-1] = 1
    if inputs is not None:
        pass
    elif x_by == "reorder":
        # input: rows longest first, the padding column (and `extra` padded steps)
        x = g.op("Gather", x_name, p["order"], axis=1)
        if with_c or p["extra"]:
            x = g.op("Pad", x, g.const([0, 0, 0, p["extra"], 0, int(with_c)]))
        if with_c:
            x = g.op("Where", p["valid"], x, g.const(column, np.float32))                # [T + extra, B, D + 1]
        inputs = [g.op("Slice", x, p["pairs"][2 * k], p["pairs"][2 * k + 1], g.const([0, 1])) for k in range(segments)]
    else:
        flat = g.op("Reshape", x_name, g.const([-1, width]))                              # [T * B, D]
        if with_c and marker == "concat":
            flat = g.op("Concat", g.const(column[None], np.float32), g.op("Pad", flat, g.const([0, 0, 0, 1])), axis=0)
        elif with_c:
            flat = g.op("ScatterND", g.op("Pad", flat, g.const([1, 0, 0, 1])), g.const([[0, width]]),
                        g.const([1.0], np.float32))                                      # [1 + T * B, D + 1]
        inputs = [g.op("Gather", flat, grid, axis=0) for grid in p["grids"]]
    flat_y, flat_c, states, ys = [], [], None, []
    for k in range(segments):
        if states is None:
            initial = ["", ""]
        else:
            initial = [g.op("Slice", s, g.const([0]), p["rows_k"][k], g.const([1])) for s in states]
        out = g.op("LSTM", inputs[k], w_name, r_name, b_name, p["seq_lens"][k] if seq_lens else "", *initial,
                   outputs=3, hidden_size=hidden)
        ys.append(out[0])
        if gather_back:
            flat_y.append(g.op("Reshape", out[0], g.const([-1, hidden])))
        if with_c:
            flat_c.append(g.op("Reshape", out[2], g.const([-1, hidden])))
        states = [out[1], out[2]]
        if p["form"] == "zero" and k < segments - 1 and p["guard"] and (k or p["guard"] != "after-first"):
            # an LSTM over 0 steps leaves Y_h/Y_c unwritten on both runtimes (stale memory)
            initial = initial if k else [g.const(np.zeros((1, 1, hidden)), np.float32)] * 2
            states = [g.op("Where", p["nonempty"][k], s, i) for s, i in zip(states, initial)]
    if not gather_back:
        return None, ys
    zeros = g.const(np.zeros((1, hidden)), np.float32)
    stacked_y = g.op("Concat", *flat_y, zeros, axis=0)
    outputs = [g.op("Gather", stacked_y, p["gather_y"], axis=0), g.op("Gather", stacked_y, p["gather_h"], axis=0)]
    if with_c:
        outputs.append(g.op("Gather", g.op("Concat", *flat_c, zeros, axis=0), p["gather_c"], axis=0))
    return outputs, ys


FORMS = {   # "+c": Y_c is an output (exact: padding column); else Y and Y_h only
    "single": lambda wrb: single_model(wrb),                                       # (a)
    "single+lens": lambda wrb: single_model(wrb, lengths=True),                    # (b)
    "fixups+c": fixed_single_model,                                                # (d)
    "fixups": lambda wrb: fixed_single_model(wrb, with_c=False),
    "zero+c reorder": lambda wrb: segmented_model(wrb, "zero", x_by="reorder"),    # (c), first version
    "pad+c reorder": lambda wrb: segmented_model(wrb, "pad", x_by="reorder"),
    "zero+c": lambda wrb: segmented_model(wrb, "zero"),
    "zero+c scatter": lambda wrb: segmented_model(wrb, "zero", marker="scatter"),
    "pad+c": lambda wrb: segmented_model(wrb, "pad"),
    "zero": lambda wrb: segmented_model(wrb, "zero", with_c=False),
    "pad": lambda wrb: segmented_model(wrb, "pad", with_c=False),
    "zero S3": lambda wrb: segmented_model(wrb, "zero", (8, 2), with_c=False),     # fewer segments
    "pad S3": lambda wrb: segmented_model(wrb, "pad", (8, 2), with_c=False),
    "zero lens": lambda wrb: segmented_model(wrb, "zero", with_c=False, seq_lens=True),
    "zero+c lens": lambda wrb: segmented_model(wrb, "zero", seq_lens=True),
    "pad lens": lambda wrb: segmented_model(wrb, "pad", with_c=False, seq_lens=True),
    "zero unguarded": lambda wrb: segmented_model(wrb, "zero", with_c=False, guard=False),   # expected wrong
    "zero unguarded0": lambda wrb: segmented_model(wrb, "zero", with_c=False, guard="after-first"),
    "zero S4": lambda wrb: segmented_model(wrb, "zero", (8, 4, 1), with_c=False),
    "zero S8": lambda wrb: segmented_model(wrb, "zero", (14, 12, 8, 6, 4, 2, 1), with_c=False),
    "plan zero": lambda wrb: segmented_model(wrb, "zero", with_c=False, plan_only=True),
    "plan pad": lambda wrb: segmented_model(wrb, "pad", with_c=False, plan_only=True),
}
# not timed by default: measured no different from their siblings (or wrong)
TIMING_SKIPPED = ("pad+c reorder", "zero+c scatter", "pad S3", "zero unguarded", "zero unguarded0")
EXACT_FORMS = [name for name in FORMS if name not in ("single", "single+lens") and not name.startswith("plan")]


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
    os.remove(path)
    request = compiled.create_infer_request()
    outputs = compiled.outputs

    def run(feeds):
        result = request.infer(feeds)
        return [np.array(result[o]) for o in outputs]
    return run


def ov_static_runner(model):
    """OpenVINO with the inputs' shapes made static: compiled once per set of input shapes."""
    import openvino as ov
    path = f"/tmp/probe_sched/model_{os.getpid()}_{id(model)}_static.onnx"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)
    core, compiled = ov.Core(), {}

    def run(feeds):
        key = tuple((name, value.shape) for name, value in sorted(feeds.items()))
        if key not in compiled:
            source = core.read_model(path)
            source.reshape({name: ov.PartialShape(list(shape)) for name, shape in key})
            compiled[key] = core.compile_model(source, "CPU", OV_F32)
        result = compiled[key](feeds)
        return [np.array(result[o]) for o in compiled[key].outputs]
    return run


RUNNERS = {"ort": lambda m: ort_runner(m, 1), "ort-default": lambda m: ort_runner(m, None),
           "ov": lambda m: ov_runner(m), "ov-1thread": lambda m: ov_runner(m, 1), "ov-static": ov_static_runner}


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

def _sigmoid(v):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-v))


def reference(x, lengths, wrb):
    """numpy float64 LSTM per row: Y[t] = h_t for t < len, the last valid h after (zeros for an
    empty row); final h and c at the last valid step."""
    w, r, b = (a[0].astype(np.float64) for a in wrb)
    hidden = r.shape[1]
    steps, batch, _ = x.shape
    h = np.zeros((batch, hidden))
    c = np.zeros((batch, hidden))
    y = np.zeros((steps, batch, hidden))
    for t in range(steps):
        gates = x[t].astype(np.float64) @ w.T + h @ r.T + b[:4 * hidden] + b[4 * hidden:]
        i, o, f, g = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        valid = (t < lengths)[:, None]
        c = np.where(valid, c_new, c)
        h = np.where(valid, h_new, h)
        y[t] = h
    return y[:, None], h[None], c[None]


def lengths_for(kind, batch, steps, rng):
    if kind == "benchmark":     # tools/benchmark.py's "lognormal" batch, the same draw
        rng = np.random.default_rng(100 * batch + steps + 7)
        lengths = np.rint(rng.lognormal(np.log(0.2 * steps), 0.75, batch))
        lengths[rng.integers(batch)] = steps
        lengths = np.clip(lengths, 1, steps)
    elif kind == "typical-tail":  # the quantiles of lognormal(median 0.16 T, sigma 0.75), one row of T
        quantiles = [statistics.NormalDist().inv_cdf((i + 0.5) / (batch - 1)) for i in range(batch - 1)]
        lengths = np.r_[steps, np.clip(np.rint(0.16 * steps * np.exp(0.75 * np.array(quantiles))), 1, steps)]
    elif kind in ("lognormal", "tail"):
        median = 0.2 if kind == "lognormal" else 0.16
        lengths = np.clip(np.rint(rng.lognormal(np.log(median * steps), 0.75, batch)), 1, steps)
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


def run_sequence(seed):
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


def exactness(configs):
    """Per config (D, H, layers, runtimes, seeds) and runtime: one session / compiled model per form,
    the run sequences of ``seeds`` one after the other, twice; max |diff| vs numpy, and how many runs
    give exactly (bitwise) the single node's (with the same fix-ups) numbers on the same runtime."""
    print("\n== 2. exactness: one session / compiled model per (form, runtime), a sequence of runs with changing B "
          "and T, twice; max |diff| vs float64 numpy over every position of Y, Y_h, Y_c; 'bitwise' = runs equal to "
          "the single node + fix-ups on the same runtime; ov-static: compiled per input shape ==")
    for input_size, hidden, depth, runtimes, seeds, forms in configs:
        stack = [weights(input_size, hidden, seed=3)] + [weights(hidden, hidden, seed=4 + k) for k in range(depth - 1)]
        runs = []
        for seed in seeds:
            for index, (batch, steps, kind) in enumerate(run_sequence(seed)):
                rng = np.random.default_rng(1000 * seed + index)
                lengths = lengths_for(kind, batch, steps, rng)
                x = rng.normal(size=(steps, batch, input_size)).astype(np.float32)
                padded = np.arange(steps)[:, None] >= lengths[None, :]
                # padded steps hold garbage (NaN on every third run): nothing may read them
                x[padded] = np.nan if index % 3 == 0 else 1e3
                expected, layer_x = None, x
                for layer_wrb in stack:
                    expected = reference(layer_x, lengths, layer_wrb)
                    layer_x = expected[0][:, 0].astype(np.float32)
                runs.append(((batch, steps, kind), {"X": x, "lengths": lengths}, expected))
        if depth == 1:
            models = {name: FORMS[name](stack[0]) for name in forms}
        else:
            models = {name: segmented_model(None, name.split()[0].split("+")[0], layers=stack, with_c="+c" in name,
                                            chain="chained" in name, seq_lens="lens" in name) for name in forms}
        for runtime, names in runtimes:
            control = {}
            for name in names or models:
                model = models[name]
                run = RUNNERS[runtime](model)
                worst, where, errors, bitwise, compared, first_error = np.zeros(3), ["", "", ""], 0, 0, 0, ""
                for repeat in range(2):
                    for number, (shape, feeds, expected) in enumerate(runs):
                        try:
                            got = run(feeds)
                        except Exception as error:  # pylint: disable=broad-except
                            errors += 1
                            if errors == 1:
                                lines = [line for line in str(error).splitlines() if "Check" in line]
                                text = (lines or str(error).splitlines() or [repr(error)])[0].strip()
                                first_error = f"{shape}: {text[:150]}"
                            continue
                        if name.startswith("fixups"):
                            control[len(got), number] = got
                        elif (len(got), number) in control:
                            compared += 1
                            bitwise += all(np.array_equal(a, b) for a, b in zip(got, control[len(got), number]))
                        for k, (g_, e_) in enumerate(zip(got, expected)):
                            diff = np.inf if g_.shape != e_.shape else np.nan_to_num(np.abs(g_ - e_).max(initial=0),
                                                                                  nan=np.inf)
                            if diff > worst[k]:
                                worst[k], where[k] = diff, f"{shape}#{repeat}"
                verdict = "WRONG" if worst.max() >= 1e-5 else "ERRORS" if errors else "EXACT"
                print(f"  D={input_size:<3} H={hidden:<4} layers {depth}  {name:14s} {runtime:11s} {verdict}  "
                      f"runs {2 * len(runs) - errors:3d}  "
                      f"Y {worst[0]:.1e}  Y_h {worst[1]:.1e}  "
                      + (f"Y_c {worst[2]:.1e}  " if "+c" in name else "")
                      + f"errors {errors}"
                      + (f"  bitwise {bitwise}/{compared}" if compared else "")
                      + ("" if verdict != "WRONG" else f"  worst at {where}")
                      + ("" if not errors else f"\n      first error at {first_error}"))


# ---------------------------------------------------------------------------------------------
# 3. timing
# ---------------------------------------------------------------------------------------------

TIMING_CASES = {   # name: (batch, length kind, new lengths every round)
    "full B=1": (1, "full", False), "full B=32": (32, "full", False),
    "bench-lognormal B=32": (32, "benchmark", False), "tail B=32": (32, "typical-tail", False),
    "tail B=32 new": (32, "tail", True)}


def timing(forms, rounds, steps=100):
    """Per case, interleaved rounds (every form once per round, in a shuffled order), medians; ratios
    are medians of per-round ratios (runs close in time share the machine's load): to (a) and to the
    single node with the project's fix-ups giving the same outputs (Y and Y_h, or with Y_c)."""
    wrb = weights(INPUT, HIDDEN, seed=5)
    print(f"\n== 3. timing: LSTM {INPUT}->{HIDDEN}, T={steps}, 1 thread, median ms over {rounds} interleaved rounds; "
          "(x a) = single / form, (x d) = fixups / form with the same outputs (>1: faster) ==")
    print("  bench-lognormal: tools/benchmark.py's batch (median 0.2 T, sigma 0.75, one row of T); tail: the "
          "quantiles of median 0.16 T, sigma 0.75, one row of T; 'new': such lengths drawn anew every round "
          "(new segment shapes every run); cases in turn, forms interleaved in shuffled order within each round")
    order_rng = np.random.default_rng(0)
    for runtime in ("ort", "ov-1thread"):
        runners = {form: RUNNERS[runtime](FORMS[form](wrb)) for form in forms}
        feeds = {}
        for case, (batch, kind, new) in TIMING_CASES.items():
            rng = np.random.default_rng(100 * batch + steps + 7)
            x = rng.normal(size=(steps, batch, INPUT)).astype(np.float32)
            feeds[case] = [{"X": x, "lengths": lengths_for(kind, batch, steps, rng)}
                           for _ in range(rounds + 3 if new else 1)]
        times = {(f, c): [] for f in forms for c in TIMING_CASES}
        # cases one after the other (a model sees one input shape in a row: OpenVINO pays much more
        # when the input shapes alternate), forms interleaved within each round
        for case, case_feeds in feeds.items():
            for round_ in range(rounds + 3):
                feed = case_feeds[round_ % len(case_feeds)]
                for form in order_rng.permutation(forms):
                    start = time.perf_counter()
                    runners[form](feed)
                    if round_ >= 3:
                        times[form, case].append(time.perf_counter() - start)
        med = {key: 1000 * np.median(value) for key, value in times.items()}

        def ratio(num, den, case):
            return np.median(np.array(times[num, case]) / np.array(times[den, case]))

        fills = {case: np.mean([f["lengths"].mean() for f in feeds[case]]) / steps for case in TIMING_CASES}
        print(f"  {runtime}: " + " | ".join(f"{case} (fill {fills[case]:.2f})" for case in TIMING_CASES))
        for form in forms:
            control = "fixups+c" if form.endswith("+c") or "+c " in form else "fixups"
            cells = []
            for case in TIMING_CASES:
                cell = f"{med[form, case]:7.3f} (x a {ratio('single', form, case):.2f}"
                if control in forms and not form.startswith(("single", "fixups", "plan")):
                    cell += f", x d {ratio(control, form, case):.2f}"
                cells.append(cell + ")")
            print(f"    {form:15s} " + " | ".join(cells))
    stacked_timing(rounds)
    node_overhead(rounds)


def stacked_timing(rounds, steps=100):
    """Two stacked layers (64 -> 128 -> 128) sharing one plan, Y and Y_h only."""
    stack = [weights(INPUT, HIDDEN, seed=5), weights(HIDDEN, HIDDEN, seed=6)]
    forms = {"single x2": single_stack_model(stack),
             "zero x2": segmented_model(None, "zero", layers=stack, with_c=False),
             "zero x2 chained": segmented_model(None, "zero", layers=stack, with_c=False, chain=True),
             "pad x2 chained": segmented_model(None, "pad", layers=stack, with_c=False, chain=True)}
    cases = {k: TIMING_CASES[k] for k in ("full B=1", "full B=32", "tail B=32", "tail B=32 new")}
    print(f"\n  two stacked layers, one plan: median ms over {rounds} rounds (x a = single x2 / form)")
    order_rng = np.random.default_rng(1)
    for runtime in ("ort", "ov-1thread"):
        runners = {name: RUNNERS[runtime](model) for name, model in forms.items()}
        times = {(f, c): [] for f in forms for c in cases}
        for case, (batch, kind, new) in cases.items():
            rng = np.random.default_rng(100 * batch + steps + 7)
            x = rng.normal(size=(steps, batch, INPUT)).astype(np.float32)
            feeds = [{"X": x, "lengths": lengths_for(kind, batch, steps, rng)} for _ in range(rounds + 3 if new else 1)]
            for round_ in range(rounds + 3):
                for form in order_rng.permutation(list(forms)):
                    start = time.perf_counter()
                    runners[form](feeds[round_ % len(feeds)])
                    if round_ >= 3:
                        times[form, case].append(time.perf_counter() - start)
        print(f"  {runtime}: " + " | ".join(cases))
        for form in forms:
            print(f"    {form:15s} " + " | ".join(
                f"{1000 * np.median(times[form, c]):7.3f} (x a "
                f"{np.median(np.array(times['single x2', c]) / np.array(times[form, c])):.2f})" for c in cases))


def node_overhead(rounds):
    """The fixed cost of an LSTM node at batch 1: a whole run of a one-node model over 1 step and
    over 0 steps, and what each node adds in a chain of 6 (each measured in a block of runs with
    one input shape, blocks interleaved)."""
    wrb = weights(INPUT, HIDDEN, seed=5)
    print(f"\n  fixed costs (us, median of {rounds * 20}): a whole run of one LSTM node at B=1 over 1 step / 0 steps "
          "(includes the per-run overhead); per node added in a chain of 6 (over 1 step / 0 steps)")
    for runtime in ("ort", "ov-1thread"):
        one, chain = RUNNERS[runtime](single_model(wrb)), RUNNERS[runtime](_chain(wrb, 6))
        x1 = np.random.default_rng(0).normal(size=(1, 1, INPUT)).astype(np.float32)
        feeds = {"one 1-step": (one, {"X": x1, "lengths": np.ones(1, np.int32)}),
                 "one 0-step": (RUNNERS[runtime](single_model(wrb)), {"X": x1[:0], "lengths": np.zeros(1, np.int32)}),
                 "six 1-step": (chain, {"X": x1, "lengths": np.ones(1, np.int32)}),
                 "six 0-step": (RUNNERS[runtime](_chain(wrb, 6)), {"X": x1[:0], "lengths": np.zeros(1, np.int32)})}
        times = {k: [] for k in feeds}
        for block in range(rounds + 1):
            for k, (run, feed) in feeds.items():
                for _ in range(20):
                    start = time.perf_counter()
                    run(feed)
                    if block:
                        times[k].append(time.perf_counter() - start)
        med = {k: 1e6 * np.median(v) for k, v in times.items()}
        print(f"    {runtime:11s} run of one node: 1 step {med['one 1-step']:.1f}, 0 steps {med['one 0-step']:.1f}; "
              f"per node added: 1 step {(med['six 1-step'] - med['one 1-step']) / 5:.1f}, "
              f"0 steps {(med['six 0-step'] - med['one 0-step']) / 5:.1f}")


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


# ---------------------------------------------------------------------------------------------
# 4. a run-time branch without If: Loop as the branch
# ---------------------------------------------------------------------------------------------

SEGMENT_COST, PLAN_COST, GAIN = 10, 70, (3, 4)       # the project's (masked_lstm_rewriter/plan/schedule.py)
FIXED_COST = SEGMENT_COST * (len(RANKS_16THS) + 1) + PLAN_COST


def branch_of(lengths, ranks=RANKS_16THS):
    """numpy mirror of the graphs' decision: "seg", "single" or "single (pre)" (ruled out by the pre-check)."""
    lengths = np.asarray(lengths, np.int64)
    batch, longest = lengths.size, int(lengths.max(initial=0))
    if not GAIN[1] * (lengths.sum() + FIXED_COST) < GAIN[0] * batch * longest:
        return "single (pre)"
    quantiles = np.sort(lengths)[::-1][batch * np.array(ranks) // 16]
    first, end = np.r_[0, quantiles], np.r_[quantiles, longest]
    count = (lengths[:, None] > first[None]).sum(0)
    cost = (np.maximum(count, 2) * (end - first)).sum() + FIXED_COST
    return "seg" if GAIN[1] * cost < GAIN[0] * batch * longest and longest >= len(ranks) + 1 else "single"


def precheck(g, lengths):
    """Bool []: can segments pay at all, 4 (sum + FIXED) < 3 B longest, computed in int32 as
    sum_b (4 l_b - 3 longest) < -4 FIXED (6 nodes)."""
    most = g.op("ReduceMax", lengths, keepdims=1)
    spread = g.op("Sub", g.op("Mul", lengths, g.const(GAIN[1], np.int32)),
                  g.op("Mul", most, g.const(GAIN[0], np.int32)))
    return g.op("Less", g.op("ReduceSum", spread, keepdims=0), g.const(-GAIN[1] * FIXED_COST, np.int32))


def plan_head(g, lengths_name, ranks=RANKS_16THS):
    """What the decision needs of the (zero-form) plan: the sort and the segments, no gather indices."""
    lengths = g.op("Cast", lengths_name, to=TensorProto.INT64)
    batch = g.op("Shape", lengths)
    sorted_ = g.op("TopK", lengths, batch, outputs=2, axis=0, largest=1, sorted=1)[0]
    longest = g.op("Slice", sorted_, g.const([0]), g.const([1]))
    quantiles = g.op("Gather", sorted_, g.op("Div", g.op("Mul", batch, g.const(ranks)), g.const(16)), axis=0)
    first = g.op("Concat", g.const([0]), quantiles, axis=0)
    end = g.op("Concat", quantiles, longest, axis=0)
    count = g.op("ReduceSum", g.op("Cast", g.op("Greater", g.op("Unsqueeze", lengths, g.const([1])), first),
                                    to=TensorProto.INT64), g.const([0]), keepdims=0)
    return {"batch": batch, "longest": longest, "count": count, "seg_steps": g.op("Sub", end, first)}


def decision(g, p, segments=len(RANKS_16THS) + 1):
    """Bool []: the segments pay (the project's rule: rows at least 2 per segment, FIXED_COST, GAIN)."""
    covered = g.op("ReduceSum", g.op("Mul", g.op("Max", p["count"], g.const(2)), p["seg_steps"]), keepdims=1)
    cost = g.op("Mul", g.op("Add", covered, g.const([FIXED_COST])), g.const([GAIN[1]]))
    single = g.op("Mul", g.op("Mul", p["batch"], p["longest"]), g.const([GAIN[0]]))
    pays = g.op("And", g.op("Less", cost, single), g.op("GreaterOrEqual", p["longest"], g.const([segments])))
    return g.op("Squeeze", pays, g.const([0]))


def loop(g, cond, inits, body, prefix, trip=None):
    """A Loop of trip count 1 and condition ``cond`` (bool []): its body runs once or not at all.
    ``inits``: [(name, elem_type[, rank])] of the loop-carried values; ``body(b, carried)`` -> (carried
    outputs, [(scan output, elem_type)]). Returns the Loop's outputs (final carried values, then the
    scan outputs, [0 or 1, ...])."""
    b = Builder(prefix)
    carried = [f"{prefix}carried_{k}" for k in range(len(inits))]
    outs, scans = body(b, carried)
    outs = [b.op("Identity", o) if o in carried else o for o in outs]
    cond_out = b.op("Identity", f"{prefix}cond")
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        b.nodes, f"{prefix}body",
        [info(f"{prefix}iter", TensorProto.INT64, []), info(f"{prefix}cond", TensorProto.BOOL, [])]
        + [info(c, t, [f"{c}_{k}" for k in range(rank)]) for c, (_, t, rank) in
           zip(carried, (i if len(i) == 3 else (*i, 0) for i in inits))],
        [info(cond_out, TensorProto.BOOL, [])] + [info(o, i[1], None) for o, i in zip(outs, inits)]
        + [info(o, t, None) for o, t in scans], b.initializers)
    out = g.op("Loop", trip or g.const(1), cond, *(i[0] for i in inits), outputs=len(inits) + len(scans), body=graph)
    return [out] if isinstance(out, str) else out


def fixed_single_layer(g, x_name, lengths_name, wrb, seq_lens=True):
    """(d) with Y_c as names [Y, Y_h, Y_c] (the same nodes as :func:`fixed_single_model`)."""
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    lengths = g.op("Cast", lengths_name, to=TensorProto.INT64)
    steps = g.op("Shape", x_name, start=0, end=1)
    time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))
    valid = g.op("Less", g.op("Unsqueeze", time_, g.const([1])), lengths)
    x = _padding_column(g, x_name, valid, width)
    y = g.op("LSTM", x, g.const(with_padding_column(w), np.float32), g.const(r, np.float32), g.const(b, np.float32),
             lengths_name if seq_lens else "", outputs=3, hidden_size=hidden)
    y_out, y_h = _fixups(g, y[0], lengths, valid, hidden)
    return [y_out, y_h, g.op("Where", _has(g, lengths), y[2], g.const(0.0, np.float32))]


def _has(g, lengths):
    return g.op("Reshape", g.op("Greater", lengths, g.const(0)), g.const([1, -1, 1]))


def _fixups(g, y, lengths, valid, hidden):
    """(Y, Y_h) from a node's Y [T, 1, B, H] exact at valid steps: h read at the last valid step (zeros
    for an empty row), Y past a row's length = h. Idempotent on outputs that already are so."""
    last = g.op("Sub", lengths, g.const(1))
    index = g.op("Expand", g.op("Reshape", g.op("Max", last, g.const(0)), g.const([1, 1, -1, 1])),
                 g.const([1, 1, 1, hidden]))
    y_h = g.op("Where", _has(g, lengths), g.op("Squeeze", g.op("GatherElements", y, index, axis=0), g.const([0])),
               g.const(0.0, np.float32))
    return g.op("Where", g.op("Unsqueeze", valid, g.const([1, 3])), y, y_h), y_h


def segmented_outputs(g, wrb, p=None, seq_lens=False):
    """The zero+c segmented layer (plan included unless given): [Y, Y_h, Y_c]."""
    if p is None:
        p = plan(g, "lengths", "X", "zero", RANKS_16THS, "grid", True)
        p["guard"] = True
    return segmented_layer(g, p, "X", wrb, True, "grid", seq_lens=seq_lens)[0]


def branch_model(wrb, variant):
    """A model choosing at run time, with Loops and no If, between the zero+c segments and (d).

    scan3     Loop P (cond: pre-check; body: sort, segments, decision; carries `used`, init false),
              Loop S (cond: used; the plan and segments as scan outputs), Loop F (cond: not used;
              (d) as scan outputs); outputs: Concat of the two Loops' scan outputs, reshaped
    carry3    P, S and F as above, the outputs chained as loop-carried values: S's initialised by
              small constants, F's by S's final values; the outputs are F's
    nested    one Loop A (cond: pre-check) computing the plan and the decision, with the segments in
              a Loop nested in it (cond: decision), carrying (used, Y, Y_h, Y_c); then F as in carry3
    slice     P and S (scan outputs) as in scan3; the single node always runs, over Slice(X, 0, T
              if not used else 0) (never 0 rows; its Y_h/Y_c at 0 steps are only Sliced to 0 rows,
              never read); Y is the Concat over time of S's and its Y, fix-ups applied to it (on
              S's part they change nothing); Y_c: Concat of S's and a 0/1-row Slice of its
    +lens     the single node with sequence_lens Min(lengths, its steps)
    slice2    (guarded only) S with carried outputs; the single node as in slice, but its fix-ups
              applied to its own Y before the Concat (the index of a row's last valid step Sliced to
              0 or 1 rows with it), so that nothing outside S touches the segments' Y but the Concat
    seglens   the segment nodes with an explicit sequence_lens (what OpenVINO needs with static shapes)
    guarded   (carry3: S's and F's outputs each Unsqueezed, then taken as follows) nothing read from
              a Loop that ran 0 times (OpenVINO 2026.4 gives such a Loop's outputs
              the previous run's values, or a first-run shape with 0 in every dynamic dimension):
              used = pre-check AND P's value; each Loop's scan output Sliced to its first 0 or 1
              rows by the decision (only its shape is read) before it is reshaped and concatenated
    """
    w, r, b = wrb
    hidden, width = w.shape[1] // 4, w.shape[2]
    seg_lens = variant.endswith(" seglens")   # the segment nodes with explicit sequence_lens (OpenVINO static)
    variant = variant.replace(" seglens", "")
    guarded = variant.endswith(" guarded")
    variant = variant.replace(" guarded", "")
    segmented = lambda b_: segmented_outputs(b_, wrb, seq_lens=seg_lens)  # noqa: E731
    g = Builder()
    f32, boolean = TensorProto.FLOAT, TensorProto.BOOL
    pre = precheck(g, "lengths")
    false = g.const(False, np.bool_)
    shape_y = g.op("Concat", g.const([-1, 1]), g.op("Shape", "lengths"), g.const([hidden]), axis=0)
    shape_s = g.op("Concat", g.const([-1]), g.op("Shape", "lengths"), g.const([hidden]), axis=0)
    initial = [(g.const(np.zeros((1, 1, 1, hidden)), np.float32), f32, 4)] + [
        (g.const(np.zeros((1, 1, hidden)), np.float32), f32, 3)] * 2

    def decide(b_, _carried):
        return [decision(b_, plan_head(b_, "lengths"))], []

    if variant == "nested":
        def outer(b_, carried):
            p = plan(b_, "lengths", "X", "zero", RANKS_16THS, "grid", True)
            p["guard"] = True
            use = decision(b_, p)
            inner = loop(b_, use, [(c, f32, rank) for c, rank in zip(carried[1:], (4, 3, 3))],
                         lambda b2, _c: (segmented_outputs(b2, wrb, p), []), "A_S_")
            return [use, *inner], []
        result = loop(g, pre, [(false, boolean)] + initial, outer, "A_")
        used, carried = result[0], [(n, f32, rank) for n, rank in zip(result[1:], (4, 3, 3))]
    else:
        used = loop(g, pre, [(false, boolean)], decide, "P_")[0]
        if guarded:
            used = g.op("And", pre, used)
    chosen = g.op("Unsqueeze", g.op("Cast", used, to=TensorProto.INT64), g.const([0]))        # [1]: 1 segments
    other = g.op("Unsqueeze", g.op("Cast", g.op("Not", used), to=TensorProto.INT64), g.const([0]))  # [1]: 1 single

    steps = g.op("Shape", "X", start=0, end=1)
    batch = g.op("Shape", "lengths")

    def take(scan, count, per_step):
        """A scan output [1, ...] as [T, 1, B, H] (per_step) or [1, B, H]; guarded: its first ``count``
        (0 or 1) rows only, reshaped to an explicit shape (of 0 elements if 0; OpenVINO resolves
        a -1 over an empty tensor to 0 in other dimensions too)."""
        if not guarded:
            return g.op("Reshape", scan, shape_y if per_step else shape_s)
        rows = g.op("Mul", steps, count) if per_step else count
        shape = g.op("Concat", rows, *([g.const([1])] if per_step else []), batch, g.const([hidden]), axis=0)
        return g.op("Reshape", g.op("Slice", scan, g.const([0]), count, g.const([0])), shape)

    if variant in ("scan3", "slice", "slice+lens"):
        seg = loop(g, used, [], lambda b_, _c: ([], [(o, f32) for o in segmented(b_)]), "S_")
        seg = [take(s_, chosen, k == 0) for k, s_ in enumerate(seg)]
    elif variant in ("carry3", "slice2") and guarded:
        seg = loop(g, used, initial, lambda b_, _c: (segmented(b_), []), "S_")
        seg = [take(g.op("Unsqueeze", s_, g.const([0])), chosen, k == 0) for k, s_ in enumerate(seg)]
    elif variant == "carry3":
        seg = loop(g, used, initial, lambda b_, _c: (segmented(b_), []), "S_")
        carried = [(n, f32, rank) for n, rank in zip(seg, (4, 3, 3))]
    if variant == "scan3":
        single = loop(g, g.op("Not", used), [],
                      lambda b_, _c: ([], [(o, f32) for o in fixed_single_layer(b_, "X", "lengths", wrb)]), "F_")
        outputs = [g.op("Concat", s, take(f, other, k == 0), axis=0) for k, (s, f) in enumerate(zip(seg, single))]
    elif variant == "carry3" and guarded:
        single = loop(g, g.op("Not", used), initial,
                      lambda b_, _c: (fixed_single_layer(b_, "X", "lengths", wrb), []), "F_")
        outputs = [g.op("Concat", s_, take(g.op("Unsqueeze", f, g.const([0])), other, k == 0), axis=0)
                   for k, (s_, f) in enumerate(zip(seg, single))]
    elif variant == "slice2":
        # the single node's own fix-ups before the Concat, over its 0 or T steps: the index of h at a
        # row's last valid step Sliced to 0 or 1 rows with it (no op over the segments' Y outside S)
        lengths = g.op("Cast", "lengths", to=TensorProto.INT64)
        own = g.op("Mul", steps, other)
        xs = g.op("Slice", "X", g.const([0]), own, g.const([0]))
        time_s = g.op("Range", g.const(0), g.op("Squeeze", own, g.const([0])), g.const(1))
        valid_s = g.op("Less", g.op("Unsqueeze", time_s, g.const([1])), lengths)
        y = g.op("LSTM", _padding_column(g, xs, valid_s, width), g.const(with_padding_column(w), np.float32),
                 g.const(r, np.float32), g.const(b, np.float32), outputs=3, hidden_size=hidden)
        index = g.op("Expand", g.op("Reshape", g.op("Max", g.op("Sub", lengths, g.const(1)), g.const(0)),
                                    g.const([1, 1, -1, 1])), g.const([1, 1, 1, hidden]))
        has = g.op("Greater", lengths, g.const(0))
        y_h = g.op("Where", g.op("Reshape", has, g.const([1, 1, -1, 1])), g.op(
            "GatherElements", y[0], g.op("Slice", index, g.const([0]), other, g.const([0])), axis=0),
            g.const(0.0, np.float32))                                                   # [0 or 1, 1, B, H]
        y_s = g.op("Where", g.op("Unsqueeze", valid_s, g.const([1, 3])), y[0], y_h)
        c_s = g.op("Where", g.op("Reshape", has, g.const([1, -1, 1])),
                   g.op("Slice", y[2], g.const([0]), other, g.const([0])), g.const(0.0, np.float32))
        outputs = [g.op("Concat", seg[0], y_s, axis=0), g.op("Concat", seg[1], g.op("Squeeze", y_h, g.const([1])),
                                                            axis=0), g.op("Concat", seg[2], c_s, axis=0)]
    elif variant in ("carry3", "nested"):
        outputs = loop(g, g.op("Not", used), carried,
                       lambda b_, _c: (fixed_single_layer(b_, "X", "lengths", wrb), []), "F_")
    elif variant.startswith("slice"):
        lengths = g.op("Cast", "lengths", to=TensorProto.INT64)
        own = g.op("Mul", steps, other)                                                 # [1] its steps
        xs = g.op("Slice", "X", g.const([0]), own, g.const([0]))
        time_s = g.op("Range", g.const(0), g.op("Squeeze", own, g.const([0])), g.const(1))
        valid_s = g.op("Less", g.op("Unsqueeze", time_s, g.const([1])), lengths)
        lens = g.op("Cast", g.op("Min", lengths, own), to=TensorProto.INT32) if variant == "slice+lens" else ""
        y = g.op("LSTM", _padding_column(g, xs, valid_s, width), g.const(with_padding_column(w), np.float32),
                 g.const(r, np.float32), g.const(b, np.float32), lens, outputs=3, hidden_size=hidden)
        y_raw = g.op("Concat", seg[0], y[0], axis=0)                                     # [T, 1, B, H]
        time_ = g.op("Range", g.const(0), g.op("Squeeze", steps, g.const([0])), g.const(1))
        valid = g.op("Less", g.op("Unsqueeze", time_, g.const([1])), lengths)
        y_out, y_h = _fixups(g, y_raw, lengths, valid, hidden)
        y_c = g.op("Concat", seg[2], g.op("Slice", y[2], g.const([0]), other, g.const([0])), axis=0)
        outputs = [y_out, y_h, g.op("Where", _has(g, lengths), y_c, g.const(0.0, np.float32))]
    else:
        raise ValueError(variant)
    renames = dict(zip(outputs, ("Y", "Y_h", "Y_c")))
    for node in g.nodes:
        node.output[:] = [renames.get(o, o) for o in node.output]
        node.input[:] = [renames.get(i, i) for i in node.input]
    return g.model(io(width)[0], io(width)[1])


BRANCH_FORMS = {name: (lambda variant: lambda wrb: branch_model(wrb, variant))(name)
                for name in ("scan3", "carry3", "nested", "slice", "scan3 guarded", "carry3 guarded", "slice guarded",
                             "slice+lens guarded", "slice2 guarded", "scan3 guarded seglens",
                             "slice2 guarded seglens")}


ALTERNATING = [(32, 100), (8, 20), (64, 100), (16, 50), (48, 99), (9, 7), (64, 60), (2, 13), (40, 100), (12, 100),
               (64, 100), (1, 1), (33, 77), (24, 30)]


def alternating_sequence():
    """Runs alternating between a long-tailed batch (segments, where they pay) and full rows (the single
    node), shapes growing and shrinking; then the same sizes in reverse with the kinds swapped (each
    size seen by both branches, one right after the other)."""
    forward = [(b, t, ("typical-tail", "full")[i % 2]) for i, (b, t) in enumerate(ALTERNATING)]
    return forward + [(b, t, ("full", "typical-tail")[i % 2]) for i, (b, t) in enumerate(ALTERNATING[::-1])]


def branch_runs(input_size, hidden, seeds, sequence="tool"):
    """The exactness section's run sequences (shapes growing and shrinking), or the alternating one,
    with the branch each takes."""
    wrb = weights(input_size, hidden, seed=3)
    runs = []
    for seed in seeds:
        for index, (batch, steps, kind) in enumerate(run_sequence(seed) if sequence == "tool" else
                                                     alternating_sequence()):
            rng = np.random.default_rng(1000 * seed + index)
            lengths = lengths_for(kind, batch, steps, rng)
            x = rng.normal(size=(steps, batch, input_size)).astype(np.float32)
            x[np.arange(steps)[:, None] >= lengths[None, :]] = np.nan if index % 3 == 0 else 1e3
            runs.append(((batch, steps, kind), {"X": x, "lengths": lengths}, reference(x, lengths, wrb),
                         branch_of(lengths)))
    return wrb, runs


def branch_exactness(forms, runtimes, input_size, hidden, seeds, repeats=2, sequence="tool"):
    """Each form in one session / compiled model over the run sequence (``repeats`` times): max |diff|
    vs numpy per output; bitwise agreement with (d) on the single-branch runs and with zero+c on the
    segment runs (same runtime): evidence of which branch ran."""
    wrb, runs = branch_runs(input_size, hidden, seeds, sequence)
    pattern = "".join("S" if r[3] == "seg" else "p" if "pre" in r[3] else "s" for r in runs)
    switches = sum(a.isupper() != b.isupper() for a, b in zip(pattern, pattern[1:]))
    print(f"\n  D={input_size} H={hidden}, {sequence} sequence: {len(runs)} runs x {repeats}; branch per run "
          f"(S segments, s single, "
          f"p single by the pre-check): {pattern}  ({switches} switches between branches)")
    for runtime in runtimes:
        controls = {}
        for name in ("fixups+c", "zero+c"):
            run = RUNNERS[runtime](FORMS[name](wrb) if runtime != "ov-static" or name != "zero+c"
                                   else FORMS["zero+c lens"](wrb))   # OpenVINO static shapes: lens
            controls[name] = [run(feeds) for _, feeds, _, _ in runs]
        for name in forms:
            try:
                run = RUNNERS[runtime](BRANCH_FORMS[name](wrb))
            except Exception as error:  # pylint: disable=broad-except
                print(f"    {name:11s} {runtime:11s} COMPILE/LOAD FAILED: {str(error).strip().splitlines()[0][:150]}")
                continue
            worst, where, errors, first_error = np.zeros(3), [""] * 3, 0, ""
            same = {"seg": [0, 0], "single": [0, 0]}
            for repeat in range(repeats):
                for number, (shape, feeds, expected, branch) in enumerate(runs):
                    try:
                        got = run(feeds)
                    except Exception as error:  # pylint: disable=broad-except
                        errors += 1
                        if errors == 1:
                            first_error = f"{shape}: {(str(error).strip().splitlines() or [repr(error)])[0][:150]}"
                        continue
                    key = "seg" if branch == "seg" else "single"
                    control = controls["zero+c" if key == "seg" else "fixups+c"][number]
                    same[key][0] += all(np.array_equal(a, c) for a, c in zip(got, control))
                    same[key][1] += 1
                    for k, (g_, e_) in enumerate(zip(got, expected)):
                        diff = np.inf if g_.shape != e_.shape else np.nan_to_num(np.abs(g_ - e_).max(initial=0),
                                                                              nan=np.inf)
                        if diff > worst[k]:
                            worst[k], where[k] = diff, f"{shape}#{repeat}"
            verdict = "WRONG" if worst.max() >= 1e-5 else "ERRORS" if errors else "EXACT"
            print(f"    {name:11s} {runtime:11s} {verdict:6s} runs {repeats * len(runs) - errors:3d}  "
                  f"Y {worst[0]:.1e}  Y_h {worst[1]:.1e}  Y_c {worst[2]:.1e}  errors {errors}  "
                  f"bitwise = zero+c on segment runs {same['seg'][0]}/{same['seg'][1]}, "
                  f"= (d) on single runs {same['single'][0]}/{same['single'][1]}"
                  + ("" if verdict != "WRONG" else f"\n      worst at {where}")
                  + ("" if not errors else f"\n      first error at {first_error}"))


def loop_facts():
    """What each runtime gives for a Loop that runs 0 times (condition false, or trip count 0): its
    carried output should be the initial value (7s, [1, 1, 1, 3]) and its scan output empty ([0, ...]);
    runs in turn in one session / compiled model, the body's output being 2 * X (and + the iteration)."""
    f32 = TensorProto.FLOAT

    def model(kind, how):
        g = Builder()
        init = g.const(np.full((1, 1, 1, 3), 7.0), np.float32)

        def body(b_, _carried):
            y = b_.op("Unsqueeze", b_.op("Mul", "X", b_.const(2.0, np.float32)), b_.const([1]))
            return ([], [(y, f32)]) if kind == "scan" else ([y], [])
        inits = [] if kind == "scan" else [(init, f32, 4)]
        if how == "cond":
            loop(g, "c", inits, body, "L_")
        else:
            loop(g, g.const(True, np.bool_), inits, body, "L_", trip=g.op("Cast", "c", to=TensorProto.INT64))
        g.nodes[-1].output[:] = ["Y"]
        return g.model([helper.make_tensor_value_info("X", f32, ["T", "B", 3]),
                        helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                       [helper.make_tensor_value_info("Y", f32, None)])

    print("\n  a Loop that runs 0 times (runs in turn: (T, B, runs?) -> output shape [values]); expected: carried = "
          "the initial 7s [1, 1, 1, 3], scan = [0, ...]")
    for kind in ("carry", "scan"):
        for how in ("cond", "trip"):
            m = model(kind, how)
            for runtime in ("ort", "ov", "ov-1thread"):
                run, cells = RUNNERS[runtime](m), []
                for steps, batch, c in ((3, 2, False), (4, 2, True), (4, 2, False), (6, 3, True), (5, 2, False)):
                    try:
                        y = run({"X": np.ones((steps, batch, 3), np.float32), "c": np.array(c)})[0]
                        cells.append(f"({steps},{batch},{'y' if c else 'n'})->{list(y.shape)}"
                                     + ("" if y.size == 0 else f"{np.unique(y).tolist()}"))
                    except Exception as error:  # pylint: disable=broad-except
                        cells.append(f"({steps},{batch},{'y' if c else 'n'})->error "
                                     f"{(str(error).strip().splitlines() or [''])[-1][:40]}")
                print(f"    {kind:5s} 0 trips by {'condition ' if how == 'cond' else 'trip count'} {runtime:10s} "
                      + " ".join(cells))


BRANCH_CASES = {"full B=1": (1, "full"), "full B=32": (32, "full"), "tail B=32": (32, "typical-tail")}


def branch_timing(forms, rounds, runtimes=("ort", "ov-1thread"), steps=100, cases=BRANCH_CASES):
    """One thread; per case, interleaved rounds (forms in a shuffled order each round); median ms and
    medians of per-round ratios: x a = single / form, x d = fixups+c / form (>1: faster)."""
    wrb = weights(INPUT, HIDDEN, seed=5)
    models = {"single": FORMS["single"](wrb), "fixups+c": FORMS["fixups+c"](wrb), "zero+c": FORMS["zero+c"](wrb)}
    models.update({name: BRANCH_FORMS[name](wrb) for name in forms})
    print(f"\n  timing: LSTM {INPUT}->{HIDDEN}, T={steps}, 1 thread, median ms over {rounds} interleaved rounds; "
          "x a = single / form, x d = fixups+c / form (medians of per-round ratios)")
    order_rng = np.random.default_rng(0)
    for runtime in runtimes:
        runners = {name: RUNNERS[runtime](model) for name, model in models.items()}
        times = {(f, c): [] for f in models for c in cases}
        branches = {}
        for case, (batch, kind) in cases.items():
            rng = np.random.default_rng(100 * batch + steps + 7)
            feed = {"X": rng.normal(size=(steps, batch, INPUT)).astype(np.float32),
                    "lengths": lengths_for(kind, batch, steps, rng)}
            branches[case] = f"fill {feed['lengths'].mean() / steps:.2f}, {branch_of(feed['lengths'])}"
            for round_ in range(rounds + 3):
                for form in order_rng.permutation(list(models)):
                    start = time.perf_counter()
                    runners[form](feed)
                    if round_ >= 3:
                        times[form, case].append(time.perf_counter() - start)
        print(f"  {runtime}: " + " | ".join(f"{case} ({branches[case]})" for case in cases))
        for form in models:
            cells = []
            for case in cases:
                ratio = lambda den: np.median(np.array(times[den, case]) / np.array(times[form, case]))  # noqa: E731
                cells.append(f"{1000 * np.median(times[form, case]):7.3f} (x a {ratio('single'):.3f}, "
                             f"x d {ratio('fixups+c'):.3f})")
            print(f"    {form:11s} " + " | ".join(cells))


def branch(args):
    print("\n== 4. a run-time branch without If (Loop as the branch): exactness over the run sequence "
          "(one session / compiled model, shapes growing and shrinking, branches alternating), then timing ==")
    forms = args.branch_forms
    if "facts" in args.branch_parts:
        loop_facts()
    if "exact" in args.branch_parts:
        for sequence in ("tool", "alternating"):
            branch_exactness(forms, ["ort", "ov", "ov-1thread"], INPUT, HIDDEN, range(1), sequence=sequence)
            branch_exactness(forms, ["ort", "ov", "ov-1thread"] + (["ov-static"] if args.thorough else []), 5, 8,
                             range(args.seeds), sequence=sequence)
    if "timing" in args.branch_parts:
        branch_timing(forms, args.rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=["facts", "exact", "timing", "branch"],
                        default=["facts", "exact", "timing"])
    parser.add_argument("--branch-forms", nargs="+", default=list(BRANCH_FORMS), choices=list(BRANCH_FORMS),
                        help="section 4's forms")
    parser.add_argument("--branch-parts", nargs="+", default=["facts", "exact", "timing"],
                        choices=["facts", "exact", "timing"])
    parser.add_argument("--rounds", type=int, default=25, help="timing rounds")
    parser.add_argument("--seeds", type=int, default=1, help="run sequences in the small exactness check")
    parser.add_argument("--thorough", action="store_true", help="every form and runtime in the exactness check "
                        "(about twice as long)")
    parser.add_argument("--forms", nargs="+", default=[f for f in FORMS if f not in TIMING_SKIPPED],
                        choices=list(FORMS), help="the forms timed")
    parser.add_argument("--fact", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fact:
        run_fact(*args.fact)
        return
    import onnxruntime  # pylint: disable=import-outside-toplevel
    import openvino  # pylint: disable=import-outside-toplevel
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, openvino {openvino.__version__}")
    if "facts" in args.only:
        facts()
    if "exact" in args.only:
        runtimes = [(name, None) for name in ("ort", "ort-default", "ov", "ov-1thread")]
        static = ["fixups+c", "fixups", "zero", "zero+c", "zero lens", "zero+c lens", "pad lens"]
        if args.thorough:
            big = ["fixups+c", "fixups", "zero+c", "pad+c", "zero", "zero lens", "zero unguarded", "zero unguarded0"]
            small = EXACT_FORMS
            stacked, stacked_runtimes = ["zero+c", "zero chained", "pad chained", "zero lens chained"], ["ort", "ov",
                                                                                                        "ov-1thread"]
        else:
            big = ["fixups+c", "zero+c", "zero", "zero lens", "zero unguarded", "zero unguarded0"]
            small = [f for f in EXACT_FORMS if f not in ("zero+c scatter", "pad S3", "zero S3", "zero S4", "zero S8")]
            stacked, stacked_runtimes = ["zero+c", "pad chained", "zero lens chained"], ["ort", "ov-1thread"]
        exactness([(INPUT, HIDDEN, 1, runtimes[:1] + runtimes[2:], range(1), big),
                   (5, 8, 1, runtimes + [("ov-static", static)], range(args.seeds), small),
                   (INPUT, HIDDEN, 2, [(name, None) for name in stacked_runtimes], range(1), stacked)])
    if "timing" in args.only:
        timing(args.forms, args.rounds)
    if "branch" in args.only:
        branch(args)


if __name__ == "__main__":
    main()
