#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Streaming benchmark: per-chunk latency of a streaming model on onnxruntime and OpenVINO, one thread.

Models: Embedding(1000, 64, mask_zero=True) -> LSTM(128, return_sequences=True), and the same with
GRU(128) (--models picks some). A sequence of T=100 steps (--steps), every row full (a live stream
has no padding), is fed in chunks of 1, 10 and 100 steps, at batch 1 and 8, each chunk with the
states the previous one returned. Variants:

  stream      the plugin's streaming model (mlr.convert(model, streaming=True)): states as inputs
              and outputs, fed back by the caller
  stateful    (OpenVINO) the same model with the states kept inside (MakeStateful, the batch fixed:
              the recipe of docs/streaming.md), fed the chunks alone
  stock       stock tf2onnx (no plugin) of the same Keras model rebuilt by hand to take its states as
              inputs (initial_state=) and return them (return_state=True): a masked Loop
  one call    the reference: the plugin's model without streaming, one call over the whole sequence

Each variant is first run chunk by chunk on the timed batch and on a batch of padded rows (an empty
row among them at batch 8) and compared with Keras's one call over the whole sequence (every output
position, the final states); the output says which are exact. Then every variant and chunk size of a
(model, batch) cell is timed in interleaved rounds: each round runs every variant and chunk size over
the whole sequence once, in a random order, each after an untimed call of its own. Reported: the
median latency of one chunk call (the state hand-over included) with the p10-p90 of the calls, the
time for the whole sequence with its min-max over the rounds, and its ratio to the one call on the
same runtime. Printed as a Markdown table.

    .venv/bin/python tools/benchmark_streaming.py [--quick] [--keras keras3|tf_keras] [--models lstm gru]
                                                  [--steps T] [--budget SECONDS]

--quick: the LSTM only, a shorter budget (about 30 s). The default run takes about 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import numpy as np

from toolutil import import_stack, op_counts, quiet_stderr  # tools/ is on sys.path when run as a script
from benchmark import cpu_snapshot, machine_info, other_load  # pylint: disable=wrong-import-order
from masked_lstm_rewriter import flavours  # pylint: disable=wrong-import-order  (toolutil puts the checkout first)
from masked_lstm_rewriter.sessions import (OPENVINO_CONFIG, onnxruntime_session,  # pylint: disable=wrong-import-order
                                           openvino_compiled)

OPSET = 15
TOLERANCE = 1e-5
VOCAB, EMBED, UNITS = 1000, 64, 128
MODELS = {"lstm": "LSTM", "gru": "GRU"}
STATES = {"lstm": ("h", "c"), "gru": ("h",)}
CHUNKS = (1, 10, 100)
BATCHES = (1, 8)
VARIANTS = ("ort stream", "ort stock", "ort one call", "ov stream", "ov stateful", "ov stock", "ov one call")
FULL = dict(models=("lstm", "gru"), budget=15.0, min_rounds=15, max_rounds=400, warmup_rounds=3)
QUICK = dict(models=("lstm",), budget=3.0, min_rounds=5, max_rounds=100, warmup_rounds=2)


# --- Keras models and conversions -------------------------------------------------------------------

def build_models(keras, tf, kind: str):
    """(model, twin): Embedding(mask_zero) -> LSTM/GRU(return_sequences), and the same weights taking
    its states as inputs (``h_in``, ``c_in``) and returning them. The twin passes its mask explicitly:
    Keras 3 drops the Embedding's mask when a functional model calls a recurrent layer with
    ``initial_state=`` (measured with Keras 3.15: the twin then runs over the padding)."""
    keras.utils.set_random_seed(0)
    layer = getattr(keras.layers, MODELS[kind])
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
    model = keras.Model(tokens, layer(UNITS, return_sequences=True, name=kind)(x), name=f"{kind}_model")
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    states = [keras.Input((UNITS,), name=f"{state}_in") for state in STATES[kind]]
    x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
    mask = keras.layers.Lambda(lambda t: tf.not_equal(t, 0), name="mask")(tokens)
    outputs = layer(UNITS, return_sequences=True, return_state=True, name=kind)(x, initial_state=states, mask=mask)
    twin = keras.Model([tokens] + states, list(outputs), name=f"{kind}_twin")
    twin.set_weights(model.get_weights())
    return model, twin


