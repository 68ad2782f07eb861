# SPDX-License-Identifier: Apache-2.0
"""Four ways a rewrite could be silently wrong (issue 13), each a model that was rewritten into wrong
numbers: now every one is refused (stays a Loop, with its reason) or exact.

1. a loop that runs fewer steps than the input has (its condition, maximum_iterations);
2. a loop-carried state taken for a constant weight (a static batch gives it a constant start);
3. a [1, T] mask, which Keras broadcasts over the batch;
4. NaN at a valid step: a documented onnxruntime limit, pinned here.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf

import fuzz_adversarial as fa
import runtimes
from fuzz_adversarial import AdversarialCase
from kerasutil import (FLAVOUR, assert_matches_keras, convert, keras, keras_outputs, onnx_outputs, op_counts,
                       randomize_weights)
from models import FEATURES, UNITS, computed_mask_model, embedding_model, explicit_mask_model, masking_model

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.plan.batch import BROADCAST_NAME
from masked_lstm_rewriter.read import loop, trip

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


def check(case, verdict=None):
    """The case is refused or exact; ``verdict`` names which it must be."""
    result = fa.check_case(case)
    assert result.ok, fa.describe(case, result)
    if verdict is not None:
        assert result.verdict == verdict, fa.describe(case, result)
    return result


# --- 1. the number of steps ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
@pytest.mark.parametrize("mutation", ["stop_cond_t_minus_2", "stop_max_iterations_t_minus_2", "max_iterations_3",
                                      "cond_const_bound", "separate_counter_bound_t_minus_2"])
def test_a_loop_that_stops_early_is_refused(mutation, kind):
    """Built like Keras's masked loop, but stops before T (was rewritten: errors 0.3 to 0.9)."""
    result = check(AdversarialCase(family="loop", kind=kind, mutation=mutation, steps=7), "refused")
    assert set(result.reasons) == {trip.TRIP_COUNT_REASON}, result.reasons


def test_keras_backend_rnn_with_input_length():
    """Keras 3's own ``backend.rnn(..., input_length=3)`` stops after 3 of 7 steps (was rewritten:
    error 0.52); tf_keras ignores input_length outside XLA and runs all 7 (rewritten, exact)."""
    case = AdversarialCase(family="loop", mutation="backend_input_length", steps=7)
    check(case, "refused" if FLAVOUR == "keras3" else "exact")


@pytest.mark.parametrize("mutation", ["keras", "max_iterations_t", "separate_counter", "zero_output_for_mask",
                                      "initial_state_ones", "go_backwards"])
def test_a_loop_that_provably_runs_every_step_is_rewritten(mutation):
    """The proof does not refuse what it should not: these run exactly T steps."""
    check(AdversarialCase(family="loop", kind="GRU", mutation=mutation), "exact")


@pytest.mark.parametrize("mutation,reason", [("counter_starts_at_1", None), ("counter_steps_by_2", None),
                                             ("cond_less_equal", trip.COND_SHAPE_REASON),
                                             ("cond_or", trip.COND_SHAPE_REASON),
                                             ("bound_carried", None), ("bound_from_mask", trip.TRIP_COUNT_REASON)])
def test_other_stop_conditions_are_refused(mutation, reason):
    result = check(AdversarialCase(family="loop", mutation=mutation), "refused")
    assert reason is None or set(result.reasons) == {reason}, result.reasons


@pytest.mark.parametrize("signature", ["static time", "static"])
def test_a_static_number_of_steps_is_read(signature):
    """With a static T, Keras compares with constants (in the condition graph and as
    maximum_iterations): equal to T, the layer is rewritten."""
    check(AdversarialCase(kind="GRU", use_bias=False, signature=signature), "exact")


@pytest.mark.parametrize("signature", ["dynamic", "static"])
@pytest.mark.parametrize("mutation", ["output_list_longer", "last_output_list_of_t"])
def test_an_output_list_of_another_length_is_refused(mutation, signature):
    """The stacked outputs are as long as the list was reserved: T + 2 elements, or T for a loop that
    writes only its last output (at 0), is not what the native op returns (was rewritten, with
    outputs of T and of 1 step)."""
    result = check(AdversarialCase(family="loop", kind="GRU", mutation=mutation, signature=signature), "refused")
    assert set(result.reasons) == {loop.OUTPUT_LIST_REASON}, result.reasons


