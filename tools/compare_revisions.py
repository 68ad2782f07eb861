#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The plugin's models from a git revision against the working tree's, timed interleaved.

The cost targets of the issues are relative to the plugin as it was ("at most +2% vs today at
batch 1 and 32"): this converts tools/benchmark.py's models (Embedding -> LSTM / Bidirectional
LSTM / GRU, 128 units, opset 15) with ``make_rewriter("post")`` (``--mode any``: "any") twice, once with BASE's
``masked_lstm_rewriter`` (a ``git worktree`` of it in a temporary folder, first on the child's
``sys.path``) and once with the working tree's; checks both against Keras at every position;
then times them on onnxruntime (one thread; ``--runtime openvino``: OpenVINO's CPU plugin, f32,
one inference thread, dynamic shapes) in interleaved rounds, the order rotating, at T=100, batch 1
and 32, fill 1.0 and 0.5 (``--long-tailed``: also batch 32 with tools/benchmark.py's long-tailed
lengths, ``lognormal``). Prints, per cell, each side's median and the ratio current / base with
the p10-p90 of the per-round ratios.

``--schedule SIDE...`` converts that side (or both) with the length-aware schedule,
``make_rewriter("post", runtime=TARGET, schedule=True)`` (a revision whose schedule was for
onnxruntime only: ``runtime="onnxruntime"``): ``--schedule current`` against the same revision
gives the schedule's cost over the plugin without it.

    .venv/bin/python tools/compare_revisions.py BASE [--models lstm bilstm gru] [--budget SECONDS]
                                                     [--schedule {base,current} ...]
                                                     [--runtime {onnxruntime,openvino}] [--mode {post,any}]
                                                     [--target {onnxruntime,openvino}] [--long-tailed]

``--target`` converts both sides for that runtime (``make_rewriter(mode, runtime=TARGET)``; default:
for any runtime).

