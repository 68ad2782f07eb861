# SPDX-License-Identifier: Apache-2.0
"""Property-based: random layer options x random post-padded batches, always equal to Keras."""

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kerasutil import assert_matches_keras, assert_native, convert, keras, op_counts, randomize_weights

ACTIVATIONS = ["tanh", "relu", "softsign", "sigmoid", "linear"]
RECURRENT_ACTIVATIONS = ["sigmoid", "hard_sigmoid", "tanh"]

layer_options = st.fixed_dictionaries({
    "units": st.integers(1, 6),
    "return_sequences": st.booleans(),
    "return_state": st.booleans(),
    "use_bias": st.booleans(),
    "activation": st.sampled_from(ACTIVATIONS),
    "recurrent_activation": st.sampled_from(RECURRENT_ACTIVATIONS),
})


@st.composite
def post_padded_batches(draw):
    batch = draw(st.integers(1, 8))
    steps = draw(st.integers(1, 9))
    lengths = draw(st.lists(st.integers(0, steps), min_size=batch, max_size=batch))
    return np.array(lengths), steps, draw(st.integers(0, 2**16))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(options=layer_options, stacked=st.booleans(), masking=st.booleans(),
       batches=st.lists(post_padded_batches(), min_size=1, max_size=3))
def test_random_layers_on_random_post_padded_batches(options, stacked, masking, batches):
    keras.utils.set_random_seed(0)
    features = 3
    if masking:
        x_in = keras.Input((None, features), name="x")
        x = keras.layers.Masking(mask_value=0.0)(x_in)
        spec = (tf.TensorSpec((None, None, features), tf.float32, name="x"),)
    else:
        x_in = keras.Input((None,), dtype="int32", name="x")
        x = keras.layers.Embedding(20, features, mask_zero=True)(x_in)
        spec = (tf.TensorSpec((None, None), tf.int32, name="x"),)
    if stacked:
        x = keras.layers.LSTM(options["units"], return_sequences=True)(x)
    model = randomize_weights(keras.Model(x_in, keras.layers.LSTM(**options)(x)), seed=1)
    onnx_model = convert(model, spec)
    if options["return_state"] and options["recurrent_activation"] not in ("sigmoid", "hard_sigmoid"):
        # the returned cell state needs gates that saturate (docs/how-it-works.md): that layer stays a Loop
        assert (op_counts(onnx_model)["LSTM"], op_counts(onnx_model)["Loop"]) == (int(stacked), 1)
    else:
        assert_native(onnx_model, lstm=2 if stacked else 1)
    for lengths, steps, seed in batches:
        rng = np.random.default_rng(seed)
        valid = np.arange(steps)[None, :] < lengths[:, None]
        if masking:
            data = rng.normal(size=(len(lengths), steps, features)).astype(np.float32) * valid[..., None]
        else:
            data = (rng.integers(1, 20, size=(len(lengths), steps)) * valid).astype(np.int32)
        assert_matches_keras(model, onnx_model, spec, [data])
