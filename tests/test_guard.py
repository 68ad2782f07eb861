# SPDX-License-Identifier: Apache-2.0
"""mask_mode="post": a mask that is not post-padded makes inference fail with a clear error."""

import numpy as np
import pytest

import runtimes
from kerasutil import LENGTHS, STEPS, assert_matches_keras, convert, keras, onnx_outputs
from models import UNITS, embedding_model, explicit_mask_model

import masked_lstm_rewriter as mlr


@pytest.fixture(scope="module")
def token_model():
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    return model, spec, convert(model, spec)


@pytest.fixture(scope="module")
def mask_input_model():
    model, spec, inputs = explicit_mask_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    return model, spec, convert(model, spec), inputs[0]


BAD_ROWS = {
    "pre-padded": [0, 0, 0, 4, 5, 6, 7],
    "both ends": [0, 3, 4, 5, 0, 0, 0],
    "hole": [3, 4, 0, 5, 6, 0, 0],
    "single leading pad": [0, 2, 3, 4, 5, 6, 7],
}


def assert_guard_fails(onnx_model, spec, inputs):
    with pytest.raises(Exception) as failure:
        onnx_outputs(onnx_model, spec, inputs)
    message = str(failure.value)
    assert "not post-padded" in message and "mask_mode='any'" in message, message


@pytest.mark.parametrize("row", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_bad_row_in_a_good_batch_fails(token_model, row):
    model, spec, onnx_model = token_model
    tokens = np.array([[1, 2, 3, 4, 5, 6, 7], [8, 9, 0, 0, 0, 0, 0], row, [0] * 7], np.int32)
    assert_guard_fails(onnx_model, spec, [tokens])


@pytest.mark.parametrize("kind", ["pre-padded", "both ends", "hole"])
def test_explicit_mask_that_is_not_post_padded_fails(mask_input_model, kind):
    model, spec, onnx_model, features = mask_input_model
    mask = np.arange(STEPS)[None, :] < np.array(LENGTHS)[:, None]
    mask[1] = np.array(BAD_ROWS[kind]) != 0
    assert_guard_fails(onnx_model, spec, [features, mask])


def test_post_padded_masks_never_fail(mask_input_model):
    model, spec, onnx_model, features = mask_input_model
    rng = np.random.default_rng(3)
    for _ in range(20):
        lengths = rng.integers(0, STEPS + 1, size=len(LENGTHS))
        mask = np.arange(STEPS)[None, :] < lengths[:, None]
        assert_matches_keras(model, onnx_model, spec, [features, mask])


def test_guard_message_names_the_remedy():
    assert "post-padded" in mlr.GUARD_MESSAGE and "mask_mode='any'" in mlr.GUARD_MESSAGE


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("steps", [STEPS - 2, STEPS + 3])
def test_a_mask_of_other_steps_than_the_input_fails(mask_input_model, runtime, steps):
    """Keras refuses a mask whose time axis is not the input's; so does the converted model, on every
    runtime (the batch-major rows read the mask with the input's shape), never returning a sequence
    of the mask's length."""
    if runtime not in runtimes.runtimes():
        pytest.skip(f"{runtime} is not installed or not asked for")
    _, spec, onnx_model, features = mask_input_model
    mask = np.arange(steps)[None, :] < np.minimum(np.array(LENGTHS), steps)[:, None]
    with pytest.raises(Exception):
        onnx_outputs(onnx_model, spec, [features, mask], runtime=runtime)
