# SPDX-License-Identifier: Apache-2.0
"""The shape of what the emitter builds: one LSTM per layer, one guard per mask, lean fix-ups (without the
length-aware schedule, whose layer If holds this single node in a branch: tests/test_schedule.py)."""

import onnx
import pytest

from kerasutil import convert, keras, op_counts
from models import UNITS, embedding_model, initial_state_model

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

SINGLE_NODE = mlr.make_rewriter(schedule=False)


def lstm_nodes(onnx_model):
    return [n for n in onnx_model.graph.node if n.op_type == "LSTM"]


def attributes(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def producers(onnx_model):
    return {output: node for node in onnx_model.graph.node for output in node.output}


def test_lstm_node_attributes_and_inputs():
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True,
                                                       recurrent_activation="hard_sigmoid"))
    onnx_model = convert(model, spec, SINGLE_NODE)
    (node,) = lstm_nodes(onnx_model)
    attrs = attributes(node)
    assert attrs["hidden_size"] == UNITS and attrs["direction"] == b"forward"
    assert attrs["activations"] == [b"HardSigmoid", b"Tanh", b"Tanh"]
    assert len(attrs["activation_alpha"]) == 1 and len(attrs["activation_beta"]) == 1
    assert node.input[4], "sequence_lens must be computed in the graph"
    # no initial state given: h as zeros (sized from the batch, so that OpenVINO folds the input's
    # transpose), no initial c, no extra inputs
    assert len(node.input) == 7 and node.input[6] == ""
    zeros = producers(onnx_model)[node.input[5]]
    assert zeros.op_type == "ConstantOfShape" and onnx.numpy_helper.to_array(zeros.attribute[0].t).tolist() == [0.0]


def test_initial_state_is_passed_to_the_lstm():
    model, spec, _ = initial_state_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    (node,) = lstm_nodes(convert(model, spec, SINGLE_NODE))
    assert all(node.input[5:7])


def test_one_guard_and_one_length_computation_per_mask():
    model, spec, _ = embedding_model(*[keras.layers.LSTM(UNITS, return_sequences=True) for _ in range(3)])
    onnx_model = convert(model, spec, SINGLE_NODE)
    assert op_counts(onnx_model)["LSTM"] == 3
    guards = [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert len(guards) == 1
    lengths = {n.input[4] for n in lstm_nodes(onnx_model)}
    assert lengths == {guards[0].output[0]}


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("build", [
    lambda: embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)),
    lambda: embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True))),
    lambda: initial_state_model(keras.layers.LSTM(UNITS, go_backwards=True, return_sequences=True,
                                                  return_state=True)),
], ids=["forward", "bidirectional", "go_backwards with initial state"])
def test_emitted_models_pass_the_onnx_checker(mode, opset, build):
    model, spec, _ = build()
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode), opset=opset)
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.shape_inference.infer_shapes(onnx_model, check_type=True, strict_mode=True)
