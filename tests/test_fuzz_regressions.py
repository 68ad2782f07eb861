# SPDX-License-Identifier: Apache-2.0
"""Cases the differential fuzzer (tests/fuzzgen.py, tests/fuzz.py) found, kept as regular tests.

Each is the case as the fuzzer printed it, plus, where it showed a bug, the smallest model that
shows it, kept after the fix.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import fuzzgen
from fuzzgen import BatchCase, LayerCase, ModelCase
from kerasutil import assert_matches_keras, convert, keras, mask_from_lengths, op_counts

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

# Fixed bug: the rewriter mapped Keras's softplus to the recurrent op's Softplus activation, which
# onnxruntime computes as log(1 + exp(x)): inf for x > 88, where Keras gives x. Such layers now
# stay Loops (whose stand-alone Softplus op is right), from a conversion and from an ONNX file:
# fuzzgen checks that they do, for that reason.


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


def test_fuzz_case_softplus_overflow():
    """Found by the fuzzer (seed 1): the third layer's gates reach ~1e6; the cell state comes
    back -inf for a row where Keras gives -90.7 (fixed: the softplus layers stay Loops)."""
    case = ModelCase(layers=(
        LayerCase(units=5, direction="go_backwards", activation="relu", recurrent_activation="softplus"),
        LayerCase(units=2, direction="go_backwards", activation="linear", recurrent_activation="linear"),
        LayerCase(units=1, activation="elu", recurrent_activation="softplus")),
        return_sequences=False, return_state=True, mask_source="masking", mask_value=-1.0, initial_state=True,
        seed=15661)
    batches = (BatchCase(rows=16, steps=4, kind="post", seed=291),)
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


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
    assert result.ok, fuzzgen.describe(case, batches, result)


@pytest.mark.parametrize("route", [fuzzgen.CONVERSION, fuzzgen.ONNX_FILE])
@pytest.mark.parametrize("mode", mlr.MASK_MODES)
@pytest.mark.parametrize("slot", ["activation", "recurrent_activation"])
def test_softplus_of_a_large_value(slot, mode, route):
    """One unit, weights 1: the gates see the input itself; a step of 100 gave inf, not ~100.
    Now the layer stays a Loop, for that reason, and matches Keras, in a conversion and when stock
    tf2onnx's file is rewritten (found by the fuzzer's ONNX-file route, seed 3801: that route made it native)."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, 1), name="x")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    layer = keras.layers.LSTM(1, return_sequences=True, **{slot: "softplus"})
    model = keras.Model([x_in, m_in], layer(x_in, mask=m_in))
    model.set_weights([np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32), np.zeros(4, np.float32)])
    spec = (tf.TensorSpec((None, None, 1), tf.float32, name="x"), tf.TensorSpec((None, None), tf.bool, name="mask"))
    x = np.array([[[50.0], [100.0], [0.0]], [[1.0], [2.0], [0.0]], [[0.0], [0.0], [0.0]]], np.float32)
    onnx_model, report = fuzzgen.converted(model, spec, ModelCase(route=route), mode)
    assert op_counts(onnx_model)["Loop"] == 1 and "softplus" in report.left_as_loop[0].detail
    assert_matches_keras(model, onnx_model, spec, [x, mask_from_lengths([2, 3, 0], 3)])


def test_gru_without_bias_with_hard_sigmoid_gates():
    """Found by the fuzzer (Keras 3, GRU sampled): with use_bias=False, TensorFlow folds
    hard_sigmoid's + 3 into the z and r gates' sums but the candidate has no bias term at all;
    the layer stayed a Loop ("only some gates have a bias"). A missing bias is a zero bias."""
    case = ModelCase(layers=(
        LayerCase(kind="GRU", units=5, activation="sigmoid", recurrent_activation="hard_sigmoid", use_bias=False,
                  reset_after=False),
        LayerCase(kind="GRU", units=4, activation="tanh", recurrent_activation="hard_sigmoid", use_bias=False)),
        return_sequences=True, return_state=True, mask_source="embedding", initial_state=True, seed=64011)
    batches = (BatchCase(rows=2, steps=12, kind="post", seed=0), BatchCase(rows=8, steps=8, kind="mixed", seed=0))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_every_layer_refused_means_no_guard_and_exact_numbers():
    """Found by the fuzzer (seed 7): with every layer refused (softplus), "post" is stock
    tf2onnx's Loops, which have no guard and are exact for a pre-padded batch too."""
    case = ModelCase(layers=(
        LayerCase(kind="SimpleRNN", units=1, direction="go_backwards", activation="softplus", use_bias=False),
        LayerCase(kind="SimpleRNN", units=1, direction="go_backwards", activation="softplus", use_bias=False)),
        return_sequences=True, mask_source="embedding", seed=1)
    batches = (BatchCase(rows=15, steps=7, kind="post", seed=1), BatchCase(rows=15, steps=7, kind="pre", seed=94))
    result = fuzzgen.check_case(case, batches)
    runs = 1 + result.openvino  # comparisons per mode and batch
    assert result.ok and result.non_post == 0 and result.comparisons == 4 * runs, \
        fuzzgen.describe(case, batches, result)


