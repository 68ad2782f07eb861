#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time one direction="bidirectional" node against the two forward nodes it replaces, on bare nodes.

For each op (LSTM, GRU, RNN), with and without ``sequence_lens`` (every row full), with the
``activations`` attribute named (the op's defaults, spelled out) and without it, on onnxruntime and
OpenVINO (CPU, exact f32), one thread, dynamic batch and steps: a model holding one bidirectional
node, and one holding two forward nodes over the same input (the reversal a backward half needs
left out, which favours two nodes slightly). Interleaved rounds; medians in milliseconds, and the
ratio one node / two nodes (above 1: one node is slower). Where the plugin emits one node for a
``Bidirectional`` layer is decided by whole models, whose figures are in docs/openvino.md
("Bidirectional nodes and sequence_lens"); these bare nodes show what the runtimes' kernels do.

Usage: python tools/benchmark_bidirectional_nodes.py [--steps 100] [--features 64] [--units 128]
                                                   [--batches 1 32] [--rounds 7] [--runtimes onnxruntime openvino]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import toolutil  # noqa: F401  pylint: disable=unused-import  (puts this checkout first on sys.path)
from masked_lstm_rewriter.sessions import onnxruntime_session, openvino_compiled

logger = logging.getLogger("benchmark_bidirectional_nodes")

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
OPSET = 15


def recurrent_model(op: str, directions: tuple, features: int, units: int, lengths: bool, named: bool,
                    seed: int = 0):
    """A model over x [T, B, features] (and lengths [B] int32): one node per entry of ``directions``
    ("bidirectional", or "forward" for each of two forward nodes), each node's Y an output."""
    rng = np.random.default_rng(seed)
    nodes, outputs, initializers = [], [], []
    for index, direction in enumerate(directions):
        count = 2 if direction == "bidirectional" else 1
        gates = GATES[op] * units
        weights = {"W": (count, gates, features), "R": (count, gates, units), "B": (count, 2 * gates)}
        names = [f"{name}{index}" for name in weights]
        initializers += [numpy_helper.from_array(rng.normal(0, 0.1, shape).astype(np.float32), name)
                         for name, shape in zip(names, weights.values())]
        attributes = {"hidden_size": units, "direction": direction}
        if named:
            attributes["activations"] = DEFAULT_ACTIVATIONS[op] * count
        nodes.append(helper.make_node(op, ["x", *names, "lengths" if lengths else ""], [f"y{index}"],
                                      name=f"{op}{index}", **attributes))
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, None))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", features])]
    if lengths:
        inputs.append(helper.make_tensor_value_info("lengths", TensorProto.INT32, ["B"]))
    graph = helper.make_graph(nodes, f"{op}_{'_'.join(directions)}", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what onnxruntime 1.31 and OpenVINO 2026.4 read
    return model


def runner(runtime: str, model, feeds: dict):
    """A function running ``model`` on ``feeds`` once, on one thread."""
    if runtime == "onnxruntime":
        session = onnxruntime_session(model, threads=1)
        return lambda: session.run(None, feeds)
    request = openvino_compiled(model, threads=1).create_infer_request()
    return lambda: request.infer(feeds)


def median_ms(runs: dict, rounds: int, calls: int) -> dict:
    """Each run's median time per call over interleaved rounds (after one untimed call each)."""
    times = {key: [] for key in runs}
    for run in runs.values():
        run()
    for _ in range(rounds):
        for key, run in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times[key].append((time.perf_counter() - start) / calls * 1e3)
    return {key: statistics.median(values) for key, values in times.items()}


def measure(args) -> list:
    """One row per (runtime, op, batch, lengths, named): one node's and two nodes' times."""
    rows = []
    for runtime, op, batch in itertools.product(args.runtimes, GATES, args.batches):
        rng = np.random.default_rng(1)
        feeds = {"x": rng.normal(size=(args.steps, batch, args.features)).astype(np.float32)}
        runs = {}
        for lengths, named in itertools.product((False, True), (True, False)):
            case_feeds = dict(feeds, lengths=np.full(batch, args.steps, np.int32)) if lengths else feeds
            for form, directions in (("one", ("bidirectional",)), ("two", ("forward", "forward"))):
                model = recurrent_model(op, directions, args.features, args.units, lengths, named)
                runs[(lengths, named, form)] = runner(runtime, model, case_feeds)
        logger.info("timing %s %s batch %d", runtime, op, batch)
        times = median_ms(runs, args.rounds, max(1, 32 // batch))
        for lengths, named in itertools.product((False, True), (True, False)):
            one, two = times[(lengths, named, "one")], times[(lengths, named, "two")]
            rows.append({"runtime": runtime, "op": op, "batch": batch, "lengths": lengths, "named": named,
                         "one": one, "two": two, "ratio": one / two})
    return rows


def table(rows: list) -> str:
    """The rows as a markdown table."""
    lines = ["| runtime | op | batch | sequence_lens | activations | one node (ms) | two nodes (ms) | one / two |",
             "| --- | --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row['runtime']} | {row['op']} | {row['batch']} | {'yes' if row['lengths'] else 'no'} | "
                     f"{'named' if row['named'] else 'unnamed'} | {row['one']:.3f} | {row['two']:.3f} | "
                     f"{row['ratio']:.2f} |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--runtimes", nargs="+", choices=("onnxruntime", "openvino"),
                        default=["onnxruntime", "openvino"])
    return parser.parse_args(argv)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    args = parse_args(argv)
    print(table(measure(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
