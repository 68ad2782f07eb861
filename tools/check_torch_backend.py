#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check the plugin on Keras 3's torch backend, through every front door, against the model run on torch.

For a few masked recurrent models built on torch (random non-zero weights), it converts each one
three ways: ``mlr.convert(model)``; Keras's own ``model.export(path, format="onnx")`` under
``mlr.enable()``; and its ``.keras`` file with the command line, run with ``KERAS_BACKEND=torch``,
followed by the command line's ``verify`` of that file against the model run on torch. Every ONNX
model runs on onnxruntime on rows of different lengths, a full row and an empty (all padding) one,
and is compared with the model's torch outputs at every position. Two more rows say what Keras's
torch export gives without the plugin, with the input length left open and fixed (informative:
they do not count towards the exit status).

Prints a table (model, front door, native ops, Loops, max |diff|) and exits non-zero if a
difference exceeds ``--tolerance``, a file keeps a ``Loop``, or a front door fails. It needs a
venv of its own with torch beside the project's stack (the project's venv is left as it is); a
CPU build of torch is enough (torch's ``+cpu`` wheel, 190 MB: the default Linux wheel also brings
CUDA libraries)::

    python3.11 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install -e '.[test]' -c constraints.txt torch==2.13.0   # about 4 min, 3.3 GB
    /tmp/torchvenv/bin/python tools/check_torch_backend.py [--models emb_lstm,...] [--workdir DIR]

The script sets ``KERAS_BACKEND=torch`` itself before Keras is imported. A run takes about 6
minutes on two cores: each conversion and each ``verify`` is a TensorFlow process of a few seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "torch"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
for _name in ("TF_USE_LEGACY_KERAS", "MLR_KERAS"):  # Keras 3 in this process, whatever the shell selected
    os.environ.pop(_name, None)

if importlib.util.find_spec("torch") is None:
    sys.exit("torch is not installed in this Python: make a venv with it (see this script's docstring)")

# pylint: disable=wrong-import-position
import numpy as np  # noqa: E402

from toolutil import ROOT, op_counts  # noqa: E402,F401  (ROOT: this checkout's package first on sys.path)

import keras  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import masked_lstm_rewriter as mlr  # noqa: E402

LENGTHS = (7, 3, 0, 5)  # a full row, an empty one, others (post-padded)
STEPS, VOCABULARY, FEATURES, UNITS = 7, 20, 2, 3
NATIVE = ("LSTM", "GRU", "RNN")
DOORS = ("convert", "export", "cli")


# ------------------------------------------------------------------ models and batches

def randomized(model):
    """``model`` with every weight drawn anew (no zero bias, so masked steps would show a mistake)."""
    rng = np.random.default_rng(1)
    for layer in model.layers:
        layer.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in layer.get_weights()])
    return model


def on_tokens(name: str, *stack):
    """Token ids -> ``Embedding(mask_zero=True)`` -> ``stack``."""
    inputs = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCABULARY, 4, mask_zero=True)(inputs)
    for layer in stack:
        x = layer(x)
    return randomized(keras.Model(inputs, x, name=name))


def on_features(name: str, *stack):
    """Features -> ``Masking(0.0)`` -> ``stack``."""
    inputs = keras.Input((None, FEATURES), name="features")
    x = keras.layers.Masking(0.0)(inputs)
    for layer in stack:
        x = layer(x)
    return randomized(keras.Model(inputs, x, name=name))


def with_initial_state(name: str, layer):
    """x, an explicit mask and h0, c0 (Keras 3 drops an Embedding's mask where initial_state is given)."""
    x, mask = keras.Input((None, FEATURES), name="x"), keras.Input((None,), dtype="bool", name="mask")
    h0, c0 = keras.Input((UNITS,), name="h0"), keras.Input((UNITS,), name="c0")
    return randomized(keras.Model([x, mask, h0, c0], layer(x, mask=mask, initial_state=[h0, c0]), name=name))


def models() -> dict:
    """name -> (model, mask mode, batch)."""
    layers = keras.layers
    return {
        "emb_lstm": (on_tokens("emb_lstm", layers.LSTM(UNITS, return_sequences=True)), "post", tokens()),
        "masking_gru_backwards": (on_features("masking_gru_backwards", layers.GRU(
            UNITS, go_backwards=True, return_sequences=True)), "post", features()),
        "bidirectional_lstm": (on_tokens("bidirectional_lstm", layers.Bidirectional(
            layers.LSTM(UNITS, return_sequences=True))), "post", tokens()),
        "lstm_gru_stack": (on_tokens("lstm_gru_stack", layers.LSTM(4, return_sequences=True), layers.GRU(UNITS)),
                           "post", tokens()),
        "simple_rnn": (on_tokens("simple_rnn", layers.SimpleRNN(UNITS, return_sequences=True)), "post", tokens()),
        "initial_state_lstm": (with_initial_state("initial_state_lstm", layers.LSTM(UNITS, return_sequences=True)),
                               "any", state_batch()),
        "backward_initial_state_lstm": (with_initial_state("backward_initial_state_lstm", layers.LSTM(
            UNITS, return_sequences=True, go_backwards=True)), "any", state_batch()),
    }


