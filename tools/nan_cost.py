#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What would it cost to make onnxruntime's LSTM keep a NaN of its input?

onnxruntime's LSTM and GRU kernels turn NaN into +FLT_MAX when the node has a bias input B
(``deepcpu::clip_add_bias``); without B they keep it (docs/limits.md). The cheapest way to drop B
is to fold the bias into W as one more input column, fed by a constant-1 feature appended to X:
``Shape``, ``Concat``, ``ConstantOfShape``, ``Concat`` before the node. This times one ONNX LSTM
node (input 64, hidden 128, T steps: the benchmark's) with B and folded, on the same input, one
intra-op thread, interleaved rounds, medians; and checks that both agree and which keeps a NaN.
No TensorFlow needed.

Usage: python tools/nan_cost.py [--steps 100] [--batches 1 32] [--rounds 400]
"""

import argparse
import time

import numpy as np
import toolutil  # noqa: F401  pylint: disable=unused-import  (tools/ is on sys.path as a script; puts this checkout first)
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter.sessions import onnxruntime_session

INPUTS, HIDDEN = 64, 128


def session(weights, recurrent, bias, fold: bool):
    """An LSTM node with its bias in B, or (``fold``) in an extra column of W fed by ones."""
    nodes, initializers = [], [numpy_helper.from_array(recurrent, "R")]
    if fold:
        folded = np.concatenate([weights, (bias[:, :4 * HIDDEN] + bias[:, 4 * HIDDEN:])[:, :, None]], axis=2)
        initializers += [numpy_helper.from_array(folded, "W"), numpy_helper.from_array(np.array([1], np.int64), "one")]
        nodes += [helper.make_node("Shape", ["X"], ["steps_batch"], start=0, end=2),
                  helper.make_node("Concat", ["steps_batch", "one"], ["ones_shape"], axis=0),
                  helper.make_node("ConstantOfShape", ["ones_shape"], ["ones"],
                                   value=numpy_helper.from_array(np.array([1], np.float32))),
                  helper.make_node("Concat", ["X", "ones"], ["X1"], axis=2),
                  helper.make_node("LSTM", ["X1", "W", "R", "", "lens"], ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN)]
    else:
        initializers += [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")]
        nodes += [helper.make_node("LSTM", ["X", "W", "R", "B", "lens"], ["Y", "Y_h", "Y_c"], hidden_size=HIDDEN)]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, INPUTS]),
                                              helper.make_tensor_value_info("lens", TensorProto.INT32, [None])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return onnxruntime_session(model)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=400, help="rounds at batch 1 (fewer for larger batches)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    weights = rng.normal(0, 0.1, (1, 4 * HIDDEN, INPUTS)).astype(np.float32)
    recurrent = rng.normal(0, 0.1, (1, 4 * HIDDEN, HIDDEN)).astype(np.float32)
    bias = rng.normal(0, 0.1, (1, 8 * HIDDEN)).astype(np.float32)
    with_b, folded = session(weights, recurrent, bias, False), session(weights, recurrent, bias, True)
    for batch in args.batches:
        feeds = {"X": rng.normal(size=(args.steps, batch, INPUTS)).astype(np.float32),
                 "lens": np.full(batch, args.steps, np.int32)}
        difference = max(float(np.abs(a - b).max()) for a, b in zip(with_b.run(None, feeds), folded.run(None, feeds)))
        poisoned = dict(feeds, X=feeds["X"].copy())
        poisoned["X"][3, 0, 0] = np.nan
        keeps = [bool(np.isnan(s.run(None, poisoned)[0]).any()) for s in (with_b, folded)]
        times = ([], [])
        for round_ in range(max(20, args.rounds // batch)):
            order = ((0, with_b), (1, folded)) if round_ % 2 else ((1, folded), (0, with_b))
            for index, sess in order:
                start = time.perf_counter()
                sess.run(None, feeds)
                times[index].append(time.perf_counter() - start)
        base, fold = (1e3 * float(np.median(t)) for t in times)
        print(f"batch {batch}: with B {base:.4f} ms (keeps NaN: {keeps[0]}), folded {fold:.4f} ms "
              f"(keeps NaN: {keeps[1]}): {1e3 * (fold - base):+.1f} us ({100 * (fold / base - 1):+.1f}%); "
              f"max |difference| {difference:.2g}")


if __name__ == "__main__":
    main()
