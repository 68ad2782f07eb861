# SPDX-License-Identifier: Apache-2.0
"""The command lines, run for real: ``python -m masked_lstm_rewriter`` and an unmodified
``python -m tf2onnx.convert`` switched by ``TF2ONNX_MASKED_LSTM``."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
import tensorflow as tf

from kerasutil import (LENGTHS, ONCE_PER_SUITE, STEPS, keras, native_layers, op_counts, post_padded_tokens,
                       randomize_weights, session)
from models import UNITS, embedding_model

from masked_lstm_rewriter import cli

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


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


PROGRESS = ("loading ", "converting with tf2onnx", "rewrote ", "no masked recurrent layer to rewrite", "writing ")


def said(stderr: str) -> list:
    """The lines the command line said on stderr, but for its progress lines."""
    return [line for line in stderr.splitlines() if line.startswith("masked_lstm_rewriter")
            and not line.startswith(tuple(f"masked_lstm_rewriter: {stage}" for stage in PROGRESS))]


def check_native(path, tokens, expected):
    onnx_model = onnx.load(str(path))
    counts = op_counts(onnx_model)
    assert (native_layers(onnx_model)["LSTM"], counts["Loop"]) == (2, 0), counts  # a Bidirectional layer
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: tokens})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.fixture(scope="module")
def default_conversion(saved_model, tmp_path_factory):
    """(the finished run, its output) of the command line on the SavedModel with no plugin option."""
    out = tmp_path_factory.mktemp("default") / "model.onnx"
    return run("masked_lstm_rewriter", "--saved-model", saved_model[0], "-o", out), out


@pytest.mark.parametrize("mode", ["post", "any"])
def test_drop_in_command_converts_and_reports(saved_model, default_conversion, tmp_path, mode):
    """"post", the default mode, as no option gives it; "any" as the option asks."""
    path, tokens, expected = saved_model
    if mode == "post":
        done, out = default_conversion
        tmp_path = out.parent
    else:
        out = tmp_path / "model.onnx"
        done = run("masked_lstm_rewriter", "--saved-model", path, "--output", out, "--mask-mode", mode)
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, tokens, expected)
    assert "2 recurrent layer(s) (2 masked, 0 without a mask): 2 native, 0 left as Loop" in done.stdout
    assert f"mask_mode={mode}" in done.stdout
    assert os.listdir(tmp_path) == ["model.onnx"]


@pytest.mark.parametrize("args, message, status", [
    ([], "no model given", 2),
    (["--saved-model", "{missing}", "--output", "{out}"], "no such file or directory", 2),
    (["{missing}", "--output", "{out}"], "no such file or directory", 2),
    (["--saved-model", "{model}", "--output", "{out}", "--no-such-option"], "unrecognized arguments", 2),
    (["--saved-model", "{model}", "--output", "{tmp}/no/dir/model.onnx"], "does not exist", 2),
    (["--saved-model", "{model}", "--output", "/proc/model.onnx"], "cannot write in /proc", 2),
    (["--saved-model", "{model}"], "--output FILE (or -o FILE) is required", 2),
    (["--saved-model", "{model}", "--output", "{out}", "--mask-mode", "pre"], "--mask-mode must be one of", 2),
    (["--saved-model", "{model}", "--output", "{out}", "--runtime", "tensorrt"], "--runtime must be one of", 2),
    (["--saved-model", "{model}", "--output", "{out}", "--target", "openvino"], "use --runtime openvino", 2),
    (["--saved-model", "{tmp}", "--output", "{out}"], "conversion failed", 1),
    (["{tmp}", "--output", "{out}"], "a directory without saved_model.pb: not a SavedModel", 2),
    (["verify", "{missing}"], "the following arguments are required", 2),
], ids=["no model", "missing model", "missing model file", "unknown option", "no output directory",
        "unwritable output", "no output", "bad mask mode", "bad runtime", "runtime as tf2onnx target",
        "unreadable model", "directory not a saved model", "verify without onnx"])
@ONCE_PER_SUITE
def test_bad_input_is_one_line_and_a_documented_status(saved_model, tmp_path, args, message, status):
    values = {"missing": tmp_path / "missing", "out": tmp_path / "model.onnx", "model": saved_model[0],
              "tmp": tmp_path}
    done = run("masked_lstm_rewriter", *[a.format(**values) for a in args])
    assert done.returncode == status, done.stderr[-2000:]
    assert status in cli.EXIT_CODES
    lines = said(done.stderr)
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("masked_lstm_rewriter: error:"), \
        done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert os.listdir(tmp_path) == [], "no partial output"


@ONCE_PER_SUITE
def test_help_and_version_are_the_plugins_and_quick():
    done = run("masked_lstm_rewriter", "--help")
    assert done.returncode == 0
    text = done.stdout
    options = text[text.index("plugin options:"):]
    assert options.index("--mask-mode") < options.index("--runtime") < options.index("tf2onnx options")
    assert "every option of python -m tf2onnx.convert passes through" in text
    assert "exit status:" in text and "tensorflow-onnx" not in text
    probe = ("import sys; from masked_lstm_rewriter import cli; cli.main(['--help']); "
             "print('TENSORFLOW' if 'tensorflow' in sys.modules else 'LIGHT')")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env=dict(os.environ)).stdout.strip().endswith("LIGHT")
    version = run("masked_lstm_rewriter", "--version")
    assert version.returncode == 0 and version.stdout.startswith("masked-lstm-rewriter 0.")
    assert "tf2onnx 1.17" in version.stdout


@ONCE_PER_SUITE
def test_tf2onnx_target_keeps_its_meaning(saved_model, tmp_path):
    """``--target`` is tf2onnx's (its workarounds): the plugin's runtime option is ``--runtime``."""
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    done = run("masked_lstm_rewriter", "--saved-model", path, "-o", out, "--target", "tensorrt")
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, tokens, expected)


@pytest.mark.parametrize("signal_name, status", [("SIGTERM", 143), ("SIGINT", 130)])
@ONCE_PER_SUITE
def test_an_interrupted_run_leaves_no_file(saved_model, tmp_path, signal_name, status):
    """Stopped while the partial output exists, the run removes it and says so in one line."""
    out = tmp_path / "model.onnx"
    env = dict(os.environ)
    env.pop("TF2ONNX_MASKED_LSTM", None)
    process = subprocess.Popen([sys.executable, "-m", "masked_lstm_rewriter", "--saved-model", str(saved_model[0]),
                                "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    deadline = time.monotonic() + 120
    while not any(name.startswith(".partial-") for name in os.listdir(tmp_path)):
        assert process.poll() is None and time.monotonic() < deadline, "the conversion never started writing"
        time.sleep(0.05)
    process.send_signal(getattr(signal, signal_name))
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr[-2000:]
    assert os.listdir(tmp_path) == []
    lines = said(stderr)
    assert len(lines) == 1 and lines[0].startswith("masked_lstm_rewriter: error: "), stderr[-2000:]


@ONCE_PER_SUITE
def test_quiet_prints_nothing_but_errors(saved_model, tmp_path):
    """``-q``: no report, no progress, no warnings, and not TensorFlow's start-up lines either
    (written by its C++ code, past Python's streams); a failure still says what failed, in one line."""
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    done = run("masked_lstm_rewriter", "--saved-model", path, "-o", out, "-q")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    check_native(out, tokens, expected)
    failed = run("masked_lstm_rewriter", "--saved-model", tmp_path, "-o", tmp_path / "other.onnx", "--quiet")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("masked_lstm_rewriter: error: conversion failed") and \
        len(failed.stderr.splitlines()) == 1, failed.stderr


@ONCE_PER_SUITE
def test_progress_lines_and_no_tf2onnx_info_by_default(saved_model, default_conversion):
    """A conversion says what it is doing, through the plugin's logger; tf2onnx's INFO lines
    (shown with -v) are not shown, nor the hidden file the output is written to first."""
    path = saved_model[0]
    done, out = default_conversion
    assert done.returncode == 0, done.stderr[-2000:]
    ours = [line.split(": ", 1)[1] for line in done.stderr.splitlines() if line.startswith("masked_lstm_rewriter: ")]
    assert ours == [f"loading {path}", "converting with tf2onnx", "rewrote 2 of 2 recurrent layer(s); optimizing",
                    f"writing {out}"], done.stderr
    assert " - INFO - " not in done.stderr and ".partial-" not in done.stderr + done.stdout
    assert done.stdout.startswith("masked_lstm_rewriter: ")  # the report


@ONCE_PER_SUITE
def test_debug_shows_the_traceback(tmp_path):
    done = run("masked_lstm_rewriter", "--saved-model", tmp_path, "--output", tmp_path / "model.onnx", "--debug")
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("masked_lstm_rewriter: error: conversion failed")


def test_a_keras_file_converts_with_dynamic_shapes_and_every_output(tmp_path):
    """MODEL first, a .keras file: traced with a dynamic batch and time (tf2onnx's own --keras loader
    keeps the shapes the model was last called with) and every output (it drops Keras 3's
    return_state outputs but one)."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(50, 5, mask_zero=True)(tokens)
    model = randomize_weights(keras.Model(tokens, keras.layers.LSTM(UNITS, return_sequences=True,
                                                                    return_state=True)(embedded)))
    model(np.ones((2, 4), np.int32))
    model.save(tmp_path / "model.keras")
    done = run("masked_lstm_rewriter", tmp_path / "model.keras", "-o", tmp_path / "model.onnx")
    assert done.returncode == 0, done.stderr[-2000:]
    onnx_model = onnx.load(str(tmp_path / "model.onnx"))
    batch = post_padded_tokens(LENGTHS, STEPS)
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: batch})
    expected = [np.asarray(x) for x in model(batch)]
    assert len(got) == 3
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=1e-5)


@pytest.mark.parametrize("mode", ["post", pytest.param("any", marks=ONCE_PER_SUITE)])  # the mode's value: any flavour
def test_environment_switch_reaches_unmodified_tf2onnx_convert(saved_model, tmp_path, mode):
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    done = run("tf2onnx.convert", "--saved-model", path, "--output", out, env_mode=mode)
    assert done.returncode == 0, done.stderr[-2000:]
    check_native(out, tokens, expected)


@ONCE_PER_SUITE
def test_environment_switch_unset_or_empty_is_stock(saved_model, tmp_path):
    """Unset or empty, the start-up hook does nothing: the plugin is not even imported (the probes),
    and unset, tf2onnx's conversion is stock. (Stock tf2onnx itself orders nodes differently from run
    to run, so bytes cannot be compared.)"""
    out = tmp_path / "unset.onnx"
    done = run("tf2onnx.convert", "--saved-model", saved_model[0], "--output", out)
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


@ONCE_PER_SUITE
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
@ONCE_PER_SUITE
def test_target_openvino_keeps_what_openvino_cannot_compile_a_loop(hard_sigmoid_model, tmp_path, command):
    out = tmp_path / "model.onnx"
    if command == "drop-in":
        done = run("masked_lstm_rewriter", "--saved-model", hard_sigmoid_model, "--output", out,
                   "--runtime", "openvino", "--mask-mode", "post")
    else:
        done = run("tf2onnx.convert", "--saved-model", hard_sigmoid_model, "--output", out, env_mode="post",
                   env={"TF2ONNX_MASKED_LSTM_TARGET": "openvino"})
    assert done.returncode == 0, done.stderr[-2000:]
    counts = op_counts(onnx.load(str(out)))
    assert (counts["Loop"], counts["LSTM"]) == (1, 0), counts
    if command == "drop-in":
        assert "OpenVINO's native LSTM op compiles only" in done.stdout
        # an explicit post mode for OpenVINO: the warning reaches the command line's user
        assert "masked_lstm_rewriter: WARNING: mask_mode='post' for OpenVINO" in done.stderr


@ONCE_PER_SUITE
def test_runtime_openvino_defaults_to_the_exact_mode(saved_model, tmp_path):
    out = tmp_path / "model.onnx"
    done = run("masked_lstm_rewriter", "--saved-model", saved_model[0], "--output", out, "--runtime", "openvino")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mask_mode=any" in done.stdout and "masked_lstm_rewriter: WARNING" not in done.stderr
    check_native(out, *saved_model[1:])


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


@ONCE_PER_SUITE
def test_graphdef_with_lowered_control_flow_is_reported(frozen_graph, tmp_path):
    """TF1-style loops reach the rewriter as ONNX Loops already: left alone, and the log says why. tf2onnx
    leaves their TensorList ops in the model, which no runtime loads: the conversion fails, saying what to
    do, unless --keep-wrong (then the report says it)."""
    paths, inputs, outputs = frozen_graph
    out = tmp_path / "model.onnx"
    args = ["--graphdef", paths[True], "--inputs", inputs, "--outputs", outputs, "--output", out]
    done = run("masked_lstm_rewriter", *args)
    assert done.returncode == 1 and not out.exists(), done.stderr[-2000:]
    (error,) = [line for line in said(done.stderr) if "error:" in line]
    assert "no ONNX form for TensorFlow op(s) TensorListReserve, TensorListSetItem" in error
    assert "freeze with lower_control_flow=False" in error
    kept = run("masked_lstm_rewriter", *args, "--keep-wrong")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert op_counts(onnx.load(str(out)))["Loop"] == 2
    assert "2 recurrent layer(s) (2 masked, 0 without a mask): 0 native, 2 left as Loop; the model is KNOWN " \
           "WRONG" in kept.stdout
    assert "lower_control_flow=False" in kept.stdout


def test_the_command_lines_choices_are_the_librarys():
    """The command line names the modes and runtimes without importing TensorFlow: the same lists."""
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    assert cli.MASK_MODES == mlr.MASK_MODES and cli.RUNTIMES == mlr.TARGETS


SCRIPT_IMPORTS = {
    "tf2onnx.convert attribute": "import tf2onnx",           # tf2onnx.convert imports tfonnx half-way through
    "from tf2onnx import convert": "from tf2onnx import convert",
    "tfonnx first": "import tf2onnx.tfonnx; import tf2onnx.convert",
    "the plugin module first": "import masked_lstm_rewriter.plugin",  # it imports tfonnx before defining enable
}


# the order of imports is the hook's subject, independent of the flavour: one order in both
@pytest.mark.parametrize("imports", [name if name == "from tf2onnx import convert" else
                                     pytest.param(name, marks=ONCE_PER_SUITE) for name in sorted(SCRIPT_IMPORTS)])
def test_environment_switch_in_a_script_converting_with_from_keras(imports):
    """The switch also serves a script's own ``tf2onnx.convert.from_keras``, however it imports tf2onnx."""
    script = "\n".join([
        "import tensorflow as tf",
        "from kerasutil import keras",
        SCRIPT_IMPORTS[imports],
        "import tf2onnx.convert",
        "tokens = keras.Input((None,), dtype='int32')",
        "embedded = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)",
        "model = keras.Model(tokens, keras.layers.LSTM(3)(embedded))",
        "spec = [tf.TensorSpec((None, None), tf.int32)]",
        "onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=15)",
        "import masked_lstm_rewriter as mlr",
        "from masked_lstm_rewriter.corpus.ops import walk_nodes",  # a scheduled layer: its single node
        "print(sorted({n.op_type for n in walk_nodes(onnx_model.graph)} & {'LSTM', 'Loop'}), mlr.enabled_mode())",
    ])
    env = dict(os.environ, TF2ONNX_MASKED_LSTM="post", PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['LSTM'] post", done.stdout
