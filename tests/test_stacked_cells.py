# SPDX-License-Identifier: Apache-2.0
"""Several cells in one loop: ``keras.layers.RNN([cell, cell, ...])`` (Keras's ``StackedRNNCells``),
as seq2seq and text-generation code builds it. One native node per cell, sharing one mask
computation, each reading the steps of the node below; Keras returns the top cell's output and
every cell's states, in order. Keras is the oracle, at every output position."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import (LENGTHS, STEPS, assert_matches_keras, check_conversion, convert, keras, mask_from_lengths,
                       op_counts, post_padded_tokens, randomize_weights)
from models import FEATURES

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.read.body import BodyMatch, is_masked_recurrent_body, read_body

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

MODES = ["post", "any"]
K = keras.layers


def flat_model(inputs, outputs, seed=0):
    """A model whose outputs are the flat list of ``outputs`` (an RNN over stacked cells returns
    each cell's states as a list of its own)."""
    return randomize_weights(keras.Model(inputs, tf.nest.flatten(outputs)), seed)


def stacked_embedding_model(rnn, seed=0):
    """tokens -> Embedding(mask_zero=True) -> ``rnn``; returns (model, spec, inputs)."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    model = flat_model(tokens, rnn(K.Embedding(50, FEATURES + 2, mask_zero=True)(tokens)), seed)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    return model, spec, [post_padded_tokens(LENGTHS, STEPS, 50, seed)]


def stacked_masking_model(rnn, seed=0):
    """float features -> Masking(0.0) -> ``rnn``."""
    keras.utils.set_random_seed(seed)
    features = keras.Input((None, FEATURES), name="features")
    model = flat_model(features, rnn(K.Masking(0.0)(features)), seed)
    x = np.random.default_rng(seed).normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)
    x[~mask_from_lengths(LENGTHS, STEPS)] = 0.0
    return model, (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),), [x]


CASES = {
    "lstm lstm sequences states": (
        lambda: K.RNN([K.LSTMCell(4), K.LSTMCell(3)], return_sequences=True, return_state=True),
        {"LSTM": 2}),
    "simple_rnn simple_rnn": (
        lambda: K.RNN([K.SimpleRNNCell(4), K.SimpleRNNCell(3, activation="relu")], return_sequences=True,
                      return_state=True),
        {"RNN": 2}),
    "lstm gru simple_rnn last output": (
        lambda: K.RNN([K.LSTMCell(4), K.GRUCell(3, reset_after=False), K.SimpleRNNCell(2)]),
        {"LSTM": 1, "GRU": 1, "RNN": 1}),
    "gru lstm go_backwards states": (
        lambda: K.RNN([K.GRUCell(4), K.LSTMCell(3)], go_backwards=True, return_sequences=True, return_state=True),
        {"GRU": 1, "LSTM": 1}),
    "bidirectional lstm gru": (
        lambda: K.Bidirectional(K.RNN([K.LSTMCell(4), K.GRUCell(3)], return_sequences=True), merge_mode="concat"),
        {"LSTM": 2, "GRU": 2}),
    "bidirectional lstm gru states sum": (
        lambda: K.Bidirectional(K.RNN([K.LSTMCell(4), K.GRUCell(3)], return_sequences=True, return_state=True),
                                merge_mode="sum"),
        {"LSTM": 2, "GRU": 2}),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_stacked_cells_embedding(case, mode):
    rnn, ops = CASES[case]
    model, spec, inputs = stacked_embedding_model(rnn())
    check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter(mode), ops=ops)
    assert [layer.rewritten for layer in mlr.last_report().layers] == [True] * (2 if "bidirectional" in case else 1)


@pytest.mark.parametrize("mode", MODES)
def test_stacked_cells_masking_go_backwards_last_output(mode):
    rnn = K.RNN([K.SimpleRNNCell(3), K.LSTMCell(4)], go_backwards=True)
    model, spec, inputs = stacked_masking_model(rnn)
    check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter(mode), ops={"RNN": 1, "LSTM": 1})


@pytest.mark.parametrize("mode", MODES)
def test_stacked_cells_with_initial_states(mode):
    """Every cell starts from its own state (a decoder fed an encoder's states); a row with no valid
    step keeps them."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    states = [keras.Input((4,), name="h1"), keras.Input((4,), name="c1"), keras.Input((3,), name="h2")]
    x = K.Embedding(50, FEATURES, mask_zero=True)(tokens)
    rnn = K.RNN([K.LSTMCell(4), K.GRUCell(3)], return_sequences=True, return_state=True)
    mask = keras.ops.greater(tokens, 0) if hasattr(keras, "ops") else tf.greater(tokens, 0)
    # each cell's states as the cell takes them: an LSTMCell's h and c as a list, a GRUCell's h alone
    model = flat_model([tokens] + states, rnn(x, initial_state=[states[:2], states[2]], mask=mask))
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),) + tuple(
        tf.TensorSpec((None, s.shape[-1]), tf.float32, name=n) for s, n in zip(states, ("h1", "c1", "h2")))
    rng = np.random.default_rng(0)
    inputs = [post_padded_tokens(LENGTHS, STEPS)] + [rng.normal(size=(len(LENGTHS), n)).astype(np.float32)
                                                     for n in (4, 4, 3)]
    check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter(mode), ops={"LSTM": 1, "GRU": 1})