def test_batch_one_signature_on_an_ill_conditioned_model():
    """Found by the fuzzer (Keras 3, seed 1, signature "batch 1"): a linear LSTM with elu gates
    after a SimpleRNN, fed row by row. The converted model gives, for each row, exactly what the
    dynamic model gives that row alone; but Keras's own float32 result for a row moves with the
    rows batched with it (by up to 7e-4), and one row alone was 2.5e-6 from float64 where within
    its batch it was 2.2e-5 (the converted model: 5.7e-5). The referee now takes Keras's float32
    error as the larger of the two. (Without return_state since the LSTM's cell state with elu
    gates makes the layer a Loop, whose arithmetic select turns the overflow into NaN: the
    sequence it returns is the same computation.)"""
    case = ModelCase(layers=(
        LayerCase(kind="SimpleRNN", units=6, activation="sigmoid", recurrent_activation="relu", use_bias=False),
        LayerCase(kind="LSTM", units=3, activation="linear", recurrent_activation="elu", use_bias=False)),
        return_sequences=True, return_state=False, mask_source="masking", mask_value=-1.0, initial_state=True,
        seed=1110, signature="batch 1")
    batches = (BatchCase(rows=3, steps=20, kind="post", seed=24049), BatchCase(rows=4, steps=17, kind="pre", seed=485),
               BatchCase(rows=13, steps=17, kind="mixed", seed=6473))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
    assert result.comparisons > 2 * len(batches), "row by row"


def test_stacked_layers_fully_static_one_row_one_step():
    """Found by the fuzzer (Keras 3 CI sample, signature "static"): over 1 row x 1 step TensorFlow
    drops the transposes between the layers, the upper layer read the lower one's stacked outputs
    directly, and the conversion crashed once the lower one was rewritten (fixed: the layer's
    input is read through the node that reads it). tests/test_static_shapes.py has the general case."""
    layer = LayerCase(units=1, activation="sigmoid", recurrent_activation="sigmoid", use_bias=False)
    case = ModelCase(layers=(layer, layer), return_sequences=False, mask_source="embedding", seed=0,
                     signature="static")
    batches = (BatchCase(rows=1, steps=1, kind="post", seed=0),) * 2
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_keras_overflow_inside_under_a_stock_loop_is_not_compared():
    """Found by the fuzzer (Keras 3, after the schedule's 16-row batches joined it): a go_backwards
    GRU with relu gates overflows to inf and NaN in Keras itself on one row, at steps the LSTM above
    treats as masked (Keras masks the reversed output with the unreversed mask); Keras's where drops
    them, but that LSTM stays stock tf2onnx's Loop, whose arithmetic select makes NaN of them. The
    GRU is rewritten as Keras computes it: such a batch is "Keras overflowed", not a mismatch."""
    case = ModelCase(
        layers=(LayerCase(kind="GRU", units=4, direction="go_backwards", activation="sigmoid",
                          recurrent_activation="relu", use_bias=True, reset_after=False),
                LayerCase(kind="LSTM", units=2, activation="sigmoid", recurrent_activation="tanh", use_bias=False,
                          reset_after=False)),
        return_sequences=False, return_state=True, mask_source="masking", mask_value=0.0, initial_state=True,
        seed=963, signature="dynamic")
    batches = (BatchCase(rows=16, steps=20, kind="post", seed=57061), BatchCase(rows=4, steps=4, kind="post", seed=108))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
    assert result.non_finite and result.passed, result


