# SPDX-License-Identifier: Apache-2.0
"""The command lines, run for real: ``python -m masked_lstm_rewriter`` and an unmodified
``python -m tf2onnx.convert`` switched by ``TF2ONNX_MASKED_LSTM``."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf

from kerasutil import keras, op_counts, session
from models import UNITS, embedding_model


def save_model(model, spec, path):
    """``model`` as a SavedModel at ``path`` whose serving signature is ``spec`` (one input)."""
    function = tf.function(lambda tokens: model(tokens, training=False), input_signature=spec)
    module = tf.Module()
    module.model = model
    module.serve = function
    tf.saved_model.save(module, str(path), signatures={"serving_default": function})
    return path


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A SavedModel of an Embedding-masked Bidirectional LSTM, and Keras's outputs on a batch."""
    model, spec, inputs = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    path = save_model(model, spec, tmp_path_factory.mktemp("cli") / "saved")
    return path, inputs[0], np.asarray(model(inputs[0]))


def run(module, *args, env_mode=None, env=None):
    env = dict(os.environ, **(env or {}))
    env.pop("TF2ONNX_MASKED_LSTM", None)
    if env_mode is not None:
        env["TF2ONNX_MASKED_LSTM"] = env_mode
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def check_native(path, tokens, expected):
    onnx_model = onnx.load(str(path))
    counts = op_counts(onnx_model)
    assert (counts["LSTM"], counts["Loop"]) == (2, 0), counts  # a Bidirectional layer: two forward nodes
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: tokens})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_drop_in_command_converts_and_reports(saved_model, tmp_path, mode):
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    done = run("masked_lstm_rewriter", "--saved-model", path, "--output", out, "--mask-mode", mode)
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, tokens, expected)
    assert "2 masked recurrent layer(s) rewritten, 0 left as Loop" in done.stdout
    assert f"mask_mode={mode}" in done.stdout
    assert os.listdir(tmp_path) == ["model.onnx"]


@pytest.mark.parametrize("args, message", [
    (["--saved-model", "{missing}", "--output", "{out}"], "no such file or directory"),
    (["--saved-model", "{model}", "--output", "{out}", "--no-such-option"], "unrecognized arguments"),
    (["--saved-model", "{model}", "--output", "{tmp}/no/dir/model.onnx"], "does not exist"),
    (["--saved-model", "{model}", "--output", "{out}", "--mask-mode", "pre"], "--mask-mode must be one of"),
    (["--saved-model", "{tmp}", "--output", "{out}"], "conversion failed"),
    (["--saved-model", "{model}", "--output", "{out}", "--target", "tensorrt"], "target must be"),
], ids=["missing model", "unknown option", "no output directory", "bad mask mode", "unreadable model", "bad target"])
def test_drop_in_command_bad_input(saved_model, tmp_path, args, message):
    values = {"missing": tmp_path / "missing", "out": tmp_path / "model.onnx", "model": saved_model[0],
              "tmp": tmp_path}
    done = run("masked_lstm_rewriter", *[a.format(**values) for a in args])
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("masked_lstm_rewriter: error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr[-2000:]
    assert os.listdir(tmp_path) == [], "no partial output"


@pytest.mark.parametrize("mode", ["post", "any"])
def test_environment_switch_reaches_unmodified_tf2onnx_convert(saved_model, tmp_path, mode):
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    done = run("tf2onnx.convert", "--saved-model", path, "--output", out, env_mode=mode)
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, tokens, expected)


def test_environment_switch_unset_or_empty_is_stock(saved_model, tmp_path):
    """Unset or empty, the start-up hook does nothing: the plugin is not even imported. (Stock
    tf2onnx itself orders nodes differently from run to run, so bytes cannot be compared.)"""
    path = saved_model[0]
    for name, mode in (("unset", None), ("empty", "")):
        out = tmp_path / f"{name}.onnx"
        done = run("tf2onnx.convert", "--saved-model", path, "--output", out, env_mode=mode)
        assert done.returncode == 0, done.stderr[-2000:]
        assert op_counts(onnx.load(str(out)))["Loop"] == 2
    probe = ("import sys, tf2onnx.tfonnx; print(any(m.split('.')[0] == 'masked_lstm_rewriter' for m in sys.modules)"
             " or any('EnableAfterImport' in type(f).__name__ for f in sys.meta_path))")
    for mode, loaded in ((None, "False"), ("", "False"), ("post", "True")):
        env = {k: v for k, v in os.environ.items() if k != "TF2ONNX_MASKED_LSTM"}
        if mode is not None:
            env["TF2ONNX_MASKED_LSTM"] = mode
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
        assert done.stdout.strip() == loaded, mode