def tokens() -> list:
    rng = np.random.default_rng(0)
    batch = np.zeros((len(LENGTHS), STEPS), np.int32)
    for row, length in enumerate(LENGTHS):
        batch[row, :length] = rng.integers(1, VOCABULARY, length)
    return [batch]


def features() -> list:
    """Non-zero features, zeros (what ``Masking`` reads as padding) after each row's length."""
    rng = np.random.default_rng(0)
    batch = rng.uniform(0.1, 1.0, (len(LENGTHS), STEPS, FEATURES)).astype(np.float32)
    for row, length in enumerate(LENGTHS):
        batch[row, length:] = 0.0
    return [batch]


def state_batch() -> list:
    """x, a mask with a full row, an empty one, leading padding and trailing padding, non-zero h0, c0."""
    rng = np.random.default_rng(2)
    mask = np.array([[1] * STEPS, [0] * STEPS, [0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]], bool)
    return [rng.normal(size=(4, STEPS, FEATURES)).astype(np.float32), mask] + \
        [rng.normal(size=(4, UNITS)).astype(np.float32) for _ in range(2)]


# ------------------------------------------------------------------ running and comparing

def torch_outputs(model, batch: list) -> list:
    """The model's outputs on torch, flat, as arrays (inference mode)."""
    outputs = model(batch if len(batch) > 1 else batch[0], training=False)
    return [keras.ops.convert_to_numpy(output) for output in keras.tree.flatten(outputs)]


def max_diff(onnx_model, expected: list, batch: list) -> float:
    """The largest |onnxruntime - torch| over every output and position (inf if the shapes differ)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # an error is raised anyway: not also printed
    session = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.asarray(value).astype(_numpy_type(i.type)) for i, value in zip(session.get_inputs(), batch)}
    got = session.run(None, feeds)
    if len(got) != len(expected) or any(g.shape != e.shape for g, e in zip(got, expected)):
        return float("inf")
    return max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))


def _numpy_type(onnx_type: str):
    return {"tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}.get(onnx_type, np.float32)


def command(args: list) -> subprocess.CompletedProcess:
    """The command line, run with this process's environment (KERAS_BACKEND=torch)."""
    return subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", *args], capture_output=True, text=True,
                          check=False)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ------------------------------------------------------------------ the front doors

def through(door: str, model, mode: str, folder: str):
    """The ONNX model that ``door`` gives for ``model``."""
    path = os.path.join(folder, f"{model.name}_{door}.onnx")
    if door == "convert":
        return mlr.convert(model, mask_mode=mode)[0]
    if door == "export":
        with mlr.enable(mask_mode=mode):
            model.export(path, format="onnx", verbose=False)
        return onnx.load(path)
    done = command([keras_file(model, folder), "-o", path, "--mask-mode", mode])
    if done.returncode != 0:
        raise RuntimeError(last_line(done.stderr))
    return onnx.load(path)


def keras_file(model, folder: str) -> str:
    path = os.path.join(folder, f"{model.name}.keras")
    if not os.path.exists(path):
        model.save(path)
    return path


def row(name: str, door: str, onnx_model, diff: float, note: str = "", ok: bool = True) -> dict:
    """A line of the table; ``ok``: the front door worked (its difference and Loops still count)."""
    counts = op_counts(onnx_model) if onnx_model is not None else {}
    native = ", ".join(f"{op} x{counts[op]}" for op in NATIVE if counts.get(op)) or "-"
    return {"model": name, "door": door, "native": native, "loops": counts.get("Loop", 0), "diff": diff,
            "note": note, "ok": ok}


def check_model(name: str, model, mode: str, batch: list, folder: str) -> list:
    """One row per front door, and one for the command line's verify."""
    expected = torch_outputs(model, batch)
    rows = []
    for door in DOORS:
        try:
            onnx_model = through(door, model, mode, folder)
        except Exception as error:  # pylint: disable=broad-except  (a row of its own, and the exit status)
            rows.append(row(name, door, None, float("inf"), f"{type(error).__name__}: {last_line(str(error))}",
                            ok=False))
            continue
        rows.append(row(name, door, onnx_model, max_diff(onnx_model, expected, batch)))
    rows.append(verify_row(name, model, folder))
    return rows