def convert(tf, tf2onnx, mlr, kind: str, model, twin) -> dict:
    """variant -> (ModelProto, {state input: state output}) for the plugin's streaming model, its model
    without streaming, and stock tf2onnx's twin (a Loop; fails if the plugin is active)."""
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    stream, _ = mlr.convert(model, input_signature=spec, opset=OPSET, streaming=True)
    whole, _ = mlr.convert(model, input_signature=spec, opset=OPSET, streaming=False)
    twin_spec = spec + tuple(tf.TensorSpec((None, UNITS), tf.float32, name=f"{s}_in") for s in STATES[kind])
    stock, _ = tf2onnx.convert.from_keras(twin, input_signature=twin_spec, opset=OPSET)
    if not op_counts(stock)["Loop"]:
        fail(f"{kind}: stock tf2onnx gave no Loop (is the plugin enabled through TF2ONNX_MASKED_LSTM?)")
    if op_counts(stream)["Loop"]:
        fail(f"{kind}: the plugin's streaming model has a Loop")
    outputs = [o.name for o in stock.graph.output]
    return {"stream": (stream, {f"{kind}/{s}_in": f"{kind}/{s}_out" for s in STATES[kind]}),
            "one call": (whole, {}),
            "stock": (stock, {f"{s}_in": outputs[1 + i] for i, s in enumerate(STATES[kind])})}


# --- runners: one sequence chunk by chunk, each call timed ---------------------------------------------

class OrtRunner:
    """onnxruntime, one thread; the states fed back by the caller."""

    def __init__(self, proto, pairs: dict):
        self.session = onnxruntime_session(proto, threads=1)
        names = [o.name for o in self.session.get_outputs()]
        self.pairs = {name: names.index(out) for name, out in pairs.items()}

    def run(self, chunks: list):
        """(seconds of each call, [first output of each chunk], {state input: final value})."""
        batch = len(chunks[0])
        states = {name: np.zeros((batch, UNITS), np.float32) for name in self.pairs}
        times, outputs = [], []
        for chunk in chunks:
            begin = time.perf_counter()
            results = self.session.run(None, {"tokens": chunk, **states})
            states = {name: results[index] for name, index in self.pairs.items()}
            times.append(time.perf_counter() - begin)
            outputs.append(results[0])
        return times, outputs, states


class OvRunner:
    """OpenVINO's CPU plugin, one inference thread, the model's dynamic shapes; the states fed back
    by the caller."""

    def __init__(self, proto, pairs: dict):
        self.compiled = openvino_compiled(proto, threads=1)
        self.request = self.compiled.create_infer_request()
        self.first = self.compiled.outputs[0]
        self.pairs = {name: self.compiled.output(out) for name, out in pairs.items()}

    def run(self, chunks: list):
        batch = len(chunks[0])
        states = {name: np.zeros((batch, UNITS), np.float32) for name in self.pairs}
        times, outputs = [], []
        for chunk in chunks:
            begin = time.perf_counter()
            results = self.request.infer({"tokens": chunk, **states})
            states = {name: results[port] for name, port in self.pairs.items()}
            times.append(time.perf_counter() - begin)
            outputs.append(results[self.first])
        return times, outputs, states


def stateful_openvino(proto, batch: int):
    """The recipe of docs/streaming.md (``stateful_openvino``), from memory and with one inference thread."""
    import openvino as ov  # pylint: disable=import-outside-toplevel
    from openvino.passes import MakeStateful, Manager  # pylint: disable=import-outside-toplevel
    core = ov.Core()
    model = core.read_model(proto.SerializeToString(), b"")
    model.reshape({i.get_any_name(): ov.PartialShape([batch, *list(i.get_partial_shape())[1:]]) for i in model.inputs})
    names = [i.get_any_name() for i in model.inputs]
    pairs = {name: name[:-len("in")] + "out" for name in names if name.endswith(("/h_in", "/c_in"))}
    manager = Manager()
    manager.register_pass(MakeStateful(pairs))
    manager.run_passes(model)
    return core.compile_model(model, "CPU", dict(OPENVINO_CONFIG, INFERENCE_NUM_THREADS=1))