# --- 2. a state is no weight --------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    AdversarialCase(kind="GRU", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="GRU", mutation="extra_h_squeezed", units=3, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="SimpleRNN", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="SimpleRNN", mutation="extra_h_unpacked", units=2, use_bias=False,
                    signature="static batch 1"),
    AdversarialCase(kind="LSTM", mutation="extra_c", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="LSTM", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
], ids=["gru + h", "gru + squeeze(h)", "simple_rnn + h", "simple_rnn + unstack(h)", "lstm + c", "lstm + h"])
def test_a_state_reaching_a_gate_is_not_a_weight(case):
    """tanh(x W + h R + b + h) and the like: with a static batch the state starts from constant
    zeros, which the weight resolution took for a bias (the GRUs were rewritten: errors up to 0.08;
    today tf2onnx fuses the others' x W + h R into a Gemm, which the reader does not read yet)."""
    check(case, "refused")


# --- 3. a [1, T] mask ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", mlr.MASK_MODES)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_mask_of_one_row_is_broadcast_over_the_batch(kind, mode):
    """Keras's where broadcasts a [1, T] mask over the batch (was: batch 1 in "any", onnxruntime's
    own sequence_lens error in "post")."""
    check(AdversarialCase(kind=kind, mask_source="explicit [1, T]", mode=mode), "exact")


@pytest.mark.parametrize("mode", mlr.MASK_MODES)
def test_a_mask_input_declared_with_any_batch_may_have_one_row(mode):
    """A mask model input declared [None, T] can be fed [1, T]: the same as a [B, T] mask of
    identical rows."""
    model, spec, (features, mask) = explicit_mask_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    assert op_counts(onnx_model)["LSTM"] == 1
    for row in (0, 1, 2):  # full, post-padded, empty
        one_row = mask[row:row + 1]
        assert_matches_keras(model, onnx_model, spec, [features, one_row])
        np.testing.assert_allclose(onnx_outputs(onnx_model, spec, [features, one_row])[0],
                                   onnx_outputs(onnx_model, spec, [features, np.repeat(one_row, 5, 0)])[0])


@pytest.mark.parametrize("mode", mlr.MASK_MODES)
def test_a_pre_padded_row_broadcast_fails_with_the_guard_or_is_exact(mode):
    model, spec, (features, _) = explicit_mask_model(keras.layers.GRU(UNITS, return_sequences=True))
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    pre_padded = np.array([[False, False, True, True, True, True, True]])
    if mode == "any":
        assert_matches_keras(model, onnx_model, spec, [features, pre_padded])
    else:
        with pytest.raises(Exception, match="mask is not post-padded"):
            onnx_outputs(onnx_model, spec, [features, pre_padded])


def mask_broadcasts(onnx_model) -> int:
    return sum(n.name.startswith(BROADCAST_NAME) for n in onnx_model.graph.node)


@pytest.mark.parametrize("build", [
    lambda layer: embedding_model(layer), lambda layer: masking_model(layer), lambda layer: computed_mask_model(layer),
], ids=["embedding", "masking", "computed from the tokens"])
def test_a_mask_computed_from_the_input_costs_no_broadcast(build):
    """The mask and the input provably share the batch: no node is added for the broadcast."""
    model, spec, inputs = build(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, spec)
    assert op_counts(onnx_model)["LSTM"] == 1 and mask_broadcasts(onnx_model) == 0
    assert_matches_keras(model, onnx_model, spec, inputs)