def verify_row(name: str, model, folder: str) -> dict:
    """The command line's ``verify`` of the command line's file against the model run on torch."""
    done = command(["verify", keras_file(model, folder), os.path.join(folder, f"{name}_cli.onnx")])
    diffs = [float(cell) for line in done.stdout.splitlines() if line.startswith("onnxruntime")
             for cell in line.split() if _is_number(cell)]  # its table's |diff| columns
    verdict = last_line(done.stdout) or last_line(done.stderr)
    ok = done.returncode == 0
    return dict(row(name, "cli verify", None, max(diffs, default=float("inf")),
                    verdict.split(":")[0] if ok else verdict[:120], ok=ok), native="", loops="")


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def keras_own_exports(name: str, model, batch: list, folder: str) -> list:
    """What Keras's torch export gives without the plugin (informative): with the model's own input
    signature (the length left open) and with one fixed to the batch's shape, each run on the batch
    and on its first step alone."""
    fixed = [keras.InputSpec(shape=batch[0].shape, dtype=str(batch[0].dtype), name="tokens")]
    return [keras_own_export(name, model, batch, os.path.join(folder, f"{name}_keras_{label}.onnx"), signature)
            for label, signature in (("open", None), ("fixed", fixed))]


def keras_own_export(name: str, model, batch: list, path: str, signature) -> dict:
    door = "Keras export, no plugin" if signature is None else "  same, fixed shape"
    try:
        model.export(path, format="onnx", verbose=False, input_signature=signature)
    except Exception as error:  # pylint: disable=broad-except  (that is the finding)
        return dict(row(name, door, None, float("inf"), f"{type(error).__name__}: {last_line(str(error))[:80]}"),
                    informative=True)
    onnx_model = onnx.load(path)
    shape = [d.dim_param or d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim]
    results = {}
    for steps in (batch[0].shape[1], 1):
        cut = [x[:, :steps] for x in batch]
        try:
            results[steps] = f"{max_diff(onnx_model, torch_outputs(model, cut), cut):.1e}"
        except Exception as error:  # pylint: disable=broad-except  (onnxruntime refuses it: that is the finding)
            results[steps] = "fails: " + _runtime_error(error)
    diff = float(results[batch[0].shape[1]]) if _is_number(results[batch[0].shape[1]]) else float("inf")
    note = f"input {shape}; " + "; ".join(f"{steps} step(s): {result}" for steps, result in results.items())
    return dict(row(name, door, onnx_model, diff, note), informative=True)


def _runtime_error(error: Exception) -> str:
    """onnxruntime's message, short: what it says after its codes and node names."""
    first = str(error).strip().splitlines()[0]
    return first.split("Status Message: ")[-1].split(" : ")[-1][:40]


# ------------------------------------------------------------------ the table

def failed(entry: dict, tolerance: float) -> bool:
    """Does the row fail the check (a front door failed, differs, or left a Loop)?"""
    return not entry.get("informative") and (not entry["ok"] or entry["diff"] > tolerance or bool(entry["loops"]))


def print_table(rows: list, tolerance: float) -> None:
    print(f"{'model':28} {'front door':24} {'native ops':16} {'Loops':>5} {'max |diff|':>11}  note")
    for entry in rows:
        diff = "-" if entry["diff"] == float("inf") else f"{entry['diff']:.2e}"
        flag = " FAIL" if failed(entry, tolerance) else ""
        print(f"{entry['model']:28} {entry['door']:24} {entry['native']:16} {entry['loops']!s:>5} {diff:>11}  "
              f"{entry['note']}{flag}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--workdir", help="where the files are written (a temporary folder by default)")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="the largest difference allowed (1e-5)")
    parser.add_argument("--models", help="a comma-separated subset of the models (default: all)")
    args = parser.parse_args(argv)
    chosen = models()
    unknown = set(args.models.split(",")) - set(chosen) if args.models else set()
    if unknown:
        parser.error(f"unknown models {', '.join(sorted(unknown))}; known: {', '.join(chosen)}")
    print(f"Keras {keras.__version__} on {keras.config.backend()}, torch {_version('torch')}, "
          f"TensorFlow {_version('tensorflow')}, onnxruntime {ort.__version__}", flush=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        rows = []
        for name, (model, mode, batch) in chosen.items():
            if args.models and name not in args.models.split(","):
                continue
            rows += check_model(name, model, mode, batch, folder)
            if name == "emb_lstm":
                rows += keras_own_exports(name, model, batch, folder)
            print(f"checked {name}", file=sys.stderr, flush=True)
    print_table(rows, args.tolerance)
    return 1 if any(failed(entry, args.tolerance) for entry in rows) else 0


def _version(name: str) -> str:
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
