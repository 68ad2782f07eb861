# SPDX-License-Identifier: Apache-2.0
"""TimeDistributed around and after masked recurrent layers: native ops, equal to Keras everywhere.

The models users ship: an NER tagger (``Embedding(mask_zero) -> Bidirectional(LSTM or GRU) ->
TimeDistributed(Dense)``) and character encoders (``TimeDistributed(LSTM)`` and
``TimeDistributed(Bidirectional(LSTM))`` over [batch, words, chars] ids), in both mask modes.
With a dynamic time axis Keras 3 maps ``TimeDistributed`` over the batch size (the traced graph
is broken in TensorFlow too, see ``masked_lstm_rewriter/patches/time_distributed.py``); with the plugin
enabled it is traced as one call over [batch * time, ...], and the masked layers inside are
rewritten like any other. Conversions here go through ``enable()``: ``custom_rewriter=`` runs
only after Keras has traced the model, too late to fix it (the conversion then fails, tested below).
"""

import logging
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import (FLAVOUR, LENGTHS, STEPS, assert_matches_keras, check_conversion, convert, keras,
                       native_layers, onnx_outputs, op_counts, post_padded_tokens, randomize_weights, structure)
from models import UNITS
import runtimes
import signatures

import masked_lstm_rewriter as mlr

TAGS = 9
VOCAB = 50
CHARS = 30
# [batch, words, chars]: a full row and a full word, a row of one short word, an empty row, an
# empty word between two others, and more rows than words (Keras 3's bug fails then)
WORD_LENGTHS = [[6, 3, 1, 6], [2], [], [4, 0, 5], [1, 1, 1, 1], [6, 6]]
WORDS, CHARS_PER_WORD = 4, 6
RECURRENT = {"LSTM": keras.layers.LSTM, "GRU": keras.layers.GRU}

keras3_only = pytest.mark.skipif(FLAVOUR != "keras3", reason="Keras 3's TimeDistributed (tf_keras reshapes)")


pytestmark = [pytest.mark.usefixtures("plugin_off"), pytest.mark.grid]


def tagger(kind="LSTM", seed=0):
    """tokens -> Embedding(mask_zero) -> Bidirectional(kind, return_sequences) -> TimeDistributed(Dense)."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    x = keras.layers.Bidirectional(RECURRENT[kind](UNITS, return_sequences=True))(x)
    tags = keras.layers.TimeDistributed(keras.layers.Dense(TAGS), name="tagger")(x)
    model = randomize_weights(keras.Model(tokens, tags), seed)
    return model, (tf.TensorSpec((None, None), tf.int32, name="tokens"),)


def char_encoder(bidirectional=False, seed=0):
    """[batch, words, chars] ids -> Embedding(mask_zero) -> TimeDistributed(LSTM) per word."""
    keras.utils.set_random_seed(seed)
    chars = keras.Input((None, None), dtype="int32", name="chars")
    x = keras.layers.Embedding(CHARS, 5, mask_zero=True)(chars)
    encoder = keras.layers.LSTM(UNITS)
    if bidirectional:
        encoder = keras.layers.Bidirectional(encoder)
    words = keras.layers.TimeDistributed(encoder, name="char_encoder")(x)
    model = randomize_weights(keras.Model(chars, words), seed)
    return model, (tf.TensorSpec((None, None, None), tf.int32, name="chars"),)


def token_ids(padding="post"):
    """[5, 7] ids: rows of lengths 7, 3, 0, 1, 6 (``pre``: right-aligned; ``holes``: gaps inside)."""
    ids = post_padded_tokens(LENGTHS, STEPS, VOCAB)
    if padding == "pre":
        ids = np.stack([np.roll(row, STEPS - length) for row, length in zip(ids, LENGTHS)])
    elif padding == "holes":
        ids[0, [1, 4]] = 0
        ids[4, 2] = 0
    return [ids]


def char_ids(padding="post", seed=0):
    """[6, 4, 6] ids for WORD_LENGTHS (``pre``: each word right-aligned; ``holes``: gaps inside words)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(WORD_LENGTHS), WORDS, CHARS_PER_WORD), np.int32)
    for row, lengths in enumerate(WORD_LENGTHS):
        for word, length in enumerate(lengths):
            start = CHARS_PER_WORD - length if padding == "pre" else 0
            ids[row, word, start:start + length] = rng.integers(1, CHARS, size=length)
    if padding == "holes":
        ids[0, 0, [1, 3]] = 0
        ids[3, 2, 0] = 0
    return [ids]


