#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time a whole model's ``Bidirectional`` layer as one ``direction="bidirectional"`` node against two
forward nodes, as the plugin emits each: what decides where it emits one node (masked_lstm_rewriter/
targets.py's ``bidirectional_slow``; the figures are in docs/openvino.md).

Models: ``Embedding(1000, 64, mask_zero=MASKED) -> Bidirectional(OP(128, return_sequences=True))``,
converted twice by the plugin with its runtime entries made to say one node is never slower (one
node) or always slower (two nodes): unmasked for any runtime, timed on onnxruntime and OpenVINO;
masked, ``mask_mode="post"``, for onnxruntime (the one masked node is exact there only), timed on
onnxruntime. Each form is checked against Keras at every position first; then both are timed in
interleaved rounds (one thread, T=100, full rows) at each batch size. Prints, per cell, the medians
and one node's time over two nodes' with the p10-p90 of the per-round ratios (above 1: one node is
slower). The bare nodes, without the rest of the model: tools/benchmark_bidirectional_nodes.py.

Usage: python tools/benchmark_bidirectional_layers.py [--ops GRU SimpleRNN] [--masked] [--batches 1 8 32 128]
                                                     [--runtimes onnxruntime openvino] [--budget 8]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile

import benchmark  # tools/ is on sys.path when run as a script
from compare_revisions import runner
from toolutil import import_stack
from masked_lstm_rewriter.corpus.ops import RECURRENT_OPS as NATIVE  # pylint: disable=wrong-import-order

STEPS, VOCAB, EMBED, UNITS = 100, 1000, 64, 128


@contextlib.contextmanager
def bidirectional_nodes(targets, slow: tuple):
    """Within: every runtime entry says a bidirectional node of the ops in ``slow`` is slower than two."""
    entries = tuple(dataclasses.replace(entry, bidirectional_slow=slow) for entry in targets.RUNTIMES)
    saved = targets.RUNTIMES, targets._BY_NAME  # pylint: disable=protected-access
    targets.RUNTIMES, targets._BY_NAME = entries, {entry.name: entry for entry in entries}
    try:
        yield
    finally:
        targets.RUNTIMES, targets._BY_NAME = saved


def build(keras, op: str, masked: bool):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=masked)(tokens)
    layer = getattr(keras.layers, op)(UNITS, return_sequences=True)
    return keras.Model(tokens, keras.layers.Bidirectional(layer)(x))


def convert_forms(stack, model, masked: bool, folder: str, name: str) -> dict:
    """{"one": path, "two": path}: the model with one bidirectional node and with two forward nodes."""
    from masked_lstm_rewriter import targets  # pylint: disable=import-outside-toplevel
    spec = (stack.tf.TensorSpec((None, None), stack.tf.int32, name="tokens"),)
    paths = {}
    for form, slow in (("one", ()), ("two", NATIVE)):
        with bidirectional_nodes(targets, slow):
            proto = stack.mlr.convert(model, input_signature=spec, runtime="onnxruntime" if masked else None,
                                      mask_mode="post").onnx_model
        directions = [attribute.s.decode() for node in proto.graph.node if node.op_type in NATIVE
                      for attribute in node.attribute if attribute.name == "direction"]
        expected = ["bidirectional"] if form == "one" else ["forward", "forward"]
        if directions != expected:
            sys.exit(f"{name}: the {form}-node form has nodes {directions}, not {expected}")
        paths[form] = os.path.join(folder, f"{name}_{form}.onnx")
        stack.onnx.save(proto, paths[form])
    return paths


def time_model(stack, model, paths: dict, runtime: str, batches: list, budget: float, label: str) -> None:
    runs = {form: runner(path, runtime) for form, path in paths.items()}
    for batch in batches:
        tokens = benchmark.tokens_for(batch, STEPS, 1.0)
        expected = stack.np.asarray(model(tokens, training=False))
        for form, run in runs.items():
            worst = float(stack.np.max(stack.np.abs(run({"tokens": tokens})[0] - expected)))
            if worst > benchmark.TOLERANCE:
                sys.exit(f"{label}, {form} node(s), batch {batch}: {worst:.2e} from Keras on {runtime}")
        times, rounds, _ = benchmark.time_cell(runs, [{"tokens": tokens}], budget, 30, 20000, warmup=1.0)
        one, two = (benchmark.stats(times[form])["median_ms"] for form in ("one", "two"))
        ratio, p10, p90, _, _ = benchmark.ratio_stats(times, "one", "two")
        print(f"{label:<22} {runtime:<12} {batch:>5} {one:>9.3f} {two:>9.3f} {ratio:>9.3f} {p10:>6.3f}-{p90:<6.3f} "
              f"{rounds:>6}", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=["GRU", "SimpleRNN"], choices=("LSTM", "GRU", "SimpleRNN"),
                        help="Keras layers (unmasked, stock tf2onnx makes an LSTM native itself: the plugin leaves it)")
    parser.add_argument("--masked", action="store_true", help="also masked, converted for onnxruntime")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--runtimes", nargs="+", default=["onnxruntime", "openvino"], choices=("onnxruntime", "openvino"))
    parser.add_argument("--budget", type=float, default=8.0, metavar="SECONDS", help="timing per cell (default 8)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    stack = import_stack("keras3")
    print(f"{'model':<22} {'runtime':<12} {'batch':>5} {'one ms':>9} {'two ms':>9} {'one/two':>9} {'p10-p90':>13} "
          f"{'rounds':>6}")
    with tempfile.TemporaryDirectory(prefix="mlr-bidirectional-") as folder:
        for masked in (False, True) if args.masked else (False,):
            for op in args.ops:
                if op == "LSTM" and not masked:
                    continue  # stock tf2onnx's own bidirectional node
                label = f"{'masked' if masked else 'unmasked'} {op}"
                model = build(stack.keras, op, masked)
                paths = convert_forms(stack, model, masked, folder, label.replace(" ", "_"))
                for runtime in args.runtimes if not masked else ["onnxruntime"]:
                    time_model(stack, model, paths, runtime, args.batches, args.budget, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
