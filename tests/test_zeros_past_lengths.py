# SPDX-License-Identifier: Apache-2.0
"""A conversion for onnxruntime reads the zeros its native nodes write past each row's length in
place of a zero step appended to ``Y`` (targets.zeros_past_lengths, emit/layer._batch_major): every
fix-up that reads zeros (an empty row, padded steps of a layer that outputs zeros there, "any"'s
compacted rows), against Keras at every position on onnxruntime; OpenVINO, which writes other values
there with dynamic shapes, is in the report's ``not_for``, and is wrong on such a model indeed."""

import numpy as np
import pytest

import runtimes
from kerasutil import convert, keras, keras_outputs, post_padded_tokens
from models import UNITS, embedding_model
from test_longest_row import LAYERS, SHORT, STEPS, check_every_output

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


def appended_zero_steps(onnx_model) -> int:
    """The Pads whose output a Reshape reads: the zero step appended to a node's Y."""
    reshaped = {node.input[0] for node in onnx_model.graph.node if node.op_type == "Reshape"}
    return sum(node.op_type == "Pad" and node.output[0] in reshaped for node in onnx_model.graph.node)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_every_output_from_the_zeros_past_the_lengths(name, mode):
    converted = check_every_output(name, mode, runtime="onnxruntime")
    assert appended_zero_steps(converted) == 0
    sequences = [layer for layer in mlr.last_report().layers if layer.not_for]
    assert all(layer.not_for == ("openvino",) for layer in sequences), str(mlr.last_report())


def test_a_model_for_any_runtime_appends_the_zero_step():
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    assert appended_zero_steps(convert(model, spec, mlr.make_rewriter("post", schedule=False))) == 1
    assert mlr.last_report().layers[0].not_for == ()


@pytest.mark.skipif("openvino" not in runtimes.runtimes(), reason="OpenVINO is not installed or MLR_OPENVINO=0")
def test_openvino_is_wrong_on_the_zeros_past_the_lengths():
    """Why the veto: an empty row reads its last step, which OpenVINO computes with dynamic shapes."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, spec, mlr.make_rewriter("post", runtime="onnxruntime"))
    assert mlr.last_report().layers[0].not_for == ("openvino",)
    tokens = post_padded_tokens(SHORT, STEPS)
    got = runtimes.run_openvino(onnx_model, {spec[0].name: tokens})[0]
    want = keras_outputs(model, [tokens])[0]
    assert not np.allclose(got[SHORT.index(0)], want[SHORT.index(0)], atol=1e-3)
