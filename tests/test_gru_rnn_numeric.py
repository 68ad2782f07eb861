# SPDX-License-Identifier: Apache-2.0
"""Masked GRU (both reset_after) and SimpleRNN: native ONNX GRU / RNN, equal to Keras everywhere.

The same guarantees as the LSTM's, checked the same way (every output at every position,
padded ones too): forward, go_backwards, Bidirectional with every merge mode, stacked,
return_state, initial_state, both mask modes.
"""

import numpy as np
import onnx
import pytest
import tensorflow as tf

from kerasutil import (assert_matches_keras, assert_native, check_conversion, convert, layer_directions, keras, onnx_outputs, post_padded_tokens,
                       randomize_weights, token_spec)
from models import (FEATURES, UNITS, computed_mask_model, embedding_model, explicit_mask_model,
                    initial_state_model, masking_model, token_mask)
from test_any_mode import KINDS, batch

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

ANY = mlr.make_rewriter("any")

CELLS = {
    "gru": (keras.layers.GRU, {}, "GRU"),
    "gru reset_after=False": (keras.layers.GRU, {"reset_after": False}, "GRU"),
    "simple_rnn": (keras.layers.SimpleRNN, {}, "RNN"),
}


@pytest.fixture(params=list(CELLS))
def cell(request):
    """A factory of the layer under test: ``cell(**options)``; ``cell.op`` is its ONNX op."""
    layer_class, defaults, op = CELLS[request.param]

    def make(units=UNITS, **options):
        if layer_class is keras.layers.SimpleRNN:
            options.pop("recurrent_activation", None)
        return layer_class(units, **defaults, **options)
    make.op = op
    return make


def check(cell, model, spec, inputs, expected=("forward",), rewriter="default"):
    """Converts, checks the native nodes and their directions, and compares with Keras."""
    expected = [d for direction in expected
                for d in (("forward", "reverse") if direction == "bidirectional" else (direction,))]
    onnx_model = check_conversion(model, spec, inputs, rewriter=rewriter, ops={cell.op: len(expected)})
    assert layer_directions(onnx_model, cell.op) == sorted(expected)
    return onnx_model


def guards(onnx_model):
    return [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]


# --- forward --------------------------------------------------------------------------------

@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("return_state", [False, True])
def test_outputs_and_states(cell, return_sequences, return_state):
    check(cell, *embedding_model(cell(return_sequences=return_sequences, return_state=return_state)))


@pytest.mark.parametrize("activation, recurrent_activation", [
    ("relu", "hard_sigmoid"), ("linear", "sigmoid"), ("softsign", "sigmoid"), ("elu", "hard_sigmoid"),
    ("tanh", "sigmoid"), ("hard_sigmoid", "hard_sigmoid")])
def test_activations(cell, activation, recurrent_activation):
    """(softplus is refused, see test_fallback. A gate activation outside [0, 1] makes a GRU's
    state grow without bound: it converts, but float32 rounding then exceeds the tolerance.)"""
    check(cell, *embedding_model(cell(activation=activation, recurrent_activation=recurrent_activation,
                                      return_sequences=True)))


@pytest.mark.parametrize("options", [dict(use_bias=False), dict(use_bias=False, return_state=True),
                                     dict(dropout=0.3, recurrent_dropout=0.3)],
                         ids=lambda o: ",".join(o))
def test_layer_options(cell, options):
    check(cell, *embedding_model(cell(return_sequences=True, **options)))


def test_mask_sources(cell):
    """Masking (a non-zero mask_value), an explicit mask input and a mask computed in the graph."""
    check(cell, *masking_model(cell(return_sequences=True), mask_value=-1.5))
    check(cell, *explicit_mask_model(cell(return_sequences=True, return_state=True)))
    check(cell, *computed_mask_model(cell(return_sequences=True)))


@pytest.mark.parametrize("return_sequences", [True, False])
def test_initial_state(cell, return_sequences):
    """Rows with no valid step keep the given initial state."""
    check(cell, *initial_state_model(cell(return_sequences=return_sequences, return_state=True), states=("h0",)))


