# SPDX-License-Identifier: Apache-2.0
"""A rewrite that fails half-way leaves no trace: the layer stays the Loop tf2onnx made, with a reason.

Failures are injected at several points of one layer's rewrite (while the mask tensors are made,
while the LSTM node is made, after the first consumer was rewired, after the loop was removed).
Only the first layer fails; later layers must still be rewritten, and a model whose every layer
fails must be exactly the stock tf2onnx model.
"""

import logging

import onnx
import pytest

from kerasutil import assert_matches_keras, convert, keras, op_counts, structure
from models import UNITS, embedding_model
import runtimes

import masked_lstm_rewriter as mlr
import masked_lstm_rewriter.plugin as plugin
from masked_lstm_rewriter.emit import layer as emit
from masked_lstm_rewriter.plan import masks
from masked_lstm_rewriter import pipeline as rewrite
from masked_lstm_rewriter.pipeline import snapshot
from masked_lstm_rewriter.read import loop as loop_reader

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

INJECTED = "injected failure"


@pytest.fixture(autouse=True)
def each_layer_alone(monkeypatch):
    """The failures are injected into one layer's emission (``emit_layer``): here a Bidirectional's
    halves are emitted alone, not as one bidirectional node (whose rollback to two nodes
    tests/unit/test_emit_bidirectional.py checks)."""
    monkeypatch.setattr(rewrite, "pair_directions", lambda layers, *args, **kwargs: list(layers))


class Injected(RuntimeError):
    pass


def fail_once(monkeypatch, module, name, after=True, times=1, when=lambda *a, **k: True):
    """Wrap ``module.name`` so that its first ``times`` qualifying calls raise (after running, when ``after``)."""
    original = getattr(module, name)
    state = {"left": times}

    def wrapper(*args, **kwargs):
        hit = state["left"] > 0 and when(*args, **kwargs)
        if hit and not after:
            state["left"] -= 1
            raise Injected(INJECTED)
        result = original(*args, **kwargs)
        if hit:
            state["left"] -= 1
            raise Injected(INJECTED)
        return result

    monkeypatch.setattr(module, name, wrapper)
    return state


def fail_in_graph_method(monkeypatch, method, times=1, when=lambda graph, *a, **k: True):
    """Make ``Graph.method`` raise right after its first ``times`` qualifying calls during emit_layer
    (``when(graph, *args)`` is asked before the call)."""
    original_emit = emit.emit_layer
    state = {"left": times}

    def emit_layer(graph, layer, tensors, *options):
        cls = type(graph)
        original = getattr(cls, method)

        def wrapper(self, *args, **kwargs):
            hit = state["left"] > 0 and when(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            if hit:
                state["left"] -= 1
                raise Injected(INJECTED)
            return result

        setattr(cls, method, wrapper)
        try:
            return original_emit(graph, layer, tensors, *options)
        finally:
            setattr(cls, method, original)

    monkeypatch.setattr(rewrite, "emit_layer", emit_layer)


def two_layer_model():
    """Two stacked masked Keras layers: three recurrent layers (a Bidirectional is two), one mask
    (shared mask tensors)."""
    return embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                           keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))


def unchanged(graph, ops):
    """A custom rewriter that changes nothing (any custom rewriter makes tf2onnx reorder the nodes a little)."""
    return graph.get_nodes()


def check_rolled_back(caplog, model, spec, inputs, loops, lstms):
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert (counts["Loop"], counts["LSTM"]) == (loops, lstms), counts
    onnx.checker.check_model(onnx_model, full_check=True)
    assert_matches_keras(model, onnx_model, spec, inputs)
    failed = mlr.last_report().left_as_loop
    assert failed and all("rewrite failed" in layer.detail and INJECTED in layer.detail for layer in failed), \
        mlr.last_report()
    warnings = [r.getMessage() for r in caplog.records if r.name == "masked_lstm_rewriter"
                and r.levelno == logging.WARNING]
    assert any(INJECTED in w and "left as a Loop" in w for w in warnings), warnings
    return onnx_model


def is_lstm(graph, op_type, *args, **kwargs):
    return op_type == "LSTM"


def is_loop(graph, name):
    return graph.get_node_by_name(name).type in ("While", "StatelessWhile")


INJECTIONS = {
    # the mask's lengths and guard are half made
    "mask tensors": lambda mp: fail_once(mp, masks.MaskPlanner, "_guard_post_padded"),
    # the weights are made, the LSTM node is not
    "lstm node": lambda mp: fail_in_graph_method(mp, "make_node", when=is_lstm),
    # the first consumer of the loop already reads the new tensors
    "after the first rewiring": lambda mp: fail_in_graph_method(mp, "replace_all_inputs"),
    # every consumer rewired, the loop's outputs and the loop itself removed
    "after removing the loop": lambda mp: fail_in_graph_method(mp, "remove_node", when=is_loop),
}


