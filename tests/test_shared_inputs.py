# SPDX-License-Identifier: Apache-2.0
"""Layers whose input other nodes read too: stacked layers whose lower sequence is also used
elsewhere (a Concatenate, a residual Add, an attention), and parallel layers over one input.

OpenVINO's CPU plugin folds the Transpose it puts in front of a recurrent op into a Reshape for
every reader of that Transpose, so with a static dimension a shared one scrambles the other
readers' steps, with no error (``test_openvino.py`` pins it on bare nodes). The emitter gives such
nodes an input of their own (``emit._read_alone``); these tests check the numbers on both
runtimes with static batch and static time signatures (a batch of one row cannot show it), the
graph invariant that avoids the bug, and that models without a shared input get no extra node.
"""

import os

import pytest
import tensorflow as tf

from kerasutil import check_conversion, convert, keras, post_padded_tokens, randomize_weights
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

layers = keras.layers
RECURRENT = ("LSTM", "GRU", "RNN")
LENGTHS = [7, 3, 0, 1, 6, 7]  # full rows, an empty row, and lengths in between
STEPS = 7
FORMS = "dynamic,static batch,static time"  # the forms where OpenVINO scrambled shared swaps


def _seq(layer):
    return layer(UNITS, return_sequences=True)


# name: (the layers over the embedded tokens, how many barrier Maxes the emitter adds in "post" mode, where
# a lower layer's sequence reaches its readers as a Gather, which no runtime folds into a swap: no barrier)
STRUCTURES = {
    "stacked, the lower sequence concatenated": (
        lambda h: layers.Concatenate()([_seq(layers.LSTM)(lower := _seq(layers.LSTM)(h)), lower]), 0),
    "stacked, residual": (lambda h: layers.Add()([_seq(layers.GRU)(lower := _seq(layers.GRU)(h)), lower]), 0),
    "stacked Bidirectional, attention over both": (
        lambda h: layers.AdditiveAttention()([
            layers.Bidirectional(_seq(layers.GRU))(lower := layers.Bidirectional(_seq(layers.LSTM))(h)), lower]), 0),
    "stacked cells over a shared sequence": (
        lambda h: layers.Concatenate()([
            layers.RNN([layers.LSTMCell(UNITS), layers.GRUCell(UNITS)], return_sequences=True)(
                lower := _seq(layers.SimpleRNN)(h)), lower]), 0),
    "three parallel layers": (
        lambda h: layers.Concatenate()([_seq(layers.LSTM)(h), _seq(layers.GRU)(h), _seq(layers.SimpleRNN)(h)]), 2),
    "two parallel go_backwards layers": (
        lambda h: layers.Concatenate()([layers.LSTM(UNITS, return_sequences=True, go_backwards=True)(h),
                                        layers.GRU(UNITS, return_sequences=True, go_backwards=True)(h)]), 1),
}
UNSHARED = {  # nothing to keep apart: no barrier (the cost stays as it was)
    "one layer": lambda h: _seq(layers.LSTM)(h),
    "Bidirectional": lambda h: layers.Bidirectional(_seq(layers.GRU))(h),
    "stacked": lambda h: _seq(layers.LSTM)(_seq(layers.LSTM)(h)),
    "stacked Bidirectional": lambda h: layers.Bidirectional(layers.LSTM(UNITS))(
        layers.Bidirectional(_seq(layers.LSTM))(h)),
    "the embedding also used elsewhere": lambda h: layers.Concatenate()([_seq(layers.LSTM)(h), h]),
}


def build(structure, seed=0):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    model = keras.Model(tokens, structure(layers.Embedding(50, FEATURES + 2, mask_zero=True)(tokens)))
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    return randomize_weights(model, seed), spec, [post_padded_tokens(LENGTHS, STEPS, 50, seed)]


def barriers(onnx_model):
    return sum(node.op_type == "Max" and node.input[0] == node.input[1] for node in onnx_model.graph.node)


def shared_swaps(onnx_model) -> list:
    """The recurrent nodes that OpenVINO would give a Transpose shared with other readers: a node
    reading the same tensor as another; reading a tensor that is also swapped (time and batch) for
    other readers; or reading a swap (which cancels with OpenVINO's own) of a swap that others read."""
    readers, producers = {}, {}
    for node in onnx_model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
        for name in node.output:
            producers[name] = node

    def swaps(node):
        return node is not None and node.op_type == "Transpose" and \
            [list(a.ints) for a in node.attribute if a.name == "perm"] == [[1, 0, 2]]

    found = []
    for node in (n for n in onnx_model.graph.node if n.op_type in RECURRENT):
        x, source = node.input[0], producers.get(node.input[0])
        others = [r for r in readers[x] if r is not node]
        if any(r.op_type in RECURRENT for r in others) or any(swaps(r) for r in others):
            found.append(node.name)
        elif swaps(source) and not others and swaps(producers.get(source.input[0])) \
                and len(readers[source.input[0]]) > 1:
            found.append(node.name)
    return found


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", STRUCTURES)
def test_shared_inputs_are_exact_with_static_shapes(name, mode, monkeypatch):
    if os.environ.get("MLR_SIGNATURES") != "all":
        monkeypatch.setenv("MLR_SIGNATURES", FORMS)
    structure, _ = STRUCTURES[name]
    model, spec, inputs = build(structure)
    onnx_model = check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter(mode))
    assert not any(node.op_type == "Loop" for node in onnx_model.graph.node)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", STRUCTURES)
def test_no_node_reads_a_shared_swap(name, mode):
    structure, expected = STRUCTURES[name]
    model, spec, _ = build(structure)
    for signature in (spec, (tf.TensorSpec((None, STEPS), tf.int32, name="tokens"),)):
        assert shared_swaps(convert(model, signature, rewriter=mlr.make_rewriter(mode))) == []
        # the barriers, counted in the main graph: the single nodes' form (with the schedule they sit in Ifs)
        onnx_model = convert(model, signature, rewriter=mlr.make_rewriter(mode, schedule=False))
        assert shared_swaps(onnx_model) == []
        if mode == "post":  # "any" gathers each layer's input: the parallel layers' gathers merge too
            assert barriers(onnx_model) == expected
    stock = convert(model, spec, rewriter=None)
    assert barriers(stock) == 0


@pytest.mark.parametrize("name", UNSHARED)
def test_unshared_inputs_get_no_extra_node(name):
    model, spec, _ = build(UNSHARED[name])
    onnx_model = convert(model, spec)
    assert barriers(onnx_model) == 0 and shared_swaps(onnx_model) == []
