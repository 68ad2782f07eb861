# SPDX-License-Identifier: Apache-2.0
"""A Keras ``Bidirectional`` layer becomes one native node with ``direction="bidirectional"`` where that
is exact, equal to Keras at every position of every output, on onnxruntime and OpenVINO.

* unmasked (what stock tf2onnx leaves a Loop: Keras 3's ``Bidirectional(GRU)``, ``Bidirectional(SimpleRNN)``,
  ``Bidirectional(LSTM(recurrent_activation="hard_sigmoid"))`` and tf_keras's ``GRU(reset_after=False)``,
  ``SimpleRNN``): one node for a SimpleRNN converted for onnxruntime, and for an LSTM or GRU converted for
  an onnxruntime that runs it no slower (``fast``); two forward nodes otherwise (both runtimes run the
  one node slower from batch 32 on), the backward half's sequence read in time order; what stock
  tf2onnx makes native stays as it made it;
* masked, ``mask_mode="post"``, without the length-aware schedule (``schedule=False``; its segments are
  forward nodes, so a scheduled pair is two): one node for a SimpleRNN converted for onnxruntime (OpenVINO ignores
  a bidirectional RNN node's ``sequence_lens`` with dynamic shapes); an LSTM or GRU stays two forward
  nodes for every runtime (onnxruntime runs such a node 6-8% slower than two at batch 32 and more),
  and is one node for an onnxruntime entry that runs it no slower (the ``fast`` fixture: what keeps
  that form checked against Keras; for a layer returning no sequence it is exact on OpenVINO too,
  only slower); for any runtime or OpenVINO, two forward nodes;
* every merge mode, ``return_sequences``, ``return_state`` (an LSTM's final cell state: the padding
  column in both directions), ``initial_state`` given to both halves (a row with no valid step keeps
  it), batches with a full row, an empty row, rows of different lengths, and padded steps holding NaN
  or 1e4.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from kerasutil import FLAVOUR, LENGTHS, STEPS, check_batches, convert, keras, mask_from_lengths, randomize_weights
from models import FEATURES, UNITS, embedding_model, initial_state_model
from test_padding_values import explicit_mask_model, flat

import masked_lstm_rewriter as mlr
import runtimes
from masked_lstm_rewriter import targets

K = keras.layers
KINDS = {"LSTM": K.LSTM, "GRU": K.GRU, "RNN": K.SimpleRNN}


@pytest.fixture
def fast(monkeypatch):
    """onnxruntime as an entry that runs a masked bidirectional LSTM or GRU node no slower than two."""
    entry = dataclasses.replace(targets.ONNXRUNTIME, bidirectional_slow=())
    by_name = targets._BY_NAME  # pylint: disable=protected-access
    monkeypatch.setattr(targets, "_BY_NAME", {**by_name, "onnxruntime": entry})


def natives(onnx_model) -> list:
    """(op, direction) of each native recurrent node, in the graph's order."""
    return [(node.op_type, next(a.s.decode() for a in node.attribute if a.name == "direction"))
            for node in onnx_model.graph.node if node.op_type in KINDS]


def features_and_mask_model(layer, seed=0):
    """Features and a boolean mask input passed as ``mask=``; (model, spec, [batches]): the padded steps
    hold NaN in one batch and 1e4 in the other (rows of LENGTHS: a full row and an empty one)."""
    model, spec, inputs_for = explicit_mask_model(layer, mask_from_lengths(LENGTHS, STEPS), seed)
    return model, spec, [inputs_for(value) for value in (np.nan, 1e4)]


def features_model(layer, seed=0):
    """Unmasked float features [B, T, F]: (model, spec, [batches]), two batches of different sizes."""
    keras.utils.set_random_seed(seed)
    features = keras.Input((None, FEATURES), name="features")
    model = randomize_weights(keras.Model(features, flat(layer(features))), seed)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    rng = np.random.default_rng(seed)
    return model, spec, [[rng.normal(size=(rows, steps, FEATURES)).astype(np.float32)] for rows, steps in ((5, 7), (1, 3))]


@pytest.mark.parametrize("kind, options, merge_mode", [
    ("LSTM", {"return_sequences": True, "return_state": True}, "concat"),
    ("LSTM", {}, "ave"),
    ("GRU", {"return_sequences": True, "return_state": True}, "sum"),
    ("GRU", {"return_sequences": True, "reset_after": False}, None),
    ("RNN", {"return_sequences": True}, "mul"),
], ids=["lstm-state-concat", "lstm-last-ave", "gru-state-sum", "gru-reset_before-none", "simple_rnn-mul"])
def test_masked_post_padded(kind, options, merge_mode, fast):
    """One bidirectional node, converted for onnxruntime; NaN and 1e4 at padded steps reach no output."""
    layer = K.Bidirectional(KINDS[kind](UNITS, **options), merge_mode=merge_mode)
    model, spec, batches = features_and_mask_model(layer)
    onnx_model = check_batches(model, spec, batches, rewriter=mlr.make_rewriter("post", runtime="onnxruntime", schedule=False),
                               ops={kind: 2})
    assert natives(onnx_model) == [(kind, "bidirectional")]
    assert "ReverseSequence" not in {node.op_type for node in onnx_model.graph.node}
    report = mlr.last_report()
    assert len(report.rewritten) == 2 and not report.left_as_loop, str(report)


@pytest.mark.parametrize("kind, runtime", [(kind, runtime) for kind in ("LSTM", "GRU", "RNN")
                                           for runtime in (None, "openvino", "onnxruntime")
                                           if (kind, runtime) != ("RNN", "onnxruntime")])