def test_environment_switch_rejects_other_values_before_converting(saved_model, tmp_path):
    out = tmp_path / "model.onnx"
    done = run("tf2onnx.convert", "--saved-model", saved_model[0], "--output", out, env_mode="yes")
    assert done.returncode != 0
    assert "TF2ONNX_MASKED_LSTM='yes': expected one of post, any" in done.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def hard_sigmoid_model(tmp_path_factory):
    """A SavedModel of an Embedding-masked LSTM with hard_sigmoid gates (OpenVINO has no native form)."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True,
                                                       recurrent_activation="hard_sigmoid"))
    return save_model(model, spec, tmp_path_factory.mktemp("cli") / "hard_sigmoid")


@pytest.mark.parametrize("command", ["drop-in", "environment"])
def test_target_openvino_keeps_what_openvino_cannot_compile_a_loop(hard_sigmoid_model, tmp_path, command):
    out = tmp_path / "model.onnx"
    if command == "drop-in":
        done = run("masked_lstm_rewriter", "--saved-model", hard_sigmoid_model, "--output", out,
                   "--target", "openvino")
    else:
        done = run("tf2onnx.convert", "--saved-model", hard_sigmoid_model, "--output", out, env_mode="post",
                   env={"TF2ONNX_MASKED_LSTM_TARGET": "openvino"})
    assert done.returncode == 0, done.stderr[-2000:]
    counts = op_counts(onnx.load(str(out)))
    assert (counts["Loop"], counts["LSTM"]) == (1, 0), counts
    if command == "drop-in":
        assert "OpenVINO's native LSTM op compiles only" in done.stdout


@pytest.fixture(scope="module")
def frozen_graph(saved_model, tmp_path_factory):
    """The same model as a frozen GraphDef (.pb), with its input and output tensor names."""
    from tensorflow.python.framework.convert_to_constants import (  # pylint: disable=import-outside-toplevel
        convert_variables_to_constants_v2)
    loaded = tf.saved_model.load(str(saved_model[0]))
    folder = tmp_path_factory.mktemp("graphdef")
    paths = {}
    for lowered in (False, True):
        frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"], lower_control_flow=lowered)
        paths[lowered] = folder / f"frozen{'-lowered' if lowered else ''}.pb"
        paths[lowered].write_bytes(frozen.graph.as_graph_def().SerializeToString())
    inputs = [t.name for t in frozen.inputs if t.dtype != tf.resource]
    return paths, ",".join(inputs), ",".join(t.name for t in frozen.outputs)


@pytest.mark.parametrize("command", ["drop-in", "environment"])
def test_graphdef_input(saved_model, frozen_graph, tmp_path, command):
    paths, inputs, outputs = frozen_graph
    out = tmp_path / "model.onnx"
    args = ["--graphdef", paths[False], "--inputs", inputs, "--outputs", outputs, "--output", out]
    if command == "drop-in":
        done = run("masked_lstm_rewriter", *args)
    else:
        done = run("tf2onnx.convert", *args, env_mode="post")
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, *saved_model[1:])


def test_graphdef_with_lowered_control_flow_is_reported(frozen_graph, tmp_path):
    """TF1-style loops reach the rewriter as ONNX Loops already: left alone, and the report says why."""
    paths, inputs, outputs = frozen_graph
    out = tmp_path / "model.onnx"
    done = run("masked_lstm_rewriter", "--graphdef", paths[True], "--inputs", inputs, "--outputs", outputs,
               "--output", out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert op_counts(onnx.load(str(out)))["Loop"] == 2
    assert "0 masked recurrent layer(s) rewritten, 2 left as Loop" in done.stdout
    assert "lower_control_flow=False" in done.stdout
