# SPDX-License-Identifier: Apache-2.0
"""Cases the differential fuzzer (tests/fuzzgen.py, tools/fuzz.py) found, kept as regular tests.

Each is the case as the fuzzer printed it, plus, where it shows a bug, the smallest model that
shows it. Known bugs are strict xfails: fixing the bug turns them into failures, so that the xfail
(and fuzzgen.known_bug's entry) is removed with the fix.
"""

import numpy as np
import pytest
import tensorflow as tf

import fuzzgen
from fuzzgen import BatchCase, LayerCase, ModelCase
from kerasutil import assert_matches_keras, convert, keras, mask_from_lengths

import masked_lstm_rewriter as mlr

SOFTPLUS_OVERFLOW = ("known bug: the rewriter maps Keras's softplus to the LSTM op's Softplus activation, "
                     "which onnxruntime computes as log(1 + exp(x)): inf for x > 88, where Keras gives x "
                     "(stock tf2onnx's Loop uses the Softplus op and is right)")


def test_ill_conditioned_model_passes_by_the_float64_referee():
    """Found by the fuzzer (seed 0): a linear recurrent activation over three stacked layers
    amplifies float32 rounding to 3e-5 (stock tf2onnx's Loop: 1.3e-5); Keras in float32 is itself
    4.5e-6 off its float64 result, and the converted model is within 10x of that."""
    case = ModelCase(layers=(
        LayerCase(units=6, direction="bidirectional", merge_mode="ave", activation="hard_sigmoid",
                  recurrent_activation="linear", use_bias=False),
        LayerCase(units=3, activation="elu", recurrent_activation="softplus"),
        LayerCase(units=5, direction="bidirectional", activation="sigmoid", recurrent_activation="linear",
                  use_bias=False)),
        return_sequences=False, mask_source="embedding", seed=65536)
    batches = (BatchCase(rows=16, steps=3, kind="post", seed=65536),
               BatchCase(rows=4, steps=15, kind="random", seed=65536))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_float64_referee_with_initial_state():
    """Found by the fuzzer (tf_keras, seed 1): an ill-conditioned model with initial_state; the
    float64 referee model took float32 state inputs, which tf_keras refuses to multiply with float64."""
    case = ModelCase(layers=(
        LayerCase(units=5, recurrent_activation="elu", use_bias=False),
        LayerCase(units=4, direction="go_backwards", activation="relu", recurrent_activation="linear",
                  use_bias=False),
        LayerCase(units=6, direction="go_backwards", activation="elu", recurrent_activation="softsign",
                  use_bias=False)),
        return_state=True, mask_source="masking", initial_state=True, seed=500)
    batches = (BatchCase(rows=6, steps=15, kind="post", seed=30302),
               BatchCase(rows=6, steps=20, kind="random", seed=32439))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


@pytest.mark.xfail(strict=True, reason=SOFTPLUS_OVERFLOW)
def test_fuzz_case_softplus_overflow():
    """Found by the fuzzer (seed 1): the third layer's gates reach ~1e6; the cell state comes
    back -inf for a row where Keras gives -90.7."""
    case = ModelCase(layers=(
        LayerCase(units=5, direction="go_backwards", activation="relu", recurrent_activation="softplus"),
        LayerCase(units=2, direction="go_backwards", activation="linear", recurrent_activation="linear"),
        LayerCase(units=1, activation="elu", recurrent_activation="softplus")),
        return_sequences=False, return_state=True, mask_source="masking", mask_value=-1.0, initial_state=True,
        seed=15661)
    batches = (BatchCase(rows=16, steps=4, kind="post", seed=291),)
    result = fuzzgen.check_case(case, batches)
    assert not result.known_bugs and result.ok, fuzzgen.describe(case, batches, result)


@pytest.mark.xfail(strict=True, reason=SOFTPLUS_OVERFLOW)
def test_fuzz_case_softplus_overflow_comes_out_finite_but_wrong():
    """Found by the fuzzer (seed 1): the middle layer's softplus overflows to inf in the ONNX
    LSTM (Keras: values up to 9e15) and the last layer's softsign and hard_sigmoid squash it:
    finite numbers that differ from Keras by 2.0, no error."""
    case = ModelCase(layers=(
        LayerCase(units=6, direction="go_backwards", activation="sigmoid", recurrent_activation="relu"),
        LayerCase(units=6, direction="bidirectional", merge_mode="sum", activation="linear",
                  recurrent_activation="softplus"),
        LayerCase(units=3, direction="go_backwards", activation="softsign", recurrent_activation="hard_sigmoid")),
        return_sequences=False, return_state=True, mask_source="embedding", seed=8712)
    batches = (BatchCase(rows=4, steps=11, kind="post", seed=187),)
    result = fuzzgen.check_case(case, batches)
    assert not result.known_bugs and result.ok, fuzzgen.describe(case, batches, result)


@pytest.mark.xfail(strict=True, reason=SOFTPLUS_OVERFLOW)
@pytest.mark.parametrize("mode", mlr.MASK_MODES)
@pytest.mark.parametrize("slot", ["activation", "recurrent_activation"])
def test_softplus_of_a_large_value(slot, mode):
    """One unit, weights 1: the gates see the input itself; a step of 100 gives inf, not ~100."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, 1), name="x")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    layer = keras.layers.LSTM(1, return_sequences=True, **{slot: "softplus"})
    model = keras.Model([x_in, m_in], layer(x_in, mask=m_in))
    model.set_weights([np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32), np.zeros(4, np.float32)])
    spec = (tf.TensorSpec((None, None, 1), tf.float32, name="x"), tf.TensorSpec((None, None), tf.bool, name="mask"))
    x = np.array([[[50.0], [100.0], [0.0]], [[1.0], [2.0], [0.0]], [[0.0], [0.0], [0.0]]], np.float32)
    assert_matches_keras(model, convert(model, spec, rewriter=mlr.make_rewriter(mode)), spec,
                         [x, mask_from_lengths([2, 3, 0], 3)])