class OvStatefulRunner:
    """OpenVINO with the states inside (MakeStateful), the batch fixed: the chunks go in alone."""

    def __init__(self, proto, pairs: dict, batch: int):
        self.compiled = stateful_openvino(proto, batch)
        self.request = self.compiled.create_infer_request()
        self.first = self.compiled.outputs[0]
        self.pairs = pairs

    def run(self, chunks: list):
        self.request.reset_state()
        times, outputs = [], []
        for chunk in chunks:
            begin = time.perf_counter()
            results = self.request.infer({"tokens": chunk})
            times.append(time.perf_counter() - begin)
            outputs.append(results[self.first])
        by_variable = {state.name: state.state.data.copy() for state in self.request.query_state()}
        return times, outputs, {name: by_variable[name + out] for name, out in self.pairs.items()}


def runners(protos: dict, batch: int, report) -> dict:
    """variant -> runner for one batch size (an OpenVINO variant OpenVINO cannot compile is left out, said)."""
    made = {"ort stream": OrtRunner(*protos["stream"]), "ort stock": OrtRunner(*protos["stock"]),
            "ort one call": OrtRunner(*protos["one call"])}
    for variant, make in (("ov stream", lambda: OvRunner(*protos["stream"])),
                          ("ov stateful", lambda: OvStatefulRunner(*protos["stream"], batch)),
                          ("ov stock", lambda: OvRunner(*protos["stock"])),
                          ("ov one call", lambda: OvRunner(*protos["one call"]))):
        try:
            made[variant] = make()
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            if variant != "ov stock":
                raise
            report(f"note: OpenVINO cannot compile {variant}: {str(error).strip().splitlines()[-1][:120]}")
    return made


# --- batches and the check against Keras ----------------------------------------------------------------

def full_tokens(batch: int, steps: int):
    return np.random.default_rng(batch).integers(1, VOCAB, (batch, steps)).astype(np.int32)


def padded_tokens(batch: int, steps: int):
    """Post-padded rows: at batch > 2, lengths spread from T (a full row) down to 0 (an empty row); else 37."""
    lengths = np.linspace(steps, 0, batch).round().astype(int) if batch > 2 else np.array([37] * batch)
    tokens = full_tokens(batch, steps)
    tokens[np.arange(steps)[None, :] >= lengths[:, None]] = 0
    return tokens


def cut(tokens, size: int) -> list:
    return [np.ascontiguousarray(tokens[:, start:start + size]) for start in range(0, tokens.shape[1], size)]


def keras_reference(model, twin, kind, tokens) -> tuple:
    """Keras's one call over the whole sequence: (its output, its final states)."""
    zeros = [np.zeros((len(tokens), UNITS), np.float32) for _ in STATES[kind]]
    states = twin([tokens] + zeros, training=False)[1:]
    return np.asarray(model(tokens, training=False)), [np.asarray(state) for state in states]


def check(runner, tokens, reference, size: int) -> dict:
    """Errors against ``reference`` of ``tokens`` run in chunks of ``size``: the largest at valid steps and in
    the final states, the largest at padded steps, and whether the padded steps that differ all lie before
    their row's first valid step in their chunk and are zeros there."""
    want, want_states = reference
    _, outputs, states = runner.run(cut(tokens, size))
    got = np.concatenate(outputs, axis=1)
    error = np.abs(got - want).max(axis=-1)
    valid = tokens != 0
    on_valid = float(error[valid].max()) if valid.any() else 0.0
    for value, expected in zip(states.values(), want_states):
        on_valid = max(on_valid, float(np.abs(value - expected).max()))
    differs = error > TOLERANCE
    before_first = np.concatenate([np.cumsum(c != 0, axis=1) == 0 for c in cut(tokens, size)], axis=1)
    return dict(valid=on_valid, padding=float(error[~valid].max()) if (~valid).any() else 0.0,
                before_first=bool((differs <= (before_first & ~valid)).all()), zeros=not got[differs].any())


def check_all(model, twin, kind, made: dict, batch: int, steps: int, exact: dict):
    """Every variant and chunk size, on full rows and on padded rows, against Keras; worst errors in ``exact``."""
    for rows, tokens in (("full", full_tokens(batch, steps)), ("padded", padded_tokens(batch, steps))):
        reference = keras_reference(model, twin, kind, tokens)
        for variant, runner in made.items():
            for size in ((steps,) if variant.endswith("one call") else CHUNKS):
                found = check(runner, tokens, reference, size)
                worst = exact.setdefault((kind, variant), dict(valid_full=0.0, valid_padded=0.0, padding=0.0,
                                                               before_first=True, zeros=True))
                worst[f"valid_{rows}"] = max(worst[f"valid_{rows}"], found["valid"])
                worst["padding"] = max(worst["padding"], found["padding"])
                worst["before_first"] &= found["before_first"]
                worst["zeros"] &= found["zeros"]


