#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Differential fuzzing of ONNX files from Keras 3's JAX-backend export: random recurrent models
exported by ``model.export(format="onnx")`` (jax2onnx), then rewritten by ``rewrite_onnx``.

Two steps, each in its own environment (the JAX one as in ``tools/make_jax_exports.py``)::

    /tmp/jaxvenv/bin/python tools/fuzz_jax_exports.py make DIR [--cases 100] [--seed 0]
    .venv/bin/python tools/fuzz_jax_exports.py check DIR

``make`` draws each case from its seed (1-3 stacked LSTM, GRU or SimpleRNN layers, 1-6 units, any
of eight activations in either slot, with or without a bias, GRU's ``reset_after``; the mask from
``Embedding(mask_zero=True)``, ``Masking``, a mask input with a static time axis, or none, with a
dynamic or static time axis; sequences or last outputs, states; initial states as inputs), exports it, and writes
``case<N>.onnx``, ``case<N>.npz`` (for a post-padded and a not post-padded batch of 5 rows of 7
steps, with a full row and an empty one: ``<batch>.in.<k>`` the model's inputs in order,
``<batch>.out.<k>`` Keras's outputs on JAX) and ``case<N>.json`` (the case; why the export
failed, if it did).

``check`` rewrites each file in both mask modes and compares every output at every position with
Keras's, on onnxruntime and on OpenVINO (where the report names no veto for it): within 1e-5
(relative above 1), or within 10x the file's own distance from Keras (a model that amplifies
float32 rounding, values up to 1e16 measured: the file itself is that far). Batches where Keras
overflows are not compared. In ``"post"`` a batch that
is not post-padded must fail with the guard's message. Prints the counts and the
reasons layers stayed Loops; exits non-zero on a mismatch, a missed guard or a crash.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import sys

ACTIVATIONS = ("tanh", "relu", "sigmoid", "softsign", "elu", "linear", "hard_sigmoid", "softplus")
MASK_SOURCES = ("embedding", "masking", "explicit", "none", "none_static")
STEPS, FEATURES, VOCAB = 7, 3, 20
MASKS = {"post": [[t < n for t in range(STEPS)] for n in (7, 3, 0, 1, 5)],
         "nonpost": [[0, 0, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1, 0], [1] * 7, [0, 1, 1, 0, 1, 0, 0],
                     [1, 0, 0, 0, 0, 0, 0]]}
ATOL, ILL_FACTOR = 1e-5, 10.0


def draw_case(seed: int) -> dict:
    """A case, a pure function of its seed."""
    rng = random.Random(seed)
    layers = [dict(kind=rng.choice(["LSTM", "GRU", "SimpleRNN"]), units=rng.randint(1, 6),
                   activation=rng.choice(ACTIVATIONS), recurrent_activation=rng.choice(ACTIVATIONS),
                   use_bias=rng.random() < 0.7, reset_after=rng.random() < 0.5)
              for _ in range(rng.choice([1, 1, 2, 3]))]
    return dict(seed=seed, layers=layers, source=rng.choice(MASK_SOURCES),
                return_sequences=rng.random() < 0.5, return_state=rng.random() < 0.3,
                initial_state=rng.random() < 0.3)


# --- make: in the JAX environment ------------------------------------------------------------

