# SPDX-License-Identifier: Apache-2.0
"""Emit stage: a forward and a backward loop over one input and mask (a ``Bidirectional``'s halves, as
Keras writes them) become one native node with ``direction="bidirectional"`` where that is exact, and
stay two forward nodes where it is not.

The function holds two of ``_graphs``'s loops side by side, the second with ``backward=True`` (its
input and mask reversed in time), reading the same ``x`` and ``mask``. Checked:

* one native node, ``direction="bidirectional"``, W, R and B stacking each half's weights in the
  ONNX op's gate order along the direction axis (forward first), no ``ReverseSequence``, and every
  output equal to numpy's masked recurrence and to stock tf2onnx's Loops at every position
  (``check_rewrites``: a full row, an empty row, lengths in between; the guard in "post");
* the halves that do not qualify (sizes, activations, kinds, GRU ``reset_after`` that differ;
  ``mask_mode="any"``; the length-aware schedule; a SimpleRNN pair for a runtime that ignores a
  bidirectional RNN's lengths; a masked LSTM or GRU pair for a runtime that runs such a node slower
  than two, onnxruntime among them) stay two forward nodes, exact, one over the rows reversed;
* masked LSTM and GRU pairs are emitted as one node for an onnxruntime entry that runs it no slower
  (``FAST``): the emitter's code for them is checked, whatever the planner picks today;
* a pair whose emission fails half-way is rolled back and emitted as two forward nodes.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import tensorflow as tf
import tf2onnx

import masked_lstm_rewriter as mlr

import _graphs as G
from _harness import FAST, check_rewrites, fast_bidirectional, native_nodes, runner


def pair_function(forward: G.Loop, backward: G.Loop):
    """(tf.function, signature): both loops over the same inputs, their outputs one after the other. A
    mask made from lengths is made once for both, as ``Bidirectional`` hands its halves one mask."""
    made_from_lengths = forward.mask == "lengths"
    if made_from_lengths:
        forward, backward = (dataclasses.replace(spec, mask="input") for spec in (forward, backward))
    fwd, signature, _ = G.masked_loop(forward)
    bwd, _, _ = G.masked_loop(backward)

    def both(*args):
        return fwd.python_function(*args) + bwd.python_function(*args)
    if made_from_lengths:
        signature = [signature[0], tf.TensorSpec([None], tf.int32, name="lengths")]
        return tf.function(lambda x, lengths: both(x, tf.sequence_mask(lengths, tf.shape(x)[1])),
                           input_signature=signature, autograph=False), signature
    return tf.function(both, input_signature=signature, autograph=False), signature


@functools.lru_cache(maxsize=None)
def convert_pair(forward: G.Loop, backward: G.Loop, mode, runtime=None, schedule=False, opset=G.OPSET,
                 fast=False) -> G.Converted:
    """The two loops converted (``mode=None``: stock tf2onnx), cached: tests only read the result.
    ``fast``: within :func:`fast_bidirectional`."""
    fn, signature = pair_function(forward, backward)
    rewriter = None if mode is None else mlr.make_rewriter(mode, runtime=runtime, schedule=schedule)
    with fast_bidirectional(fast):
        return convert(fn, signature, rewriter, opset)


def convert(fn, signature, rewriter, opset=G.OPSET) -> G.Converted:
    """``fn`` converted with ``rewriter`` (None: stock tf2onnx), and the report."""
    model, _ = tf2onnx.convert.from_function(fn, input_signature=signature, opset=opset,
                                             custom_rewriter=[] if rewriter is None else [rewriter])
    return G.Converted(model, None if rewriter is None else mlr.last_report(), ())


class PairCase:
    """The two loops, for ``check_rewrites``: references are numpy's masked recurrence of each loop and
    the Loops stock tf2onnx makes of the same function."""

    replaces = "Loop"
    atol, rtol = 1e-5, 1e-5

    def __init__(self, forward: G.Loop, backward: G.Loop, runtime=None, schedule=False, opset=G.OPSET, fast=False):
        self.specs = (forward, backward)
        self.runtime, self.schedule, self.opset, self.fast = runtime, schedule, opset, fast
        self._stock = None

    def rewrite(self, mode: str) -> tuple:
        converted = convert_pair(*self.specs, mode, self.runtime, self.schedule, self.opset, self.fast)
        return converted.model, converted.report

    def batches(self, layout: str) -> list:
        if self.specs[0].mask == "lengths" and layout != "post":
            return []
        found = []
        for seed in G.SEEDS:
            feeds, mask = G.batch(self.specs[0], G.LAYOUTS[layout], seed)
            expected = [output for spec in self.specs
                        for output in G.reference(spec, G.weights_of(spec), feeds["x"], mask).values()]
            if self._stock is None:
                self._stock = runner(convert_pair(*self.specs, None).model, "onnxruntime")
            found.append((feeds, {"numpy's masked recurrence": expected, "stock tf2onnx's Loops": self._stock(feeds)}))
        return found


def halves(kind="LSTM", mask="input", both=(), **backward):
    """A forward loop and a backward one over the same input and mask (the backward one's weights
    differ: another seed), ``both`` (pairs) changing both, ``backward`` the backward one."""
    forward = G.Loop(kind, mask=mask, **dict(both))
    return forward, dataclasses.replace(forward, backward=True, seed=1, **backward)


def directions(model) -> list:
    return [G.attributes(node)["direction"] for node in native_nodes(model)]


def ops(model) -> set:
    return {node.op_type for node in model.graph.node}


KINDS = [pytest.param("LSTM", id="lstm"), pytest.param("GRU", id="gru"), pytest.param("RNN", id="simple_rnn")]


@pytest.mark.parametrize("mask", ["input", "none"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_pair_is_one_bidirectional_node(kind, mask):
    """Converted for onnxruntime, the one runtime that runs a bidirectional node (RNN) no slower than
    two forward nodes (OpenVINO runs each op's slower, and ignores a bidirectional RNN's lengths);
    an LSTM or GRU pair for an onnxruntime that runs it no slower (:data:`FAST`)."""
    specs = halves(kind, mask)
    case = PairCase(*specs, runtime="onnxruntime", fast=kind != "RNN")
    model, report = check_rewrites(case, "post", natives=[kind], runtimes=["onnxruntime"])
    (node,) = native_nodes(model)
    assert directions(model) == ["bidirectional"] and "ReverseSequence" not in ops(model)
    assert mask != "none" or not {"Split", "Where"} & ops(model), ops(model)  # no mask machinery without a mask
    init = G.initializers(model)
    w, r, b = (init[name] for name in node.input[1:4])
    units, features, gates = specs[0].units, specs[0].features, G.GATES[kind]
    padding_column = kind == "LSTM" and mask != "none"  # the cell state is an output
    assert w.shape == (2, gates * units, features + padding_column) and r.shape == (2, gates * units, units)
    assert b.shape == (2, 2 * gates * units)
    for direction, spec in enumerate(specs):  # forward first, each half's own kernel in the op's gate order
        kernel = G.keras_blocks(kind, G.weights_of(spec)["kernel"], units)
        onnx_w = G.onnx_blocks(kind, w[direction], units)
        for gate in G.KERAS_GATES[kind]:
            np.testing.assert_array_equal(onnx_w[gate][:, :features], kernel[gate].T, err_msg=f"{direction} {gate}")
    assert ("activations" in G.attributes(node)) == (mask != "none"), G.attributes(node)  # the defaults: unnamed
    assert [layer.detail.split(", with")[0] for layer in report.layers] == [
        f"{kind}, forward: the forward direction of a bidirectional node",
        f"{kind}, backward: the reverse direction of a bidirectional node"]


@pytest.mark.parametrize("opset", [13, 18])
def test_every_opset(opset):
    """The node and how its outputs are cut into directions are valid at the first and the last opset."""
    model, _ = check_rewrites(PairCase(*halves("LSTM"), runtime="onnxruntime", opset=opset, fast=True), "post",
                              natives=["LSTM"], runtimes=["onnxruntime"])
    assert directions(model) == ["bidirectional"]


def test_openvino_is_vetoed_for_a_masked_simple_rnn_pair_for_onnxruntime():
    _, report = PairCase(*halves("RNN"), runtime="onnxruntime").rewrite("post")
    assert all(layer.not_for == ("openvino",) and "convert with runtime='openvino'" in layer.detail
               for layer in report.layers), str(report)


@pytest.mark.parametrize("specs, mode, runtime", [
    pytest.param(halves(units=3), "post", "onnxruntime", id="sizes-differ"),
    pytest.param(halves(activation="relu"), "post", "onnxruntime", id="activations-differ"),
    pytest.param(halves("GRU", reset_after=False), "post", "onnxruntime", id="gru-reset_after-differs"),
    pytest.param((G.Loop("LSTM"), G.Loop("GRU", backward=True, seed=1)), "post", "onnxruntime", id="kinds-differ"),
    pytest.param(halves("GRU"), "any", "onnxruntime", id="mask_mode-any"),
    pytest.param(halves("RNN"), "post", None, id="simple_rnn-any-runtime"),
    pytest.param(halves("RNN"), "post", "openvino", id="simple_rnn-openvino"),
    pytest.param(halves("LSTM"), "post", None, id="lstm-any-runtime"),
    pytest.param(halves("GRU"), "post", "openvino", id="gru-openvino"),
    pytest.param(halves("LSTM"), "post", "onnxruntime", id="lstm-onnxruntime"),
    pytest.param(halves("GRU"), "post", "onnxruntime", id="gru-onnxruntime"),
    pytest.param(halves("LSTM", mask="none", both=(("activation", "relu"),)), "post", None, id="unmasked-lstm-named-activations"),
    pytest.param(halves("LSTM", mask="none"), "post", None, id="unmasked-lstm-any-runtime"),
    pytest.param(halves("GRU", mask="none"), "post", "onnxruntime", id="unmasked-gru-onnxruntime"),
    pytest.param(halves("RNN", mask="none"), "post", None, id="unmasked-simple_rnn-any-runtime"),
    pytest.param(halves("RNN", mask="none"), "post", "openvino", id="unmasked-simple_rnn-openvino"),
])
def test_halves_that_do_not_qualify_stay_two_forward_nodes(specs, mode, runtime):
    """Unmasked, each runtime but onnxruntime's RNN runs one bidirectional node 5-18% slower than two
    forward nodes at batch 32 and more: the halves stay two nodes, with the steps reversed by a Slice
    and the backward sequence handed over in time order (no ReverseSequence reverses it back)."""
    model, _ = check_rewrites(PairCase(*specs, runtime=runtime), mode, natives=2)
    masked = specs[0].mask != "none"
    assert directions(model) == ["forward", "forward"]
    assert ("ReverseSequence" in ops(model)) == masked and (masked or "Slice" in ops(model))


def test_an_unmasked_pair_names_activations_other_than_the_defaults():
    """For onnxruntime, which runs a bidirectional RNN node as fast as two, an unmasked pair with other
    activations is one node naming them."""
    case = PairCase(*halves("RNN", mask="none", both=(("activation", "relu"),)), runtime="onnxruntime")
    model, _ = check_rewrites(case, "post", natives=["RNN"], runtimes=["onnxruntime"])
    (node,) = native_nodes(model)
    assert G.attributes(node)["activations"] == ["Relu", "Relu"]


def test_a_mask_made_from_lengths_pairs_in_any_mode():
    """``sequence_mask(lengths, T)`` keeps each row's valid steps in place in "any" too."""
    model, _ = check_rewrites(PairCase(*halves("GRU", mask="lengths"), runtime="onnxruntime", fast=True), "any",
                              natives=["GRU"])
    assert directions(model) == ["bidirectional"]