def test_stacked_layers_share_one_guard(cell):
    model, spec, inputs = embedding_model(cell(return_sequences=True), cell(return_sequences=True,
                                                                            return_state=True))
    assert len(guards(check(cell, model, spec, inputs, expected=("forward", "forward")))) == 1


def test_dynamic_batch_and_time(cell):
    model, spec, _ = embedding_model(cell(return_sequences=True, return_state=True))
    onnx_model = convert(model, spec)
    assert_native(onnx_model, op=cell.op)
    rng = np.random.default_rng(1)
    for rows, steps in [(1, 1), (1, 9), (2, 3), (17, 12)]:
        lengths = rng.integers(0, steps + 1, size=rows)
        lengths[0] = steps
        if rows > 2:
            lengths[1] = 0
        assert_matches_keras(model, onnx_model, spec, [post_padded_tokens(lengths, steps, seed=rows)])


@pytest.mark.parametrize("opset", [13, 18])
def test_emitted_models_pass_the_onnx_checker(cell, opset):
    model, spec, inputs = initial_state_model(
        keras.layers.Bidirectional(cell(return_sequences=True, return_state=True)), states=("h0", "h1"))
    onnx_model = convert(model, spec, opset=opset)
    onnx.checker.check_model(onnx_model, full_check=True)
    onnx.shape_inference.infer_shapes(onnx_model, check_type=True, strict_mode=True)
    assert_matches_keras(model, onnx_model, spec, inputs)


# --- go_backwards and Bidirectional -----------------------------------------------------------

@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("return_state", [False, True])
def test_go_backwards(cell, return_sequences, return_state):
    layer = cell(go_backwards=True, return_sequences=return_sequences, return_state=return_state)
    check(cell, *embedding_model(layer), expected=["reverse"])


def test_go_backwards_with_initial_state(cell):
    check(cell, *initial_state_model(cell(go_backwards=True, return_sequences=True, return_state=True),
                                     states=("h0",)), expected=["reverse"])


@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_merge_modes(cell, merge_mode, return_sequences):
    layer = keras.layers.Bidirectional(cell(return_sequences=return_sequences), merge_mode=merge_mode)
    check(cell, *embedding_model(layer), expected=["bidirectional"])


def test_bidirectional_return_state_and_initial_state(cell):
    layer = keras.layers.Bidirectional(cell(return_sequences=True, return_state=True))
    check(cell, *embedding_model(layer), expected=["bidirectional"])
    layer = keras.layers.Bidirectional(cell(return_sequences=True, return_state=True))
    check(cell, *initial_state_model(layer, states=("h0", "h1")), expected=["bidirectional"])


def test_bidirectional_halves_that_one_node_cannot_hold(cell):
    """Halves of different sizes (or, for a GRU, different reset_after): one node each, as always."""
    backward = cell(UNITS + 2, return_sequences=True, go_backwards=True)
    layer = keras.layers.Bidirectional(cell(return_sequences=True), backward_layer=backward)
    check(cell, *embedding_model(layer), expected=["forward", "reverse"])


def test_gru_halves_with_different_reset_after(cell):
    if cell.op != "GRU":
        pytest.skip("GRU only")
    backward = keras.layers.GRU(UNITS, return_sequences=True, go_backwards=True, reset_after=False)
    layer = keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True), backward_layer=backward)
    check(cell, *embedding_model(layer), expected=["forward", "reverse"])


def test_stacked_bidirectional_layers(cell):
    layers = [keras.layers.Bidirectional(cell(return_sequences=True)),
              keras.layers.Bidirectional(cell(return_sequences=True), merge_mode="sum"), cell(return_state=True)]
    onnx_model = check(cell, *embedding_model(*layers), expected=["bidirectional", "bidirectional", "forward"])
    assert len(guards(onnx_model)) == 1