def test_a_model_of_refused_layers_is_stock_tf2onnx_even_where_its_loop_overflows():
    """Found by the fuzzer (Keras 3, with the schedule and without): a Bidirectional LSTM with
    softplus gates, both halves refused (left as tf2onnx's Loops). On a batch whose values reach
    1e24, the Loop's arithmetic select turns a discarded step's overflowing candidate into NaN
    where Keras is finite. That model is stock tf2onnx's: the fuzzer counts it apart."""
    case = ModelCase(
        layers=(LayerCase(kind="LSTM", units=1, direction="bidirectional", merge_mode="ave", activation="softplus",
                          recurrent_activation="softplus", use_bias=False, reset_after=False),),
        return_sequences=True, return_state=True, mask_source="embedding", mask_value=0.0, initial_state=False,
        seed=2272, signature="dynamic")
    batches = (BatchCase(rows=8, steps=12, kind="post", seed=1952), BatchCase(rows=2, steps=11, kind="mixed", seed=451),
               BatchCase(rows=5, steps=17, kind="random", seed=511))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
    assert result.stock_overflow and result.passed, result


def test_a_layer_above_a_refused_one_reads_its_steps_through_it():
    """Found by the fuzzer (tf_keras, static signature): the first layer stays a Loop (softplus);
    the one above it has the static number of steps as its loop's bound, which could only be
    proven through the refused layer's output list. That layer's step is now read (and refused),
    so its list's reserved size is known, and only the softplus layer stays a Loop."""
    case = ModelCase(
        layers=(LayerCase(kind="LSTM", units=6, direction="forward", merge_mode="concat", activation="softplus",
                          recurrent_activation="relu", use_bias=False, reset_after=True),
                LayerCase(kind="LSTM", units=6, direction="go_backwards", merge_mode="concat", activation="relu",
                          recurrent_activation="linear", use_bias=True, reset_after=False),
                LayerCase(kind="GRU", units=4, direction="forward", merge_mode="concat", activation="tanh",
                          recurrent_activation="tanh", use_bias=True, reset_after=True)),
        return_sequences=True, return_state=False, mask_source="embedding", mask_value=0.0, initial_state=True,
        seed=640, signature="static")
    batches = (BatchCase(rows=7, steps=20, kind="post", seed=1943),
               BatchCase(rows=2, steps=14, kind="random", seed=332))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


@pytest.mark.parametrize("wiring, form", [("skip", "static time"), ("parallel", "static batch")])
def test_shared_layer_inputs_on_openvino(wiring, form):
    """Found with OpenVINO in the fuzzer: a stacked layer whose lower sequence is also a model
    output ("skip"), or a second layer over the first one's input ("parallel"), with a static
    dimension: OpenVINO scrambled the shared input's other readers (0.46 and 0.25 off) until each
    node got an input of its own (emit._read_alone, tests/test_shared_inputs.py)."""
    case = ModelCase(layers=(LayerCase(kind="LSTM", units=4), LayerCase(kind="GRU", units=3)), wiring=wiring,
                     signature=form)
    batches = (BatchCase(rows=5, steps=6, kind="post", seed=1), BatchCase(rows=5, steps=6, kind="holes", seed=2))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
    assert result.openvino == ("openvino" in fuzzgen.runtimes.runtimes())
    assert result.comparisons == 3 * (1 + result.openvino)