def char_nodes(bidirectional):
    """LSTM nodes of a character encoder, by signature form: one per direction, times one per word
    where Keras 3 unrolls a fixed words axis (its own correct path, left as it is: each word is a
    masked layer of its own)."""
    def nodes(form):
        static_words = signatures.FORMS[form][1] is not None
        return {"LSTM": (2 if bidirectional else 1) * (WORDS if FLAVOUR == "keras3" and static_words else 1)}
    return nodes


def check_enabled(model, spec, inputs, ops, mask_mode="post"):
    """check_conversion with the plugin enabled (the only way the tracing fix applies)."""
    with mlr.enable(mask_mode):
        return check_conversion(model, spec, inputs, rewriter=None, ops=ops)


# --- the NER tagger ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_tagger_post(kind):
    model, spec = tagger(kind)
    check_enabled(model, spec, token_ids(), {kind: 2})  # a Bidirectional layer: two forward nodes


@pytest.mark.parametrize("padding", ["pre", "holes", "post"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_tagger_any(kind, padding):
    model, spec = tagger(kind)
    check_enabled(model, spec, token_ids(padding), {kind: 2}, mask_mode="any")


def test_tagger_more_rows_than_steps():
    """Keras 3's own traced graph fails here ("slice index ... out of bounds")."""
    model, spec = tagger()
    ids = post_padded_tokens([3, 0, 1, 2, 3, 3, 1, 0], 3, VOCAB)
    check_enabled(model, spec, [ids], {"LSTM": 2})


# --- character encoders -----------------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [False, True], ids=["lstm", "bidirectional"])
def test_char_encoder_post(bidirectional):
    model, spec = char_encoder(bidirectional)
    check_enabled(model, spec, char_ids(), char_nodes(bidirectional))


@pytest.mark.parametrize("padding", ["pre", "holes"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["lstm", "bidirectional"])
def test_char_encoder_any(bidirectional, padding):
    model, spec = char_encoder(bidirectional)
    check_enabled(model, spec, char_ids(padding), char_nodes(bidirectional), mask_mode="any")


# --- static signatures and OpenVINO ------------------------------------------------------------

@pytest.mark.parametrize("form", ["batch 1", "static batch", "static time"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["lstm", "bidirectional"])
def test_char_encoder_signatures(monkeypatch, bidirectional, form):
    """The words axis dynamic (merged into the batch) or fixed (Keras 3 unrolls it)."""
    monkeypatch.setenv("MLR_SIGNATURES", form)
    model, spec = char_encoder(bidirectional)
    check_enabled(model, spec, char_ids(), char_nodes(bidirectional))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_tagger_static_time(monkeypatch, kind):
    """A fixed time axis: Keras unrolls TimeDistributed itself, correctly."""
    monkeypatch.setenv("MLR_SIGNATURES", "static time")
    model, spec = tagger(kind)
    check_enabled(model, spec, token_ids(), {kind: 2})


openvino = pytest.mark.skipif(runtimes.ov is None, reason="openvino is not installed")


@openvino
@pytest.mark.parametrize("build, inputs, ops", [
    (lambda: tagger("LSTM"), token_ids, {"LSTM": 2}), (lambda: tagger("GRU"), token_ids, {"GRU": 2}),
    (lambda: char_encoder(bidirectional=True), char_ids, char_nodes(True))],
    ids=["tagger lstm", "tagger gru", "char bidirectional"])
def test_openvino_dynamic(monkeypatch, build, inputs, ops):
    """The whole models on OpenVINO with dynamic shapes, as they declare them."""
    monkeypatch.setenv("MLR_OPENVINO", "1")
    model, spec = build()
    check_enabled(model, spec, inputs(), ops)


@openvino
def test_openvino_forward_char_encoder_static(monkeypatch):
    """Fully static, on OpenVINO (which honours ``sequence_lens`` only there; the emitted graph
    does not depend on it)."""
    monkeypatch.setenv("MLR_OPENVINO", "1")
    monkeypatch.setenv("MLR_SIGNATURES", "dynamic")
    model, spec = char_encoder()
    ids = char_ids()
    check_enabled(model, (tf.TensorSpec(ids[0].shape, tf.int32, name="chars"),), ids, char_nodes(False)("static"))


@openvino
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_openvino_bidirectional_over_flattened_frames(monkeypatch, kind):
    """[batch, 7 frames, 2, 3] -> TimeDistributed(Flatten) -> Bidirectional (a lip-reading model's
    shape): Keras 3 unrolls the frames, and its stack of them, transposed, reaches the backward half.
    A reversal there that tf2onnx's transpose optimizer moves past the transposes made OpenVINO
    compute the backward half wrongly for every batch of more than one row."""
    monkeypatch.setenv("MLR_OPENVINO", "1")
    monkeypatch.setenv("MLR_SIGNATURES", "dynamic")
    keras.utils.set_random_seed(0)
    frames = keras.Input((STEPS, 2, 3), name="frames")
    x = keras.layers.TimeDistributed(keras.layers.Flatten())(frames)
    model = randomize_weights(keras.Model(frames, keras.layers.Bidirectional(
        RECURRENT[kind](UNITS, return_sequences=True))(x)))
    spec = (tf.TensorSpec((None, STEPS, 2, 3), tf.float32, name="frames"),)
    inputs = [np.random.default_rng(0).normal(size=(len(LENGTHS), STEPS, 2, 3)).astype(np.float32)]
    check_conversion(model, spec, inputs, rewriter=mlr.rewrite_masked_lstm, ops={kind: 2})


# --- what the fix touches and what it leaves alone ---------------------------------------------

@keras3_only
def test_keras3_traces_over_the_batch():
    """The root cause, in TensorFlow alone: Keras 3 (3.14+) maps a TimeDistributed with a dynamic
    time axis over the batch size. If this fails, Keras has fixed it: the fix may be retired."""
    model, spec = tagger()
    traced = tf.function(lambda ids: model(ids, training=False), input_signature=spec)
    ids = token_ids()[0]
    assert model(ids).shape == (5, 7, TAGS)
    assert traced(ids).shape == (5, 5, TAGS)
    with mlr.enable():
        fixed = tf.function(lambda ids: model(ids, training=False), input_signature=spec)
        np.testing.assert_allclose(fixed(ids), model(ids), atol=1e-6)


@keras3_only
def test_enable_patches_keras_and_disable_restores_it():
    from keras.src.layers.rnn.time_distributed import TimeDistributed  # pylint: disable=import-outside-toplevel
    original = TimeDistributed.call
    with mlr.enable():
        assert TimeDistributed.call is not original
        with mlr.enable("any"):
            assert TimeDistributed.call is not original
    assert TimeDistributed.call is original


@keras3_only
def test_keras_export(tmp_path):
    """``model.export(format="onnx")`` traces the model itself, before tf2onnx is called."""
    model, _ = char_encoder(bidirectional=True)
    ids = char_ids()
    model(ids[0])  # Keras exports only a model that has been called
    with mlr.enable():
        model.export(str(tmp_path / "model.onnx"), format="onnx", verbose=False)
    onnx_model = onnx.load(str(tmp_path / "model.onnx"))
    assert native_layers(onnx_model)["LSTM"] == 2 and op_counts(onnx_model)["Loop"] == 0
    spec = (tf.TensorSpec(None, tf.int32, name=onnx_model.graph.input[0].name),)
    assert_matches_keras(model, onnx_model, spec, ids)


@keras3_only
def test_custom_rewriter_alone_reports_the_model_wrong(caplog):
    """Without enable() the model reaches the rewriter already broken. tf2onnx's Python API logs
    what a rewriter raises and goes on: the ERROR names the layer and how to convert it right,
    and the report says the model is wrong."""
    model, spec = tagger()
    with caplog.at_level(logging.ERROR):
        convert(model, spec)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "TimeDistributed layer 'tagger_1'" in errors[0], errors
    assert "enable()" in errors[0] and "keep_wrong=True" in errors[0]
    assert "KNOWN WRONG" in mlr.last_report().headline()


@keras3_only
def test_keep_wrong_writes_the_broken_model_and_says_so(caplog):
    model, spec = tagger()
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(keep_wrong=True))
    warnings = [r.getMessage() for r in caplog.records if "TimeDistributed" in r.getMessage()]
    assert len(warnings) == 1 and "'tagger_1'" in warnings[0], warnings
    report = mlr.last_report()
    assert len(report.known_wrong) == 1 and "KNOWN WRONG" in report.headline() and "KNOWN WRONG" in str(report)
    assert native_layers(onnx_model)["LSTM"] == 2  # the Bidirectional LSTM is still rewritten
    assert onnx_outputs(onnx_model, spec, token_ids())[0].shape == (5, 5, TAGS)  # as broken as in TensorFlow


@pytest.fixture(scope="module")
def saved_without_plugin(tmp_path_factory):
    """The tagger exported by Keras 3 as a SavedModel without the plugin: the broken trace inside."""
    model, _ = tagger()
    model(token_ids()[0])
    path = tmp_path_factory.mktemp("td") / "saved"
    model.export(str(path), format="tf_saved_model", verbose=False)
    return path


@keras3_only
def test_broken_saved_model_fails_on_every_front_door(saved_without_plugin, tmp_path):
    with pytest.raises(mlr.KnownWrong, match="'tagger_1'"):
        mlr.convert(saved_without_plugin, tmp_path / "library.onnx")
    assert not (tmp_path / "library.onnx").exists()
    out = tmp_path / "cli.onnx"
    done = run_cli(saved_without_plugin, "-o", out)
    errors = [line for line in done.stderr.splitlines() if line.startswith("masked_lstm_rewriter: error")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert "'tagger_1'" in errors[0] and "--keep-wrong" in errors[0] and not out.exists()
    assert not done.stdout.strip()


@keras3_only
def test_broken_saved_model_kept_on_request(saved_without_plugin, tmp_path):
    out = tmp_path / "kept.onnx"
    done = run_cli(saved_without_plugin, "-o", out, "--keep-wrong")
    assert done.returncode == 0 and out.exists(), done.stderr
    assert "KNOWN WRONG" in done.stdout.splitlines()[0] and "'tagger_1'" in done.stdout


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", *map(str, args)], capture_output=True,
                          text=True, timeout=600, check=False, env={k: v for k, v in os.environ.items()
                                                                    if k != "TF2ONNX_MASKED_LSTM"})


def test_no_warning_when_traced_right(caplog):
    model, spec = tagger()
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"), mlr.enable():
        convert(model, spec, rewriter=None)
    assert not [r for r in caplog.records if "TimeDistributed" in r.getMessage()]


def dense_model(steps=None):
    """features [batch, steps, 3] -> TimeDistributed(Dense): no mask, no recurrent layer."""
    keras.utils.set_random_seed(0)
    features = keras.Input((steps, 3), name="features")
    model = randomize_weights(keras.Model(features, keras.layers.TimeDistributed(keras.layers.Dense(TAGS))(features)))
    return model, (tf.TensorSpec((None, steps, 3), tf.float32, name="features"),)


def test_unmasked_time_distributed_dense():
    """No mask at all: with Keras 3, stock tf2onnx's model is just as broken, so it is fixed the same way."""
    model, spec = dense_model()
    inputs = [np.random.default_rng(0).normal(size=(5, 7, 3)).astype(np.float32)]
    assert op_counts(check_enabled(model, spec, inputs, None))["Loop"] == 0


def test_static_time_axis_is_stock():
    """With a fixed time axis Keras traces correctly: the plugin leaves that model as stock makes it."""
    model, spec = dense_model(steps=7)
    stock = convert_from_fresh_names(model, spec)
    with mlr.enable():
        assert structure(convert_from_fresh_names(model, spec)) == structure(stock)


def convert_from_fresh_names(model, spec):
    """tf2onnx numbers the names it makes from one global counter, and orders tied nodes by name:
    "Add__998" and "Add__1003" sort the other way round than "Add__98" and "Add__103", so two
    conversions compare equal under ``canonical`` only when they start from the same count."""
    tf2onnx.utils.INTERNAL_NAME = 1
    return convert(model, spec, rewriter=None)