def verdict(worst: dict) -> str:
    """The table's word: "yes" (every position and state), "valid steps" (and the states), or "no"."""
    if max(worst["valid_full"], worst["valid_padded"]) > TOLERANCE:
        return "no"
    return "yes" if worst["padding"] <= TOLERANCE else "valid steps"


def exactness(worst: dict) -> str:
    """One line on how a variant compares with Keras's one call."""
    on_valid = max(worst["valid_full"], worst["valid_padded"])
    if verdict(worst) == "no":
        return f"NOT exact (max {on_valid:.2g} at valid steps or in the states)"
    if verdict(worst) == "yes":
        return f"exact (max {max(on_valid, worst['padding']):.2g})"
    where = "padded steps before a row's first valid step in a chunk" if worst["before_first"] else "padded steps"
    zeros = ", zeros there where the one call repeats the row's last output" if worst["zeros"] else ""
    return (f"exact at valid steps and in the states (max {on_valid:.2g}); differs at {where} "
            f"(max {worst['padding']:.2g}{zeros})")


# --- timing --------------------------------------------------------------------------------------------

def time_cell(made: dict, batch: int, steps: int, settings: dict) -> tuple:
    """Interleaved rounds over every (variant, chunk size) of a cell, in a new random order each round:
    {key: [each round's call times]}, rounds. Each timed pass follows an untimed call of the same
    variant, so that it runs with its own weights in the caches rather than the previous variant's
    (measured without it: the one call, always after another model's pass, came out 20% slower than
    the streaming model's single 100-step call; with it, within 10%)."""
    tokens = full_tokens(batch, steps)
    jobs = {(variant, size): cut(tokens, size) for variant in made
            for size in ((steps,) if variant.endswith("one call") else CHUNKS)}
    keys = list(jobs)
    start = time.perf_counter()
    for _ in range(settings["warmup_rounds"]):
        for key in keys:
            made[key[0]].run(jobs[key])
    round_seconds = (time.perf_counter() - start) / settings["warmup_rounds"]
    rounds = int(min(settings["max_rounds"], max(settings["min_rounds"], settings["budget"] / round_seconds)))
    times = {key: [] for key in keys}
    order = np.random.default_rng(batch)
    for _ in range(rounds):
        for index in order.permutation(len(keys)):
            runner, chunks = made[keys[index][0]], jobs[keys[index]]
            runner.run(chunks[:1])
            times[keys[index]].append(runner.run(chunks)[0])
    return times, rounds


def rows_of(kind, batch, times: dict, steps: int, exact: dict) -> list:
    """Table rows of one cell: per chunk call median [p10-p90], per sequence median [min-max], over the one call."""
    rows = []
    for (variant, size), rounds in times.items():
        calls = 1000 * np.concatenate([np.asarray(r) for r in rounds])
        sequences = 1000 * np.asarray([sum(r) for r in rounds])
        one_call = 1000 * np.asarray([sum(r) for r in times[(variant.split()[0] + " one call", steps)]])
        p10, p50, p90 = np.percentile(calls, [10, 50, 90])
        rows.append(dict(model=MODELS[kind], batch=batch, chunk=size, runtime=variant.split()[0],
                         variant=variant.split(" ", 1)[1], call=f"{p50:.3f} [{p10:.3f}-{p90:.3f}]",
                         sequence=f"{np.median(sequences):.2f} [{sequences.min():.2f}-{sequences.max():.2f}]",
                         ratio=f"{np.median(sequences) / np.median(one_call):.2f}",
                         exact=verdict(exact[(kind, variant)])))
    order = {name: i for i, name in enumerate(VARIANTS)}
    return sorted(rows, key=lambda r: (-1 if r["variant"] == "one call" else r["chunk"], r["runtime"] != "ort",
                                       order[f"{r['runtime']} {r['variant']}"]))