def test_a_loop_kept_for_openvino_that_overflows_is_not_compared():
    """Found by the fuzzer with OpenVINO (seed 31): a linear recurrent activation is native for
    onnxruntime but stays stock tf2onnx's Loop for runtime="openvino"; that Loop's arithmetic
    select turned an overflow at a step Keras discards into NaN on OpenVINO. tf2onnx's, as with
    every layer refused (test_a_model_of_refused_layers_is_stock_tf2onnx_even_where_its_loop_overflows)."""
    case = ModelCase(layers=(LayerCase(kind="LSTM", units=1, direction="bidirectional", merge_mode=None,
                                       activation="relu", recurrent_activation="linear", use_bias=False),),
                     return_sequences=False, mask_source="masking", initial_state=True, seed=831)
    batches = (BatchCase(rows=15, steps=15, kind="mixed", seed=34),)
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_an_overflow_stock_tf2onnx_has_too_is_counted_apart():
    """Found by ``tests/fuzz.py`` (tf_keras): three LSTMs with linear activations and relu gates, whose
    outputs reach 1.2e36 on one row. onnxruntime's float32 overflows there, with the plugin and with
    stock tf2onnx's Loops alike (the same positions), where Keras stays finite: those positions are
    counted apart, and every other position is still compared."""
    layer = LayerCase(kind="LSTM", units=6, activation="linear", recurrent_activation="relu", use_bias=False)
    case = ModelCase(layers=(layer, dataclasses.replace(layer, reset_after=True), layer), return_sequences=False,
                     return_state=True, mask_source="computed", initial_state=True, seed=5526, wiring="parallel")
    batches = (BatchCase(rows=12, steps=15, kind="post", seed=15), BatchCase(rows=6, steps=15, kind="post", seed=12))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
    assert result.stock_overflow and result.passed, result


def test_rounding_an_ill_conditioned_model_amplifies_passes_by_its_sensitivity():
    """Found by ``tests/fuzz.py`` (tf_keras, seed 342): three stacked linear GRUs whose outputs reach
    7e4. The native op is 1.1e-2 from float64 Keras where float32 Keras happened to be 8e-4 off
    (stock tf2onnx's Loop: 1.4e-2), while one float32 rounding of the weights and inputs moves the
    float64 model by 4e-2: the referee allows for that (Float64Referee.sensitivity)."""
    layer = LayerCase(kind="GRU", units=5, direction="go_backwards", activation="linear", recurrent_activation="tanh",
                      reset_after=False)
    case = ModelCase(layers=(layer,) * 3, return_sequences=True, return_state=True, mask_source="embedding",
                     initial_state=True, seed=8, signature="dynamic", wiring="chain")
    batches = (BatchCase(rows=9, steps=31, kind="long-tailed", seed=1955),)
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_stock_tf2onnx_native_op_openvino_cannot_compile_leaves_openvino_out():
    """Found by ``tests/fuzz.py`` (tf_keras, seed 342): the first layer runs unmasked (a mask passed to
    the layers above only), and stock tf2onnx makes it a native bidirectional LSTM with tf_keras's
    HardSigmoid, which OpenVINO does not compile; no conversion makes that model for OpenVINO (the
    plugin leaves stock tf2onnx's native ops alone), so it is compared on onnxruntime only."""
    lstm = LayerCase(kind="LSTM", units=3, direction="bidirectional", merge_mode="sum", activation="sigmoid",
                     recurrent_activation="hard_sigmoid")
    gru = LayerCase(kind="GRU", units=6, activation="linear", recurrent_activation="linear", use_bias=False,
                    reset_after=True)
    case = ModelCase(layers=(lstm, gru, lstm), return_sequences=True, return_state=True, mask_source="computed",
                     seed=381, signature="dynamic", wiring="mask above")
    batches = (BatchCase(rows=2, steps=9, kind="post", seed=3654), BatchCase(rows=6, steps=9, kind="pre", seed=381))
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)


def test_a_model_of_refused_layers_off_keras_as_stock_tf2onnx_is_counted_apart():
    """Found by ``tests/fuzz.py`` (keras3, seed 345): softplus-gated Bidirectional LSTMs, every layer
    refused (so the model is stock tf2onnx's Loops), whose values reach 6e13; stock tf2onnx's own
    conversion is 6% off Keras there, and the plugin's model equals it: tf2onnx's, counted apart."""
    layer = LayerCase(kind="LSTM", units=4, direction="bidirectional", merge_mode="sum", activation="sigmoid",
                      recurrent_activation="softplus", use_bias=False)
    case = ModelCase(layers=(dataclasses.replace(layer, merge_mode="concat"), layer, layer), return_sequences=False,
                     return_state=True, mask_source="explicit", initial_state=True, seed=13752, signature="dynamic",
                     wiring="summary")
    batches = (BatchCase(rows=4, steps=14, kind="post", seed=1024),)
    result = fuzzgen.check_case(case, batches)
    assert result.ok, fuzzgen.describe(case, batches, result)
