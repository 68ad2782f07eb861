#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Measure what the post-padding guard, the output fix-ups and mask_mode="any" cost.

Converts Embedding(1000, 64, mask_zero=True) -> LSTM(128, return_sequences=True) (optionally
wrapped in Bidirectional) four ways and
times onnxruntime (1 thread, interleaved rounds, medians) on post-padded batches:

  loop        stock tf2onnx (an ONNX Loop)
  plugin      masked_lstm_rewriter, mask_mode="post" (guard + fix-ups)
  any         masked_lstm_rewriter, mask_mode="any" (valid steps gathered to the front and back)
  no-guard    the plugin's model with the guard's Split bypassed (for the guard's cost)
  unmasked    the same weights without a mask: stock tf2onnx's native LSTM over every step

Usage: python tools/guard_cost.py [--keras keras3|tf_keras] [--steps 100] [--batches 1 32] [--rounds 30]
                                  [--fill 1.0] [--bidirectional]
"""

import argparse
import time

import toolutil  # noqa: F401  pylint: disable=unused-import  (tools/ is on sys.path as a script; puts this checkout first)
from masked_lstm_rewriter import flavours


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras", choices=flavours.FLAVOURS, default="keras3")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    parser.add_argument("--fill", type=float, default=1.0, help="mean fraction of valid steps per row")
    parser.add_argument("--bidirectional", action="store_true", help="wrap the LSTM in Bidirectional")
    return parser.parse_args()


ARGS = parse_args()
flavours.select(ARGS.keras)  # before TensorFlow is imported

import logging  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402

import masked_lstm_rewriter as mlr  # noqa: E402
from masked_lstm_rewriter.corpus.ops import without_guard  # noqa: E402
from masked_lstm_rewriter.sessions import onnxruntime_session as session  # noqa: E402

keras = __import__("tf_keras" if ARGS.keras == "tf_keras" else "keras")
logging.getLogger("tf2onnx").setLevel(logging.ERROR)


def build(mask_zero):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(1000, 64, mask_zero=mask_zero)(tokens)
    layer = keras.layers.LSTM(128, return_sequences=True)
    if ARGS.bidirectional:
        layer = keras.layers.Bidirectional(layer)
    return keras.Model(tokens, layer(x))


def convert(model, rewriters=None):
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    return tf2onnx.convert.from_keras(model, input_signature=spec, opset=15, custom_rewriter=rewriters)[0]


def batch(rows, steps, fill, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.normal(fill * steps, 0.1 * steps, rows).round().astype(int), 1, steps)
    lengths[0] = steps if fill == 1.0 else lengths[0]
    tokens = rng.integers(1, 1000, (rows, steps)).astype(np.int32)
    tokens[np.arange(steps)[None, :] >= lengths[:, None]] = 0
    return tokens


def main():
    masked = build(mask_zero=True)
    unmasked = build(mask_zero=False)
    unmasked.set_weights(masked.get_weights())
    plugin = convert(masked, [mlr.rewrite_masked_lstm])
    sessions = {"loop": session(convert(masked)), "plugin": session(plugin),
                "no-guard": session(without_guard(plugin, mlr.GUARD_MESSAGE)),
                "unmasked": session(convert(unmasked)),
                "any": session(convert(masked, [mlr.make_rewriter("any")]))}
    print(f"keras={ARGS.keras} steps={ARGS.steps} fill={ARGS.fill} bidirectional={ARGS.bidirectional} "
          f"onnxruntime={ort.__version__} 1 thread")
    print(f"{'batch':>5} " + " ".join(f"{k + ' ms':>12}" for k in sessions) +
          f" {'guard cost':>11} {'vs unmasked':>12} {'vs loop':>8} {'any vs post':>12}")
    for rows in ARGS.batches:
        tokens = batch(rows, ARGS.steps, ARGS.fill)
        expected = np.asarray(masked(tokens))
        for name in ("loop", "plugin", "no-guard", "any"):
            got = sessions[name].run(None, {"tokens": tokens})[0]
            assert np.abs(got - expected).max() < 1e-5, name
        times = {k: [] for k in sessions}
        for _ in range(3):  # warm-up
            for s in sessions.values():
                s.run(None, {"tokens": tokens})
        for _ in range(ARGS.rounds):
            for name, s in sessions.items():
                start = time.perf_counter()
                s.run(None, {"tokens": tokens})
                times[name].append(time.perf_counter() - start)
        med = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        print(f"{rows:>5} " + " ".join(f"{med[k]:>12.3f}" for k in sessions) +
              f" {100 * (med['plugin'] / med['no-guard'] - 1):>10.1f}%"
              f" {100 * (med['plugin'] / med['unmasked'] - 1):>11.1f}%"
              f" {med['loop'] / med['plugin']:>7.1f}x"
              f" {100 * (med['any'] / med['plugin'] - 1):>11.1f}%")


if __name__ == "__main__":
    main()