def test_the_length_aware_schedule_keeps_two_nodes():
    """Its segments are forward nodes: a scheduled pair stays two layers (each in its own If)."""
    model, _ = PairCase(*halves("GRU"), runtime="onnxruntime", schedule=True, fast=True).rewrite("post")
    assert "If" in ops(model) and "bidirectional" not in str(model.graph)


def test_a_pair_that_fails_half_way_is_rolled_back_and_emitted_as_two_nodes(monkeypatch, caplog):
    from masked_lstm_rewriter import pipeline  # pylint: disable=import-outside-toplevel
    real = pipeline.emit_pair

    def fail_after_emitting(graph, pair, masks, connect):
        real(graph, pair, masks, lambda *args: None)  # the node and the fix-ups, but nothing rewired
        raise RuntimeError("half-way")
    monkeypatch.setattr(pipeline, "emit_pair", fail_after_emitting)
    fn, signature = pair_function(*halves("GRU"))
    with fast_bidirectional():
        converted = convert(fn, signature, mlr.make_rewriter("post", runtime="onnxruntime", schedule=False))
    assert directions(converted.model) == ["forward", "forward"] and "Loop" not in ops(converted.model)
    assert [layer.rewritten for layer in converted.report.layers] == [True, True]
    assert any("not one bidirectional node, each emitted alone" in r.getMessage() and "half-way" in r.getMessage()
               for r in caplog.records)
    feeds, mask = G.batch(halves("GRU")[0], G.POST_PADDED)
    expected = [o for spec in halves("GRU") for o in G.reference(spec, G.weights_of(spec), feeds["x"], mask).values()]
    for got, want in zip(runner(converted.model, "onnxruntime")(feeds), expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