# what the reason says the rewriter was doing (plugin/unforeseen.py), for each injection
STAGES = {
    "mask tensors": "rewrite failed while computing the mask's lengths, guard or reordering (plan/masks.py, _emit)",
    "lstm node": "rewrite failed while emitting the schedule's segments (emit/segments.py, segments)",  # its first LSTM
    "after the first rewiring": "while pointing the loop's consumers at the native node's outputs (emit/rewire.py",
    "after removing the loop": "while pointing the loop's consumers at the native node's outputs (emit/rewire.py, rewire)",
}


@pytest.mark.parametrize("where", INJECTIONS)
def test_failed_layer_stays_a_loop_and_the_next_are_rewritten(caplog, monkeypatch, where):
    model, spec, inputs = two_layer_model()
    INJECTIONS[where](monkeypatch)
    check_rolled_back(caplog, model, spec, inputs, loops=1, lstms=2)
    report = mlr.last_report()
    assert len(report.rewritten) == 2 and len(report.left_as_loop) == 1, report
    assert STAGES[where] in report.left_as_loop[0].detail, report.left_as_loop[0].detail


@pytest.mark.parametrize("where", ["lstm node", "after the first rewiring", "after removing the loop"])
def test_every_layer_failing_gives_the_stock_model(caplog, monkeypatch, where):
    model, spec, inputs = two_layer_model()
    stock = convert(model, spec, rewriter=unchanged)
    fail = {"lstm node": lambda: fail_in_graph_method(monkeypatch, "make_node", times=99,
                                                      when=is_lstm),
            "after the first rewiring": lambda: fail_in_graph_method(monkeypatch, "replace_all_inputs", times=99),
            "after removing the loop": lambda: fail_in_graph_method(monkeypatch, "remove_node", times=99)}
    fail[where]()
    onnx_model = check_rolled_back(caplog, model, spec, inputs, loops=3, lstms=0)
    assert len(mlr.last_report().left_as_loop) == 3
    assert structure(onnx_model) == structure(stock)


def test_matcher_exception_on_one_layer_does_not_stop_the_others(caplog, monkeypatch):
    model, spec, inputs = two_layer_model()
    fail_once(monkeypatch, loop_reader, "_read_layer", after=False)
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec)
    counts = op_counts(onnx_model)
    assert (counts["Loop"], counts["LSTM"]) == (1, 2), counts
    assert_matches_keras(model, onnx_model, spec, inputs)
    (failed,) = mlr.last_report().left_as_loop
    assert failed.detail.startswith("unexpected loop wiring") and INJECTED in failed.detail


def test_snapshot_restores_the_graph_exactly(monkeypatch):
    """GraphSnapshot on its own: edits of every kind, then restore, give back the same graph."""
    seen = {}
    original_rewrite = plugin.rewrite_graph

    def rewrite(graph, ops, sources, mask_mode, target, *options):
        if not any(op.type in ("While", "StatelessWhile") for op in ops):
            return original_rewrite(graph, ops, sources, mask_mode, target, *options)
        saved = snapshot.GraphSnapshot(graph)
        before = _state(graph)
        original_rewrite(graph, ops, sources, mask_mode, target, *options)   # a full successful rewrite
        seen["changed"] = _state(graph) != before
        saved.restore()
        seen["restored"] = _state(graph) == before

    monkeypatch.setattr(plugin, "rewrite_graph", rewrite)
    model, spec, inputs = two_layer_model()
    onnx_model = convert(model, spec)
    assert seen == {"changed": True, "restored": True}
    assert structure(onnx_model) == structure(convert(model, spec, rewriter=unchanged))
    assert_matches_keras(model, onnx_model, spec, inputs)


def _state(graph):
    nodes = sorted((n.name, n.type, tuple(n.input), tuple(n.output), n.graph is graph) for n in graph.get_nodes())
    consumers = {k: frozenset(v) for k, v in graph._output_to_consumers.items() if v}  # pylint: disable=protected-access
    return nodes, consumers, tuple(graph.outputs)


def test_a_failed_first_layer_leaves_the_schedule_to_the_next(caplog, monkeypatch):
    """The mask's tensors, the schedule's plan among them, are made with the first layer rewritten
    over the mask. When that layer's rewrite fails, they go with it and the next layer makes them
    again: one plan, which the runs below take and skip."""
    from test_schedule import LONG_TAILED, schedule_taken, tokens

    model, spec, _ = two_layer_model()
    INJECTIONS["after the first rewiring"](monkeypatch)
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("post", schedule=True))
    counts = op_counts(onnx_model)
    assert (counts["Loop"], counts["LSTM"], counts["TopK"]) == (1, 2, 0), counts  # TopK: in a branch
    assert sum(n.op_type == "If" and "_plan" in n.name for n in onnx_model.graph.node) == 1
    (failed,) = mlr.last_report().left_as_loop
    assert INJECTED in failed.detail
    for batch, taken in ((tokens(LONG_TAILED), True), (tokens([5, 0, 3]), False)):
        assert schedule_taken(onnx_model, {"tokens": batch}) == [taken]
        for runtime in runtimes.runtimes():
            assert_matches_keras(model, onnx_model, spec, [batch], runtime)
