#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Latency benchmark: stock tf2onnx's Loop vs the plugin vs the unmasked native op (onnxruntime),
and the routes a user could take instead (TensorFlow, OpenVINO's TensorFlow front end, LiteRT).

Three models, Embedding(1000, 64, mask_zero=True) -> LSTM(128, return_sequences=True), the
same with Bidirectional(LSTM), and with GRU(128, return_sequences=True) (--models picks some),
each converted (opset 15) these ways:

  loop       stock tf2onnx: an ONNX Loop
  sched      the plugin's default conversion, mlr.enable("post") (native LSTM/GRU, guard, fix-ups, and
             the length-aware schedule: segments where a long-tailed batch of 8 rows or more pays)
  post       the plugin without the schedule, mlr.enable("post", schedule=False): one node per layer
  any        the plugin, mlr.enable("any", schedule=False)
  unmasked   the same weights with mask_zero=False, converted with the plugin too (as "post"): a
             native LSTM/GRU over every step, the practical limit. Stock tf2onnx makes the LSTMs
             native itself (the plugin leaves its graph as it is); Keras 3's GRU it leaves a Loop,
             which the plugin makes native. The op the unmasked model holds, and who made it, is
             printed with the conversions and written to conversion.csv (unmasked_op)
  no-guard   (headline rows only) the "post" model with the guard's Split bypassed, as in
             tools/guard_cost.py
  post-ort   (headline rows only) the plugin's model converted for onnxruntime,
             make_rewriter("post", runtime="onnxruntime"): no cut at the longest row, no zero
             step appended (onnxruntime writes zeros past the lengths), no explicit zero state
  floor      (headline rows only; LSTM and GRU) the unmasked model plus the fewest nodes that make it
             exact on every runtime (tools/benchmark_floor.py): what masking cannot do without
  ov-post    (headline rows only) the "post" model on OpenVINO (CPU, f32, as many inference
             threads as onnxruntime's), compiled with the model's dynamic shapes
  ov-loop    (headline rows only) stock tf2onnx's Loop on OpenVINO, where OpenVINO compiles it
  ov-unmasked (headline rows only) the unmasked model on OpenVINO, the limit there
  ov-static  (headline rows only) the "post" model on OpenVINO compiled with static shapes, those of
             the cell's batch (model.reshape before compile_model, as users do for speed)
  ov-floor   (headline rows only) the floor on OpenVINO, dynamic shapes
  ov-sched   the "sched" model on OpenVINO, dynamic shapes (headline and distribution rows; the
             distribution rows also time ov-post and ov-unmasked)
  int8       (headline rows only) the "post" model quantized (mlr.quantize_model, as
             quantize="int8" does) on onnxruntime, for the models it quantizes something in (not
             the GRU model: onnxruntime has no int8 GRU), checked against Keras within verify's
             int8 tolerance instead of 1e-5

and the routes a user could take instead of converting to ONNX (tools/benchmark_alternatives.py
builds them; --alternatives picks some), timed on the headline rows and the grid's 1-thread rows,
in the same blocks, with their ratio over "post" (tf_over_post, ...):

  tf         TensorFlow running the Keras model: a tf.function with a [None, None] input signature,
             saved as a SavedModel and run in the timing process, TensorFlow's intra- and inter-op
             threads set to the cell's thread count before it runs anything
  ov-tf      OpenVINO's own TensorFlow front end (openvino.convert_model on that SavedModel, dynamic
             shapes), CPU, f32, as many inference threads as onnxruntime's
  litert     LiteRT: tf.lite.TFLiteConverter (builtin ops) on the model traced at each (batch, T),
             one static-shape model per shape, on ai-edge-litert's interpreter (pip install
             ai-edge-litert; else tf.lite.Interpreter), num_threads as onnxruntime's

Each alternative is checked against Keras like the ONNX models, but a failure does not stop the
benchmark: one line says what failed (or the largest difference), and the variant is marked
"failed" (not timed) or "not exact" (timed) in the tables and in the CSVs' status columns.

Grid: batch {1, 8, 32, 128} x T {16, 64, 256} x fill {1.0, 0.75, 0.5} x onnxruntime intra-op
threads {1, all cores}. Fill is the mean count of valid steps per row over T; rows are
post-padded, with lengths spread evenly over fill +- 0.125 (every row full at fill 1.0). Headline
rows: T=100, batch 1 and 32, 1 thread, fill 1.0 and 0.5. Each cell is timed in blocks, as a service
runs one model: each variant runs a block of consecutive runs (after two untimed ones), the
variants taking turns, the order reversed every other cycle, 8 blocks each, after a warm-up; the
number of runs follows from a time budget per cell. A distribution row's cell runs 8 batches
drawn from its distribution (the same shape, other lengths) in turn: each timed run follows one of
other lengths, as a service's requests do, and a runtime that prepares its nodes again when
their shapes change (OpenVINO) pays for it as there. Reported: the median, p10-p90 and the
interquartile range of each variant's block medians, and the ratios (median over median; p10-p90
of the per-cycle ratios). --timing rounds times as earlier runs did, in interleaved rounds (every
variant once per round, the order rotating, a run under 10 ms after an untimed one of the same
model, the batches in turn round by round): a model then runs with the others' data in the
caches, which charges the models with more nodes (the schedule's; on OpenVINO, measured: a
scheduled LSTM's 8 long-tailed rows 1.40 ms interleaved, 0.90 ms in blocks, the unmasked model's
0.93 and 0.86).

