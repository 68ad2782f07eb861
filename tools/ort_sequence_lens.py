#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Does onnxruntime skip padded steps of an LSTM with ``sequence_lens``? Which ones?

Times one ONNX LSTM node (input 64, hidden 128, T steps, random weights, 1 intra-op thread,
interleaved rounds, medians) on the same input with different ``sequence_lens``: none given,
every row full, every row half, one full row with the others half or 1 step, every row empty.
No TensorFlow needed.

Usage: python tools/ort_sequence_lens.py [--steps 100] [--batches 1 8 32] [--rounds 100]
"""

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
import toolutil  # noqa: F401  pylint: disable=unused-import  (tools/ is on sys.path as a script; puts this checkout first)
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter.sessions import onnxruntime_session as session

INPUT, HIDDEN = 64, 128


def lstm_model(with_lengths: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.1, shape).astype(np.float32), name)
               for name, shape in (("W", (1, 4 * HIDDEN, INPUT)), ("R", (1, 4 * HIDDEN, HIDDEN)),
                                   ("B", (1, 8 * HIDDEN)))]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "N", INPUT])]
    if with_lengths:
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, ["N"]))
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "L" if with_lengths else ""], ["Y"],
                            hidden_size=HIDDEN)
    graph = helper.make_graph([node], "lstm", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8  # what onnxruntime 1.31 accepts
    return model


def length_cases(batch: int, steps: int) -> dict:
    half, rest = steps // 2, batch - 1
    return {"no sequence_lens": None,
            "all full": np.full(batch, steps),
            "all half": np.full(batch, half),
            "one full, rest half": np.r_[steps, np.full(rest, half)],
            "one full, rest 1": np.r_[steps, np.full(rest, 1)],
            "all empty": np.zeros(batch)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    plain, with_lengths = session(lstm_model(False)), session(lstm_model(True))
    print(f"onnxruntime {ort.__version__}, LSTM {INPUT}->{HIDDEN}, T={args.steps}, 1 thread, "
          f"median ms of {args.rounds} interleaved rounds")
    for batch in args.batches:
        x = np.random.default_rng(1).normal(size=(args.steps, batch, INPUT)).astype(np.float32)
        runs = {name: (plain, {"X": x}) if lengths is None else
                (with_lengths, {"X": x, "L": lengths.astype(np.int32)})
                for name, lengths in length_cases(batch, args.steps).items()}
        times = {name: [] for name in runs}
        for round_ in range(args.rounds + 3):
            for name, (sess, feeds) in runs.items():
                start = time.perf_counter()
                sess.run(None, feeds)
                if round_ >= 3:  # warm-up rounds
                    times[name].append(time.perf_counter() - start)
        print(f"batch {batch:>3}: " + ", ".join(f"{name} {1000 * np.median(t):.3f}" for name, t in times.items()))


if __name__ == "__main__":
    main()
