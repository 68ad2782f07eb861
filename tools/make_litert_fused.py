#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Make LiteRT flatbuffers whose LSTM layers LiteRT fused into ``UNIDIRECTIONAL_SEQUENCE_LSTM`` (test data
for ``.tflite`` files in): tf_keras LSTM layers without a mask, which LiteRT's converter fuses, as TensorFlow's
guide to converting RNNs to LiteRT has users do. tf2onnx has no ONNX form for the op.

    .venv/bin/python tools/make_litert_fused.py [--out testdata/litert_fused]

For each case it writes ``<case>.tflite`` (static shapes: 4 rows of 6 steps) and ``<case>.npz``: the
input (``post.in.<name>``), Keras's outputs (``post.out.0``) and LiteRT's (``litert.out.0``) on it; and
for streaming, the same tokens followed by 6 more (``stream.in.<name>``, 4 x 12) with Keras's output over
all 12 steps (``stream.out.0``), what two runs of 6 steps carrying the states must give. The "clip" case
drives a cell state past 10 and back, where LiteRT's op clips it and Keras does not: its two stored
outputs differ there.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # LiteRT fuses tf_keras's LSTM, not Keras 3's
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, STEPS, VOCAB = 4, 6, 10
INPUT = "ids"
L = keras.layers


def _transposed(x):
    return L.Lambda(lambda v: tf.transpose(v, [1, 0, 2]))(x)


# case -> the layers over the embedded tokens (shared by the 6-step and the 12-step model)
CASES = {
    "sequence": lambda: [L.LSTM(5, return_sequences=True)],
    "last_dense": lambda: [L.LSTM(5), L.Dense(3)],
    "go_backwards": lambda: [L.LSTM(5, return_sequences=True, go_backwards=True)],
    "bidirectional": lambda: [L.Bidirectional(L.LSTM(5, return_sequences=True))],
    "bidirectional_sum_last": lambda: [L.Bidirectional(L.LSTM(5), merge_mode="sum")],
    "stack": lambda: [L.LSTM(6, return_sequences=True), L.LSTM(5, return_sequences=True)],
    "lstm_gru": lambda: [L.LSTM(6, return_sequences=True), L.GRU(5, return_sequences=True)],
    "time_major": lambda: [_transposed, L.LSTM(5, return_sequences=True, time_major=True), _transposed],
    "clip": lambda: [L.LSTM(1, return_sequences=True)],
}
STREAMED = ("sequence", "stack")  # forward layers only: a backward one cannot stream


def _model(layers, embedding, steps: int):
    tokens = keras.Input((steps,), batch_size=BATCH, dtype="int32", name=INPUT)
    x = embedding(tokens)
    for layer in layers:
        x = layer(x)
    return keras.Model(tokens, x)


def _weights(model, case: str) -> None:
    """Weights from uniform(-0.5, 0.5) (no bias zero); for "clip", an LSTM that adds 1 to its cell state
    at each step of token 1 and takes 1 from it at each step of token 2 (input and forget gates open)."""
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.uniform(-0.5, 0.5, weight.shape).astype(np.float32))
    if case == "clip":
        embedding, lstm = model.layers[1], model.layers[2]
        embedding.set_weights([np.array([[0.0], [1.0], [-1.0]] + [[0.0]] * (VOCAB - 3), np.float32)])
        kernel = np.array([[0.0, 0.0, 20.0, 0.0]], np.float32)
        lstm.set_weights([kernel, np.zeros((1, 4), np.float32), np.array([20.0, 20.0, 0.0, 0.0], np.float32)])


def _tokens(case: str, steps: int) -> np.ndarray:
    if case == "clip":  # 12 steps up (the cell state reaches 12, LiteRT's 10), then down
        up = np.ones((BATCH, steps // 2), np.int32)
        return np.concatenate([up, 2 * up], axis=1)
    return np.random.default_rng(steps).integers(0, VOCAB, (BATCH, steps)).astype(np.int32)


def _litert(flatbuffer: bytes, tokens: np.ndarray) -> np.ndarray:
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], tokens)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def make(case: str, out: str) -> str:
    keras.utils.set_random_seed(0)
    layers, embedding = CASES[case](), L.Embedding(VOCAB, 1 if case == "clip" else 4)
    steps = 24 if case == "clip" else STEPS
    model = _model(layers, embedding, steps)
    _weights(model, case)
    flatbuffer = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    with open(os.path.join(out, f"{case}.tflite"), "wb") as handle:
        handle.write(flatbuffer)
    tokens = _tokens(case, steps)
    arrays = {f"post.in.serving_default_{INPUT}:0": tokens, "post.out.0": model.predict(tokens, verbose=0),
              "litert.out.0": _litert(flatbuffer, tokens)}
    if case in STREAMED:
        longer = np.concatenate([tokens, _tokens(case, 2 * STEPS)[:, STEPS:]], axis=1)
        arrays[f"stream.in.serving_default_{INPUT}:0"] = longer
        arrays["stream.out.0"] = _model(layers, embedding, 2 * STEPS).predict(longer, verbose=0)
    np.savez(os.path.join(out, f"{case}.npz"), **arrays)
    ops = sorted({op["op_name"] for op in tf.lite.Interpreter(model_content=flatbuffer)._get_ops_details()})
    gap = np.abs(arrays["post.out.0"] - arrays["litert.out.0"]).max()
    return f"{case}: {', '.join(ops)}; |Keras - LiteRT| {gap:.2g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "testdata", "litert_fused"))
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for case in args.cases.split(","):
        print(make(case, args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
