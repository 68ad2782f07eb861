#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The bundled example: one masked Keras model, converted by stock tf2onnx and with the plugin.

Builds a small seeded model (Embedding(mask_zero=True) -> LSTM -> Dense), a seeded batch of
post-padded token rows (one full-length row, one all-padding row, the rest in between),
converts it twice with ``tf2onnx.convert.from_keras`` and prints, for each ONNX model: the
LSTM / Loop / node counts, the largest difference from Keras over every output position, and
the onnxruntime latency (median, one thread). Exits non-zero if the plugin's model still has a
Loop or differs from Keras by more than the tolerance.

    .venv/bin/python tools/demo.py [--keras {keras3,tf_keras}] [--batch 8] [--time 50]
                                   [--runs 200] [--save DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

from toolutil import import_stack, op_counts, quiet_stderr  # tools/ is on sys.path when run as a script
from masked_lstm_rewriter import flavours  # pylint: disable=wrong-import-order  (toolutil puts the checkout first)
from masked_lstm_rewriter.sessions import onnxruntime_session  # pylint: disable=wrong-import-order

TOLERANCE = 1e-5
OPSET = 15
VOCAB, EMBED, UNITS, CLASSES = 1000, 64, 128, 16
FILE_NAMES = {"stock tf2onnx": "stock.onnx", "with plugin": "plugin.onnx"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=flavours.FLAVOURS, default="keras3",
                        help="Keras flavour to build the model with (default: keras3)")
    parser.add_argument("--batch", type=int, default=8, help="rows in the example batch (default: 8)")
    parser.add_argument("--time", type=int, default=50, help="steps per row (default: 50)")
    parser.add_argument("--runs", type=int, default=200,
                        help="timed onnxruntime runs per model, after warm-up (default: 200)")
    parser.add_argument("--save", metavar="DIR", help="write stock.onnx and plugin.onnx to DIR")
    parser.add_argument("--verbose", action="store_true",
                        help="let TensorFlow and tf2onnx write their own messages to stderr")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.time < 1 or args.runs < 1:
        parser.error("--batch, --time and --runs must be positive")
    return args


def example_lengths(batch: int, steps: int, rng) -> list:
    """Row 0 is full length, row 1 (when there is one) all padding, the rest in between."""
    lengths = [int(n) for n in rng.integers(1, steps + 1, size=batch)]
    lengths[0] = steps
    if batch > 1:
        lengths[1] = 0
    return lengths


def example_batch(batch: int, steps: int, np):
    rng = np.random.default_rng(0)
    lengths = example_lengths(batch, steps, rng)
    tokens = np.zeros((batch, steps), np.int32)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(1, VOCAB, size=length)  # 0 is the padding id
    return tokens, lengths


def build_model(keras):
    keras.utils.set_random_seed(0)
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
    x = keras.layers.LSTM(UNITS, return_sequences=True, name="lstm")(x)
    out = keras.layers.Dense(CLASSES, name="logits")(x)
    return keras.Model(tokens, out, name="masked_tagger")


def median_latency_ms(session, feed, runs: int) -> float:
    for _ in range(max(5, runs // 20)):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet = not args.verbose
    stack = import_stack(args.keras, args.verbose)  # mlr: this checkout's plugin
    np, ort, tf, tf2onnx, mlr, keras = stack.np, stack.ort, stack.tf, stack.tf2onnx, stack.mlr, stack.keras

    # the plugin's own log lines (one per masked layer) are collected and printed below
    plugin_log = _Collect()
    logger = logging.getLogger("masked_lstm_rewriter")
    logger.addHandler(plugin_log)
    logger.setLevel(logging.INFO)

    with quiet_stderr(quiet):
        model = build_model(keras)
        tokens, lengths = example_batch(args.batch, args.time, np)
        expected = np.asarray(model(tokens, training=False))

        spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
        converted = {}
        converted["stock tf2onnx"], _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=OPSET)
        with mlr.enable():  # the plugin in tf2onnx's own call, as users enable it
            converted["with plugin"], _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=OPSET)

    print(f"masked_lstm_rewriter {mlr.__version__} demo: {args.keras} (keras {keras.__version__}), "
          f"tensorflow {tf.__version__}, tf2onnx {tf2onnx.__version__}, onnxruntime {ort.__version__}")
    print(f"model: Embedding({VOCAB}, {EMBED}, mask_zero=True) -> LSTM({UNITS}, return_sequences=True)"
          f" -> Dense({CLASSES}); opset {OPSET}")
    print(f"batch: {args.batch} rows x {args.time} steps, post-padded, lengths {lengths}")
    for record in plugin_log.records:
        print(f"plugin log: {record.levelname}: {record.getMessage()}")
    print()

    rows, results = [], {}
    for label, proto in converted.items():
        counts = op_counts(proto)
        session = onnxruntime_session(proto)
        feed = {session.get_inputs()[0].name: tokens}
        got = session.run(None, feed)[0]
        diff = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else float("inf")
        latency = median_latency_ms(session, feed, args.runs)
        results[label] = (counts, diff, latency)
        rows.append((label, counts["LSTM"], counts["Loop"], len(proto.graph.node), sum(counts.values()),
                     diff, latency))
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            path = os.path.join(args.save, FILE_NAMES[label])
            with open(path, "wb") as handle:
                handle.write(proto.SerializeToString())

    header = ("model", "LSTM", "Loop", "nodes", "nodes+sub", "max |diff| vs Keras", "median ms")
    print(f"{header[0]:<14} {header[1]:>4} {header[2]:>4} {header[3]:>5} {header[4]:>9} "
          f"{header[5]:>19} {header[6]:>9}")
    for label, lstm, loop, nodes, all_nodes, diff, latency in rows:
        print(f"{label:<14} {lstm:>4} {loop:>4} {nodes:>5} {all_nodes:>9} {diff:>19.3g} {latency:>9.3f}")
    stock_ms, plugin_ms = results["stock tf2onnx"][2], results["with plugin"][2]
    print(f"speed-up: {stock_ms / plugin_ms:.1f}x (onnxruntime, 1 intra-op thread, median of {args.runs} runs)")
    if args.save:
        print(f"saved: {os.path.join(args.save, 'stock.onnx')}, {os.path.join(args.save, 'plugin.onnx')}")

    counts, diff, _ = results["with plugin"]
    problems = []
    if counts["Loop"]:
        problems.append(f"the plugin's model still has {counts['Loop']} Loop op(s)")
    if counts["LSTM"] == 0:
        problems.append("the plugin's model has no LSTM op")
    if not diff <= TOLERANCE:
        problems.append(f"the plugin's model differs from Keras by {diff:.3g} (> {TOLERANCE:g})")
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print(f"OK: no Loop left, outputs equal Keras's at every position within {TOLERANCE:g}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
