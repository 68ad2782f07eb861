# SPDX-License-Identifier: Apache-2.0
"""Switching the rewrite on: custom_rewriter, enable()/disable(), logging, and staying out of the way."""

import logging

import numpy as np
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import FLAVOUR, assert_matches_keras, assert_native, canonical, convert, keras, op_counts, session
from models import UNITS, embedding_model

import masked_lstm_rewriter as mlr


pytestmark = pytest.mark.usefixtures("plugin_off")


def masked_model():
    return embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))


def stock(model, spec):
    return convert(model, spec, rewriter=None)


def test_mask_modes_are_checked():
    with pytest.raises(ValueError, match="mask_mode"):
        mlr.make_rewriter("pre")
    with pytest.raises(ValueError, match="mask_mode"):
        mlr.enable("pre")
    assert mlr.enabled_mode() is None
    assert mlr.make_rewriter("any").mask_mode == "any"


def test_enable_any_mode_and_restore():
    model, spec, _ = masked_model()
    with mlr.enable("any"):
        assert mlr.enabled_mode() == "any"
        with mlr.enable("post"):
            assert mlr.enabled_mode() == "post"
        assert mlr.enabled_mode() == "any"
        assert_native(stock(model, spec))
    assert mlr.enabled_mode() is None


def test_enable_applies_to_plain_from_keras():
    model, spec, inputs = masked_model()
    assert op_counts(stock(model, spec))["Loop"] == 1
    mlr.enable()
    assert mlr.enabled_mode() == "post"
    onnx_model = stock(model, spec)
    assert_native(onnx_model)
    assert_matches_keras(model, onnx_model, spec, inputs)
    mlr.disable()
    assert op_counts(stock(model, spec))["Loop"] == 1


def test_enable_as_context_manager_restores_previous_state():
    model, spec, _ = masked_model()
    with mlr.enable():
        assert_native(stock(model, spec))
    assert mlr.enabled_mode() is None
    assert op_counts(stock(model, spec))["Loop"] == 1


def test_rewrite_applied_once_when_enabled_twice_and_passed_explicitly(caplog):
    model, spec, inputs = masked_model()
    mlr.enable()
    mlr.enable()
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)  # also passes rewrite_masked_lstm explicitly
    assert_native(onnx_model)
    assert_matches_keras(model, onnx_model, spec, inputs)
    rewritten = [r for r in caplog.records if r.levelno == logging.INFO and "rewritten" in r.getMessage()]
    assert len(rewritten) == 1


def test_enable_covers_from_function():
    model, spec, inputs = masked_model()
    function = tf.function(lambda tokens: model(tokens, training=False))
    with mlr.enable():
        onnx_model, _ = tf2onnx.convert.from_function(function, input_signature=spec, opset=15)
    assert_native(onnx_model)
    assert_matches_keras(model, onnx_model, spec, inputs)


@pytest.mark.skipif(FLAVOUR != "keras3", reason="model.export(format='onnx') is Keras 3")
def test_enable_covers_keras3_export(tmp_path):
    import onnx
    model, spec, inputs = masked_model()
    model(inputs[0])  # export needs a model that has been called
    path = tmp_path / "model.onnx"
    with mlr.enable():
        model.export(str(path), format="onnx", verbose=False)
    onnx_model = onnx.load(str(path))
    assert_native(onnx_model)
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: inputs[0]})[0]
    np.testing.assert_allclose(got, np.asarray(model(inputs[0])), atol=1e-5)


def test_logs_one_info_line_per_rewritten_layer(caplog):
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                                     keras.layers.LSTM(UNITS))
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        convert(model, spec)
    infos = [r.getMessage() for r in caplog.records if r.name == "masked_lstm_rewriter"]
    assert len(infos) == 2 and all("rewritten into a native ONNX LSTM" in m for m in infos)


@pytest.mark.parametrize("kind", ["unmasked lstm", "dense"])
def test_models_without_masked_layers_convert_as_stock(kind):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, 5)(tokens)
    x = keras.layers.LSTM(UNITS, return_sequences=True)(x) if kind == "unmasked lstm" else keras.layers.Dense(3)(x)
    model = keras.Model(tokens, x)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    assert canonical(convert(model, spec)) == canonical(stock(model, spec))
    with mlr.enable():
        assert canonical(stock(model, spec)) == canonical(convert(model, spec, rewriter=None))


def test_enable_covers_the_saved_model_command_line_path(tmp_path, monkeypatch):
    """tf2onnx.convert's main() (--saved-model) in this process, with the plugin enabled."""
    import onnx
    from tf2onnx import convert as tf2onnx_convert
    model, spec, inputs = masked_model()
    saved = tmp_path / "saved"
    function = tf.function(lambda tokens: model(tokens, training=False), input_signature=spec)
    module = tf.Module()
    module.model = model  # tracks the weights
    module.serve = function
    tf.saved_model.save(module, str(saved), signatures={"serving_default": function})
    out = tmp_path / "model.onnx"
    monkeypatch.setattr("sys.argv", ["tf2onnx.convert", "--saved-model", str(saved), "--output", str(out),
                                     "--opset", "15"])
    with mlr.enable():
        tf2onnx_convert.main()
    onnx_model = onnx.load(str(out))
    assert_native(onnx_model)
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: inputs[0]})[0]
    np.testing.assert_allclose(got, np.asarray(model(inputs[0])), atol=1e-5)


def test_last_report_lists_rewritten_and_skipped_layers():
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
                                     keras.layers.GRU(UNITS, return_sequences=True),
                                     keras.layers.SimpleRNN(UNITS, activation="swish"))
    convert(model, spec, rewriter=mlr.make_rewriter("any"))
    report = mlr.last_report()
    assert sorted(r.detail for r in report.rewritten) == [
        "GRU, forward", "LSTM, backward: a forward node over each row reversed within its length", "LSTM, forward"]
    assert all(r.mask_mode == "any" for r in report.rewritten)
    (skipped,) = report.left_as_loop
    assert "simple_rnn" in skipped.layer and "activation" in skipped.detail
    assert str(report).splitlines()[0] == ("masked_lstm_rewriter: 4 recurrent layer(s) (4 masked, 0 without a mask): "
                                           "3 native, 1 left as Loop")
    # the next conversion starts a new report
    plain, plain_spec, _ = masked_model()
    convert(plain, plain_spec)
    assert len(mlr.last_report().layers) == 1 and not mlr.last_report().left_as_loop