def build_model(keras, case: dict):
    """The Keras model of ``case``, its weights drawn from uniform(-0.7, 0.7)."""
    layers, source = keras.layers, case["source"]
    if source == "embedding":
        inputs = [keras.Input((None,), dtype="int32", name="tokens")]
        x = layers.Embedding(VOCAB, 4, mask_zero=True)(inputs[0])
    else:
        static = source in ("explicit", "none_static")
        inputs = [keras.Input((STEPS if static else None, FEATURES), name="features")]
        inputs += [keras.Input((STEPS,), dtype="bool", name="mask")] if source == "explicit" else []
        x = layers.Masking(0.0)(inputs[0]) if source == "masking" else inputs[0]
    first = case["layers"][0]
    states = [keras.Input((first["units"],), name=name)
              for name in ("h0", "c0")[:2 if first["kind"] == "LSTM" else 1]] if case.get("initial_state") else []
    inputs += states
    outputs = []
    for index, spec in enumerate(case["layers"]):
        last = index == len(case["layers"]) - 1
        options = dict(activation=spec["activation"], use_bias=spec["use_bias"],
                       return_sequences=case["return_sequences"] or not last,
                       return_state=case["return_state"] and last)
        if spec["kind"] != "SimpleRNN":
            options["recurrent_activation"] = spec["recurrent_activation"]
        if spec["kind"] == "GRU":
            options["reset_after"] = spec["reset_after"]
        layer = getattr(layers, spec["kind"])(spec["units"], **options)
        given = dict(mask=inputs[1]) if source == "explicit" else {}
        y = layer(x, initial_state=states, **given) if states and index == 0 else layer(x, **given)
        outputs = list(y) if isinstance(y, (list, tuple)) else [y]
        x = outputs[0]
    model = keras.Model(inputs, outputs)
    import numpy as np  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(case["seed"])
    model.set_weights([rng.uniform(-0.7, 0.7, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def batch_inputs(case: dict, mask, rng) -> list:
    """The model's inputs for a batch whose valid steps are ``mask``: tokens or features (a mask input
    too), then the initial states."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    first = case["layers"][0]
    states = [rng.uniform(-1, 1, (mask.shape[0], first["units"])).astype(np.float32)
              for _ in range(2 if first["kind"] == "LSTM" else 1)] if case.get("initial_state") else []
    if case["source"] == "embedding":
        return [np.where(mask, rng.integers(1, VOCAB, mask.shape), 0).astype(np.int32)] + states
    x = rng.uniform(-1, 1, mask.shape + (FEATURES,)).astype(np.float32)
    if case["source"] == "masking":
        x = np.where(mask[..., None], x, 0).astype(np.float32)
    return ([x, mask] if case["source"] == "explicit" else [x]) + states


def make(folder: str, cases: int, seed: int) -> int:
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import keras  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    os.makedirs(folder, exist_ok=True)
    for number in range(seed, seed + cases):
        case, stem = draw_case(number), os.path.join(folder, f"case{number}")
        try:
            model, arrays = build_model(keras, case), {}
            for batch, mask in MASKS.items():
                inputs = batch_inputs(case, np.array(mask, bool), np.random.default_rng(number))
                outputs = model(inputs if len(inputs) > 1 else inputs[0])
                arrays.update({f"{batch}.in.{k}": value for k, value in enumerate(inputs)})
                for k, output in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
                    arrays[f"{batch}.out.{k}"] = np.asarray(output)
            model.export(stem + ".onnx", format="onnx", verbose=False)
            np.savez(stem + ".npz", **arrays)
        except Exception as error:  # pylint: disable=broad-except  (an export that fails is counted)
            case["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        with open(stem + ".json", "w", encoding="utf-8") as out:
            json.dump(case, out)
        print(f"case{number}: {case.get('error', 'exported')}", file=sys.stderr, flush=True)
    return 0


# --- check: in the project's environment ---------------------------------------------------------

def _distance(expected, got) -> float:
    """The largest |expected - got| / max(1, |expected|) over every position; inf where the outputs'
    number or shapes differ, or where one is NaN (as tests/fuzzgen.py's scaled_difference)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    if len(expected) != len(got) or any(want.shape != have.shape for want, have in zip(expected, got)):
        return float("inf")
    worst = 0.0
    for want, have in zip(expected, got):
        with np.errstate(invalid="ignore"):
            apart = np.abs(want - have) / np.maximum(1.0, np.abs(want))
        worst = max([worst] + ([float(np.max(np.where(np.isnan(apart), np.inf, apart)))] if apart.size else []))
    return worst


def check(folder: str) -> int:  # pylint: disable=too-many-locals
    import logging  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    import toolutil  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import  (this checkout first)
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    logging.getLogger("masked_lstm_rewriter").setLevel(logging.ERROR)
    counts, reasons, failures = collections.Counter(), collections.Counter(), []
    for path in sorted(glob.glob(os.path.join(folder, "case*.json")), key=lambda p: (len(p), p)):
        with open(path, encoding="utf-8") as source:
            case = json.load(source)
        if "error" in case:
            counts["export failed"] += 1
            reasons[f"export: {case['error'][:100]}"] += 1
            continue
        stem = path[:-len(".json")]
        original, data = onnx.load(stem + ".onnx"), np.load(stem + ".npz")
        counts["cases"] += 1
        for mode in ("post", "any"):
            try:
                converted = mlr.rewrite_onnx(original, mask_mode=mode)
            except Exception as error:  # pylint: disable=broad-except
                failures.append(f"case{case['seed']} {mode}: crashed: {error!r} {case}")
                continue
            reasons.update(layer.detail[:100] for layer in converted.report.left_as_loop)
            counts["layers rewritten"] += len(converted.report.rewritten)
            runtimes = ["onnxruntime"] + (["openvino"] if not any(
                "openvino" in layer.not_for for layer in converted.report.layers) else [])
            for name in runtimes:
                run, run_file = _runner(converted.onnx_model, name), _runner(original, name)
                for batch in MASKS:
                    _check_batch(case, mode, batch, data, (run, run_file, name), converted.report, counts, failures)
    print(json.dumps(dict(counts)))
    for reason, count in reasons.most_common():
        print(f"  left as a Loop ({count}): {reason}")
    for failure in failures:
        print("FAILING: " + failure)
    return 1 if failures else 0


def _runner(model, runtime: str):
    """``run([inputs]) -> [outputs]`` on ``runtime`` (``verify``'s runner: OpenVINO with the declared
    shapes, its requests asynchronous so that the guard's error is raised there too)."""
    from masked_lstm_rewriter.verification import make_runner  # pylint: disable=import-outside-toplevel
    weights = {tensor.name for tensor in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in weights]
    run = make_runner(runtime, model)
    return lambda values: run(dict(zip(inputs, values)))


def _check_batch(case, mode, batch, data, runs, report, counts, failures) -> None:
    """One batch on one runtime: equal to Keras (or ill-conditioned like the file), or the guard."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    run, run_file, runtime = runs
    feeds = [data[f"{batch}.in.{k}"] for k in range(sum(f.startswith(f"{batch}.in.") for f in data.files))]
    expected = [data[k] for k in sorted(f for f in data.files if f.startswith(f"{batch}.out."))]
    guarded = mode == "post" and batch == "nonpost" and case["source"] not in ("none", "none_static") \
        and any(layer.masked for layer in report.rewritten)
    label = f"case{case['seed']} {mode} {batch} on {runtime}"
    try:
        got = run(feeds)
    except Exception as error:  # pylint: disable=broad-except  (onnxruntime's own exception types)
        if guarded and mlr.GUARD_MESSAGE in str(error):
            counts["guard fired"] += 1
        else:
            failures.append(f"{label}: {str(error)[:300]} {case}")
        return
    if guarded:
        failures.append(f"{label}: returned numbers where the guard must fail {case}")
        return
    if not all(np.all(np.isfinite(want)) for want in expected):
        counts["not compared (Keras overflowed)"] += 1
        return
    counts["comparisons"] += 1
    distance = _distance(expected, got)
    if distance > ATOL:
        file_distance = _distance(expected, run_file(feeds))
        if distance <= ILL_FACTOR * file_distance:
            counts["ill-conditioned, as close as the file"] += 1
            return
        failures.append(f"{label}: {distance:.3g} from Keras (the file {file_distance:.3g}) {case}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="step", required=True)
    made = sub.add_parser("make", help="export random models (in a JAX environment)")
    made.add_argument("folder")
    made.add_argument("--cases", type=int, default=100)
    made.add_argument("--seed", type=int, default=0, help="the first case's seed (default 0)")
    checked = sub.add_parser("check", help="rewrite the files and compare with Keras")
    checked.add_argument("folder")
    args = parser.parse_args(argv)
    return make(args.folder, args.cases, args.seed) if args.step == "make" else check(args.folder)


if __name__ == "__main__":
    sys.exit(main())