def test_stacked_layers_with_a_mask_input_share_one_broadcast():
    """The second layer reads the first one's output: the same batch, so one broadcast serves both."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="features")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    hidden = keras.layers.LSTM(UNITS, return_sequences=True)(x_in, mask=m_in)
    out = keras.layers.GRU(UNITS, return_sequences=True)(hidden, mask=m_in)
    model = randomize_weights(keras.Model([x_in, m_in], out))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
            tf.TensorSpec((None, None), tf.bool, name="mask"))
    onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert (counts["LSTM"], counts["GRU"], mask_broadcasts(onnx_model)) == (1, 1, 1), counts
    features = np.random.default_rng(0).normal(size=(4, 6, FEATURES)).astype(np.float32)
    for mask in (np.array([[True] * 4 + [False] * 2]), np.arange(6)[None, :] < np.array([[6], [3], [0], [1]])):
        assert_matches_keras(model, onnx_model, spec, [features, mask])


# --- 4. NaN -------------------------------------------------------------------------------------

def _bare_node(kind, bias, steps=3, batch=2, inputs=2, hidden=3):
    """One ONNX LSTM, GRU or RNN node with random weights, with or without its B input."""
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto, helper  # pylint: disable=import-outside-toplevel
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    rng = np.random.default_rng(0)
    weights = {"W": rng.normal(size=(1, gates * hidden, inputs)), "R": rng.normal(size=(1, gates * hidden, hidden)),
               "B": rng.normal(size=(1, 2 * gates * hidden))}
    initializers = [onnx.numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()
                    if bias or name != "B"]
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, ["X", "W", "R", "B" if bias else "", "lens"], outputs, hidden_size=hidden)
    graph = helper.make_graph([node], "bare", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                             [steps, batch, inputs]),
                                               helper.make_tensor_value_info("lens", TensorProto.INT32, [batch])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    x = rng.normal(size=(steps, batch, inputs)).astype(np.float32)
    x[1, 0, 0] = np.nan  # row 0, step 1 (valid: every step of both rows is)
    return model, {"X": x, "lens": np.full(batch, steps, np.int32)}


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("bias", [True, False], ids=["with B", "without B"])
def test_which_recurrent_kernels_swallow_nan(runtime, kind, bias):
    """Pins the runtime limit docs/limits.md documents: onnxruntime's LSTM and GRU kernels clip every
    gate pre-activation with ``deepcpu::clip_add_bias`` when the node has a B input, and its
    ``std::min``/``std::max`` turn NaN into +FLT_MAX (finite gates from there on); without B they
    use ``clip_ignore_bias``, which keeps NaN; the RNN kernel never clips. OpenVINO keeps NaN.
    Fails when a runtime changes, so that docs/limits.md can be updated."""
    if runtime == "openvino" and runtimes.ov is None:
        pytest.skip("openvino is not installed")
    model, feeds = _bare_node(kind, bias)
    y = runtimes.RUNNERS[runtime](model, feeds)[0][:, 0]  # [T, B, H] of the one direction
    swallowed = runtime == "onnxruntime" and bias and kind in ("LSTM", "GRU")
    assert np.isnan(y[1:, 0]).all() != swallowed and np.isfinite(y[:, 1]).all() and np.isfinite(y[0]).all()


@pytest.mark.parametrize("layer,op", [(lambda: keras.layers.LSTM(UNITS, return_sequences=True), "LSTM"),
                                      (lambda: keras.layers.GRU(UNITS, return_sequences=True), "GRU"),
                                      (lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True), "RNN")])
def test_nan_at_a_valid_step_in_a_rewritten_model(layer, op):
    """NaN in Keras; the same in the rewritten model only where the kernel lets it through (the
    RNN, or a layer without bias): a documented onnxruntime limit. Other rows are unaffected."""
    model, spec, (features, mask) = explicit_mask_model(layer())
    onnx_model = convert(model, spec)
    assert op_counts(onnx_model)[op] == 1
    features = features.copy()
    features[0, 2, 0] = np.nan  # row 0 is full: step 2 is valid
    expected, got = keras_outputs(model, [features, mask])[0], onnx_outputs(onnx_model, spec, [features, mask])[0]
    assert np.isnan(expected[0, 2:]).all() and np.isfinite(expected[1:]).all()
    np.testing.assert_allclose(got[1:], expected[1:], atol=1e-5)
    np.testing.assert_allclose(got[0, :2], expected[0, :2], atol=1e-5)
    assert np.isnan(got[0, 2:]).all() == (op == "RNN"), got[0]
    assert np.isfinite(got[0, 2:]).all() == (op != "RNN"), got[0]


def test_stock_loop_keeps_nan():
    """The Loop tf2onnx makes computes each op on its own, NaN included."""
    model, spec, (features, mask) = explicit_mask_model(keras.layers.LSTM(UNITS, return_sequences=True))
    features = features.copy()
    features[0, 2, 0] = np.nan
    got = onnx_outputs(convert(model, spec, rewriter=None), spec, [features, mask])[0]
    assert np.isnan(got[0, 2:]).all() and np.isfinite(got[1:]).all()


def test_logging_names_the_layer_for_a_refused_trip_count(caplog):
    model, spec = fa.build_model(AdversarialCase(family="loop", mutation="stop_cond_t_minus_2"))
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        convert(model, spec)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "masked_lstm_rewriter"]
    assert "loop_layer" in message and trip.TRIP_COUNT_REASON in message
