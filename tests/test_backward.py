# SPDX-License-Identifier: Apache-2.0
"""go_backwards and Bidirectional masked LSTMs: native ONNX LSTMs, equal to Keras everywhere."""

import numpy as np
import onnx
import pytest

from kerasutil import (assert_matches_keras, assert_native, check_conversion, convert, layer_directions, keras, onnx_outputs, post_padded_tokens,
                       randomize_weights, token_spec)
from models import UNITS, embedding_model, explicit_mask_model, initial_state_model, masking_model, token_mask

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


def lstm(**options):
    return keras.layers.LSTM(UNITS, **options)


def time_reversals(onnx_model):
    """Reversals of a whole sequence (Slices with a negative step): Keras's go_backwards order."""
    negative = {i.name for i in onnx_model.graph.initializer if onnx.numpy_helper.to_array(i).tolist() == [-1]}
    return sum(n.op_type == "Slice" and len(n.input) > 4 and n.input[4] in negative for n in onnx_model.graph.node)


def check(model, spec, inputs, directions):
    """``directions``: of the Keras layers ("bidirectional" counts as a forward and a reverse one)."""
    directions = [d for direction in directions
                  for d in (("forward", "reverse") if direction == "bidirectional" else (direction,))]
    onnx_model = check_conversion(model, spec, inputs, ops={"LSTM": len(directions)})
    assert layer_directions(onnx_model) == sorted(directions)
    return onnx_model


# --- go_backwards ---------------------------------------------------------------------------

@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("return_state", [False, True])
def test_go_backwards(return_sequences, return_state):
    """Keras returns the sequence in reversed order, padding first: reproduced position by position."""
    layer = lstm(go_backwards=True, return_sequences=return_sequences, return_state=return_state)
    onnx_model = check(*embedding_model(layer), directions=["reverse"])
    assert time_reversals(onnx_model) == (1 if return_sequences else 0)


def test_go_backwards_with_initial_state():
    check(*initial_state_model(lstm(go_backwards=True, return_sequences=True, return_state=True)),
          directions=["reverse"])


def test_go_backwards_with_masking_layer_and_explicit_mask():
    check(*masking_model(lstm(go_backwards=True, return_sequences=True), mask_value=-1.0), directions=["reverse"])
    check(*explicit_mask_model(lstm(go_backwards=True, return_sequences=True, return_state=True)),
          directions=["reverse"])


def test_stacked_go_backwards_layers():
    check(*embedding_model(lstm(go_backwards=True, return_sequences=True), lstm(return_sequences=True)),
          directions=["forward", "reverse"])


# --- Bidirectional --------------------------------------------------------------------------

@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_merge_modes(merge_mode, return_sequences):
    layer = keras.layers.Bidirectional(lstm(return_sequences=return_sequences), merge_mode=merge_mode)
    onnx_model = check(*embedding_model(layer), directions=["bidirectional"])
    assert time_reversals(onnx_model) == 0, "the backward half's reversal and its reversal back must cancel"


@pytest.mark.parametrize("return_sequences", [True, False])
def test_bidirectional_return_state(return_sequences):
    layer = keras.layers.Bidirectional(lstm(return_sequences=return_sequences, return_state=True))
    check(*embedding_model(layer), directions=["bidirectional"])


def test_bidirectional_with_explicit_backward_layer():
    layer = keras.layers.Bidirectional(lstm(return_sequences=True),
                                       backward_layer=lstm(return_sequences=True, go_backwards=True,
                                                           activation="relu", recurrent_activation="hard_sigmoid"))
    check(*embedding_model(layer), directions=["bidirectional"])


def test_bidirectional_with_halves_of_different_sizes():
    """Each half is a node of its own, whatever its size."""
    layer = keras.layers.Bidirectional(lstm(return_sequences=True),
                                       backward_layer=keras.layers.LSTM(UNITS + 2, return_sequences=True,
                                                                        go_backwards=True))
    check(*embedding_model(layer), directions=["forward", "reverse"])


def test_stacked_bidirectional_then_unidirectional():
    layers = [keras.layers.Bidirectional(lstm(return_sequences=True)),
              keras.layers.Bidirectional(lstm(return_sequences=True), merge_mode="sum"),
              lstm(return_state=True)]
    onnx_model = check(*embedding_model(*layers), directions=["bidirectional", "bidirectional", "forward"])
    guards = [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert len(guards) == 1


def test_bidirectional_with_masking_layer():
    check(*masking_model(keras.layers.Bidirectional(lstm(return_sequences=True))), directions=["bidirectional"])


def test_bidirectional_dynamic_batch_and_time():
    model, spec, _ = embedding_model(keras.layers.Bidirectional(lstm(return_sequences=True, return_state=True)))
    onnx_model = convert(model, spec)
    assert_native(onnx_model, lstm=2)
    rng = np.random.default_rng(5)
    for batch, steps in [(1, 1), (1, 6), (3, 2), (16, 11), (64, 25)]:
        lengths = rng.integers(0, steps + 1, size=batch)
        lengths[0] = steps
        assert_matches_keras(model, onnx_model, spec, [post_padded_tokens(lengths, steps, seed=batch)])


# --- the guard sees the user's padding, not the reversed one ----------------------------------

@pytest.mark.parametrize("layer", [
    lambda: lstm(go_backwards=True, return_sequences=True),
    lambda: keras.layers.Bidirectional(lstm(return_sequences=True)),
], ids=["go_backwards", "bidirectional"])
def test_guard_on_user_padding(layer):
    """Post-padded data passes (the layer sees it pre-padded after reversal); pre-padded data fails."""
    model, spec, inputs = embedding_model(layer())
    onnx_model = convert(model, spec)
    assert_matches_keras(model, onnx_model, spec, inputs)
    pre_padded = np.array([[0, 0, 3, 4], [5, 6, 7, 8]], np.int32)
    with pytest.raises(Exception, match="not post-padded"):
        onnx_outputs(onnx_model, spec, [pre_padded])


def test_encoder_decoder_with_bidirectional_encoder():
    """A Bidirectional encoder's concatenated states start a decoder."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    _, fh, fc, bh, bc = keras.layers.Bidirectional(lstm(return_state=True))(
        keras.layers.Embedding(30, 3, mask_zero=True)(source))
    h = keras.layers.Concatenate()([fh, bh])
    c = keras.layers.Concatenate()([fc, bc])
    decoded = keras.layers.LSTM(2 * UNITS, return_sequences=True)(
        keras.layers.Embedding(30, 3, mask_zero=True)(target), initial_state=[h, c], mask=token_mask(target))
    model = randomize_weights(keras.Model([source, target], decoded))
    inputs = [post_padded_tokens([5, 0, 2, 5], 5, 30, seed=1), post_padded_tokens([4, 3, 0, 1], 4, 30, seed=2)]
    check(model, (token_spec("source"), token_spec("target")), inputs, directions=["bidirectional", "forward"])
