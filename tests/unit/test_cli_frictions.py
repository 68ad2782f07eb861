# SPDX-License-Identifier: Apache-2.0
"""The command line's frictions, in process and without Keras: ``-q`` / ``--quiet``, progress lines
and no tf2onnx INFO lines by default, model files checked before TensorFlow loads (a truncated
``.keras``, a text file named ``.h5``), the tf_keras ``.h5`` hint, the LiteRT hint, output paths (empty, under a
file), a signal arriving once the output is in place, and environment variables named in errors.

The conversions here are of a tiny SavedModel built with TensorFlow alone (no Keras); the
subprocess tests of ``tests/test_cli.py`` check what only a fresh process shows (TensorFlow's
start-up lines under ``-q``)."""

from __future__ import annotations

import os
import signal
import zipfile

import onnx
import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import cli, cli_input, output_file
from _onnx_files import DATA, perturbed_lstm

STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")  # ids -> Embedding(10) -> LSTM
ERROR = "masked_lstm_rewriter: error: "
MASK_MODE_ENV, RUNTIME_ENV = "TF2ONNX_MASKED_LSTM", "TF2ONNX_MASKED_LSTM_TARGET"


PROGRESS = ("loading ", "converting with tf2onnx", "rewrote ", "no masked recurrent layer to rewrite", "writing ")


