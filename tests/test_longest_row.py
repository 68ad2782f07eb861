# SPDX-License-Identifier: Apache-2.0
"""Masked nodes run only up to the batch's longest row (emit/layer.steps_run, for a model any runtime
may run): every fix-up, on batches where no row is full (so that the nodes run fewer steps than the
input has) and on one with a full row, against Keras at every position, on onnxruntime and OpenVINO,
with the declared and the sampled static signatures, in both mask modes."""

import numpy as np
import pytest

from kerasutil import check_batches, keras, post_padded_tokens
from models import UNITS, embedding_model, initial_state_model

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

STEPS = 9
SHORT = [5, 2, 0, 4, 1]    # the longest row 5 of 9 steps, an empty row
FULL = [9, 2, 0, 4, 1]


def holed_tokens(seed=0):
    """Rows with padding before and between valid steps, none full (mask_mode="any")."""
    tokens = post_padded_tokens([8, 8, 0, 3, 6], STEPS, seed=seed)
    tokens[0, 0] = tokens[1, 2] = tokens[1, 5] = tokens[4, 3] = 0
    tokens[4, 7] = 3
    return tokens


LAYERS = {
    "lstm states": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True),
    "lstm go_backwards states": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True,
                                                          go_backwards=True),
    "bidirectional lstm sequences": lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
    "bidirectional gru last": lambda: keras.layers.Bidirectional(keras.layers.GRU(UNITS)),
    "simple_rnn go_backwards last": lambda: keras.layers.SimpleRNN(UNITS, go_backwards=True),
    "stacked lstm": lambda: (keras.layers.LSTM(UNITS, return_sequences=True), keras.layers.LSTM(UNITS)),
}


def check_every_output(name: str, mode: str, runtime=None):
    """The model of ``LAYERS[name]`` converted in ``mode`` for ``runtime``, checked against Keras on
    batches with no full row and with one (and, in "any", rows padded before and between valid steps);
    returns the conversion."""
    layers = LAYERS[name]()
    model, spec, _ = embedding_model(*(layers if isinstance(layers, tuple) else (layers,)))
    batches = [[post_padded_tokens(SHORT, STEPS)], [post_padded_tokens(FULL, STEPS, seed=1)]]
    if mode == "any":
        batches.append([holed_tokens()])
    return check_batches(model, spec, batches, rewriter=mlr.make_rewriter(mode, runtime=runtime))


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_every_output_when_no_row_is_full(name, mode):
    check_every_output(name, mode)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_initial_state_when_no_row_is_full(mode):
    """A row with no valid step keeps its initial state; the others start from it."""
    model, spec, _ = initial_state_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    rng = np.random.default_rng(3)
    states = [rng.normal(size=(len(SHORT), UNITS)).astype(np.float32) for _ in range(2)]
    check_batches(model, spec, [[post_padded_tokens(SHORT, STEPS), *states]], rewriter=mlr.make_rewriter(mode))