``--blocks`` times each side in blocks of consecutive runs instead (one model at a time, as a
service runs it; the sides alternate block by block, ``benchmark.BLOCK_CYCLES`` times): interleaved runs
charge each model the caches the other left cold, and a model with more or larger buffers pays
more for that (the schedule's cost with full rows at batch 32 read +4% interleaved, 0% in blocks).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Optional

import benchmark  # tools/ is on sys.path when run as a script
from toolutil import ROOT, quiet_stderr
from masked_lstm_rewriter.sessions import onnxruntime_session  # pylint: disable=wrong-import-order

CELLS = [(batch, fill) for batch in (1, 32) for fill in (1.0, 0.5)]
LONG_TAILED = (32, "lognormal")  # a fill given by name: one of tools/benchmark.py's length distributions
STEPS = 100


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git revision to compare the working tree with")
    parser.add_argument("--models", nargs="+", choices=benchmark.MODELS, default=list(benchmark.MODELS))
    parser.add_argument("--budget", type=float, default=8.0, metavar="SECONDS", help="timing per cell (default 8)")
    parser.add_argument("--schedule", nargs="+", choices=("base", "current"), default=[],
                        help="convert these sides with schedule=True")
    parser.add_argument("--mode", choices=("post", "any"), default="post", help="the mask mode of both sides")
    parser.add_argument("--runtime", choices=("onnxruntime", "openvino"), default="onnxruntime",
                        help="the runtime the two sides are timed on (default onnxruntime)")
    parser.add_argument("--target", choices=("onnxruntime", "openvino"),
                        help="the runtime both sides are converted for (default: any runtime)")
    parser.add_argument("--long-tailed", action="store_true", help="also time batch 32 with long-tailed lengths")
    parser.add_argument("--blocks", action="store_true",
                        help="time each side in blocks of consecutive runs, the sides alternating block by block")
    parser.add_argument("--convert", metavar="DIR", help=argparse.SUPPRESS)  # child: convert into DIR
    parser.add_argument("--tree", help=argparse.SUPPRESS)  # child: with the package of this tree
    return parser.parse_args(argv)


def convert_into(folder: str, tree: str, models: list, scheduled: bool, mode: str = "post",
                 target: Optional[str] = None) -> None:
    """Child process: each model's conversion in ``mode`` by the masked_lstm_rewriter of ``tree``, with
    for ``target`` (None: any runtime), with the schedule if ``scheduled``."""
    import importlib

    import tensorflow as tf
    import tf2onnx
    from tensorflow import keras

    # tools/toolutil.py put the working tree's package first and imported it: swap in the tree's
    for name in [m for m in sys.modules if m == "masked_lstm_rewriter" or m.startswith("masked_lstm_rewriter.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    mlr = importlib.import_module("masked_lstm_rewriter")

    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    # positional: a revision before runtime= (which had target=) takes it as well as today's
    try:
        rewriter = mlr.make_rewriter(mode, target, scheduled)
    except ValueError:  # a revision whose schedule needed runtime="onnxruntime"
        print(f"  {tree}: schedule=True for onnxruntime only in this revision", flush=True)
        rewriter = mlr.make_rewriter(mode, "onnxruntime", True)
    for model in models:
        masked, _ = benchmark.build_pair(keras, model)
        with quiet_stderr(True):
            proto, _ = tf2onnx.convert.from_keras(masked, input_signature=spec, opset=benchmark.OPSET,
                                                  custom_rewriter=[rewriter])
        with open(os.path.join(folder, f"{model}.onnx"), "wb") as out:
            out.write(proto.SerializeToString())
        print(f"{model}: converted with {os.path.dirname(os.path.dirname(mlr.__file__))}"
              f"{' (scheduled)' if scheduled else ''}", flush=True)


def convert_with(tree: str, folder: str, models: list, scheduled: bool, mode: str,
                 target: Optional[str] = None) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, os.path.abspath(__file__), "unused", "--convert", folder, "--tree", tree,
                    "--mode", mode, "--models", *models] + (["--schedule", "current"] if scheduled else [])
                   + (["--target", target] if target else []),
                   env=env, check=True, cwd=folder)


def cell_tokens(batch: int, fill):
    """The timed batch of a cell: a fill share, or the name of a length distribution."""
    if isinstance(fill, str):
        return benchmark.distribution_tokens(fill, batch, STEPS)
    return benchmark.tokens_for(batch, STEPS, fill)


def check_against_keras(models: list, folders: dict, cells: list) -> None:
    """Both sides match Keras at every position of every timed batch (else the timing means nothing)."""
    import numpy as np
    from tensorflow import keras

    for model in models:
        masked, _ = benchmark.build_pair(keras, model)
        for batch, fill in cells:
            tokens = cell_tokens(batch, fill)
            expected = np.asarray(masked(tokens, training=False))
            for side, folder in folders.items():
                got = onnxruntime_session(os.path.join(folder, f"{model}.onnx")).run(None, {"tokens": tokens})[0]
                worst = float(np.max(np.abs(expected - got)))
                if worst > benchmark.TOLERANCE:
                    sys.exit(f"{model} ({side}) differs from Keras by {worst:.2e} at batch {batch}, fill {fill}")


def runner(path: str, runtime: str):
    """A callable running the model at ``path`` on ``runtime`` (one thread) with a feed."""
    session = benchmark.OpenVinoSession(path, threads=1) if runtime == "openvino" else onnxruntime_session(path)
    return lambda feed: session.run(None, feed)


def time_all(models: list, folders: dict, budget: float, runtime: str, cells: list, blocks: bool = False) -> None:
    print(f"{'model':<8} {'batch':>5} {'fill':>9} {'base ms':>9} {'current ms':>10} {'current/base':>12} "
          f"{'p10-p90':>13} {'blocks' if blocks else 'rounds':>6}")
    for model in models:
        runs = {side: runner(os.path.join(folder, f"{model}.onnx"), runtime) for side, folder in folders.items()}
        for batch, fill in cells:
            feed = {"tokens": cell_tokens(batch, fill)}
            timer = benchmark.time_blocks if blocks else benchmark.time_cell
            times, _, _ = timer(runs, [feed], budget, 30, 20000, warmup=1.0)
            rounds = len(times["base"])
            base, current = (benchmark.stats(times[side])["median_ms"] for side in ("base", "current"))
            ratio, p10, p90, _, _ = benchmark.ratio_stats(times, "current", "base")
            print(f"{model:<8} {batch:>5} {fill:>9} {base:>9.3f} {current:>10.3f} {ratio:>12.3f} "
                  f"{p10:>6.3f}-{p90:<6.3f} {rounds:>6}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.convert:
        convert_into(args.convert, args.tree, args.models, "current" in args.schedule, args.mode, args.target)
        return 0
    with tempfile.TemporaryDirectory(prefix="mlr-compare-") as tmp:
        base_tree = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", base_tree, args.base], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        try:
            folders = {"base": os.path.join(tmp, "base-models"), "current": os.path.join(tmp, "current-models")}
            for side, tree in (("base", base_tree), ("current", ROOT)):
                os.makedirs(folders[side])
                convert_with(tree, folders[side], args.models, side in args.schedule, args.mode, args.target)
            cells = CELLS + ([LONG_TAILED] if args.long_tailed else [])
            check_against_keras(args.models, folders, cells)
            revision = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout.strip()
            scheduled = f"; scheduled: {' and '.join(args.schedule)}" if args.schedule else ""
            scheduled += f"; converted for {args.target}" if args.target else ""
            timing = "in blocks of consecutive runs" if args.blocks else "interleaved"
            print(f"base {args.base} ({revision}) against the working tree; \"{args.mode}\", T={STEPS}, {args.runtime}, 1 thread, "
                  f"{args.budget:g} s per cell, {timing}{scheduled}")
            time_all(args.models, folders, args.budget, args.runtime, cells, args.blocks)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", base_tree], cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