def markdown(rows: list, steps: int) -> list:
    head = ["model", "batch", "chunk", "runtime", "variant", "ms per chunk call, median [p10-p90]",
            f"ms per sequence (T={steps}), median [min-max]", "sequence / one call", "exact"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for row in rows:
        chunk = "whole" if row["variant"] == "one call" else row["chunk"]
        lines.append(f"| {row['model']} | {row['batch']} | {chunk} | {row['runtime']} | {row['variant']} | "
                     f"{row['call']} | {row['sequence']} | {row['ratio']} | {row['exact']} |")
    return lines


# --- main ----------------------------------------------------------------------------------------------

class BenchmarkError(Exception):
    """A failed check: printed as one line, exit status 1."""


def fail(message: str):
    raise BenchmarkError(message)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the LSTM only, a shorter budget (about 30 s)")
    parser.add_argument("--keras", choices=flavours.FLAVOURS, default="keras3")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), help="default: lstm gru (--quick: lstm)")
    parser.add_argument("--steps", type=int, default=100, metavar="T", help="sequence length (default 100; "
                        "chunk sizes that do not divide it leave a shorter last chunk)")
    parser.add_argument("--budget", type=float, metavar="SECONDS", help="timing budget per (model, batch) cell")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's and tf2onnx's messages")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    settings = dict(QUICK if args.quick else FULL)
    settings["budget"] = args.budget or settings["budget"]
    models = args.models or settings["models"]
    if os.environ.get("TF2ONNX_MASKED_LSTM"):
        fail("TF2ONNX_MASKED_LSTM is set: unset it, or the 'stock' conversions would use the plugin too")
    wall_start, cpu_start = time.perf_counter(), cpu_snapshot()
    stack = import_stack(args.keras, args.verbose)
    tf, tf2onnx, mlr, keras = stack.tf, stack.tf2onnx, stack.mlr, stack.keras
    import openvino as ov  # pylint: disable=import-outside-toplevel
    versions = {"python": platform.python_version(), "tensorflow": tf.__version__,
                f"keras ({args.keras})": keras.__version__, "tf2onnx": tf2onnx.__version__,
                "onnxruntime": stack.ort.__version__, "openvino": ov.__version__.split("-")[0],
                "masked_lstm_rewriter": mlr.__version__}
    now = datetime.datetime.now().isoformat(timespec="seconds")
    print(f"tools/benchmark_streaming.py {' '.join(sys.argv[1:] if argv is None else argv)} on {now}")
    for line in machine_info(versions):
        print(line)
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min); opset {OPSET}; one thread (onnxruntime "
          f"intra- and inter-op, OpenVINO INFERENCE_NUM_THREADS=1); T={args.steps}; timed rows are full\n", flush=True)

    rows, exact = [], {}
    for kind in models:
        begin = time.perf_counter()
        with quiet_stderr(not args.verbose):
            model, twin = build_models(keras, tf, kind)
            protos = convert(tf, tf2onnx, mlr, kind, model, twin)
        print(f"{MODELS[kind]}: built and converted in {time.perf_counter() - begin:.0f} s", flush=True)
        for batch in BATCHES:
            begin = time.perf_counter()
            made = runners(protos, batch, print)
            with quiet_stderr(not args.verbose):
                check_all(model, twin, kind, made, batch, args.steps, exact)
            checked = time.perf_counter()
            times, rounds = time_cell(made, batch, args.steps, settings)
            print(f"{MODELS[kind]} batch {batch}: compiled and checked in {checked - begin:.0f} s, timed "
                  f"{rounds} interleaved rounds in {time.perf_counter() - checked:.0f} s", flush=True)
            rows += rows_of(kind, batch, times, args.steps, exact)

    print(f"\nagainst Keras's one call over the whole sequence (tolerance {TOLERANCE:g}; chunks of "
          f"{', '.join(map(str, CHUNKS))}; batch {' and '.join(map(str, BATCHES))}; full rows, and post-padded "
          f"rows: lengths from T down to 0 at batch 8, 37 at batch 1):")
    for (kind, variant), worst in exact.items():
        print(f"  {MODELS[kind]:<4} {variant:<12} {exactness(worst)}")
    print()
    for line in markdown(rows, args.steps):
        print(line)
    wall = time.perf_counter() - wall_start
    busy = other_load(cpu_start, cpu_snapshot(), wall)
    print(f"\nthe whole run {wall:.0f} s; other processes kept {busy:.2f} cores busy on average"
          + (" (the machine was busy: expect noise)" if busy > 0.2 else "") +
          f"; load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as error:
        print(f"\nbenchmark_streaming: FAILED: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
