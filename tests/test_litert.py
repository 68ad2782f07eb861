# SPDX-License-Identifier: Apache-2.0
"""LiteRT flatbuffers in (``tf2onnx.convert.from_tflite``, ``python -m masked_lstm_rewriter --tflite``):
tf2onnx converts a ``.tflite`` file's loop bodies before any rewriter runs, so the plugin reads each
recurrent layer off the ``Loop`` tf2onnx makes of it (plugin/__init__.py, sources/onnx_loop.py); a tf_keras
LSTM without a mask LiteRT fuses into one op, read as tf2onnx's rewriters run (sources/litert_lstm.py).
Keras is the oracle, at every position, on a batch with a full row, an empty row and rows of other
lengths; in "post" the guard fails on a batch that is not post-padded."""

import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import ATOL, keras, native_layers, op_counts, post_padded_tokens, randomize_weights
from runtimes import RUNNERS, runtimes

import masked_lstm_rewriter as mlr

BATCH, STEPS = 5, 7
LENGTHS = [7, 3, 0, 1, 6]
# the Keras layers each model's native nodes hold (a Bidirectional's halves count twice)
NATIVE = {"lstm_last": {"LSTM": 1}, "bidirectional_gru": {"GRU": 2}, "stack": {"LSTM": 1, "GRU": 1},
          "final_c": {"LSTM": 1}, "unmasked_gru_last": {"GRU": 1}, "unmasked_lstm": {"LSTM": 2}}
UNMASKED = ("unmasked_gru_last", "unmasked_lstm")


def _model(name, batch=BATCH):
    """A model with static shapes (LiteRT converts those) and one output, masked but for the UNMASKED ones
    (tf_keras's "unmasked_lstm" LiteRT fuses into one op, UNIDIRECTIONAL_SEQUENCE_LSTM)."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((STEPS,), batch_size=batch, dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, 6, mask_zero=name not in UNMASKED)(tokens)
    layers = keras.layers
    if name == "unmasked_lstm":
        y = layers.Bidirectional(layers.LSTM(8, return_sequences=True), merge_mode="sum")(x)
    elif name in ("lstm_last", "unmasked_gru_last"):  # LiteRT keeps the last output as a one-step list
        y = (layers.LSTM if name == "lstm_last" else layers.GRU)(8)(x)
    elif name == "bidirectional_gru":
        y = layers.Bidirectional(layers.GRU(8, return_sequences=True))(x)
    elif name == "stack":         # tf2onnx's file of it does not load in onnxruntime
        y = layers.GRU(8)(layers.LSTM(8, return_sequences=True)(x))
    else:                         # "final_c": a Loop output that is the graph's output itself
        y = layers.LSTM(8, return_state=True)(x)[2]
    return randomize_weights(keras.Model(tokens, y))


def _flatbuffer(model, folder) -> str:
    path = os.path.join(folder, "model.tflite")
    with open(path, "wb") as handle:
        handle.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return path


def _run(onnx_model, tokens, runtime):
    return RUNNERS[runtime](onnx_model, {onnx_model.graph.input[0].name: tokens})[0]


def _check_litert(name, mode, folder, batches, batch=BATCH, opset=15):
    """Converted through ``enable()``: every layer native (counted), no Loop left, Keras's outputs on
    every runtime for each of ``batches`` (row lengths); in "post", the guard fails on rows padded first."""
    model = _model(name, batch)
    with mlr.enable(mask_mode=mode):
        onnx_model, _ = tf2onnx.convert.from_tflite(_flatbuffer(model, folder), opset=opset)
    report = mlr.last_report()
    assert not report.left_as_loop and op_counts(onnx_model)["Loop"] == 0, str(report)
    assert native_layers(onnx_model) == NATIVE[name], str(report)
    for lengths in batches:
        tokens = post_padded_tokens(lengths, STEPS, seed=len(lengths) + lengths[0])
        expected = np.asarray(model(tokens))
        for runtime in runtimes():
            np.testing.assert_allclose(_run(onnx_model, tokens, runtime), expected, atol=ATOL, rtol=0,
                                       err_msg=f"{runtime}, rows {lengths}")
        if mode == "post" and report.masked and 0 < min(lengths) and max(lengths) < STEPS:
            with pytest.raises(Exception, match=re.escape(mlr.GUARD_MESSAGE)):
                _run(onnx_model, tokens[:, ::-1].copy(), "onnxruntime")


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", list(NATIVE))
def test_a_litert_file_converts_native_and_equal_to_keras(name, mode, tmp_path):
    _check_litert(name, mode, str(tmp_path), [LENGTHS, [2, 5, 1, 3, 4]])


@pytest.mark.parametrize("name", ["lstm_last", "stack", "unmasked_lstm"])
def test_a_litert_file_of_batch_one_at_opset_11(name, tmp_path):
    """Mobile models are often of one row: LiteRT then reshapes the [1, 4H] recurrent term to [4H] (and
    in tf_keras fuses the unmasked LSTM into one op). Single rows, full, partial and empty, at the lowest
    opset the native ops are emitted for."""
    _check_litert(name, "post", str(tmp_path), [[STEPS], [3], [0]], batch=1, opset=11)


def test_the_command_line_converts_a_litert_file(tmp_path):
    """``python -m masked_lstm_rewriter --tflite`` (tf2onnx's own option) reports the layer native."""
    model = _model("lstm_last")
    output = str(tmp_path / "model.onnx")
    result = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", "--tflite",
                             _flatbuffer(model, str(tmp_path)), "-o", output],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1 native, 0 left as Loop" in result.stderr + result.stdout
    tokens = post_padded_tokens(LENGTHS, STEPS)
    np.testing.assert_allclose(_run(onnx.load(output), tokens, "onnxruntime"), np.asarray(model(tokens)), atol=ATOL)


def test_the_command_line_says_what_to_do_with_a_stateful_litert_file(tmp_path):
    """LiteRT keeps a stateful layer's states in resource variables, which tf2onnx fails to parse ("list index
    out of range", stock or not): the command line says so, and to convert the Keras model instead."""
    tokens = keras.Input((STEPS,), batch_size=BATCH, dtype="int32")
    model = keras.Model(tokens, keras.layers.LSTM(4, stateful=True)(keras.layers.Embedding(50, 6)(tokens)))
    result = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", _flatbuffer(model, str(tmp_path)), "-o",
                             str(tmp_path / "model.onnx")], capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "holds LiteRT resource variables (a stateful layer's states)" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "model.onnx").exists()


def test_a_bare_custom_rewriter_says_why_a_litert_loop_stays(tmp_path):
    """Passed as ``custom_rewriter`` alone, the rewriter sees the LiteRT loop before tf2onnx makes its
    Loop: the report names the layer, says so and what to do, rather than report no layer."""
    onnx_model, _ = tf2onnx.convert.from_tflite(_flatbuffer(_model("lstm_last"), str(tmp_path)), opset=15,
                                                custom_rewriter=[mlr.rewrite_masked_lstm])
    (layer,) = mlr.last_report().layers
    assert not layer.rewritten and layer.masked and "a LiteRT loop" in layer.detail and "enable()" in layer.detail
    assert op_counts(onnx_model)["Loop"] == 1
