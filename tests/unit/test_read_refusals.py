# SPDX-License-Identifier: Apache-2.0
"""Read stage, refusals: a loop the native op cannot replace stays the Loop, with its reason.

One test per kind of failure, each turning one knob of an otherwise supported loop. Reasons are
asserted by their stable text (the wording ``masked_lstm_rewriter`` gives in its log and in
``last_report()``, and that docs/why-a-loop.md documents):

* the body reader's refusals (read from the While body alone): an activation no ONNX op has
  (swish, ``x * sigmoid(x)``), one that the native ops compute wrongly (softplus), float64, a mask
  applied by arithmetic instead of a select;
* the main graph's: a loop that may stop before its last step, weights that are not constants;
* the emitter's and the plugin's: an LSTM cell state that a non-saturating recurrent activation
  cannot hold, an activation the target runtime cannot compile, an opset before 11.

Every refused loop is left exactly as tf2onnx made it: one Loop, no native op, one layer reported
(``check_refuses`` of ``_harness.py`` on the While source's case, ``_graphs.WhileLoop``).
"""

import pytest

import _graphs as G
from _harness import check_refuses, check_rewrites

SWISH_RNN = "a gate's activation is not one ONNX RNN supports (it is computed by Mul)"
SWISH_GRU = "a gate's activation is not one ONNX GRU supports (it is computed by Mul)"
SWISH_LSTM = "the hidden state is not o * act(c) with an activation ONNX LSTM supports"
SOFTPLUS = "softplus activation: onnxruntime's native recurrent ops compute it as log(1 + exp(x))"
FLOAT64 = "float64 layer: onnxruntime (1.31) has no float64 kernel for the native LSTM, GRU or RNN"
TRIP_COUNT = "the loop may stop before its last time step"
NOT_CONSTANTS = "the weights are not constants"
CELL_STATE = "the final cell state is used and recurrent activation Relu cannot hold it over padded steps"
OPENVINO = "target openvino: OpenVINO's native GRU op compiles only Sigmoid, Tanh, Relu activations, not Softsign"
OPSET = "opset 10: the native form is emitted for opset 11 and later"
MASK_USE = "the step reads a mask but does not select its output and states by it as Keras's layers do"


@pytest.mark.parametrize("spec, reason", [
    pytest.param(G.Loop("RNN", activation="swish"), SWISH_RNN, id="swish-rnn"),
    pytest.param(G.Loop("GRU", activation="swish"), SWISH_GRU, id="swish-gru"),
    pytest.param(G.Loop("LSTM", activation="swish"), SWISH_LSTM, id="swish-lstm"),
    pytest.param(G.Loop("LSTM", dtype="float64"), FLOAT64, id="float64"),
    pytest.param(G.Loop("GRU", select="arithmetic"), MASK_USE, id="mask-by-arithmetic"),
])
def test_body_reader_refuses(spec, reason):
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert (read.kind, read.reason[:len(reason)]) == (None, reason)
    check_refuses(G.WhileLoop(spec), reason)


def test_softplus_is_read_but_refused():
    """The step is read (a layer stacked above may need its output list), and marked refused."""
    spec = G.Loop("RNN", activation="softplus")
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert (read.kind, read.activations, read.reason[:len(SOFTPLUS)]) == ("RNN", ("Softplus",), SOFTPLUS)
    check_refuses(G.WhileLoop(spec), SOFTPLUS)


@pytest.mark.parametrize("spec, reason", [
    pytest.param(G.Loop("GRU", stop="T-1"), TRIP_COUNT, id="stops-before-T"),
    pytest.param(G.Loop("RNN", weights="inputs"), NOT_CONSTANTS, id="weights-not-constants"),
    pytest.param(G.Loop("LSTM", recurrent_activation="relu"), CELL_STATE, id="cell-state-relu"),
])
def test_a_body_that_reads_is_refused_in_the_main_graph(spec, reason):
    """The body reads as a supported cell; what refuses it is how the main graph runs it."""
    (read,) = G.read_bodies(*G.masked_loop(spec)[:2])
    assert read.reason is None and read.kind == spec.kind
    check_refuses(G.WhileLoop(spec), reason)


def test_the_cell_state_refusal_needs_the_cell_state():
    """Without c among the outputs, a relu recurrent activation is rewritten (and exact)."""
    check_rewrites(G.WhileLoop(G.Loop("LSTM", recurrent_activation="relu", outputs=("seq", "last", "h"))), "post",
                   natives=["LSTM"])


def test_runtime_refusal():
    spec = G.Loop("GRU", recurrent_activation="softsign")
    check_refuses(G.WhileLoop(spec, runtime="openvino"), OPENVINO, "any")
    _, report = check_rewrites(G.WhileLoop(spec), "any", natives=["GRU"])  # without: native, not for OpenVINO
    assert [(layer.rewritten, layer.detail.split(";")[0]) for layer in report.layers] == [(True, "GRU, forward")]
    assert "for openvino, convert with runtime='openvino'" in report.layers[0].detail


def test_opset_before_11_is_refused():
    check_refuses(G.WhileLoop(G.Loop("GRU"), opset=10), OPSET)


def test_a_refused_loop_still_computes_the_layer():
    """The Loop left in place is tf2onnx's own: it gives the masked recurrence's numbers."""
    spec = G.Loop("LSTM", recurrent_activation="relu")
    converted, weights = G.convert_loop(spec, "post")
    G.assert_matches_reference(spec, converted, weights, G.NOT_POST_PADDED)
