# SPDX-License-Identifier: Apache-2.0
"""Streaming through the front doors beside ``mlr.convert`` and ``enable()`` + ``from_keras``
(tests/test_streaming.py): the command line's switch and its default for a stateful Keras file,
``verify`` on a streaming model, and Keras 3's own ``model.export(format="onnx")`` under ``enable()``.

The oracle is Keras: every output at every position, on batches of rows of different lengths with
a full row and an empty row (those of tests/test_streaming.py, and verify's own).
"""

import logging

import onnx
import pytest

import masked_lstm_rewriter as mlr
import runtimes
from kerasutil import FLAVOUR, ONCE_PER_SUITE
from masked_lstm_rewriter import backend_process, cli, conversion, keras_source
from masked_lstm_rewriter.patches import keras_export
from test_streaming import (BATCH, built, check_chunks, convert_streaming, embedding_lstm_gru, keras_call,
                            reset, run_in_chunks, runner, state_inputs, streamed_names, text_generator, tokens_for,
                            valid_steps, _error)

pytestmark = pytest.mark.usefixtures("plugin_off")

keras3_only = pytest.mark.skipif(FLAVOUR != "keras3", reason="model.export(format='onnx') is Keras 3's")
CHUNKS = [3, 1, 4]


def stateful_model():
    """The stateful text generator of tests/test_streaming.py, its state no longer zeros (a call made)."""
    model, spec, make_input, _ = built(text_generator, batch=BATCH)
    model(make_input(valid_steps("post")))
    return model, spec


def check_stateful_chunks(model, onnx_model, spec, tokens):
    """Chunk by chunk on every runtime, the streaming model follows Keras's stateful model reset before
    the first chunk, at every position of the first output."""
    output = onnx_model.graph.output[0].name
    for runtime in runtimes.runtimes():
        reset(model)
        start = 0
        for end, out in run_in_chunks(runner(onnx_model, runtime), {"tokens": tokens}, state_inputs(onnx_model, spec),
                                      CHUNKS, BATCH):
            _error(keras_call(model, {"tokens": tokens[:, start:end]})[0], out[output],
                   f"{runtime}: steps {start} to {end}")
            start = end


# --- verify ------------------------------------------------------------------------------------------

def test_verify_feeds_a_streaming_model_zero_states_and_compares_its_own_outputs():
    model, spec, _, keras_states = built(embedding_lstm_gru)
    onnx_model = convert_streaming(model, spec, "any")  # no guard: every batch is compared
    result = mlr.verify(model, onnx_model, runtime="all")
    assert result.ok, result
    own = [o.name for o in onnx_model.graph.output][:len(model.outputs)]
    assert all([out.name for out in check.outputs] == own for check in result.checks), result
    assert {check.batch.split()[0] for check in result.checks} >= {"post-padded", "pre-padded", "holes"}
    assert sorted(result.ignored) == sorted(keras_states)
    assert "not compared: the state outputs lstm/h_out, lstm/c_out, gru/h_out" in result.verdict()
    assert any("state inputs lstm/h_in, lstm/c_in, gru/h_in are fed zeros" in note for note in result.notes)


def test_verify_resets_a_stateful_keras_model_before_each_batch():
    """The Keras model's state is not zeros when verify starts: it matches only if reset (each batch)."""
    model, spec = stateful_model()
    onnx_model, _ = mlr.convert(model, input_signature=spec)  # a stateful model streams by default
    assert streamed_names(onnx_model, spec) == (["gru/h_in"], ["gru/h_out"])
    result = mlr.verify(model, onnx_model, runtime="all")
    assert result.ok and len(result.checks) >= 3, result
    assert any("stateful layer(s) gru: reset before each batch" in note for note in result.notes), result.notes


# --- the command line ---------------------------------------------------------------------------------

def run_command(args, capsys) -> str:
    assert cli.main([str(arg) for arg in args]) == 0, capsys.readouterr().err
    return capsys.readouterr().err


