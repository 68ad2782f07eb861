# SPDX-License-Identifier: Apache-2.0
"""Run by tests/test_other_backends.py in a process whose Keras 3 is on another backend (JAX).

    KERAS_BACKEND=jax python tests/backend_check.py OUT_FOLDER

For each model it builds on that backend (random non-zero weights), it goes through some of the
front doors (:data:`DOORS`): the model object with ``mlr.convert``, its ``.keras`` file with the
command line (``KERAS_BACKEND`` left as it is), Keras's own ``model.export(format="onnx")`` under
``mlr.enable()``, and ``verify`` of the command line's file against the model on this backend.
Each ONNX model is run on onnxruntime and compared with the model run on its own backend, every
output at every position. Prints one JSON object: {model: {front door: {"error": max |diff|,
"ops": [...], "names": [inputs, outputs]}, "verify": {"status": ..., "last": [line]}}}, where inputs and
outputs are [[name, [dim_param or size, ...]], ...].
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import keras
import numpy as np
import onnx
import onnxruntime as ort

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.corpus.ops import walk_nodes

LENGTHS = (7, 3, 0, 5)  # a full row, an empty one, others
STEPS = 7


def tokens() -> np.ndarray:
    rng = np.random.default_rng(0)
    batch = np.zeros((len(LENGTHS), STEPS), np.int32)
    for row, length in enumerate(LENGTHS):
        batch[row, :length] = rng.integers(1, 20, length)
    return batch


def randomized(model):
    rng = np.random.default_rng(1)
    for layer in model.layers:
        layer.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in layer.get_weights()])
    return model


def models() -> dict:
    layers = keras.layers

    def on_tokens(name, *stack):
        inputs = keras.Input((None,), dtype="int32", name="tokens")
        x = layers.Embedding(20, 4, mask_zero=True)(inputs)
        for layer in stack:
            x = layer(x)
        return randomized(keras.Model(inputs, x, name=name))
    def with_initial_state(name, layer):
        """x, an explicit mask and h0, c0 (Keras 3 drops an Embedding's mask where initial_state is given)."""
        x, mask = keras.Input((None, 2), name="x"), keras.Input((None,), dtype="bool", name="mask")
        h0, c0 = keras.Input((3,), name="h0"), keras.Input((3,), name="c0")
        return randomized(keras.Model([x, mask, h0, c0], layer(x, mask=mask, initial_state=[h0, c0]), name=name))
    return {
        "initial_state_lstm": with_initial_state("initial_state_lstm", layers.LSTM(3, return_sequences=True)),
        "backward_initial_state_lstm": with_initial_state("backward_initial_state_lstm",
                                                          layers.LSTM(3, return_sequences=True, go_backwards=True)),
        "lstm": on_tokens("lstm", layers.LSTM(3, return_sequences=True)),
        "bidirectional_gru": on_tokens("bidirectional_gru", layers.Bidirectional(layers.GRU(3, return_sequences=True))),
        "backward_rnn_last": on_tokens("backward_rnn_last", layers.SimpleRNN(3, go_backwards=True)),
        "softsign_lstm": on_tokens("softsign_lstm", layers.LSTM(3, activation="softsign", return_sequences=True)),
    }


def state_batch() -> list:
    """x, a mask with leading padding, an empty row and a full one, and non-zero h0, c0: where Keras on
    JAX outputs the initial state (before a row's first valid step) and on TensorFlow zeros."""
    rng = np.random.default_rng(2)
    mask = np.array([[1] * STEPS, [0] * STEPS, [0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]], bool)
    return [rng.normal(size=(4, STEPS, 2)).astype(np.float32), mask] + \
        [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(2)]


def compare(model, onnx_model, batch) -> dict:
    batch = batch if isinstance(batch, list) else [batch]
    expected = model(batch if len(batch) > 1 else batch[0])
    expected = [np.asarray(e) for e in (expected if isinstance(expected, (list, tuple)) else [expected])]
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: value for i, value in zip(session.get_inputs(), batch)})
    shapes_agree = len(got) == len(expected) and all(g.shape == e.shape for g, e in zip(got, expected))
    error = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected)) if shapes_agree else float("inf")
    return {"error": error, "ops": sorted({node.op_type for node in walk_nodes(onnx_model.graph)}),  # a scheduled layer:
            "names": names(onnx_model)}                                                            # its single node


def names(onnx_model) -> list:
    """[inputs, outputs], each [[name, [dim_param or size, ...]], ...]."""
    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    return [[[v.name, dims(v)] for v in values] for values in (onnx_model.graph.input, onnx_model.graph.output)]


# the front doors each model goes through (each conversion is a TensorFlow process: a few seconds)
DOORS = {"lstm": ("convert", "cli", "export", "verify"), "bidirectional_gru": ("export", "convert_streaming"),
         "backward_rnn_last": ("convert",), "initial_state_lstm": ("convert_any",),
         "backward_initial_state_lstm": ("convert_any",), "softsign_lstm": ("export_openvino",)}


class Warnings(logging.Handler):
    """The plugin's WARNING records, as messages."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def through(door: str, model, folder: str) -> tuple:
    """(the ONNX model ``door`` gives for ``model``, the report's counts of layers rewritten and left
    as Loops, or None where the door gives no report (the command line))."""
    if door.startswith("convert"):
        onnx_model, report = mlr.convert(model, mask_mode="any" if door == "convert_any" else None,
                                         streaming=True if door == "convert_streaming" else None)
        return onnx_model, (len(report.rewritten), len(report.left_as_loop))
    path = os.path.join(folder, f"{model.name}_{door}.onnx")
    if door.startswith("export"):
        with mlr.enable(runtime="openvino" if door == "export_openvino" else None):
            model.export(path, format="onnx", verbose=False)
        report = mlr.last_report()
        return onnx.load(path), (len(report.rewritten), len(report.left_as_loop))
    keras_file = os.path.join(folder, f"{model.name}.keras")
    model.save(keras_file)
    done = command([keras_file, "-o", path])
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return onnx.load(path), None


def command(args: list) -> subprocess.CompletedProcess:
    """The command line, run with this process's environment (its KERAS_BACKEND)."""
    return subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", *args], capture_output=True, text=True,
                          check=False)


def main(folder: str) -> None:
    results = {"backend": keras.config.backend()}
    batch = tokens()
    for name, model in models().items():
        found = results[name] = {}
        for door in DOORS[name]:
            if door == "verify":  # the command line's verify, against the model run on this backend
                done = command(["verify", os.path.join(folder, f"{name}.keras"), os.path.join(folder, f"{name}_cli.onnx")])
                found[door] = {"status": done.returncode, "last": done.stdout.strip().splitlines()[-1:]}
                continue
            warnings = Warnings()
            logging.getLogger("masked_lstm_rewriter").addHandler(warnings)
            try:
                onnx_model, counts = through(door, model, folder)
            except Exception as error:  # pylint: disable=broad-except  (reported, and the test fails on it)
                found[door] = {"failed": f"{type(error).__name__}: {error}"}
                continue
            finally:
                logging.getLogger("masked_lstm_rewriter").removeHandler(warnings)
            found[door] = dict(compare(model, onnx_model, state_batch() if "initial_state" in name else batch),
                               counts=counts, warnings=warnings.messages)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