The timing runs in one child process per thread count, with one onnxruntime global thread pool
shared by the variants' sessions: per-session pools left spinning after a run would steal a
core from the next variant's run (measured: it made the 2-thread Loop 5x slower at batch 1).
That pool's own worker spins too, at 2 threads: so the alternatives are timed at 1 thread only.
A child that times "tf" loads TensorFlow and sets its threads first; its pools burn no CPU after
a run (measured: no more than after an onnxruntime run), so they take no core from the others.
Like OpenVINO's, a run of TensorFlow or LiteRT leaves the caches cold for the variant after it:
its untimed run takes most of that back (measured, the "post" model at batch 1: +10% after a
TensorFlow run, as after OpenVINO's Loop; +60% without the untimed run). Not all of it for the
Loop: in quick runs on a busy machine, Loop/post came out up to 1.3x higher (10 of 12 headline
rows higher) with the alternatives than with --alternatives none, while post/unmasked did not
move; compare the two before quoting Loop/post from a run with the alternatives.

Before timing, every ONNX model is run once on every batch it is timed on and compared with Keras
(every output position, padded ones included; on OpenVINO one request runs them all in turn): the
benchmark stops with an error if any differs by
more than 1e-5. It also times the conversions (median of a few) and records the ONNX file sizes.

Writes to --out (default docs/benchmark): ratios.csv (one row per cell; the alternatives'
status in tf_status, ovtf_status, litert_status), latency.csv (one row per cell and variant,
with its status; a failed alternative's without figures), conversion.csv, summary.txt (what is
printed after the timing tables) and the plots benchmark.png and benchmark_bidirectional.png
(tools/plot_benchmark.py).

    .venv/bin/python tools/benchmark.py [--quick] [--keras keras3|tf_keras] [--out DIR]
                                        [--budget SECONDS] [--threads N ...] [--models M ...]
                                        [--alternatives tf,ov-tf,litert|all|none]
                                        [--alternatives-headline-only]

--quick: a smaller grid and fewer rounds (about a minute on 2 cores), written to
build/benchmark-quick unless --out is given, so that it never overwrites the full results.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from toolutil import import_stack, op_counts, quiet_stderr  # tools/ is on sys.path when run as a script
import benchmark_alternatives as alternatives  # pylint: disable=wrong-import-order  (beside this file)
from benchmark_floor import floor_model  # pylint: disable=wrong-import-order  (beside this file)
from masked_lstm_rewriter import flavours  # pylint: disable=wrong-import-order  (toolutil puts the checkout first)
from masked_lstm_rewriter.corpus.ops import without_guard  # pylint: disable=wrong-import-order
from masked_lstm_rewriter.sessions import onnxruntime_session, openvino_compiled  # pylint: disable=wrong-import-order

TOLERANCE = 1e-5
OPSET = 15
VOCAB, EMBED, UNITS = 1000, 64, 128
MODELS = ("lstm", "bilstm", "gru")
MODEL_NAMES = {"lstm": "LSTM", "bilstm": "Bidirectional", "gru": "GRU"}
NATIVE_OPS = {"lstm": "LSTM", "bilstm": "LSTM", "gru": "GRU"}  # the Keras layer, and the plugin's ONNX op
# "sched": the plugin's default conversion in "post" mode (the length-aware schedule), a model for any
# runtime; "post", "any": the plugin without the schedule
VARIANTS = ("loop", "post", "any", "unmasked", "sched")
# OpenVINO (headline rows): the plugin's "post" model and stock tf2onnx's Loop, compiled with the
# models' own dynamic shapes, as a user loading the file does
OPENVINO_VARIANTS = {"ov-post": "post", "ov-loop": "loop", "ov-unmasked": "unmasked", "ov-static": "post",
                     "ov-floor": "floor", "ov-sched": "sched"}
DIST_OPENVINO = ("ov-post", "ov-unmasked", "ov-sched")  # OpenVINO in the distribution rows
OPENVINO_STATIC = ("ov-static",)  # compiled with the shapes of the batch they run
QUANTIZED = "int8"  # the "post" model quantized (headline rows only)
FLOOR = "floor"  # the unmasked model plus the fewest nodes exactness needs (headline rows only)
FOR_ONNXRUNTIME = "post-ort"  # the "post" model converted for onnxruntime (headline rows only)
HEADLINE_VARIANTS = VARIANTS + ("no-guard", FOR_ONNXRUNTIME, FLOOR, QUANTIZED) + tuple(OPENVINO_VARIANTS)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL_ROWS_GOAL = {1: 1.03, 32: 1.02}  # onnxruntime, every row full: the plugin's time over the unmasked op's
FLOOR_GOAL = 1.02  # every row full: the plugin's time over the floor's (noise apart, on it)
SCHEDULE_GOAL = 2.5  # long-tailed batch of 32, the schedule: the unmasked op's time over the scheduled model's
OPENVINO_SCHEDULE_GOAL = 2.0  # the same on OpenVINO
SETTLE_BELOW = 0.010  # seconds: a shorter run is timed after an untimed one of the same model (time_cell)
DRAWS = 8  # a distribution's batches per cell, run in turn: consecutive runs see other lengths, as a service's do

# (name, numerator, denominator): the ratios reported for every cell
RATIOS = (("loop_over_post", "loop", "post"), ("post_over_unmasked", "post", "unmasked"),
          ("any_over_post", "any", "post"), ("post_over_noguard", "post", "no-guard"),
          ("ovpost_over_post", "ov-post", "post"), ("ovloop_over_ovpost", "ov-loop", "ov-post"),
          ("ovpost_over_ovunmasked", "ov-post", "ov-unmasked"), ("ovstatic_over_ovpost", "ov-static", "ov-post"),
          ("postort_over_unmasked", FOR_ONNXRUNTIME, "unmasked"), ("post_over_floor", "post", FLOOR),
          ("floor_over_unmasked", FLOOR, "unmasked"),
          ("ovpost_over_ovfloor", "ov-post", "ov-floor"), ("ovfloor_over_ovunmasked", "ov-floor", "ov-unmasked"),
          ("loop_over_sched", "loop", "sched"), ("unmasked_over_sched", "unmasked", "sched"),
          ("sched_over_unmasked", "sched", "unmasked"), ("ovsched_over_ovunmasked", "ov-sched", "ov-unmasked"),
          ("sched_over_post", "sched", "post"), ("post_over_int8", "post", QUANTIZED),
          ("ovunmasked_over_ovsched", "ov-unmasked", "ov-sched"), ("ovsched_over_ovpost", "ov-sched", "ov-post"),
          # the routes a user could take instead (tools/benchmark_alternatives.py)
          ("tf_over_post", "tf", "post"), ("ovtf_over_post", "ov-tf", "post"),
          ("litert_over_post", "litert", "post"))

FULL = dict(batches=(1, 8, 32, 128), times=(16, 64, 256), fills=(1.0, 0.75, 0.5),
            dist_batches=(1, 8, 32, 128), dist_time=100, dist_budget=4.0, dist_min_rounds=40, dist_max_rounds=1000,
            headline_batches=(1, 32), headline_time=100, headline_fills=(1.0, 0.5),
            budget=1.5, min_rounds=15, max_rounds=300, warmup=0.3,
            headline_budget=8.0, headline_min_rounds=100, headline_max_rounds=2000, conversions=5)
QUICK = dict(batches=(1, 32), times=(16, 64), fills=(1.0, 0.5),
             dist_batches=(1, 8, 32), dist_time=100, dist_budget=1.5, dist_min_rounds=15, dist_max_rounds=400,
             headline_batches=(1, 32), headline_time=100, headline_fills=(1.0, 0.5),
             budget=0.25, min_rounds=5, max_rounds=40, warmup=0.05,
             headline_budget=1.5, headline_min_rounds=20, headline_max_rounds=400, conversions=2)


# ----------------------------------------------------------------------------------------------
# shared by the main process and the timing children (numpy only)

def lengths_for(batch: int, steps: int, fill: float):
    """Valid steps per row: every row full at fill 1.0, else spread evenly over fill +- 0.125
    (one row: exactly fill * T), shuffled with a fixed seed; at least 1."""
    import numpy as np
    spread = min(0.125, 1.0 - fill, fill)
    if fill >= 1.0 or batch == 1:
        fractions = np.full(batch, fill)
    else:
        fractions = fill - spread + 2 * spread * (np.arange(batch) + 0.5) / batch
    lengths = np.clip(np.rint(fractions * steps).astype(int), 1, steps)
    return np.random.default_rng(1000 * batch + steps).permutation(lengths)


def cell_feeds(cell: dict) -> list:
    """The batches a timing cell runs in turn: DRAWS of its distribution, or the one of its evenly spread fill."""
    return shape_batches(cell["batch"], cell["time"], cell.get("dist") or cell["fill"])


def shape_batches(batch: int, steps: int, fill) -> list:
    """The batches of a numerics shape or a timing cell: ``fill`` is an evenly spread fill (one batch)
    or a distribution's name (DRAWS batches drawn from it)."""
    if isinstance(fill, str):
        return [distribution_tokens(fill, batch, steps, draw) for draw in range(DRAWS)]
    return [tokens_for(batch, steps, fill)]


def each_batch(shapes):
    """(batch, T, fill, tokens) for every batch of every numerics shape (:func:`shape_batches`)."""
    for batch, steps, fill in shapes:
        for tokens in shape_batches(batch, steps, fill):
            yield batch, steps, fill, tokens


def tokens_for(batch: int, steps: int, fill: float):
    """A post-padded batch of token ids (0 is the padding id)."""
    import numpy as np
    lengths = lengths_for(batch, steps, fill)
    rng = np.random.default_rng(7 * batch + 13 * steps + int(100 * fill))
    tokens = rng.integers(1, VOCAB, (batch, steps)).astype(np.int32)
    tokens[np.arange(steps)[None, :] >= lengths[:, None]] = 0
    return tokens


# realistic length distributions (name -> description), next to the grid's evenly spread fills
DISTRIBUTIONS = {
    "full": "every row full",
    "uniform": "lengths uniform over 50-100% of T",
    "lognormal": "long-tailed: lognormal lengths, median 0.2 T, sigma 0.75, clipped to [1, T], one row of T",
    "one-long": "one row of T, the others 5-15% of T",
}


def distribution_lengths(name: str, batch: int, steps: int, draw: int = 0):
    """Valid steps per row drawn from distribution ``name`` (fixed seed per batch, T and draw), post-padded."""
    import numpy as np
    rng = np.random.default_rng(100 * batch + steps + 7 + 1_000_000 * draw)
    if name == "full":
        lengths = np.full(batch, steps)
    elif name == "uniform":
        lengths = rng.integers(steps // 2, steps + 1, batch)
    elif name == "lognormal":
        lengths = np.rint(rng.lognormal(np.log(0.2 * steps), 0.75, batch))
        lengths[rng.integers(batch)] = steps
    elif name == "one-long":
        lengths = rng.integers(max(1, steps // 20), max(2, (3 * steps) // 20) + 1, batch)
        lengths[rng.integers(batch)] = steps
    else:
        raise ValueError(f"unknown distribution {name!r}; known: {', '.join(DISTRIBUTIONS)}")
    return np.clip(lengths, 1, steps).astype(int)


def drawn_lengths(name: str, batch: int, steps: int):
    """The lengths of all DRAWS batches of distribution ``name``, one after the other."""
    import numpy as np
    return np.concatenate([distribution_lengths(name, batch, steps, draw) for draw in range(DRAWS)])


def distribution_tokens(name: str, batch: int, steps: int, draw: int = 0):
    """A post-padded batch of token ids whose lengths follow distribution ``name`` (``draw``: which one)."""
    import numpy as np
    lengths = distribution_lengths(name, batch, steps, draw)
    rng = np.random.default_rng(11 * batch + steps + 1_000_000 * draw)
    tokens = rng.integers(1, VOCAB, (batch, steps)).astype(np.int32)
    tokens[np.arange(steps)[None, :] >= lengths[:, None]] = 0
    return tokens


def cpu_snapshot():
    """(busy seconds of the whole machine, CPU seconds of this process and its waited-for children)."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])  # user nice system irq softirq steal
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system + own.children_user + own.children_system


def other_load(start, end, wall: float) -> float:
    """Mean number of cores that other processes kept busy between two cpu_snapshot()s."""
    if wall <= 0:
        return 0.0
    return max(0.0, ((end[0] - start[0]) - (end[1] - start[1])) / wall)


STAT_COLUMNS = ("median_ms", "p10_ms", "p25_ms", "p75_ms", "p90_ms")


def stats(values) -> dict:
    import numpy as np
    ms = 1000 * np.asarray(values)
    p10, p25, p50, p75, p90 = np.percentile(ms, [10, 25, 50, 75, 90])
    return dict(zip(STAT_COLUMNS, (p50, p10, p25, p75, p90)))


def ratio_stats(times: dict, top: str, bottom: str):
    """Median over median, and p10/p90 of the ratios within each round."""
    import numpy as np
    if top not in times or bottom not in times:
        return None
    a, b = np.asarray(times[top]), np.asarray(times[bottom])
    p10, p25, p75, p90 = np.percentile(a / b, [10, 25, 75, 90])
    return float(np.median(a) / np.median(b)), float(p10), float(p90), float(p25), float(p75)


def format_cell(cell: dict) -> str:
    times = cell["times"]
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    text = (f"{MODEL_NAMES[cell['model']]:<13} {cell['threads']:>2} {cell['time']:>4} {cell['batch']:>5} "
            f"{cell['fill']:>5.2f} " + " ".join(f"{med[k]:>9.3f}" for k in VARIANTS))
    for key, top, bottom in RATIOS[:3]:
        value = ratio_stats(times, top, bottom)
        text += f" {value[0]:>{9 if key == 'loop_over_post' else 8}.2f}"
    text += f" {cell['rounds']:>6} {cell['other_load']:>5.2f}"
    # the alternatives, far slower, after the columns (with their ratio over "post")
    text += "".join(f"  {name} {med[name]:.3f} ({med[name] / med['post']:.1f}x)"
                    for name in alternatives.ALTERNATIVES if name in med)
    return text


TABLE_HEADER = (f"{'model':<13} {'th':>2} {'T':>4} {'batch':>5} {'fill':>5} "
                + " ".join(f"{k + ' ms':>9}" for k in VARIANTS)
                + f" {'Loop/post':>9} {'post/unm':>8} {'any/post':>8} {'rounds':>6} {'other':>5}")


# ----------------------------------------------------------------------------------------------
# the timing child: onnxruntime and numpy only

def warm_up(runs: dict, feeds: list, warmup: float) -> tuple:
    """Rounds of every variant on the feeds in turn, at least 3 and one per feed, until ``warmup``
    seconds (at most 50): ({variant: seconds of its last run}, rounds)."""
    start = time.perf_counter()
    warm_rounds, last = 0, {}
    while warm_rounds < max(3, len(feeds)) or (time.perf_counter() - start < warmup and warm_rounds < 50):
        for name, run in runs.items():
            begin = time.perf_counter()
            run(feeds[warm_rounds % len(feeds)])
            last[name] = time.perf_counter() - begin
        warm_rounds += 1
    return last, warm_rounds


def time_cell(runs: dict, feeds: list, budget: float, min_rounds: int, max_rounds: int, warmup: float):
    """Interleaved rounds, each running every variant, the order rotating; round k runs ``feeds[k]``
    (cycling), so that where a cell has several batches each run follows one of other lengths, as in
    a service (a runtime that prepares its nodes per shape pays for it as there). A variant whose run
    takes under SETTLE_BELOW runs once untimed, on the previous round's feed, before its timed run:
    the variant before it (another model, on OpenVINO another runtime) has evicted its weights from
    the caches, and timing that cold run would charge a small model the previous one's footprint
    rather than its own cost (measured: the LSTM "post" model at batch 1 took 0.49 ms right after an
    OpenVINO run, 0.37 ms warm). ``runs``: variant -> a callable taking a feed (open_runs)."""
    names = list(runs)
    last, warm_rounds = warm_up(runs, feeds, warmup)
    settle = {name: last[name] < SETTLE_BELOW for name in names}
    round_seconds = sum(last[name] * (2 if settle[name] else 1) for name in names)
    rounds = int(min(max_rounds, max(min_rounds, budget / max(round_seconds, 1e-9))))
    times = {name: [] for name in names}
    for index in range(rounds):
        first = index % len(names)
        feed = feeds[index % len(feeds)]
        for name in names[first:] + names[:first]:  # rotate the order: no variant always runs first
            run = runs[name]
            if settle[name]:
                run(feeds[(index - 1) % len(feeds)])
            begin = time.perf_counter()
            run(feed)
            times[name].append(time.perf_counter() - begin)
    return times, rounds, warm_rounds


BLOCK_CYCLES = 8  # each variant's blocks per cell (time_blocks)


def time_blocks(runs: dict, feeds: list, budget: float, min_runs: int, max_runs: int, warmup: float):
    """Blocks of consecutive runs, as a service runs one model: each variant runs a block, the
    variants taking turns, the order reversed every other cycle, ``BLOCK_CYCLES`` blocks each; a
    block's runs take ``feeds`` in turn after two untimed runs (the variant before it, another model
    or runtime, has left the caches cold). Returns ({variant: [median seconds of each block]}, timed
    runs per variant, warm-up rounds); the runs per variant follow from ``budget`` as in time_cell."""
    names = list(runs)
    last, warm_rounds = warm_up(runs, feeds, warmup)
    total = int(min(max_runs, max(min_runs, budget / max(sum(last.values()), 1e-9))))
    size = max(3, -(-total // BLOCK_CYCLES))
    medians = {name: [] for name in names}
    for cycle in range(BLOCK_CYCLES):
        for name in names if cycle % 2 == 0 else names[::-1]:
            run = runs[name]
            for feed in (feeds * 2)[-2:]:
                run(feed)
            times = []
            for index in range(size):
                feed = feeds[index % len(feeds)]
                begin = time.perf_counter()
                run(feed)
                times.append(time.perf_counter() - begin)
            medians[name].append(statistics.median(times))
    return medians, size * BLOCK_CYCLES, warm_rounds


TIMERS = {"blocks": time_blocks, "rounds": time_cell}
TIMING_WORDS = {"blocks": ("medians in ms of blocks of consecutive runs", "per-cycle"),
                "rounds": ("medians in ms of interleaved rounds", "per-round")}


class OpenVinoSession:
    """An OpenVINO CPU model behind onnxruntime's ``run(None, feed)``: compiled once with the
    model's declared (dynamic) shapes, or (``static``) once per shape of the feeds it runs, f32
    precision, ``threads`` inference threads."""

    def __init__(self, path: str, threads: int, static: bool = False):
        self.path, self.threads, self.static, self.requests = path, threads, static, {}
        if not static:
            self.requests[None] = openvino_compiled(path, threads=threads).create_infer_request()

    def run(self, _, feed):
        key = tuple((name, value.shape) for name, value in sorted(feed.items())) if self.static else None
        if key not in self.requests:
            shapes = {name: shape for name, shape in key}
            self.requests[key] = openvino_compiled(self.path, shapes, threads=self.threads).create_infer_request()
        request = self.requests[key]
        request.infer(feed)
        return [request.get_output_tensor(i).data for i in range(len(request.model_outputs))]


def open_session(variant: str, path: str, threads: int):
    """An onnxruntime session, or for an OpenVINO variant an OpenVinoSession (None where OpenVINO
    cannot compile the model: it is left out of the timing)."""
    if variant not in OPENVINO_VARIANTS:
        return onnxruntime_session(path, shared_threads=True)
    try:
        return OpenVinoSession(path, threads, static=variant in OPENVINO_STATIC)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        print(f"note: OpenVINO cannot compile {os.path.basename(path)}: {str(error).strip().splitlines()[-1]}",
              flush=True)
        return None


def open_runs(job: dict) -> dict:
    """model -> variant -> a callable taking the feed: onnxruntime sessions sharing one global
    pool, OpenVINO models, and the alternatives (TensorFlow's threads set before it runs anything)."""
    import onnxruntime as ort
    threads = job["threads"]
    # One pool for all sessions: see the module docstring. Spinning stays at onnxruntime's default.
    ort.set_global_thread_pool_sizes(threads, 1)
    if any(spec["kind"] == "tf" for specs in job["alternatives"].values() for spec in specs.values()):
        with quiet_stderr():  # TensorFlow's start-up notices
            alternatives.configure_tensorflow(threads)
    runs = {}
    for model, files in job["models"].items():
        opened = {variant: open_session(variant, path, threads) for variant, path in files.items()}
        runs[model] = {variant: functools.partial(session.run, None) for variant, session in opened.items()
                       if session is not None}
        with quiet_stderr():  # LiteRT announces its delegate, TensorFlow its start-up
            for variant, spec in job["alternatives"].get(model, {}).items():
                runs[model][variant] = alternatives.open_runner(spec, threads).run
    return runs


def worker(job_path: str) -> int:
    with open(job_path) as handle:
        job = json.load(handle)
    threads = job["threads"]
    runs = open_runs(job)
    results = []
    for cell in job["cells"]:
        variants = [v for v in cell["variants"] if v in runs[cell["model"]]]
        chosen = {v: runs[cell["model"]][v] for v in variants}
        feeds = [{"tokens": tokens} for tokens in cell_feeds(cell)]
        before, wall_start = cpu_snapshot(), time.perf_counter()
        times, rounds, warm = TIMERS[job["timing"]](chosen, feeds, cell["budget"], cell["min_rounds"],
                                                    cell["max_rounds"], cell["warmup"])
        load = other_load(before, cpu_snapshot(), time.perf_counter() - wall_start)
        result = dict(cell, times=times, rounds=rounds, warmup_rounds=warm, threads=threads, other_load=load)
        results.append(result)
        print(format_cell(result) + {"headline": "  (headline)", "dist": f"  ({cell.get('dist')})"}.get(cell["set"], ""),
              flush=True)
    with open(job["results"], "w") as handle:
        json.dump(results, handle)
    return 0


# ----------------------------------------------------------------------------------------------
# the main process: Keras, tf2onnx, the checks, the reports

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small grid, few rounds: about a minute (default out: build/benchmark-quick)")
    parser.add_argument("--keras", choices=flavours.FLAVOURS, default="keras3")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: docs/benchmark, "
                                                      "or build/benchmark-quick with --quick)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="timing budget per grid cell (default: 1.5, or 0.25 with --quick)")
    parser.add_argument("--threads", type=int, nargs="+", metavar="N",
                        help="onnxruntime intra-op thread counts (default: 1 and every core)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--alternatives", default="all", metavar="NAMES",
                        help="the routes a user could take instead, timed beside the ONNX variants: a comma-"
                             "separated subset of tf,ov-tf,litert, or all (default) or none")
    parser.add_argument("--alternatives-headline-only", action="store_true",
                        help="time the alternatives on the headline rows only, not on the grid")
    parser.add_argument("--timing", choices=tuple(TIMERS), default="blocks",
                        help="blocks: each variant runs blocks of consecutive runs, the variants taking turns, as a "
                             "service runs one model (default); rounds: every variant once per round, interleaved")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's and tf2onnx's messages")
    parser.add_argument("--worker", metavar="JOB", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = os.path.join(ROOT, *(("build", "benchmark-quick") if args.quick else ("docs", "benchmark")))
    if args.threads is None:
        args.threads = sorted({1, os.cpu_count() or 1})
    if any(n < 1 for n in args.threads) or (args.budget is not None and args.budget <= 0):
        parser.error("--threads and --budget must be positive")
    try:
        args.alternatives = alternatives.parse_names(args.alternatives)
    except ValueError as error:
        parser.error(f"--alternatives: {error}")
    return args


class Report:
    """Prints and keeps the lines for summary.txt."""

    def __init__(self):
        self.lines = []

    def __call__(self, text: str = "", keep: bool = True):
        print(text, flush=True)
        if keep:
            self.lines.append(text)


def machine_info(versions: dict) -> list:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        with open("/proc/meminfo") as handle:
            memory = next(line.split()[1] for line in handle if line.startswith("MemTotal"))
        memory = f", {int(memory) / 2 ** 20:.1f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        memory = ""
    lines = [(f"machine: {cpu}, {os.cpu_count()} logical cores ({usable} usable){memory}, "
              f"{platform.system()} {platform.release()} {platform.machine()}"),
             "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())]
    return lines


def git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "masked_lstm_rewriter"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"{head}" + (" + uncommitted changes in masked_lstm_rewriter/" if dirty else " (clean plugin sources)")


class BenchmarkError(Exception):
    """A failed check: printed as one line, exit status 1."""


def fail(message: str):
    raise BenchmarkError(message)


def build_pair(keras, model: str):
    """The masked model and an unmasked twin with the same weights."""
    built = []
    for mask_zero in (True, False):
        keras.utils.set_random_seed(0)
        tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
        x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=mask_zero, name="embedding")(tokens)
        op = NATIVE_OPS[model]
        layer = getattr(keras.layers, op)(UNITS, return_sequences=True, name=op.lower())
        if model == "bilstm":
            layer = keras.layers.Bidirectional(layer, name="bidirectional")
        built.append(keras.Model(tokens, layer(x), name=f"{model}_{'masked' if mask_zero else 'unmasked'}"))
    built[1].set_weights(built[0].get_weights())
    return built


def convert_all(tf, tf2onnx, mlr, keras_models: dict, repeats: int, quiet: bool):
    """Converts each model each way `repeats` times, interleaved; returns (protos, seconds)."""
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    # (which Keras model, the plugin's options or None for stock tf2onnx): the plugin through mlr.enable,
    # as mlr.convert and the command line run it (with its patches: tf2onnx's optimizers pass over the
    # schedule's Ifs)
    ways = {"loop": (0, None), "post": (0, dict(mask_mode="post", schedule=False)),
            "sched": (0, dict(mask_mode="post")),
            FOR_ONNXRUNTIME: (0, dict(mask_mode="post", runtime="onnxruntime", schedule=False)),
            "any": (0, dict(mask_mode="any", schedule=False)),
            # with the plugin: the native op wherever the plugin makes one (Keras 3's GRU, which stock
            # leaves a Loop even unmasked); stock's native LSTM stays as stock made it
            "unmasked": (1, dict(mask_mode="post", schedule=False))}
    protos, seconds, makers = {}, {}, {}
    for _ in range(repeats):
        for model, pair in keras_models.items():
            for variant, (which, options) in ways.items():
                with quiet_stderr(quiet):
                    start = time.perf_counter()
                    with mlr.enable(**options) if options is not None else contextlib.nullcontext():
                        proto, _ = tf2onnx.convert.from_keras(pair[which], input_signature=spec, opset=OPSET)
                    elapsed = time.perf_counter() - start
                protos[(model, variant)] = proto
                seconds.setdefault((model, variant), []).append(elapsed)
                if variant == "unmasked":  # who made its native op: the plugin's report lists what it rewrote
                    makers[model] = "the plugin" if mlr.last_report().rewritten else "stock tf2onnx"
    return protos, seconds, makers


def unmasked_op(proto, maker: str) -> str:
    """What the unmasked model computes its recurrence with: ``"native GRU (the plugin)"``, ``"native
    LSTM (stock tf2onnx)"``, or ``"Loop"`` when a Loop is left (then it is no native reference)."""
    counts = op_counts(proto)
    if counts["Loop"]:
        return "Loop"
    native = [op for op in ("LSTM", "GRU", "RNN") if counts[op]]
    return f"native {'+'.join(native) or 'none'} ({maker})"


def check_structure(protos: dict):
    for (model, variant), proto in protos.items():
        counts = op_counts(proto)
        op = NATIVE_OPS[model]
        if variant in ("post", "any", "sched", FOR_ONNXRUNTIME) and (counts["Loop"] or not counts[op]):
            fail(f"{model}/{variant}: the plugin's model has {counts['Loop']} Loop and {counts[op]} {op} ops "
                 f"(expected no Loop, at least one {op})")
        if variant == "loop" and not counts["Loop"]:
            fail(f"{model}/loop: stock tf2onnx gave no Loop (is the plugin enabled through TF2ONNX_MASKED_LSTM?)")
        if variant == "unmasked" and (counts["Loop"] or not counts[op]):
            fail(f"{model}/unmasked: the unmasked model, converted with the plugin, has {counts['Loop']} Loop and "
                 f"{counts[op]} {op} ops (expected no Loop, at least one {op}): it is no native reference")


def check_openvino_numerics(np, keras_models: dict, protos: dict, shapes: list, worst: dict, report: Report) -> set:
    """The OpenVINO variants on the headline shapes vs Keras (dynamic shapes, as timed); returns
    the (model, variant) pairs OpenVINO compiled. The plugin's must compile and match; stock
    tf2onnx's Loop is timed where OpenVINO loads it."""
    try:
        import openvino as ov
    except ImportError:
        report("  OpenVINO: not installed (pip install openvino): no OpenVINO columns")
        return set()
    compiled = set()
    for model, (masked, unmasked) in keras_models.items():
        for variant, source in OPENVINO_VARIANTS.items():
            if (model, source) not in protos:  # no floor for this model
                continue
            try:
                net = None if variant in OPENVINO_STATIC else openvino_compiled(protos[(model, source)], threads=1)
            except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
                if source in ("post", "sched"):
                    fail(f"OpenVINO cannot compile the plugin's {model} model ({source}): {error}")
                report(f"  {MODEL_NAMES[model]:<13} {variant}: OpenVINO cannot compile it "
                       f"({str(error).strip().splitlines()[-1][:100]})")
                continue
            request = None if net is None else net.create_infer_request()  # one, run on batch after batch
            for batch, steps, fill, tokens in each_batch(shapes):
                want = np.asarray((unmasked if source == "unmasked" else masked)(tokens, training=False))
                if variant in OPENVINO_STATIC:
                    net = openvino_compiled(protos[(model, source)], {"tokens": tokens.shape}, threads=1)
                    request = net.create_infer_request()
                got = request.infer({"tokens": tokens})[net.output(0)]
                diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
                for key in ((model, variant), (model, variant, batch, steps, fill)):
                    worst[key] = max(worst.get(key, 0.0), diff)
                if not diff <= TOLERANCE:
                    fail(f"{model}/{variant} on OpenVINO differs from Keras by {diff:.3g} (> {TOLERANCE:g}) "
                         f"at batch {batch}, T={steps}, fill {fill}")
            compiled.add((model, variant))
        report(f"  {MODEL_NAMES[model]:<13} OpenVINO {ov.__version__.split('-')[0]}, dynamic shapes (static: ov-static), "
               f"{len(shapes)} headline and distribution shapes: " + ", ".join(
                   f"{v} {worst[(model, v)]:.2g}" for v in OPENVINO_VARIANTS if (model, v) in compiled))
    return compiled


def quantized_models(np, mlr, keras_models: dict, protos: dict, shapes: list, worst: dict, report: Report) -> dict:
    """The "post" models quantized (int8), where that quantizes something, each checked against Keras
    on ``shapes`` within verify's int8 tolerance; returns model -> ModelProto."""
    from masked_lstm_rewriter.quantize import describe
    from masked_lstm_rewriter.verify_tolerance import choose
    quantized = {}
    for model, (masked, _) in keras_models.items():
        proto = mlr.quantize_model(protos[(model, "post")])
        if not describe(proto):
            report(f"  {MODEL_NAMES[model]:<13} int8: nothing to quantize (onnxruntime has no int8 "
                   f"{NATIVE_OPS[model]}): no int8 variant")
            continue
        tolerance = choose(proto, None)
        check_masked(np, onnxruntime_session(proto), masked, shapes, worst, (model, QUANTIZED), tolerance.allowed,
                     str(tolerance))
        quantized[model] = proto
        report(f"  {MODEL_NAMES[model]:<13} int8 ({describe(proto)}), {len(shapes)} headline and distribution "
               f"shapes: {worst[(model, QUANTIZED)]:.2g} (tolerance {tolerance})")
    return quantized


def check_masked(np, session, masked, shapes: list, worst: dict, key: tuple, allowed, limit: str) -> None:
    """Runs ``session`` on each shape against the masked Keras model: records the largest difference
    under ``worst[key]`` (``key``: (model, variant)) and per shape; fails beyond ``allowed(Keras's
    output)`` (``limit`` says it)."""
    for batch, steps, fill, tokens in each_batch(shapes):
        want = np.asarray(masked(tokens, training=False))
        got = session.run(None, {"tokens": tokens})[0]
        diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        for cell in (key, key + (batch, steps, fill)):
            worst[cell] = max(worst.get(cell, 0.0), diff)
        if not diff <= allowed(want):
            fail(f"{'/'.join(key)} differs from Keras by {diff:.3g} (> {limit}) at batch {batch}, T={steps}, "
                 f"fill {fill}")


def floor_models(np, keras_models: dict, protos: dict, shapes: list, worst: dict, report: Report) -> dict:
    """(model, FLOOR) -> the floor of each model that has one (tools/benchmark_floor.py), each checked
    against Keras on ``shapes`` on onnxruntime (OpenVINO: check_openvino_numerics)."""
    floors = {}
    for model, (masked, _) in keras_models.items():
        try:
            proto = floor_model(protos[(model, "unmasked")])
        except ValueError as error:
            report(f"  {MODEL_NAMES[model]:<13} no floor variant ({error})")
            continue
        check_masked(np, onnxruntime_session(proto), masked, shapes, worst, (model, FLOOR), lambda _: TOLERANCE,
                     f"{TOLERANCE:g}")
        floors[(model, FLOOR)] = proto
        report(f"  {MODEL_NAMES[model]:<13} floor ({len(proto.graph.node)} nodes; unmasked "
               f"{len(protos[(model, 'unmasked')].graph.node)}, post {len(protos[(model, 'post')].graph.node)}), "
               f"{len(shapes)} headline and distribution shapes: {worst[(model, FLOOR)]:.2g}")
    return floors


def report_floor(ratio_rows: list, report: Report):
    """The floor against the unmasked op and the plugin's models (for any runtime, for onnxruntime), full
    rows, on both runtimes."""
    rows = sorted((r for r in ratio_rows if r["set"] == "headline" and r["fill"] == 1.0),
                  key=lambda r: (MODELS.index(r["model"]), r["batch"]))
    if not rows:
        return
    report("the floor: the unmasked model plus the fewest nodes exactness needs on every runtime "
           "(tools/benchmark_floor.py; LSTM and GRU), and post-ort, the plugin's model converted for onnxruntime; "
           "full rows, 1 thread, medians in ms")
    report(f"  {'model':<13} {'batch':>5} {'unmasked':>8} {'floor':>7} {'post':>7} {'post-ort':>8} {'floor/unm.':>17} "
           f"{'post/floor':>17} {'post-ort/unm.':>17} {'OV unm.':>7} {'OV floor':>8} {'OV post':>7} "
           f"{'OV floor/unm.':>17} "
           f"{'OV post/floor':>17}")
    for row in rows:
        def ratio(key, row=row):
            return f"{row[key]:.3f} [{row[key + '_p10']:.2f}-{row[key + '_p90']:.2f}]" if row[key] != "" else "-"

        def ms(key, width, row=row):
            return f"{row[key]:>{width}.3f}" if row[key] != "" else f"{'-':>{width}}"
        report(f"  {MODEL_NAMES[row['model']]:<13} {row['batch']:>5} {ms('unmasked_ms', 8)} {ms('floor_ms', 7)} "
               f"{ms('post_ms', 7)} {ms('postort_ms', 8)} {ratio('floor_over_unmasked'):>17} "
               f"{ratio('post_over_floor'):>17} {ratio('postort_over_unmasked'):>17} "
               f"{ms('ovunmasked_ms', 7)} {ms('ovfloor_ms', 8)} {ms('ovpost_ms', 7)} "
               f"{ratio('ovfloor_over_ovunmasked'):>17} {ratio('ovpost_over_ovfloor'):>17}")


def report_quantized(ratio_rows: list, worst: dict, report: Report):
    """The int8 variant on the headline rows: its latency against the float "post" model, its distance from Keras."""
    rows = sorted((r for r in ratio_rows if r["set"] == "headline" and r["int8_ms"] != ""),
                  key=lambda r: (MODELS.index(r["model"]), -r["fill"], r["batch"]))
    if not rows:
        return
    report("int8: the \"post\" model quantized (quantize=\"int8\"), onnxruntime, 1 intra-op thread, medians in ms")
    report(f"  {'model':<13} {'batch':>5} {'fill':>4} {'post':>7} {'int8':>7} {'post/int8':>17} {'max |int8 - Keras|':>18}")
    for row in rows:
        diff = worst.get((row["model"], QUANTIZED, row["batch"], row["time"], row["fill"]), float("nan"))
        ratio = f"{row['post_over_int8']:.2f} [{row['post_over_int8_p10']:.2f}-{row['post_over_int8_p90']:.2f}]"
        report(f"  {MODEL_NAMES[row['model']]:<13} {row['batch']:>5} {row['fill']:>4.2f} {row['post_ms']:>7.3f} "
               f"{row['int8_ms']:>7.3f} {ratio:>17} {diff:>18.2g}")


def check_numerics(np, keras_models: dict, protos: dict, shapes: list, report: Report) -> dict:
    """Runs every ONNX model on every (batch, T, fill) and compares with Keras; fails beyond TOLERANCE."""
    worst, largest = {}, {}
    for model, (masked, unmasked) in keras_models.items():
        sessions = {v: onnxruntime_session(protos[(model, v)]) for v in VARIANTS}
        for batch, steps, fill, tokens in each_batch(shapes):
            expected = {"masked": np.asarray(masked(tokens, training=False)),
                        "unmasked": np.asarray(unmasked(tokens, training=False))}
            largest[model] = max(largest.get(model, 0.0), float(np.max(np.abs(expected["masked"]))))
            for variant, session in sessions.items():
                want = expected["unmasked" if variant == "unmasked" else "masked"]
                got = session.run(None, {"tokens": tokens})[0]
                diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
                for key in ((model, variant), (model, variant, batch, steps, fill)):
                    worst[key] = max(worst.get(key, 0.0), diff)
                if not diff <= TOLERANCE:
                    who = "the plugin's" if variant in ("post", "any", "sched") else "the"
                    fail(f"{who} {model}/{variant} model differs from Keras by {diff:.3g} (> {TOLERANCE:g}) "
                         f"at batch {batch}, T={steps}, fill {fill} (shapes {got.shape} vs {want.shape})")
    for model in keras_models:
        report(f"  {MODEL_NAMES[model]:<13} max |ONNX - Keras| over {len(shapes)} shapes: "
               + ", ".join(f"{v} {worst[(model, v)]:.2g}" for v in VARIANTS)
               + f" (largest |Keras output| {largest[model]:.2g})")
    return worst


def grid_alternatives(args, threads: int) -> list:
    """The alternatives timed on the grid's cells of ``threads`` threads: on the 1-thread ones only.
    With more, onnxruntime's global pool keeps a worker spinning for tens of milliseconds after each
    run (Python cannot turn that off for the global pool), which takes a core from the variant run
    next: TensorFlow measured 1.3-1.5x slower right after an onnxruntime run at 2 threads."""
    return [] if args.alternatives_headline_only or threads != 1 else list(args.alternatives)


def build_alternatives(np, tf, args, keras_models: dict, shapes: list, folder: str, worst: dict,
                       report: Report) -> dict:
    """The routes a user could take instead (tools/benchmark_alternatives.py), built in ``folder``
    and checked against Keras on ``shapes``; their differences go into ``worst`` beside the ONNX
    variants'. Returns (model, variant) -> Outcome. A failure is reported, never raised."""
    if not args.alternatives:
        return {}
    if not shapes:
        report("alternatives: not timed (they are timed on 1-thread cells only; see --threads)")
        report()
        return {}
    report(f"alternatives, built and checked against Keras at every position on {len(shapes)} shapes "
           f"(tolerance {TOLERANCE:g}); TensorFlow {tf.__version__}:")
    for name in args.alternatives:
        report(f"  {name:<7} {alternatives.DESCRIPTIONS[name]}")
    masked = {model: pair[0] for model, pair in keras_models.items()}
    outcomes = alternatives.prepare_all(np, tf, args.alternatives, masked, shapes, folder, shape_batches, TOLERANCE,
                                        report, MODEL_NAMES, quiet=not args.verbose)
    for (model, variant), outcome in outcomes.items():
        if outcome.diffs:
            worst[(model, variant)] = outcome.worst
        for (batch, steps, fill), diff in outcome.diffs.items():
            worst[(model, variant, batch, steps, fill)] = diff
    report()
    return outcomes


def timed_alternatives(outcomes: dict) -> dict:
    """model -> variant -> the spec the timing process opens, for the alternatives that did not fail."""
    specs = {}
    for (model, variant), outcome in outcomes.items():
        if outcome.spec is not None:
            specs.setdefault(model, {})[variant] = outcome.spec
    return specs


def report_alternatives(ratio_rows: list, outcomes: dict, report: Report) -> bool:
    """The alternatives on the headline rows: their latency and their ratio over the plugin's "post"
    model on onnxruntime. Returns whether there was anything to show."""
    names = list(dict.fromkeys(variant for _, variant in outcomes))
    if not names:
        return False
    report("alternatives: the routes a user could take instead, T=100, 1 thread, medians in ms; ratio over the "
           "plugin's \"post\" model on onnxruntime (median over median [p10-p90 per round])")
    report(f"  {'model':<13} {'batch':>5} {'fill':>4} {'post':>7} "
           + " ".join(f"{name:>9} {name + '/post':>17}" for name in names))
    for row in sorted((r for r in ratio_rows if r["set"] == "headline"),
                      key=lambda r: (MODELS.index(r["model"]), -r["fill"], r["batch"])):
        cells = [alternative_cell(row, name) for name in names]
        report(f"  {MODEL_NAMES[row['model']]:<13} {row['batch']:>5} {row['fill']:>4.2f} {row['post_ms']:>7.3f} "
               + " ".join(cells))
    if any(o.status == alternatives.NOT_EXACT for o in outcomes.values()):
        report("  *: not exact against Keras (see the alternatives' check above): timed, but not a like-for-like "
               "route")
    return True


def alternative_cell(row: dict, name: str) -> str:
    """One alternative's columns in the headline table: milliseconds and ratio, or why there are none."""
    key = column(name)
    status = row[key + "_status"]
    if status in ("", alternatives.FAILED) or row[key + "_ms"] == "":
        text = status or "-"
        return f"{text:>9} {text:>17}"
    mark = "*" if status == alternatives.NOT_EXACT else ""
    ratio = f"{row[key + '_over_post']:.1f}x [{row[key + '_over_post_p10']:.1f}-{row[key + '_over_post_p90']:.1f}]"
    return f"{row[key + '_ms']:>8.3f}{mark or ' '} {ratio + mark:>17}"


def report_alternatives_grid(ratio_rows: list, report: Report):
    """Over the grid: the range of each alternative's time over the plugin's, per model."""
    grid = [r for r in ratio_rows if r["set"] == "grid"]
    lines = []
    for model in MODELS:
        for name in alternatives.ALTERNATIVES:
            key = column(name) + "_over_post"
            mine = [r for r in grid if r["model"] == model and r[key] != ""]
            if mine:
                low, high = min(mine, key=lambda r: r[key]), max(mine, key=lambda r: r[key])
                mark = " (not exact)" if mine[0][column(name) + "_status"] == alternatives.NOT_EXACT else ""
                lines.append(f"  {MODEL_NAMES[model]}: {name}{mark} takes {low[key]:.1f}x (batch {low['batch']}, "
                             f"T={low['time']}, fill {low['fill']!r}) to {high[key]:.1f}x (batch {high['batch']}, "
                             f"T={high['time']}, fill {high['fill']!r}) the plugin's time, over {len(mine)} "
                             f"cells (1 thread)")
    if lines:
        report()
        report("the alternatives over the grid, against the plugin (\"post\") on onnxruntime:")
        for line in lines:
            report(line)


def run_children(args, onnx_files: dict, alternative_specs: dict, cells_by_threads: dict, tmp: str) -> list:
    results = []
    for threads, cells in cells_by_threads.items():
        job = dict(threads=threads, models=onnx_files, alternatives=alternative_specs, cells=cells,
                   timing=args.timing, results=os.path.join(tmp, f"results-{threads}.json"))
        job_path = os.path.join(tmp, f"job-{threads}.json")
        with open(job_path, "w") as handle:
            json.dump(job, handle)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        code = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", job_path], env=env,
                              check=False).returncode
        if code:
            fail(f"the timing process for {threads} thread(s) exited with status {code}")
        with open(job["results"]) as handle:
            results.extend(json.load(handle))
    return results


def summarise(results: list, worst: dict, outcomes: dict) -> tuple:
    """Rows for ratios.csv and latency.csv; ``outcomes``: the alternatives' (build_alternatives)."""
    import numpy as np
    ratio_rows, latency_rows = [], []
    for cell in results:
        times = cell["times"]
        lengths = (drawn_lengths(cell["dist"], cell["batch"], cell["time"]) if cell.get("dist")
                   else lengths_for(cell["batch"], cell["time"], cell["fill"]))
        base = dict(model=cell["model"], set=cell["set"], dist=cell.get("dist") or "", threads=cell["threads"],
                    batch=cell["batch"], time=cell["time"], fill=cell["fill"])
        row = dict(base, fill_actual=round(float(np.mean(lengths)) / cell["time"], 4),
                   max_length=int(np.max(lengths)), rounds=cell["rounds"], other_load=round(cell["other_load"], 3))
        for variant in HEADLINE_VARIANTS + alternatives.ALTERNATIVES:
            row[column(variant) + "_ms"] = (round(stats(times[variant])["median_ms"], 4)
                                                     if variant in times else "")
        for variant in alternatives.ALTERNATIVES:  # exact, not exact (timed, marked), failed (not timed), or ""
            outcome = outcomes.get((cell["model"], variant)) if variant in cell["variants"] else None
            row[column(variant) + "_status"] = outcome.status if outcome else ""
        for key, top, bottom in RATIOS:
            value = ratio_stats(times, top, bottom)
            for suffix, index in (("", 0), ("_p10", 1), ("_p25", 3), ("_p75", 4), ("_p90", 2)):
                row[key + suffix] = round(value[index], 4) if value else ""
        ratio_rows.append(row)
        for variant, values in times.items():
            diff = worst.get((cell["model"], "post" if variant == "no-guard" else variant,
                              cell["batch"], cell["time"], cell.get("dist") or cell["fill"]), "")
            latency_rows.append(dict(base, variant=variant, rounds=len(values),
                                     **{k: round(v, 4) for k, v in stats(values).items()},
                                     max_abs_diff_vs_keras=(f"{diff:.3g}" if diff != "" else ""),
                                     status=variant_status(variant, cell["model"], outcomes)))
        latency_rows += failed_latency_rows(cell, base, outcomes)
    return ratio_rows, latency_rows


def column(variant: str) -> str:
    """A variant's name in the CSVs' column names: ``ov-tf`` -> ``ovtf`` (``ovtf_ms``, ``ovtf_over_post``)."""
    return variant.replace("-", "")


def variant_status(variant: str, model: str, outcomes: dict) -> str:
    """latency.csv's status of a timed variant: the ONNX ones passed the check before timing."""
    if variant in alternatives.ALTERNATIVES:
        return outcomes[(model, variant)].status
    return "within int8 tolerance" if variant == QUANTIZED else "exact"


def failed_latency_rows(cell: dict, base: dict, outcomes: dict) -> list:
    """A latency.csv row, without figures, for each alternative of the cell that failed (not timed)."""
    rows = []
    for variant in cell["variants"]:
        outcome = outcomes.get((cell["model"], variant))
        if outcome is not None and outcome.status == alternatives.FAILED:
            rows.append(dict(base, variant=variant, rounds=0, **dict.fromkeys(STAT_COLUMNS, ""),
                             max_abs_diff_vs_keras="", status=f"failed: {outcome.detail}"))
    return rows


def write_csv(path: str, rows: list):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def find(rows: list, **match):
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            return row
    return None


def report_distributions(ratio_rows: list, settings: dict, report: Report):
    """The realistic length distributions: latency of each variant, the plugin's speed-ups."""
    report(f"length distributions: T={settings['dist_time']}, 1 intra-op thread, {TIMING_WORDS[settings['timing']][0]}, "
           f"{DRAWS} batches per row run in turn (fill: their mean)")
    for name, text in DISTRIBUTIONS.items():
        report(f"  {name}: {text}")
    report(f"  {'model':<13} {'batch':>5} {'lengths':<10} {'fill':>5} {'Loop':>7} {'post':>7} {'sched':>7} "
           f"{'any':>7} {'unmasked':>8} {'Loop/sched':>10} {'unm/sched':>9} {'sched/post':>10} "
           f"{'OV post':>8} {'OV sched':>8} {'OV unm.':>8} {'OV unm/sched':>12} {'rounds':>6}")
    for row in sorted((r for r in ratio_rows if r["set"] == "dist"),
                      key=lambda r: (MODELS.index(r["model"]), r["batch"], list(DISTRIBUTIONS).index(r["dist"]))):
        report(f"  {MODEL_NAMES[row['model']]:<13} {row['batch']:>5} {row['dist']:<10} {row['fill_actual']:>5.2f} "
               f"{row['loop_ms']:>7.3f} {row['post_ms']:>7.3f} {row['sched_ms']:>7.3f} {row['any_ms']:>7.3f} "
               f"{row['unmasked_ms']:>8.3f} {row['loop_over_sched']:>10.2f} {row['unmasked_over_sched']:>9.2f} "
               f"{row['sched_over_post']:>10.3f} {_ms(row, 'ovpost_ms'):>8} {_ms(row, 'ovsched_ms'):>8} "
               f"{_ms(row, 'ovunmasked_ms'):>8} {_ratio(row, 'ovunmasked_over_ovsched'):>12} {row['rounds']:>6}")


def _ms(row: dict, key: str) -> str:
    """A latency in a report's table, or "-" where the variant was not timed (no OpenVINO)."""
    return "-" if row[key] == "" else f"{row[key]:.3f}"


def _ratio(row: dict, key: str) -> str:
    return "-" if row[key] == "" else f"{row[key]:.2f}x"


def report_default_conversion(ratio_rows: list, report: Report) -> None:
    """The default conversion's model ("sched") on the headline rows: against the Loop and the unmasked op."""
    report("the default conversion (the schedule), onnxruntime, headline rows: Loop / it, it / unmasked")
    for model in MODELS:
        for fill in (1.0, 0.5):
            rows = sorted((r for r in ratio_rows if r["set"] == "headline" and r["model"] == model
                           and r["fill"] == fill), key=lambda r: r["batch"])
            cells = "; ".join(f"batch {r['batch']}: {r['loop_over_sched']:.1f}x, "
                              f"{100 * (r['sched_over_unmasked'] - 1):+.0f}%" for r in rows)
            if cells:
                report(f"  {MODEL_NAMES[model]:<13} fill {fill!r}: {cells}")


def evaluate_targets(ratio_rows: list, settings: dict, report: Report):
    """The issue's targets, on the headline rows (T=100, 1 thread); the grid's share as information."""
    steps = settings["headline_time"]
    passes = misses = 0

    def line(ok: bool, text: str):
        nonlocal passes, misses
        passes, misses = passes + ok, misses + (not ok)
        report(f"{'PASS' if ok else 'MISS'}  {text}")

    def pct(value: float) -> str:
        return f"{100 * (value - 1):+.1f}%"

    def spread(row, key):
        return f"[p10-p90 {row[key + '_p10']:.2f}-{row[key + '_p90']:.2f}]"

    for model in MODELS:
        head = [r for r in ratio_rows if r["set"] == "headline" and r["model"] == model]
        if not head:
            continue
        tag = "" if model == "lstm" else f"[{MODEL_NAMES[model]}] "
        for batch, goal in ((1, 5.0), (32, 1.7)):
            row = find(head, batch=batch, fill=1.0)
            if row:
                line(row["loop_over_post"] >= goal,
                     f"{tag}batch {batch}, T={steps}, 1 thread, fill 1.0: plugin {row['loop_over_post']:.2f}x "
                     f"faster than the Loop {spread(row, 'loop_over_post')} (target >= {goal:g}x)")
        for row in sorted((r for r in head if r["fill"] == 1.0), key=lambda r: r["batch"]):
            goal = FULL_ROWS_GOAL.get(row["batch"], 1.05)
            line(row["post_over_unmasked"] <= goal,
                 f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 1.0: plugin vs unmasked "
                 f"{pct(row['post_over_unmasked'])} {spread(row, 'post_over_unmasked')} (target within {pct(goal)})")
            if row["ovpost_over_ovunmasked"] != "":
                line(row["ovpost_over_ovunmasked"] <= 1.05,
                     f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 1.0, OpenVINO: plugin vs unmasked "
                     f"{pct(row['ovpost_over_ovunmasked'])} {spread(row, 'ovpost_over_ovunmasked')} (target within +5%)")
            if row["postort_over_unmasked"] != "":
                line(row["postort_over_unmasked"] <= goal,
                     f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 1.0: plugin converted for onnxruntime vs "
                     f"unmasked {pct(row['postort_over_unmasked'])} {spread(row, 'postort_over_unmasked')} "
                     f"(target within {pct(goal)})")
            for key, runtime, runtime_goal in (("sched_over_unmasked", "", goal),
                                               ("ovsched_over_ovunmasked", ", OpenVINO", 1.05)):
                if row[key] != "":
                    line(row[key] <= runtime_goal,
                         f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 1.0{runtime}: the default conversion "
                         f"(schedule) vs unmasked {pct(row[key])} {spread(row, key)} (target within {pct(runtime_goal)})")
            for key, runtime in (("post_over_floor", ""), ("ovpost_over_ovfloor", ", OpenVINO")):
                if row[key] != "":
                    line(row[key] <= FLOOR_GOAL,
                         f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 1.0{runtime}: plugin vs the floor "
                         f"{pct(row[key])} {spread(row, key)} (target: on it, within {pct(FLOOR_GOAL)})")
        for row in sorted((r for r in head if r["fill"] == 0.5), key=lambda r: r["batch"]):
            line(row["post_over_unmasked"] < 1.0,
                 f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill 0.5: plugin vs unmasked "
                 f"{pct(row['post_over_unmasked'])} {spread(row, 'post_over_unmasked')} (target: faster, < 0%)")
        for row in sorted(head, key=lambda r: (-r["fill"], r["batch"])):
            line(row["any_over_post"] <= 1.15,
                 f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill {row['fill']!r}: \"any\" vs \"post\" "
                 f"{pct(row['any_over_post'])} {spread(row, 'any_over_post')} (target at most +15%)")
        for row in sorted(head, key=lambda r: (-r["fill"], r["batch"])):
            if row["post_over_noguard"] != "":
                line(row["post_over_noguard"] <= 1.03,
                     f"{tag}batch {row['batch']}, T={steps}, 1 thread, fill {row['fill']!r}: guard cost "
                     f"(post vs no-guard) {pct(row['post_over_noguard'])} {spread(row, 'post_over_noguard')} "
                     f"(target at most +3%)")
    for model in MODELS:
        dist = {(r["batch"], r["dist"]): r for r in ratio_rows if r["set"] == "dist" and r["model"] == model}
        tag = "" if model == "lstm" else f"[{MODEL_NAMES[model]}] "
        row = dist.get((32, "lognormal"))
        if row:
            line(row["unmasked_over_sched"] >= SCHEDULE_GOAL,
                 f"{tag}long-tailed batch 32 (fill {row['fill_actual']:.2f}): plugin with the schedule "
                 f"{row['unmasked_over_sched']:.2f}x faster than the unmasked native op (target >= {SCHEDULE_GOAL:g}x)")
            line(row["loop_over_sched"] >= 2.5,
                 f"{tag}long-tailed batch 32: plugin with the schedule {row['loop_over_sched']:.2f}x faster than "
                 f"the Loop (target >= 2.5x)")
            if row["ovunmasked_over_ovsched"] != "":
                line(row["ovunmasked_over_ovsched"] >= OPENVINO_SCHEDULE_GOAL,
                     f"{tag}long-tailed batch 32, OpenVINO: plugin with the schedule "
                     f"{row['ovunmasked_over_ovsched']:.2f}x faster than the unmasked native op "
                     f"(target >= {OPENVINO_SCHEDULE_GOAL:g}x)")
        for batch in (1, 32):
            row = dist.get((batch, "full"))
            if row:
                line(row["sched_over_post"] <= 1.02,
                     f"{tag}batch {batch}, full rows: the schedule's cost over the plugin without it "
                     f"{pct(row['sched_over_post'])} (target at most +2%)")
                if row["ovsched_over_ovpost"] != "":
                    line(row["ovsched_over_ovpost"] <= 1.02,
                         f"{tag}batch {batch}, full rows, OpenVINO: the schedule's cost over the plugin without it "
                         f"{pct(row['ovsched_over_ovpost'])} (target at most +2%)")
        row = dist.get((1, "full"))
        if row:
            for variant, key in (("post", "post_over_unmasked"), ("sched", None)):
                value = row[key] if key else row["sched_ms"] / row["unmasked_ms"]
                line(value <= 1.03, f"{tag}batch 1, full row: plugin ({variant}) vs unmasked {pct(value)} "
                                    f"(target within +3%)")
    report(f"targets: {passes} PASS, {misses} MISS (targets are reported, not enforced)")

    grid = [r for r in ratio_rows if r["set"] == "grid"]
    if grid:
        report()
        report("the same checks over the grid (every T, batch and thread count):")
        for model in MODELS:
            mine = [r for r in grid if r["model"] == model]
            if not mine:
                continue
            full = [r for r in mine if r["fill"] == 1.0]
            half = [r for r in mine if r["fill"] == 0.5]
            lo = min(mine, key=lambda r: r["loop_over_post"])
            hi = max(mine, key=lambda r: r["loop_over_post"])
            report(f"  {MODEL_NAMES[model]}: plugin over Loop {lo['loop_over_post']:.2f}x "
                   f"(batch {lo['batch']}, T={lo['time']}, fill {lo['fill']!r}, {lo['threads']} th) to "
                   f"{hi['loop_over_post']:.2f}x (batch {hi['batch']}, T={hi['time']}, fill {hi['fill']!r}, "
                   f"{hi['threads']} th)")
            if full:
                bad = max(full, key=lambda r: r["post_over_unmasked"])
                report(f"  {MODEL_NAMES[model]}: fill 1.0, plugin within 5% of unmasked in "
                       f"{sum(r['post_over_unmasked'] <= 1.05 for r in full)}/{len(full)} cells; worst "
                       f"{pct(bad['post_over_unmasked'])} (batch {bad['batch']}, T={bad['time']}, {bad['threads']} th)")
            if half:
                bad = max(half, key=lambda r: r["post_over_unmasked"])
                report(f"  {MODEL_NAMES[model]}: fill 0.5, plugin faster than unmasked in "
                       f"{sum(r['post_over_unmasked'] < 1.0 for r in half)}/{len(half)} cells; worst "
                       f"{pct(bad['post_over_unmasked'])} (batch {bad['batch']}, T={bad['time']}, {bad['threads']} th)")
            bad = max(mine, key=lambda r: r["any_over_post"])
            report(f"  {MODEL_NAMES[model]}: \"any\" at most 15% over \"post\" in "
                   f"{sum(r['any_over_post'] <= 1.15 for r in mine)}/{len(mine)} cells; worst "
                   f"{pct(bad['any_over_post'])} (batch {bad['batch']}, T={bad['time']}, fill {bad['fill']!r}, "
                   f"{bad['threads']} th)")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker)
    wall_start, cpu_start = time.perf_counter(), cpu_snapshot()
    settings = dict(QUICK if args.quick else FULL, timing=args.timing)
    if args.budget is not None:
        settings["budget"] = args.budget
        settings["headline_budget"] = max(args.budget, settings["headline_budget"] * args.budget /
                                          (QUICK if args.quick else FULL)["budget"])
    quiet = not args.verbose
    stack = import_stack(args.keras, args.verbose)  # mlr: the checkout's plugin, the one measured
    np, onnx, ort, tf, tf2onnx, mlr, keras = (stack.np, stack.onnx, stack.ort, stack.tf, stack.tf2onnx, stack.mlr,
                                              stack.keras)
    if os.environ.get("TF2ONNX_MASKED_LSTM"):
        fail("TF2ONNX_MASKED_LSTM is set: unset it, or the 'stock' conversions would use the plugin too")
    os.makedirs(args.out, exist_ok=True)

    report = Report()
    versions = {"python": platform.python_version(), "numpy": np.__version__, "tensorflow": tf.__version__,
                f"keras ({args.keras})": keras.__version__, "tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__,
                "onnxruntime": ort.__version__, "masked_lstm_rewriter": f"{mlr.__version__} ({git_state()})"}
    now = datetime.datetime.now().isoformat(timespec="seconds")
    report(f"tools/benchmark.py {'--quick ' if args.quick else ''}{'--keras tf_keras ' * (args.keras == 'tf_keras')}"
           f"on {now}")
    for line in machine_info(versions):
        report(line)
    report(f"load average at start: {os.getloadavg()[0]:.2f} (1 min); opset {OPSET}; "
           f"onnxruntime CPUExecutionProvider, intra-op threads {args.threads}")
    report()

    # models, conversions, sizes
    with quiet_stderr(quiet):
        keras_models = {m: build_pair(keras, m) for m in args.models}
    protos, seconds, makers = convert_all(tf, tf2onnx, mlr, keras_models, settings["conversions"], quiet)
    references = {m: unmasked_op(protos[(m, "unmasked")], makers[m]) for m in args.models}
    report("unmasked reference (the same weights without a mask, converted with the plugin): " +
           "; ".join(f"{MODEL_NAMES[m]} {references[m]}" for m in args.models))
    check_structure(protos)
    conversion_rows = []
    report(f"conversion (tf2onnx.convert.from_keras, median of {settings['conversions']}, interleaved) and ONNX size:")
    report(f"  {'model':<13} {'variant':<9} {'median s':>8} {'min s':>6} {'bytes':>9} {'nodes':>5} "
           f"{'+subgraphs':>10} {'RNN ops':>7} {'Loop':>4}")
    for (model, variant), proto in protos.items():
        counts = op_counts(proto)
        values = sorted(seconds[(model, variant)])
        row = dict(model=model, variant=variant, conversions=len(values),
                   median_s=round(float(np.median(values)), 4), min_s=round(values[0], 4),
                   max_s=round(values[-1], 4), onnx_bytes=len(proto.SerializeToString()),
                   nodes=len(proto.graph.node), nodes_with_subgraphs=sum(counts.values()),
                   native_ops=counts[NATIVE_OPS[model]], loop_ops=counts["Loop"],
                   unmasked_op=references[model] if variant == "unmasked" else "")
        conversion_rows.append(row)
        report(f"  {MODEL_NAMES[model]:<13} {variant:<9} {row['median_s']:>8.3f} {row['min_s']:>6.3f} "
               f"{row['onnx_bytes']:>9} {row['nodes']:>5} {row['nodes_with_subgraphs']:>10} "
               f"{row['native_ops']:>7} {row['loop_ops']:>4}")
    report()

    # shapes and numerics
    grid_shapes = [(b, t, f) for t in settings["times"] for b in settings["batches"] for f in settings["fills"]]
    head_shapes = [(b, settings["headline_time"], f) for b in settings["headline_batches"]
                   for f in settings["headline_fills"]]
    dist_shapes = [(b, settings["dist_time"], d) for b in settings["dist_batches"] for d in DISTRIBUTIONS]
    report(f"numerics: every model on every shape vs Keras, tolerance {TOLERANCE:g}:")
    with quiet_stderr(quiet):
        worst = check_numerics(np, keras_models, protos, head_shapes + dist_shapes + grid_shapes, report)
        for model, (masked, _) in keras_models.items():
            check_masked(np, onnxruntime_session(protos[(model, FOR_ONNXRUNTIME)]), masked, head_shapes + dist_shapes,
                         worst, (model, FOR_ONNXRUNTIME), lambda _: TOLERANCE, f"{TOLERANCE:g}")
        report("  converted for onnxruntime (post-ort), headline and distribution shapes: " + ", ".join(
            f"{MODEL_NAMES[m]} {worst[(m, FOR_ONNXRUNTIME)]:.2g}" for m in keras_models))
        floors = floor_models(np, keras_models, protos, head_shapes + dist_shapes, worst, report)
        openvino_models = check_openvino_numerics(np, keras_models, {**protos, **floors}, head_shapes + dist_shapes,
                                                  worst, report)
        int8_models = quantized_models(np, mlr, keras_models, protos, head_shapes + dist_shapes, worst, report)
    report()

    # timing, in one child process per thread count
    with tempfile.TemporaryDirectory(prefix="mlr-benchmark-") as tmp:
        # the alternatives are timed on 1-thread cells only (grid_alternatives): their shapes
        alternative_shapes = ([] if 1 not in args.threads else
                              head_shapes + ([] if args.alternatives_headline_only else grid_shapes))
        outcomes = build_alternatives(np, tf, args, keras_models, alternative_shapes, tmp, worst, report)
        onnx_files = {}
        for (model, variant), proto in protos.items():
            onnx_files.setdefault(model, {})[variant] = path = os.path.join(tmp, f"{model}-{variant}.onnx")
            onnx.save(proto, path)
            if variant == "post":
                bare = without_guard(proto, mlr.GUARD_MESSAGE)
                if bare is not None:
                    onnx_files[model]["no-guard"] = os.path.join(tmp, f"{model}-no-guard.onnx")
                    onnx.save(bare, onnx_files[model]["no-guard"])
                else:
                    report(f"note: {model}: the plugin's model has no guard node; no no-guard variant")
        for (model, variant), proto in floors.items():
            onnx_files[model][variant] = os.path.join(tmp, f"{model}-{variant}.onnx")
            onnx.save(proto, onnx_files[model][variant])
        for (model, variant) in openvino_models:
            onnx_files[model][variant] = onnx_files[model][OPENVINO_VARIANTS[variant]]
        for model, proto in int8_models.items():
            onnx_files[model][QUANTIZED] = os.path.join(tmp, f"{model}-{QUANTIZED}.onnx")
            onnx.save(proto, onnx_files[model][QUANTIZED])
        grid_cell = dict(set="grid", variants=list(VARIANTS), budget=settings["budget"],
                         min_rounds=settings["min_rounds"], max_rounds=settings["max_rounds"],
                         warmup=settings["warmup"])
        head_cell = dict(set="headline", variants=list(HEADLINE_VARIANTS + args.alternatives),
                         budget=settings["headline_budget"],
                         min_rounds=settings["headline_min_rounds"], max_rounds=settings["headline_max_rounds"],
                         warmup=max(settings["warmup"], 0.2))
        dist_cell = dict(set="dist", variants=list(VARIANTS + DIST_OPENVINO), budget=settings["dist_budget"],
                         min_rounds=settings["dist_min_rounds"], max_rounds=settings["dist_max_rounds"],
                         warmup=max(settings["warmup"], 0.2))
        cells_by_threads = {}
        for threads in args.threads:
            cells = []
            if threads == 1:
                cells += [dict(head_cell, model=m, batch=b, time=t, fill=f) for m in args.models
                          for b, t, f in head_shapes]
                cells += [dict(dist_cell, model=m, batch=b, time=t, dist=d,
                               fill=round(float(np.mean(drawn_lengths(d, b, t))) / t, 4))
                          for m in args.models for b, t, d in dist_shapes]
            cells += [dict(grid_cell, model=m, batch=b, time=t, fill=f,
                           variants=grid_cell["variants"] + grid_alternatives(args, threads))
                      for m in args.models for b, t, f in grid_shapes]
            cells_by_threads[threads] = cells
        total = sum(len(c) for c in cells_by_threads.values())
        print(f"latency: {total} cells, {TIMING_WORDS[settings['timing']][0]}; 'other' = mean cores used by "
              f"other processes meanwhile", flush=True)
        print(TABLE_HEADER, flush=True)
        timing_start = time.perf_counter()
        results = run_children(args, onnx_files, timed_alternatives(outcomes), cells_by_threads, tmp)
        timing_seconds = time.perf_counter() - timing_start
    print(flush=True)

    ratio_rows, latency_rows = summarise(results, worst, outcomes)
    for row in ratio_rows:  # CSV values for the checks below
        row["fill"] = float(row["fill"])

    # headline
    words, ratios = TIMING_WORDS[settings["timing"]]
    report(f"headline: T={settings['headline_time']}, 1 intra-op thread, {words} "
           f"(ratios: median over median, [p10-p90] of the {ratios} ratios)")
    report(f"  {'model':<13} {'batch':>5} {'fill':>4} {'Loop':>7} {'post':>7} {'any':>7} {'unmasked':>8} "
           f"{'no-guard':>8} {'OV post':>7} {'OV Loop':>7} {'OV unm.':>7} {'OV stat.':>8} {'Loop/post':>17} "
           f"{'post/unmasked':>17} "
           f"{'any/post':>17} {'OV post/post':>17} {'OV post/unm.':>17} {'rounds':>6}")
    for row in sorted((r for r in ratio_rows if r["set"] == "headline"),
                      key=lambda r: (MODELS.index(r["model"]), -r["fill"], r["batch"])):
        def ratio(key, row=row):
            return f"{row[key]:.2f} [{row[key + '_p10']:.2f}-{row[key + '_p90']:.2f}]"
        def ms(key, width, row=row):
            return f"{row[key]:>{width}.3f}" if row[key] != "" else f"{'-':>{width}}"

        def ratio_or_dash(key, row=row):
            return ratio(key) if row[key] != "" else "-"
        report(f"  {MODEL_NAMES[row['model']]:<13} {row['batch']:>5} {row['fill']:>4.2f} {row['loop_ms']:>7.3f} "
               f"{row['post_ms']:>7.3f} {row['any_ms']:>7.3f} {row['unmasked_ms']:>8.3f} {ms('noguard_ms', 8)} "
               f"{ms('ovpost_ms', 7)} {ms('ovloop_ms', 7)} {ms('ovunmasked_ms', 7)} {ms('ovstatic_ms', 8)} "
               f"{ratio('loop_over_post'):>17} {ratio('post_over_unmasked'):>17} {ratio('any_over_post'):>17} "
               f"{ratio_or_dash('ovpost_over_post'):>17} {ratio_or_dash('ovpost_over_ovunmasked'):>17} "
               f"{row['rounds']:>6}")
    report("  unmasked: the same weights without a mask, converted with the plugin: "
           + "; ".join(f"{MODEL_NAMES[m]} {references[m]}" for m in args.models))
    report()
    report_floor(ratio_rows, report)
    report()
    report_quantized(ratio_rows, worst, report)
    report()
    if report_alternatives(ratio_rows, outcomes, report):
        report()
    report_distributions(ratio_rows, settings, report)
    report()
    report_default_conversion(ratio_rows, report)
    report()
    evaluate_targets(ratio_rows, settings, report)
    report_alternatives_grid(ratio_rows, report)
    report()

    # files
    paths = [os.path.join(args.out, name) for name in ("ratios.csv", "latency.csv", "conversion.csv")]
    write_csv(paths[0], ratio_rows)
    write_csv(paths[1], latency_rows)
    write_csv(paths[2], conversion_rows)
    if not args.no_plot:
        try:
            import plot_benchmark
        except ImportError:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import plot_benchmark
        cpu = machine_info(versions)[0].split(": ", 1)[1].split(",")[0]
        subtitle = (f"{cpu}; onnxruntime {ort.__version__}, tf2onnx {tf2onnx.__version__}, {args.keras}; "
                    f"points: medians; bars: interquartile range of the {TIMING_WORDS[args.timing][1]} ratios")
        try:
            paths += plot_benchmark.plot(paths[0], args.out, subtitle=subtitle)
            paths += plot_benchmark.plot_fill(paths[0], args.out, subtitle=subtitle)
        except ImportError as error:
            report(f"note: no plot ({error}); pip install matplotlib")

    wall = time.perf_counter() - wall_start
    busy = other_load(cpu_start, cpu_snapshot(), wall)
    high = max((r["other_load"] for r in ratio_rows), default=0.0)
    report(f"timing took {timing_seconds:.0f} s; the whole run {wall:.0f} s "
           f"({'quick' if args.quick else 'full'} settings); load average at the end {os.getloadavg()[0]:.2f}")
    report(f"other processes kept {busy:.2f} cores busy on average during the run (the most during one cell: "
           f"{high:.2f})" + (": the machine was busy, expect noise" if busy > 0.2 else ""))
    summary = os.path.join(args.out, "summary.txt")
    with open(summary, "w") as handle:
        handle.write("\n".join(report.lines) + "\n")
    paths.append(summary)
    print("wrote: " + ", ".join(os.path.relpath(p, ROOT) if p.startswith(ROOT) else p for p in paths))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as error:
        print(f"\nbenchmark: FAILED: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
