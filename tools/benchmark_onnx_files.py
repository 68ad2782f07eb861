#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How fast ONNX files in are: rewriting a stock tf2onnx file, and running what comes out.

    .venv/bin/python tools/benchmark_onnx_files.py [--keras keras3|tf_keras] [--layers 20] [--runs 20]

A masked stack of ``--layers`` recurrent layers (LSTM, GRU, SimpleRNN in turn, 64 units over an
``Embedding(1000, 64, mask_zero=True)``) is converted three ways: by stock tf2onnx (its Loops), by
stock tf2onnx then :func:`masked_lstm_rewriter.rewrite_onnx`, and by the plugin directly
(:func:`masked_lstm_rewriter.convert`). The script prints how long each conversion took, the
native op counts, and the median time of one onnxruntime inference (one thread) of each on a
long-tailed batch of 32 rows of 100 steps: the rewritten file should run as fast as the direct
conversion, and the rewrite take seconds. It also checks that the rewritten file and the direct
conversion agree with Keras within 1e-5 at every position. Figures, not a test.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from toolutil import import_stack

KINDS = ("LSTM", "GRU", "SimpleRNN")


def build(stack, layers: int):
    keras, tf = stack.keras, stack.tf
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(1000, 64, mask_zero=True)(tokens)
    for index in range(layers):
        x = getattr(keras.layers, KINDS[index % len(KINDS)])(64, return_sequences=True)(x)
    return keras.Model(tokens, x), (tf.TensorSpec((None, None), tf.int32, name="ids"),)


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def median_ms(stack, model, feeds: dict, runs: int) -> float:
    options = stack.ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = stack.ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def long_tailed_batch(stack, rows=32, steps=100):
    rng = stack.np.random.default_rng(0)
    ids = rng.integers(1, 1000, (rows, steps)).astype(stack.np.int32)
    lengths = stack.np.minimum(steps, 1 + rng.exponential(steps / 4, rows).astype(int))
    lengths[0] = steps
    for row, length in enumerate(lengths):
        ids[row, length:] = 0
    return ids


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keras", choices=("keras3", "tf_keras"), default="keras3")
    parser.add_argument("--layers", type=int, default=20, help="recurrent layers in the stack (20)")
    parser.add_argument("--runs", type=int, default=20, help="timed inferences per model (20)")
    args = parser.parse_args(argv)
    stack = import_stack(args.keras)
    model, spec = build(stack, args.layers)
    (stock, _), stock_s = timed(stack.tf2onnx.convert.from_keras, model, input_signature=spec, opset=15)
    (rewritten, report), rewrite_s = timed(stack.mlr.rewrite_onnx, stock)
    (direct, _), direct_s = timed(stack.mlr.convert, model)
    ids = long_tailed_batch(stack)
    expected = stack.np.asarray(model(ids, training=False))
    for name, onnx_model in (("rewritten", rewritten), ("direct", direct)):
        got = stack.ort.InferenceSession(onnx_model.SerializeToString()).run(None, {"ids": ids})[0]
        error = float(stack.np.max(stack.np.abs(got - expected)))
        if error > 1e-5:
            raise SystemExit(f"{name}: max |keras - onnx| = {error}")
    print(f"{args.layers} layers ({args.keras}); {len(report.rewritten)} rewritten, {len(report.left_as_loop)} left")
    print(f"{'model':<28}{'seconds to make':>16}{'ops':>30}{'median ms':>12}")
    for name, onnx_model, seconds in (("stock tf2onnx (Loops)", stock, stock_s),
                                      ("stock, then rewrite_onnx", rewritten, rewrite_s),
                                      ("plugin directly", direct, direct_s)):
        counts = collections.Counter(n.op_type for n in onnx_model.graph.node)
        ops = ", ".join(f"{op} {counts[op]}" for op in ("Loop", "LSTM", "GRU", "RNN") if counts[op])
        ms = median_ms(stack, onnx_model, {"ids": ids}, args.runs)
        print(f"{name:<28}{seconds:>16.1f}{ops:>30}{ms:>12.1f}")
    print("(rewrite_onnx's seconds: the rewrite alone, on the stock model already in memory)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
