# SPDX-License-Identifier: Apache-2.0
"""mask_mode="any": exact for every mask (pre-padded, holes, both ends, empty and full rows)."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kerasutil import FLAVOUR, assert_matches_keras, assert_native, check_conversion, convert, keras, randomize_weights
from models import FEATURES, UNITS, embedding_model, masking_model

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

ANY = mlr.make_rewriter("any")

LAYERS = {
    "forward": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True),
    "forward last output": lambda: keras.layers.LSTM(UNITS, return_state=True),
    "go_backwards": lambda: keras.layers.LSTM(UNITS, go_backwards=True, return_sequences=True, return_state=True),
    "go_backwards last output": lambda: keras.layers.LSTM(UNITS, go_backwards=True, recurrent_activation="hard_sigmoid"),
    "bidirectional": lambda: keras.layers.Bidirectional(
        keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)),
    "bidirectional last output": lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS), merge_mode="sum"),
    "stacked": lambda: [keras.layers.LSTM(UNITS, return_sequences=True),
                        keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True))],
}
LSTM_NODES = {"bidirectional": 2, "bidirectional last output": 2, "stacked": 3}  # a Bidirectional is two nodes


def mask_input_model(name, with_initial_state=False):
    """features + a boolean mask input (any mask can be fed), optionally initial states."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="features")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    inputs, spec = [x_in, m_in], [tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
                                  tf.TensorSpec((None, None), tf.bool, name="mask")]
    layers = LAYERS[name]()
    x = x_in
    for layer in layers if isinstance(layers, list) else [layers]:
        if with_initial_state:
            names = ["h0", "c0"] + (["h1", "c1"] if name.startswith("bidirectional") else [])
            states = [keras.Input((UNITS,), name=n) for n in names]
            inputs += states
            spec += [tf.TensorSpec((None, UNITS), tf.float32, name=n) for n in names]
            x = layer(x, mask=m_in, initial_state=states)
        else:
            x = layer(x, mask=m_in)
    model = randomize_weights(keras.Model(inputs, x))
    return model, tuple(spec)


@pytest.fixture(scope="module", params=list(LAYERS))
def converted(request):
    model, spec = mask_input_model(request.param)
    onnx_model = convert(model, spec, rewriter=ANY)
    assert_native(onnx_model, lstm=LSTM_NODES.get(request.param, 1))
    assert not any(n.name.startswith(mlr.GUARD_MESSAGE) for n in onnx_model.graph.node)
    return model, spec, onnx_model


def batch(mask, seed=0):
    features = np.random.default_rng(seed).normal(size=mask.shape + (FEATURES,)).astype(np.float32)
    return [features, mask]


KINDS = {
    "post-padded": [1, 1, 1, 0, 0, 0],
    "pre-padded": [0, 0, 0, 1, 1, 1],
    "both ends": [0, 1, 1, 1, 0, 0],
    "holes": [1, 0, 1, 1, 0, 1],
    "single step in the middle": [0, 0, 1, 0, 0, 0],
    "empty": [0, 0, 0, 0, 0, 0],
    "full": [1, 1, 1, 1, 1, 1],
}


@pytest.mark.parametrize("name", LAYERS)
def test_every_kind_of_mask_in_one_batch(name):
    """Every signature form and runtime (check_conversion), one batch holding every kind of row."""
    model, spec = mask_input_model(name)
    mask = np.array(list(KINDS.values()), bool)
    check_conversion(model, spec, batch(mask), rewriter=ANY, ops={"LSTM": LSTM_NODES.get(name, 1)})


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_alone(converted, kind):
    model, spec, onnx_model = converted
    assert_matches_keras(model, onnx_model, spec, batch(np.array([KINDS[kind]], bool)))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_masks(converted, data):
    """Random masks, batch 1 to 64, any number of steps."""
    model, spec, onnx_model = converted
    rows = data.draw(st.integers(1, 64), label="rows")
    steps = data.draw(st.integers(1, 12), label="steps")
    mask = data.draw(arrays(bool, (rows, steps)), label="mask")
    assert_matches_keras(model, onnx_model, spec, batch(mask, seed=rows * 100 + steps))


@pytest.mark.parametrize("name", ["forward", "go_backwards", "bidirectional"])
def test_initial_state_with_any_mask(name):
    """Rows with no valid step keep the initial state; the carried output still starts at zeros."""
    model, spec = mask_input_model(name, with_initial_state=True)
    rng = np.random.default_rng(7)
    mask = np.array(list(KINDS.values()), bool)
    states = [rng.normal(size=(len(mask), UNITS)).astype(np.float32) for _ in range(len(spec) - 2)]
    check_conversion(model, spec, batch(mask) + states, rewriter=ANY, ops={"LSTM": LSTM_NODES.get(name, 1)})


def test_pre_padded_tokens_from_pad_sequences_defaults():
    """keras pad_sequences pads at the front by default: an Embedding mask that is pre-padded."""
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    tokens = np.array([[0, 0, 0, 4, 5, 6], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 9]], np.int32)
    check_conversion(model, spec, [tokens], rewriter=ANY, ops={"LSTM": 2})


def test_masking_layer_documentation_example():
    """The Masking docs mask interior steps of a float input."""
    model, spec, inputs = masking_model(keras.layers.LSTM(UNITS, return_sequences=True))
    features = inputs[0].copy()
    features[0, 3] = 0.0
    features[2, 5] = 0.0
    features[4, 0] = 0.0
    check_conversion(model, spec, [features], rewriter=ANY, ops={"LSTM": 1})


@pytest.mark.parametrize("opset", [13, 18])
def test_opsets(opset):
    model, spec = mask_input_model("bidirectional")
    check_conversion(model, spec, batch(np.array(list(KINDS.values()), bool)), rewriter=ANY, ops={"LSTM": 2},
                     opset=opset)