def one_error_line(err: str) -> str:
    """The one line the run said beside its progress lines: the error."""
    lines = [line for line in err.strip().splitlines()
             if line.strip() and not line.startswith(tuple(f"masked_lstm_rewriter: {stage}" for stage in PROGRESS))]
    assert len(lines) == 1 and lines[0].startswith(ERROR), err
    return lines[0]


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A SavedModel of ``x * 2`` built with TensorFlow alone: a conversion of about a second."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    module = tf.Module()
    module.scale = tf.Variable(2.0)
    serve = tf.function(lambda x: {"y": x * module.scale}, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    module.serve = serve
    path = tmp_path_factory.mktemp("saved") / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return str(path)


@pytest.fixture
def tf_environment(monkeypatch):
    """tf2onnx's main sets TF_CPP_MIN_LOG_LEVEL for the process: restored after the test."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    for name in (MASK_MODE_ENV, RUNTIME_ENV):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------- quiet, progress, tf2onnx's lines


def test_a_conversion_shows_progress_and_no_tf2onnx_info(saved_model, tmp_path, capsys, tf_environment):
    out = tmp_path / "model.onnx"
    assert cli.main([saved_model, "-o", str(out)]) == 0
    captured = capsys.readouterr()
    ours = [line.split(": ", 1)[1] for line in captured.err.splitlines() if line.startswith("masked_lstm_rewriter: ")]
    stages = [next((i for i, line in enumerate(ours) if line.startswith(stage)), None)
              for stage in (f"loading {saved_model}", "converting with tf2onnx", "no masked recurrent layer to "
                            "rewrite; optimizing", f"writing {out}")]
    assert None not in stages and stages == sorted(stages), captured.err
    assert " - INFO - " not in captured.err, captured.err
    assert ".partial-" not in captured.err + captured.out
    assert out.exists() and os.listdir(tmp_path) == ["model.onnx"]


def test_verbose_shows_tf2onnx_info_naming_the_output_not_the_hidden_file(saved_model, tmp_path, capsys,
                                                                          tf_environment):
    out = tmp_path / "model.onnx"
    assert cli.main([saved_model, "-o", str(out), "-v"]) == 0
    captured = capsys.readouterr()
    assert " - INFO - " in captured.err and f"ONNX model is saved at {out}" in captured.err, captured.err
    assert ".partial-" not in captured.err + captured.out


def test_options_before_the_model(saved_model, tmp_path, capsys, tf_environment):
    out = tmp_path / "model.onnx"
    assert cli.main(["--debug", "--opset", "15", saved_model, "-o", str(out)]) == 0
    assert onnx.load(str(out)).opset_import[0].version == 15, capsys.readouterr().err


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_conversion_prints_nothing(saved_model, tmp_path, capfd, tf_environment, flag):
    out = tmp_path / "model.onnx"
    assert cli.main([saved_model, "-o", str(out), flag]) == 0
    assert capfd.readouterr() == ("", "")
    assert onnx.load(str(out)).graph.output


def test_quiet_conversion_still_says_what_failed(tmp_path, capfd, tf_environment):
    assert cli.main(["--saved-model", str(tmp_path), "-o", str(tmp_path / "model.onnx"), "-q"]) == 1
    captured = capfd.readouterr()
    assert captured.out == "" and "conversion failed" in one_error_line(captured.err)
    assert os.listdir(tmp_path) == []


def test_quiet_rewrite_prints_nothing_not_even_warnings(tmp_path, capfd, tf_environment):
    out = tmp_path / "native.onnx"
    args = ["rewrite", STOCK, "-o", str(out), "--runtime", "openvino", "--mask-mode", "post"]
    assert cli.main(args) == 0
    assert "WARNING: mask_mode='post' for OpenVINO" in capfd.readouterr().err  # the warning this test silences
    assert cli.main(args + ["-q"]) == 0
    assert capfd.readouterr() == ("", "")
    assert cli.main(["rewrite", str(tmp_path / "missing.onnx"), "-o", str(out), "--quiet"]) == 2
    captured = capfd.readouterr()
    assert captured.out == "" and "missing.onnx: no such file" in one_error_line(captured.err)


def test_quiet_verify_prints_nothing_or_the_failed_verdict(tmp_path, capfd):
    right, wrong = tmp_path / "right.onnx", tmp_path / "wrong.onnx"
    rewritten = mlr.rewrite_onnx(STOCK, mask_mode="post").onnx_model
    onnx.save(rewritten, right)
    onnx.save(perturbed_lstm(rewritten), wrong)
    small = ["--rows", "3", "--steps", "4", "-q"]
    capfd.readouterr()  # what making the files said (TensorFlow's start-up lines, when it loads here first)
    assert cli.main(["verify", STOCK, str(right)] + small) == 0
    assert capfd.readouterr() == ("", "")
    assert cli.main(["-q", "verify", STOCK, str(right)] + small[:-1]) == 0
    assert capfd.readouterr() == ("", "")
    assert cli.main(["verify", STOCK, str(wrong)] + small) == 1
    captured = capfd.readouterr()
    assert captured.out == "" and one_error_line(captured.err).startswith(ERROR + "NOT verified")


# ---------------------------------------------------------------- model files checked before TensorFlow


def _truncated_keras(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}" * 500)
        archive.writestr("model.weights.h5", b"\0" * 4000)
    path.write_bytes(path.read_bytes()[:1500])


@pytest.mark.parametrize("name, make, message", [
    ("trunc.keras", _truncated_keras, "trunc.keras: not a valid .keras file (not a zip archive; truncated?)"),
    ("text.keras", lambda path: path.write_text("hello"), "text.keras: not a valid .keras file (not a zip archive"),
    ("other.keras", lambda path: zipfile.ZipFile(path, "w").close(), "other.keras: not a valid .keras file (a zip "
     "archive without a Keras model's config.json)"),
    ("model.h5", lambda path: path.write_text("hello\n"), "model.h5: not a valid .h5 file (no HDF5 signature"),
    ("empty.hdf5", lambda path: path.write_bytes(b""), "empty.hdf5: not a valid .hdf5 file (no HDF5 signature"),
], ids=["truncated keras", "text keras", "zip without config", "text h5", "empty hdf5"])
@pytest.mark.parametrize("form", ["MODEL", "--keras", "verify"])
def test_a_model_file_that_is_not_what_its_name_says(tmp_path, capsys, monkeypatch, name, make, message, form):
    monkeypatch.chdir(tmp_path)
    make(tmp_path / name)
    args = {"MODEL": [name, "-o", "out.onnx"], "--keras": ["--keras", name, "-o", "out.onnx"],
            "verify": ["verify", name, STOCK]}[form]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in one_error_line(captured.err), captured.err
    assert sorted(os.listdir(tmp_path)) == [name]


def test_hdf5_signature_after_a_user_block(tmp_path):
    (tmp_path / "model.h5").write_bytes(b"\0" * 512 + cli_input.HDF5_SIGNATURE + b"\0" * 100)
    (tmp_path / "plain.h5").write_bytes(cli_input.HDF5_SIGNATURE + b"\0" * 100)
    assert cli_input.model_file_problem(str(tmp_path / "model.h5")) is None
    assert cli_input.model_file_problem(str(tmp_path / "plain.h5")) is None


LEGACY_FAILURE = ("legacy.h5: Keras could not load it (ValueError: Unrecognized keyword arguments passed to LSTM: "
                  "{'time_major': False})")


@pytest.mark.parametrize("legacy, status", [(None, 2), ("1", 1)], ids=["Keras 3", "TF_USE_LEGACY_KERAS=1"])
def test_a_tf_keras_h5_file_under_keras_3_gets_a_hint(tmp_path, capsys, monkeypatch, tf_environment, legacy, status):
    """Keras 3 cannot read tf_keras's LSTM (``time_major``): the error says to run with tf_keras."""
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel

    def fails():
        raise ValueError(LEGACY_FAILURE)
    monkeypatch.setattr(convert, "main", fails)
    if legacy is None:
        monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    else:
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "legacy.h5").write_bytes(cli_input.HDF5_SIGNATURE + b"\0" * 100)
    assert cli.main(["legacy.h5", "-o", "out.onnx"]) == status
    line = one_error_line(capsys.readouterr().err)
    assert LEGACY_FAILURE in line
    assert line.endswith("; a tf_keras (Keras 2) .h5 file: run with TF_USE_LEGACY_KERAS=1") == (legacy is None)
    assert sorted(os.listdir(tmp_path)) == ["legacy.h5"]