@pytest.mark.parametrize("mode", ["post", "any"])
def test_lstm_gru_and_simple_rnn_stacked(mode):
    """Every kind in one model: one mask computation, three native ops."""
    layers = [keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True), merge_mode="sum"),
              keras.layers.LSTM(UNITS, return_sequences=True, go_backwards=True),
              keras.layers.SimpleRNN(UNITS, return_sequences=True, return_state=True)]
    check_conversion(*embedding_model(*layers), rewriter=mlr.make_rewriter(mode), ops={"GRU": 2, "LSTM": 1, "RNN": 1})


def test_nmt_encoder_decoder():
    """TensorFlow's NMT tutorial: a Bidirectional(GRU, merge_mode="sum") encoder whose summed
    states start a GRU decoder (rows with empty source give zeros, empty targets keep them)."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    _, forward_h, backward_h = keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_state=True),
                                                          merge_mode="sum")(
        keras.layers.Embedding(30, 3, mask_zero=True)(source))
    state = keras.layers.Add()([forward_h, backward_h])
    decoded = keras.layers.GRU(UNITS, return_sequences=True, return_state=True)(
        keras.layers.Embedding(30, 3, mask_zero=True)(target), initial_state=state, mask=token_mask(target))
    model = randomize_weights(keras.Model([source, target], decoded))
    spec = (token_spec("source"), token_spec("target"))
    inputs = [post_padded_tokens([5, 0, 2, 5], 5, 30, seed=1), post_padded_tokens([4, 3, 0, 1], 4, 30, seed=2)]
    check_conversion(model, spec, inputs, ops={"GRU": 3})


# --- masks: the guard, and mask_mode="any" ----------------------------------------------------

def test_guard_rejects_pre_padded_tokens(cell):
    model, spec, inputs = embedding_model(keras.layers.Bidirectional(cell(return_sequences=True)))
    onnx_model = check(cell, model, spec, inputs, expected=["bidirectional"])
    with pytest.raises(Exception, match="not post-padded"):
        onnx_outputs(onnx_model, spec, [np.array([[0, 0, 3, 4], [5, 6, 7, 8]], np.int32)])


LAYOUTS = {
    "forward": (lambda cell: cell(return_sequences=True, return_state=True), ["forward"], ("h0",)),
    "forward last output": (lambda cell: cell(), ["forward"], ("h0",)),
    "go_backwards": (lambda cell: cell(go_backwards=True, return_sequences=True, return_state=True),
                     ["reverse"], ("h0",)),
    "bidirectional": (lambda cell: keras.layers.Bidirectional(cell(return_sequences=True, return_state=True)),
                      ["bidirectional"], ("h0", "h1")),
}


def mask_input_model(layer, states=()):
    """features + a boolean mask input (any mask can be fed), and optional initial states."""
    keras.utils.set_random_seed(0)
    x_in = keras.Input((None, FEATURES), name="features")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    state_inputs = [keras.Input((UNITS,), name=name) for name in states]
    outputs = layer(x_in, mask=m_in, **({"initial_state": state_inputs} if states else {}))
    model = randomize_weights(keras.Model([x_in, m_in] + state_inputs, outputs))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
            tf.TensorSpec((None, None), tf.bool, name="mask")) + tuple(
        tf.TensorSpec((None, UNITS), tf.float32, name=name) for name in states)
    return model, spec


@pytest.mark.parametrize("with_initial_state", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_any_mode_every_kind_of_mask(cell, layout, with_initial_state):
    """Pre-padded, holes, both ends, a single step, empty and full rows in one batch."""
    build, expected, states = LAYOUTS[layout]
    model, spec = mask_input_model(build(cell), states if with_initial_state else ())
    mask = np.array(list(KINDS.values()), bool)
    rng = np.random.default_rng(7)
    values = [rng.normal(size=(len(mask), UNITS)).astype(np.float32) for _ in spec[2:]]
    onnx_model = check(cell, model, spec, batch(mask) + values, expected=expected, rewriter=ANY)
    assert not guards(onnx_model)
    for kind in ("pre-padded", "holes", "empty"):
        assert_matches_keras(model, onnx_model, spec, batch(np.array([KINDS[kind]], bool)) + [v[:1] for v in values])
