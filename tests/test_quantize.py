# SPDX-License-Identifier: Apache-2.0
"""``convert(..., quantize="int8")`` and ``--quantize int8`` on Keras models: the LSTM becomes
``DynamicQuantizeLSTM``, a GRU stays float32 with the ``Dense`` after it int8, every output within
verify's int8 tolerance of Keras at every position (rows of different lengths, a full row and an
empty one), and ``verify`` passes, naming the tolerance it applied. The ONNX-level checks (the
guard, opsets, refusals, a Loop left) are in tests/unit/test_quantize.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import masked_lstm_rewriter as mlr
from kerasutil import LENGTHS, STEPS, keras, op_counts, post_padded_tokens, session
from masked_lstm_rewriter import cli
from masked_lstm_rewriter.verify_tolerance import choose

VOCAB = 50
TOLERANCE = "20% of each output's largest |reference value| (at least 1e-05)"
# the nodes each model has once quantized: its recurrent layer's, and the Dense's MatMulInteger
QUANTIZED = {"LSTM": {"DynamicQuantizeLSTM": 1, "LSTM": 0, "MatMulInteger": 1, "MatMul": 0},
             "GRU": {"GRU": 1, "MatMulInteger": 1, "MatMul": 0}}


def tokens_to_dense(kind: str):
    """tokens -> Embedding(mask_zero=True) -> LSTM or GRU(16, return_sequences=True) -> Dense(4), with
    Keras's initial weights (as a trained model's, not chaotic: see docs/quantization.md)."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    x = getattr(keras.layers, kind)(16, return_sequences=True)(x)
    return keras.Model(tokens, keras.layers.Dense(4)(x))


def assert_within_the_int8_tolerance(model, onnx_model):
    tokens = post_padded_tokens(LENGTHS, STEPS, VOCAB)  # rows of 7 (full), 3, 0 (empty), 1 and 6 steps
    expected = np.asarray(model(tokens, training=False))
    got = session(onnx_model).run(None, {"tokens": tokens})[0]
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) <= choose(onnx_model, None).allowed(expected)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_convert_quantizes_and_verify_names_the_tolerance(kind):
    model = tokens_to_dense(kind)
    onnx_model, report = mlr.convert(model, quantize="int8")
    counts = op_counts(onnx_model)
    assert {op: counts[op] for op in QUANTIZED[kind]} == QUANTIZED[kind], counts
    assert "quantized: int8 for onnxruntime" in str(report)
    assert_within_the_int8_tolerance(model, onnx_model)
    result = mlr.verify(model, onnx_model)
    assert result.ok, result
    assert f"within {TOLERANCE} on onnxruntime" in result.verdict()
    assert f"note: tolerance {TOLERANCE}: the model is int8-quantized" in result.format()


def test_the_command_line_quantizes(tmp_path, capsys):
    model = tokens_to_dense("LSTM")
    model.save(tmp_path / "model.keras")
    assert cli.main([str(tmp_path / "model.keras"), "-o", str(tmp_path / "int8.onnx"), "--quantize", "int8"]) == 0
    assert "quantized: int8 for onnxruntime: 1 DynamicQuantizeLSTM, 1 MatMulInteger" in capsys.readouterr().out
    onnx_model = onnx.load(str(tmp_path / "int8.onnx"))
    assert op_counts(onnx_model)["DynamicQuantizeLSTM"] == 1
    assert_within_the_int8_tolerance(model, onnx_model)


def test_int8_for_openvino_is_refused_before_any_work():
    with pytest.raises(ValueError, match="makes a model for onnxruntime .* not for runtime='openvino'"):
        mlr.convert(tokens_to_dense("GRU"), quantize="int8", runtime="openvino")