def test_stacked_cells_share_one_mask_computation():
    """Three cells, one guard: the mask's lengths are computed once and read by every node."""
    model, spec, _ = stacked_embedding_model(K.RNN([K.LSTMCell(4), K.GRUCell(3), K.SimpleRNNCell(2)],
                                                   return_sequences=True))
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(schedule=False))  # the single nodes, in the main graph
    lengths = {node.input[4] for node in onnx_model.graph.node if node.op_type in ("LSTM", "GRU", "RNN")}
    assert len(lengths) == 1, lengths
    # the lengths (the nodes' sequence_lens) and the guard's count of falls; the sequence is gathered
    # at rows from the mask's running count, which needs no lengths of its own
    assert sum(node.op_type == "ReduceSum" for node in onnx_model.graph.node) == 2


def test_stacked_cells_post_guard_refuses_a_pre_padded_batch():
    model, spec, _ = stacked_embedding_model(K.RNN([K.LSTMCell(4), K.LSTMCell(3)], return_sequences=True))
    onnx_model = convert(model, spec)
    tokens = post_padded_tokens(LENGTHS, STEPS)[:, ::-1].copy()  # pre-padded
    from kerasutil import session  # pylint: disable=import-outside-toplevel
    with pytest.raises(Exception, match="not post-padded"):
        session(onnx_model).run(None, {"tokens": tokens})


def test_unsupported_stacked_cell_says_which_cell_and_why(caplog):
    """A stack whose second cell has an activation ONNX RNN lacks stays a Loop, and the reason names
    the cell and the RNN algebra (not the LSTM's)."""
    model, spec, inputs = stacked_embedding_model(
        K.RNN([K.SimpleRNNCell(4), K.SimpleRNNCell(3, activation="selu")], return_sequences=True))
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    assert op_counts(onnx_model)["Loop"] == 1
    (left,) = mlr.last_report().left_as_loop
    assert left.detail == ("in a stack of 2 cells (keras.layers.RNN([cell, ...]), MultiRNNCell), cell 2: "
                           "a gate's activation is not one ONNX RNN supports (it is computed by Selu)"), left.detail
    assert any(left.detail in record.getMessage() for record in caplog.records)
    assert_matches_keras(model, onnx_model, spec, inputs)


def body_matches(rnn):
    found = []

    def record(graph, ops):
        if is_masked_recurrent_body(graph):
            found.append(read_body(graph))
        return ops
    model, spec, _ = stacked_embedding_model(rnn)
    convert(model, spec, rewriter=record)
    return found


@pytest.mark.parametrize("cells, kinds", [
    (lambda: [K.LSTMCell(4), K.LSTMCell(3)], ["LSTM", "LSTM"]),
    (lambda: [K.SimpleRNNCell(4), K.SimpleRNNCell(3)], ["RNN", "RNN"]),
    (lambda: [K.GRUCell(4), K.LSTMCell(3), K.SimpleRNNCell(2)], ["GRU", "LSTM", "RNN"]),
    (lambda: K.LSTMCell(4), ["LSTM"]),  # (Keras 3.15 cannot trace a list of one cell)
], ids=["lstm lstm", "rnn rnn", "gru lstm rnn", "one cell"])
def test_matcher_reads_each_cell_bottom_to_top(cells, kinds):
    (body,) = body_matches(K.RNN(cells(), return_sequences=True))
    assert isinstance(body, BodyMatch), body
    assert [cell.kind for cell in body.cells] == kinds
    assert [cell.c_index is not None for cell in body.cells] == [kind == "LSTM" for kind in kinds]
    states = body.state_indices
    assert len(states) == len(set(states)) == sum(2 if kind == "LSTM" else 1 for kind in kinds)
    assert body.top is body.cells[-1] and body.top.kind == kinds[-1]


def test_matcher_names_the_stacked_cell_it_cannot_read():
    (body,) = body_matches(K.RNN([K.LSTMCell(4), K.GRUCell(3, activation="swish")], return_sequences=True))
    assert isinstance(body, Refusal)
    assert body.reason.startswith("in a stack of 2 cells (keras.layers.RNN([cell, ...]), MultiRNNCell), cell 2: ") and \
        "ONNX GRU" in body.reason, body.reason