def test_command_line_streams_a_stateful_keras_file_unless_told_not_to(tmp_path, capsys, monkeypatch):
    """No flag: streamed, said on stderr; --no-streaming: frozen, said with the states it froze. Both
    match Keras: the streamed model chunk by chunk, the frozen one as the saved model runs."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # tf2onnx's main sets it for the process
    model, spec = stateful_model()
    path = tmp_path / "model.keras"
    model.save(path)
    said = run_command([path, "-o", tmp_path / "streamed.onnx"], capsys)
    assert "masked_lstm_rewriter: stateful layer(s) gru: converted for streaming" in said, said
    assert "--no-streaming freezes" in said, said
    said = run_command([path, "-o", tmp_path / "frozen.onnx", "--no-streaming"], capsys)
    assert "masked_lstm_rewriter: stateful layer 'gru': its state is frozen" in said and "--streaming" in said, said
    streamed, frozen = (onnx.load(str(tmp_path / name)) for name in ("streamed.onnx", "frozen.onnx"))
    assert streamed_names(streamed, spec) == (["gru/h_in"], ["gru/h_out"])
    assert streamed_names(frozen, spec) == ([], [])
    tokens = tokens_for(valid_steps("post"))
    saved = keras_source.load(str(path))
    expected = keras_call(saved, {"tokens": tokens})[0]  # from the state the file holds, as frozen
    for runtime in runtimes.runtimes():
        _error(expected, runner(frozen, runtime)({"tokens": tokens})[frozen.graph.output[0].name], runtime)
    check_stateful_chunks(saved, streamed, spec, tokens)


def test_a_subclassed_model_streams_and_reports_under_its_keras_layer_names(tmp_path):
    """Keras 3 traces a subclassed model's layers ``gru`` and ``gru_1`` under ``gru_1`` and ``gru_1_2``:
    the state names and the report are the Keras layers' all the same, in the model's order."""
    from kerasutil import keras  # pylint: disable=import-outside-toplevel
    from test_streaming import VOCAB  # pylint: disable=import-outside-toplevel

    class TwoGRUs(keras.Model):  # pylint: disable=too-few-public-methods
        def __init__(self):
            super().__init__()
            self.embedding = keras.layers.Embedding(VOCAB, 5, mask_zero=True)
            self.lower = keras.layers.GRU(4, return_sequences=True)
            self.upper = keras.layers.GRU(3, return_sequences=True)

        def call(self, tokens):
            return self.upper(self.lower(self.embedding(tokens)))

    model = TwoGRUs()
    tokens = tokens_for(valid_steps("post"))
    model(tokens)
    onnx_model, report = mlr.convert(model, str(tmp_path / "model.onnx"), streaming=True)
    names = [model.lower.name, model.upper.name]
    assert [layer.layer for layer in report.layers] == names, str(report)
    assert [i.name for i in onnx_model.graph.input][1:] == [f"{name}/h_in" for name in names]


# --- Keras 3's own export -----------------------------------------------------------------------------

@keras3_only
def test_keras_export_streams_under_enable_with_the_keras_layer_names(tmp_path):
    model, spec, make_input, keras_states = built(embedding_lstm_gru)
    model(make_input(valid_steps("post")))  # Keras exports a model that has been called
    with mlr.enable(streaming=True):
        model.export(str(tmp_path / "model.onnx"), format="onnx", verbose=False)
    onnx_model = onnx.load(str(tmp_path / "model.onnx"))
    assert streamed_names(onnx_model, spec) == (["lstm/h_in", "lstm/c_in", "gru/h_in"], list(keras_states))
    for runtime in runtimes.runtimes():
        check_chunks(model, onnx_model, spec, {"tokens": make_input(valid_steps("post"))}, keras_states, runtime)


@keras3_only
def test_keras_export_of_a_stateful_model_streams_only_when_enabled_with_streaming(tmp_path, caplog):
    """enable() is an explicit switch: without streaming=True the state is frozen (said at INFO, with the
    Keras layer's name), as in any tf2onnx conversion under enable(); with it, the state is the inputs."""
    model, spec = stateful_model()
    reset(model)  # frozen, the model starts from zeros
    tokens = tokens_for(valid_steps("post"))
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"), mlr.enable():
        model.export(str(tmp_path / "frozen.onnx"), format="onnx", verbose=False)
    assert "stateful layer 'gru': its state is frozen" in caplog.text, caplog.text
    frozen = onnx.load(str(tmp_path / "frozen.onnx"))
    assert streamed_names(frozen, spec) == ([], [])
    expected = keras_call(model, {"tokens": tokens})[0]
    for runtime in runtimes.runtimes():
        _error(expected, runner(frozen, runtime)({"tokens": tokens})[frozen.graph.output[0].name], runtime)
    with mlr.enable(streaming=True):
        model.export(str(tmp_path / "streamed.onnx"), format="onnx", verbose=False)
    streamed = onnx.load(str(tmp_path / "streamed.onnx"))
    assert streamed_names(streamed, spec) == (["gru/h_in"], ["gru/h_out"])
    check_stateful_chunks(model, streamed, spec, tokens)


@ONCE_PER_SUITE
def test_keras_export_on_another_backend_converts_with_the_enabled_switches(tmp_path, monkeypatch):
    """On JAX or torch the export converts in a TensorFlow process: with enable()'s streaming and
    keep_wrong, not convert's stateful default."""
    asked = []
    monkeypatch.setattr(backend_process, "needs_tensorflow_process", lambda model: True)
    monkeypatch.setattr(backend_process, "convert_in_tensorflow_process",
                        lambda model, **options: asked.append(options) or (None, "report"))
    monkeypatch.setattr(conversion, "save", lambda onnx_model, path: None)
    for streaming in (True, False):
        with mlr.enable(streaming=streaming, keep_wrong=True):
            keras_export.export_onnx(object(), str(tmp_path / "model.onnx"))
    assert [(options["streaming"], options["keep_wrong"]) for options in asked] == [(True, True), (False, True)]