def test_masked_stays_two_forward_nodes_unless_simple_rnn_for_onnxruntime(kind, runtime):
    layer = K.Bidirectional(KINDS[kind](UNITS, return_sequences=True, return_state=True))
    model, spec, batches = features_and_mask_model(layer)
    onnx_model = check_batches(model, spec, batches, rewriter=mlr.make_rewriter("post", runtime=runtime, schedule=False),
                               ops={kind: 2})
    assert natives(onnx_model) == [(kind, "forward"), (kind, "forward")]


def test_masked_embedding_return_sequences_no_merge(fast):
    """Embedding(mask_zero=True) -> Bidirectional(LSTM(return_sequences=True), merge_mode=None): the two
    sequences, each zeros at padded steps, the backward one in the model's time order."""
    model, spec, inputs = embedding_model(K.Bidirectional(K.LSTM(UNITS, return_sequences=True), merge_mode=None))
    onnx_model = check_batches(model, spec, [inputs], rewriter=mlr.make_rewriter("post", runtime="onnxruntime", schedule=False),
                               ops={"LSTM": 2})
    assert natives(onnx_model) == [("LSTM", "bidirectional")]


@pytest.mark.parametrize("kind, states", [("LSTM", ("h0", "c0", "h1", "c1")), ("GRU", ("h0", "h1"))], ids=["lstm", "gru"])
def test_masked_initial_states(kind, states, fast):
    """Each half's initial states, stacked along the node's direction axis."""
    layer = K.Bidirectional(KINDS[kind](UNITS, return_sequences=True, return_state=True))
    model, spec, inputs = initial_state_model(layer, states=states)
    onnx_model = check_batches(model, spec, [inputs], rewriter=mlr.make_rewriter("post", runtime="onnxruntime", schedule=False),
                               ops={kind: 2})
    assert natives(onnx_model) == [(kind, "bidirectional")]


def test_stacked_cells_stay_forward_nodes():
    """RNN([cell, cell]): a stack per half, emitted as today (each cell a forward node)."""
    layer = K.Bidirectional(K.RNN([K.GRUCell(UNITS), K.GRUCell(3)], return_sequences=True))
    model, spec, batches = features_and_mask_model(layer)
    onnx_model = check_batches(model, spec, batches[:1], ops={"GRU": 4})
    assert {direction for _, direction in natives(onnx_model)} == {"forward"}


# Keras 3 leaves every one a Loop in stock tf2onnx; tf_keras makes GRU(reset_after=True) (its default)
# one bidirectional node itself, kept as it is
UNMASKED = {
    "gru": (lambda: K.Bidirectional(K.GRU(UNITS, return_sequences=True)), "GRU", FLAVOUR == "keras3"),
    "gru-reset_before-state": (lambda: K.Bidirectional(K.GRU(UNITS, reset_after=False, return_state=True),
                                                       merge_mode="sum"), "GRU", True),
    "simple_rnn": (lambda: K.Bidirectional(K.SimpleRNN(UNITS, return_sequences=True), merge_mode="ave"), "RNN", True),
    # OpenVINO compiles no HardSigmoid in a native node: converted for it, the plugin keeps Keras 3's Loops
    "lstm-hard_sigmoid-state": (lambda: K.Bidirectional(K.LSTM(UNITS, recurrent_activation="hard_sigmoid",
                                                               return_sequences=True, return_state=True)),
                                "LSTM", FLAVOUR == "keras3"),
}


@pytest.mark.parametrize("name", list(UNMASKED))
def test_unmasked(name, monkeypatch):
    """For any runtime, the plugin's halves are two forward nodes with no ReverseSequence (each
    reversal a Slice, none reversed back); stock tf2onnx's one node stays."""
    build, op, by_plugin = UNMASKED[name]
    if name.startswith("lstm-hard_sigmoid") and not by_plugin:  # stock's native node: no OpenVINO target helps
        monkeypatch.setattr(runtimes, "runtimes", lambda: ("onnxruntime",))
    model, spec, batches = features_model(build())
    onnx_model = check_batches(model, spec, batches, ops={op: 2})
    assert natives(onnx_model) == ([(op, "forward")] * 2 if by_plugin else [(op, "bidirectional")])
    assert not {"Loop", "ReverseSequence"} & {node.op_type for node in onnx_model.graph.node}
    rewritten = convert(model, spec) and mlr.last_report().rewritten
    assert len(rewritten) == (2 if by_plugin else 0), str(mlr.last_report())


@pytest.mark.parametrize("name", [name for name, (_, _, by_plugin) in UNMASKED.items() if by_plugin])
def test_unmasked_one_node_for_onnxruntime(name, fast):
    """Converted for onnxruntime: one node, a SimpleRNN's as onnxruntime is, an LSTM's or GRU's for an
    onnxruntime that runs it no slower (``fast``)."""
    build, op, _ = UNMASKED[name]
    model, spec, batches = features_model(build())
    onnx_model = check_batches(model, spec, batches, rewriter=mlr.make_rewriter("post", runtime="onnxruntime", schedule=False),
                               ops={op: 2})
    assert natives(onnx_model) == [(op, "bidirectional")]


@pytest.mark.parametrize("runtime", [None, "onnxruntime"])
def test_unmasked_with_other_activations_is_one_node_only_for_onnxruntime(runtime, fast):
    """A GRU with relu must name its activations: one node only when converted for an onnxruntime that
    runs it no slower (OpenVINO runs it 2-10x slower)."""
    model, spec, batches = features_model(K.Bidirectional(K.GRU(UNITS, activation="relu", return_sequences=True)))
    onnx_model = check_batches(model, spec, batches, rewriter=mlr.make_rewriter("post", runtime=runtime, schedule=False),
                               ops={"GRU": 2})
    assert natives(onnx_model) == ([("GRU", "bidirectional")] if runtime else [("GRU", "forward")] * 2)
