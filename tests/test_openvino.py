# SPDX-License-Identifier: Apache-2.0
"""What OpenVINO (its ONNX front end, CPU) does with the emitted models, beyond the corpus.

Skipped when openvino is not installed. Two tests pin OpenVINO behaviour that the README
documents (measured with 2024.6 and 2026.4): with a dynamic input dimension, OpenVINO ignores the
LSTM's ``sequence_lens`` (wrong numbers: compile with static shapes), and it never checks a
Reshape's element count (the post-padding guard cannot fail there). If one of them fails,
OpenVINO changed: update the README and ``masked_lstm_rewriter/corpus/check.py``.
"""

import numpy as np
import pytest

from kerasutil import ATOL, MAX_ERRORS, convert, keras, keras_outputs, post_padded_tokens
from models import UNITS, embedding_model, initial_state_model

import masked_lstm_rewriter as mlr

ov = pytest.importorskip("openvino")
from masked_lstm_rewriter.corpus.check import OPENVINO_CONFIG, openvino_runner  # noqa: E402


def run_openvino(onnx_model, spec, inputs, tmp_path, static=True):
    path = str(tmp_path / "model.onnx")
    with open(path, "wb") as handle:
        handle.write(onnx_model.SerializeToString())
    feeds = {s.name: np.asarray(x) for s, x in zip(spec, inputs)}
    names = [o.name for o in onnx_model.graph.output]
    if static:
        return openvino_runner(path)(names, feeds)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", OPENVINO_CONFIG)
    results = compiled(feeds)
    return [results[compiled.output(name)] for name in names]


def max_error(model, inputs, got):
    expected = keras_outputs(model, inputs)
    assert [e.shape for e in expected] == [g.shape for g in got]
    return max(float(np.max(np.abs(e - g))) for e, g in zip(expected, got))


@pytest.mark.parametrize("mode", ["post", "any"])
def test_zero_length_rows_with_an_initial_state(tmp_path, mode):
    """A row with no valid step keeps the initial state, as in Keras (the fix-ups; the README's claim)."""
    model, spec, inputs = initial_state_model(
        keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    error = max_error(model, inputs, run_openvino(onnx_model, spec, inputs, tmp_path))
    MAX_ERRORS.append(error)
    assert error <= ATOL


def test_bidirectional_any_mode_with_a_pre_padded_batch(tmp_path):
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    tokens = post_padded_tokens([7, 3, 0, 1, 6], 7)[:, ::-1].copy()  # pre-padded
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("any"))
    error = max_error(model, [tokens], run_openvino(onnx_model, spec, [tokens], tmp_path))
    MAX_ERRORS.append(error)
    assert error <= ATOL


def test_dynamic_shapes_still_ignore_sequence_lens(tmp_path):
    """Documented limit: compiled with dynamic shapes, OpenVINO runs every step of every row."""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    onnx_model = convert(model, spec)
    assert max_error(model, inputs, run_openvino(onnx_model, spec, inputs, tmp_path)) <= ATOL
    dynamic = max_error(model, inputs, run_openvino(onnx_model, spec, inputs, tmp_path, static=False))
    assert dynamic > 1e-3, "OpenVINO now honours sequence_lens with dynamic shapes: update the README"


def test_guard_is_not_enforced(tmp_path):
    """Documented limit: OpenVINO does not check the guard's Reshape, so a pre-padded batch runs."""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    tokens = inputs[0][:, ::-1].copy()  # pre-padded
    run_openvino(convert(model, spec), spec, [tokens], tmp_path)  # no error, (wrong) numbers