# ---------------------------------------------------------------- output paths


@pytest.mark.parametrize("command", ["convert", "rewrite"])
@pytest.mark.parametrize("output, message", [
    (["-o", ""], "--output: an empty file name"),
    (["--output="], "--output: an empty file name"),
    (["-o", "file.keras/out.onnx"], "file.keras is a file, not a directory"),
    (["-o", "file.keras/sub/out.onnx"], "file.keras is a file, not a directory"),
], ids=["-o empty", "--output= empty", "under a file", "deep under a file"])
def test_an_output_that_cannot_be_a_file_fails_at_once(tmp_path, capsys, monkeypatch, saved_model, command, output,
                                                       message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.keras").write_text("a file")
    if command == "rewrite" and output == ["--output="]:
        output = ["--output", ""]
    args = ([saved_model] if command == "convert" else ["rewrite", STOCK]) + output
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in one_error_line(captured.err), captured.err
    assert sorted(os.listdir(tmp_path)) == ["file.keras"]


def test_the_library_says_the_same(tmp_path):
    (tmp_path / "file.keras").write_text("a file")
    with pytest.raises(output_file.OutputError, match="an empty file name"):
        output_file.check_writable("")
    with pytest.raises(output_file.OutputError, match=r"file\.keras is a file, not a directory"):
        output_file.check_writable(tmp_path / "file.keras" / "out.onnx")
    with pytest.raises(output_file.OutputError, match="does not exist"):
        output_file.check_writable(tmp_path / "no" / "out.onnx")


def _signal_at_rename(monkeypatch, when: str):
    """SIGINT to this process right after the output is renamed into place (``after``), or just
    before the last step ahead of the rename (``before``)."""
    replace, chmod = os.replace, os.chmod

    def replace_then_signal(source, target):
        replace(source, target)
        os.kill(os.getpid(), signal.SIGINT)

    def signal_then_chmod(path, mode):
        os.kill(os.getpid(), signal.SIGINT)
        chmod(path, mode)
    if when == "after":
        monkeypatch.setattr(os, "replace", replace_then_signal)
    else:
        monkeypatch.setattr(os, "chmod", signal_then_chmod)


@pytest.mark.parametrize("when, status", [("after", 0), ("before", 130)])
def test_a_signal_once_the_output_is_in_place_ends_the_run_with_0(tmp_path, capsys, monkeypatch, when, status):
    """From the rename on, the conversion is done: a Ctrl-C then is ignored (status 0, the file
    kept); one a moment earlier stops the run (status 130, no file)."""
    out = tmp_path / "native.onnx"
    _signal_at_rename(monkeypatch, when)
    assert cli.main(["rewrite", STOCK, "-o", str(out)]) == status
    captured = capsys.readouterr()
    assert os.listdir(tmp_path) == (["native.onnx"] if status == 0 else [])
    assert (ERROR in captured.err) == (status != 0), captured.err
    assert bool(captured.out.strip()) == (status == 0)  # the report


def test_a_conversion_interrupted_just_after_the_rename_keeps_its_file(saved_model, tmp_path, capsys, monkeypatch,
                                                                        tf_environment):
    out = tmp_path / "model.onnx"
    _signal_at_rename(monkeypatch, "after")
    assert cli.main([saved_model, "-o", str(out)]) == 0
    assert ERROR not in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["model.onnx"] and onnx.load(str(out)).graph.output


# ---------------------------------------------------------------- environment variables named in errors


@pytest.mark.parametrize("variable, choices", [(MASK_MODE_ENV, "post, any"),
                                               (RUNTIME_ENV, "onnxruntime, openvino")])
def test_a_bad_environment_value_is_named_as_such(tmp_path, capsys, monkeypatch, variable, choices):
    monkeypatch.setenv(variable, "x")
    assert cli.main([str(tmp_path), "-o", str(tmp_path / "out.onnx")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line == f"{ERROR}{variable} must be one of {choices} (or empty), not 'x'"
    option = "--mask-mode" if variable == MASK_MODE_ENV else "--runtime"
    value = "any" if variable == MASK_MODE_ENV else "onnxruntime"
    assert cli.main([option, value]) == 2  # given on the command line, the variable does not matter
    assert "no model given" in one_error_line(capsys.readouterr().err)
    assert cli.main([option, "pre"]) == 2
    assert one_error_line(capsys.readouterr().err) == f"{ERROR}{option} must be one of {choices}, not 'pre'"


def test_rewrite_names_a_bad_mask_mode_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(MASK_MODE_ENV, "x")
    assert cli.main(["rewrite", STOCK, "-o", str(tmp_path / "out.onnx")]) == 2
    assert one_error_line(capsys.readouterr().err) == f"{ERROR}{MASK_MODE_ENV} must be one of post, any " \
                                                      "(or empty), not 'x'"
    assert cli.main(["rewrite", STOCK, "-o", str(tmp_path / "out.onnx"), "--mask-mode", "any"]) == 0


@pytest.mark.parametrize("model, option", [("m.keras", "--keras"), ("m.H5", "--keras"), ("m.tflite", "--tflite")])
def test_model_is_short_for_the_option_of_its_suffix(model, option):
    assert cli._expand_model([model, "-o", "out.onnx"]) == [option, model, "-o", "out.onnx"]


def test_a_model_of_another_kind_is_named_with_the_kinds_taken(tmp_path):
    (tmp_path / "model.pb").write_bytes(b"")
    with pytest.raises(cli.UsageError, match=r"not a \.keras, \.h5 or \.tflite file or a SavedModel directory"):
        cli._expand_model([str(tmp_path / "model.pb")])


def test_the_litert_hint_is_given_only_for_a_file_with_resource_variables(tmp_path):
    """A LiteRT file of fused LSTMs holds none (no hint); nor does a file flatbuffers cannot read. (A stateful
    model's file, which holds them, is made with Keras: tests/test_litert.py.)"""
    fused = os.path.join(os.path.dirname(DATA), "litert_fused", "sequence.tflite")
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in cli_input.litert_ops(fused)
    garbage = tmp_path / "model.tflite"
    garbage.write_bytes(b"not a flatbuffer")
    for path in (fused, str(garbage), None):
        assert cli_input.with_litert_hint("list index out of range", path) == "list index out of range"
