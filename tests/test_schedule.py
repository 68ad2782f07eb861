# SPDX-License-Identifier: Apache-2.0
"""The length-ordered schedule (masked_lstm_rewriter/plan/schedule.py, emit/segments.py): exact at every position, for
every layer kind, direction and mask mode, on batches that run it and on batches that do not."""

import functools
import logging

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kerasutil import (FLAVOUR, assert_matches_keras, check_batches, convert, keras, layer_directions, onnx_outputs,
                       oracle_outputs, post_padded_tokens, scheduled_layers, walk_nodes)
from models import FEATURES, UNITS, embedding_model, explicit_mask_model, initial_state_model
from test_stacked_cells import stacked_embedding_model

import masked_lstm_rewriter as mlr
import runtimes
import signatures
from masked_lstm_rewriter import targets
from masked_lstm_rewriter.plan.schedule import MIN_BATCH, SCHEDULE_NAME, Cuts
from masked_lstm_rewriter.sessions import onnxruntime_session

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)


STEPS = 40
SEGMENTS = Cuts(*targets.schedule_cuts(None)).segments  # a model for any runtime's
# long-tailed: one full row, most short ones, a few empty, rows in no particular order
LONG_TAILED = [40, 3, 0, 5, 2, 9, 1, 4, 0, 6, 2, 3, 14, 1, 2, 7]
# rows longest first, the reverse of the order the schedule sorts them into, and ties
REVERSED = [40, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 5, 6, 40, 1, 0][::-1]
TIES = [30] * 8 + [2] * 8 + [40]
# every row padded past the longest one: the segments end before the last step
SHORT_OF_T = [28, 3, 0, 5, 2, 9, 1, 4, 0, 6, 2, 3, 14, 1, 2, 7]
# 13 rows: the rows at the cuts' ranks tie and the last is the longest, so the segments' first steps are
# made increasing and the last segment is a single step at the end (below the longest length)
FEW_ROWS = [40, 2, 0, 1, 3, 1, 0, 2, 1, 1, 2, 0, 1]
BATCHES = {"long-tailed": LONG_TAILED, "reversed": REVERSED, "ties": TIES, "short of T": SHORT_OF_T,
           "few rows": FEW_ROWS}


def tokens(lengths, seed=0):
    return post_padded_tokens(lengths, STEPS, 50, seed)


def schedule_taken(onnx_model, feeds) -> list:
    """Whether each plan (one per mask) chose the segments on this batch: its If's first output."""
    model = onnx.ModelProto()
    model.CopyFrom(onnx_model)
    plans = [n for n in model.graph.node if n.op_type == "If" and n.name.startswith(SCHEDULE_NAME + "_plan")]
    for plan in plans:
        model.graph.output.append(helper.make_tensor_value_info(plan.output[0], onnx.TensorProto.BOOL, None))
    results = onnx_outputs(model, [type("Spec", (), {"name": k}) for k in feeds], list(feeds.values()))
    return [bool(np.asarray(r).all()) for r in results[len(results) - len(plans):]]


def scheduled(mode="post", runtime=None):
    """The schedule in a model for any runtime (checked on each), or for ``runtime``."""
    return mlr.make_rewriter(mode, runtime=runtime, schedule=True)


SCHEDULED = scheduled()


def check_scheduled(model, spec, batches, ops, taken=True, rewriter=SCHEDULED):
    """Exact on every batch under the signature forms, and the dynamic model runs the segments on
    each batch (``taken``); returns that model."""
    onnx_model = check_batches(model, spec, batches, rewriter=rewriter, ops=ops)
    assert scheduled_layers(onnx_model) == sum(ops.values()), "every layer carries the schedule"
    for inputs in batches:
        feeds = {s.name: np.asarray(x) for s, x in zip(spec, inputs)}
        assert all(schedule_taken(onnx_model, feeds)) == taken, [len(i) for i in inputs]
    return onnx_model


LAYERS = {
    "lstm": lambda **o: keras.layers.LSTM(UNITS, **o),
    "gru": lambda **o: keras.layers.GRU(UNITS, **o),
    "gru_reset_before": lambda **o: keras.layers.GRU(UNITS, reset_after=False, **o),
    "simple_rnn": lambda **o: keras.layers.SimpleRNN(UNITS, **o),
}
OPS = {"lstm": "LSTM", "gru": "GRU", "gru_reset_before": "GRU", "simple_rnn": "RNN"}


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("direction", ["forward", "go_backwards", "bidirectional"])
@pytest.mark.parametrize("kind", list(LAYERS))
def test_every_kind_direction_and_mode(kind, direction, mode):
    """Sequences and states (LSTM: the cell state through the padding column) at every position."""
    options = dict(return_sequences=True, return_state=direction != "bidirectional")
    layer = LAYERS[kind](go_backwards=direction == "go_backwards", **options)
    if direction == "bidirectional":
        layer = keras.layers.Bidirectional(layer)
    model, spec, _ = embedding_model(layer)
    batches = [[tokens(BATCHES["long-tailed"])], [tokens(BATCHES["reversed"], 1)]]
    count = 2 if direction == "bidirectional" else 1
    check_scheduled(model, spec, batches, {OPS[kind]: count}, rewriter=scheduled(mode))


@pytest.mark.parametrize("mode", ["post", "any"])
def test_stacked_cells_in_one_loop(mode, caplog):
    """``keras.layers.RNN([cells])`` converted for onnxruntime: one node per cell, each in segments over
    the one below's outputs, with every cell's final states (the LSTM's c through its padding column).
    For any runtime, no schedule: OpenVINO 2026.4 fails to compile a scheduled stack of cells once its
    shapes are made static (targets.schedules_cell_stacks); exact either way."""
    rnn = keras.layers.RNN([keras.layers.LSTMCell(UNITS), keras.layers.GRUCell(3)], go_backwards=True,
                           return_sequences=True, return_state=True)
    model, spec, _ = stacked_embedding_model(rnn)
    batches = [[tokens(BATCHES["long-tailed"])], [tokens(BATCHES["reversed"], 1)]]
    check_scheduled(model, spec, batches, {"LSTM": 1, "GRU": 1}, rewriter=scheduled(mode, runtime="onnxruntime"))
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        assert not scheduled_layers(check_batches(model, spec, batches[:1], rewriter=scheduled(mode)))
    assert any("(stacked cells): the length-aware schedule is left out" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("opset", [11, 12, 13, 18])
def test_lowest_and_highest_opsets(opset):
    """The plan's and the segments' nodes at the opsets where their spelling changes (11: the lowest;
    12: integer Max and GreaterOrEqual; 13: Squeeze's and Split's inputs; 18: ReduceMax's): a
    Bidirectional layer (a forward and a reversed half) with its states."""
    layer = keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    model, spec, _ = embedding_model(layer)
    onnx_model = check_batches(model, spec, [[tokens(LONG_TAILED)], [tokens(SHORT_OF_T, 1)]], rewriter=SCHEDULED,
                               ops={"LSTM": 2}, opset=opset)
    assert onnx_model.opset_import[0].version == opset and scheduled_layers(onnx_model) == 2
    feeds = {spec[0].name: tokens(LONG_TAILED)}
    assert all(schedule_taken(onnx_model, feeds))


@pytest.mark.usefixtures("plugin_off")
@pytest.mark.parametrize("mode, opset", [("post", 15), ("any", 15), ("post", 11), ("any", 12)])
def test_an_onnx_file_rewritten_with_the_schedule(mode, opset):
    """An ONNX file of stock tf2onnx's Loops, rewritten with the schedule: its layers scheduled, and the
    outputs equal to Keras's on every runtime and to the file's own at every position, on batches
    that run the segments."""
    layer = keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True))
    model, spec, _ = embedding_model(layer)
    stock = convert(model, spec, rewriter=None, opset=opset)
    rewritten, report = mlr.rewrite_onnx(stock, mask_mode=mode, schedule=True)
    assert not report.left_as_loop and scheduled_layers(rewritten) == 2, str(report)
    for batch in ([tokens(LONG_TAILED)], [tokens(SHORT_OF_T, 1)]):
        feeds = {spec[0].name: batch[0]}
        assert all(schedule_taken(rewritten, feeds))
        for runtime in runtimes.runtimes():
            assert_matches_keras(model, rewritten, spec, batch, runtime)
        for ours, theirs in zip(onnx_outputs(rewritten, spec, batch), onnx_outputs(stock, spec, batch)):
            np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("name", list(BATCHES))
def test_row_orders_and_ties(name):
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    check_scheduled(model, spec, [[tokens(BATCHES[name])]], {"LSTM": 1})


def test_any_mode_with_holes_and_pre_padding():
    """mask_mode="any" schedules the compacted rows: pre-padded rows and holes, long-tailed."""
    layer = keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True))
    model, spec, _ = embedding_model(layer)
    batch = tokens(LONG_TAILED, 3)
    batch[1] = np.roll(batch[1], 10)          # pre-padded
    batch[4, 1] = 0                           # a hole
    batch[12] = np.roll(batch[12], 5)         # both ends
    check_scheduled(model, spec, [[batch]], {"GRU": 2}, rewriter=scheduled("any"))


def test_initial_state():
    """Initial states are ordered with the rows and sliced to each segment's rows; empty rows keep them."""
    model, spec, inputs = initial_state_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    rows = len(LONG_TAILED)
    rng = np.random.default_rng(5)
    batch = [tokens(LONG_TAILED)] + [rng.normal(size=(rows, UNITS)).astype(np.float32) for _ in range(2)]
    check_scheduled(model, spec, [batch], {"LSTM": 1})


def test_stacked_layers_share_one_plan(monkeypatch):
    """One sort and one plan per mask, whatever the number of layers over it. (Declared signature
    only: the count of plans is what is checked, and a batch fixed below MIN_BATCH has none.)"""
    monkeypatch.setattr(signatures, "forms_for", lambda test_id=None: ("dynamic",))
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                                     keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True)),
                                     keras.layers.SimpleRNN(UNITS, go_backwards=True))
    onnx_model = check_scheduled(model, spec, [[tokens(LONG_TAILED)]], {"LSTM": 1, "GRU": 2, "RNN": 1})
    plans = [n for n in walk_nodes(onnx_model.graph) if n.op_type == "If" and n.name.startswith(SCHEDULE_NAME + "_plan")]
    topk = [n for n in walk_nodes(onnx_model.graph, segments=True) if n.op_type == "TopK"]
    assert len(plans) == 1 and len(topk) == 1, (len(plans), len(topk))
    assert layer_directions(onnx_model, "GRU") == ["forward", "reverse"]


def test_explicit_mask_input_with_return_state():
    model, spec, _ = explicit_mask_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    rng = np.random.default_rng(2)
    features = rng.normal(size=(len(LONG_TAILED), STEPS, FEATURES)).astype(np.float32)
    mask = np.arange(STEPS)[None, :] < np.asarray(LONG_TAILED)[:, None]
    check_scheduled(model, spec, [[features, mask]], {"LSTM": 1})


@pytest.mark.parametrize("lengths", [[7], [5, 0, 3], [STEPS] * MIN_BATCH, [3] * 12, [0] * 10],
                         ids=["batch 1", "small batch", "full rows", "equal lengths", "all empty"])
def test_batches_that_keep_the_single_node(lengths):
    """Small batches, full or equal rows, too few steps: the single node runs, as without a schedule."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    check_scheduled(model, spec, [[tokens(lengths)]], {"LSTM": 1}, taken=False)


def test_static_small_batch_has_no_schedule():
    """A static batch below MIN_BATCH rows never pays: no If at all, the graph of the single node."""
    import tensorflow as tf
    model, _, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, (tf.TensorSpec((1, None), tf.int32, name="tokens"),), rewriter=SCHEDULED)
    assert not any(n.op_type == "If" for n in onnx_model.graph.node)


@pytest.mark.parametrize("opset", [11, 15])
def test_post_guard_still_fails_on_a_scheduled_batch(opset):
    """The guard runs before the plan: a pre-padded row in a long-tailed batch fails loudly, on every
    runtime (before opset 13, the guard is spelled without Split's sizes input)."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, spec, rewriter=SCHEDULED, opset=opset)
    batch = tokens(LONG_TAILED)
    batch[3] = np.roll(batch[3], 4)
    for runtime in runtimes.runtimes():
        with pytest.raises(Exception) as failure:
            onnx_outputs(onnx_model, spec, [batch], runtime)
        assert "not post-padded" in str(failure.value), runtime


@pytest.mark.parametrize("runtime", [None, "openvino"])
def test_segments_cover_long_tailed_batches(runtime):
    """The plan has its runtime's segments (for OpenVINO fewer than for any runtime: a segment costs
    it more), and a long row among many short ones runs them, exact at every position on every
    runtime and signature form."""
    model, spec, _ = embedding_model(keras.layers.GRU(UNITS, return_sequences=True))
    onnx_model = check_scheduled(model, spec, [[tokens([STEPS] + [2] * 31)]], {"GRU": 1},
                                 rewriter=scheduled(runtime=runtime))
    segments = [n for n in walk_nodes(onnx_model.graph, segments=True) if n.op_type == "GRU"]
    assert len(segments) == Cuts(*targets.schedule_cuts(runtime)).segments + 1
    assert Cuts(*targets.schedule_cuts("openvino")).segments < SEGMENTS


@pytest.mark.parametrize("runtime", [None, "onnxruntime"])
@pytest.mark.parametrize("layer, wheres", [
    (lambda: keras.layers.LSTM(UNITS, return_sequences=True), 0),
    (lambda: keras.layers.LSTM(UNITS, return_sequences=True, go_backwards=True), 1)], ids=["plain", "go_backwards"])
def test_the_layers_if_gives_zeros_past_the_lengths(layer, wheres, runtime):
    """Past each row's length the rows of a layer's If read as zeros: the segments' indices point at a zero
    row there, which they append to their rows where the runtime's node writes zeros past the lengths
    (onnxruntime), and which the rows get after the If for any runtime (one Pad, where the fix-ups
    without a schedule pad the node's Y). The single node's branch holds the bare node, its Y returned
    as the node gives it. So the fix-ups after the If are the ones without a schedule: a plain layer's
    sequence is one Gather of the If's rows, at the plan's indices composed with the batch-major ones
    (one copy), with no Where; a reversed layer keeps its Where."""
    model, spec, _ = embedding_model(layer())
    rewriter = scheduled(runtime=runtime)
    onnx_model = check_scheduled(model, spec, [[tokens(LONG_TAILED)]], {"LSTM": 1}, rewriter=rewriter)
    check_scheduled(model, spec, [[tokens([5, 0, 3])]], {"LSTM": 1}, taken=False, rewriter=rewriter)  # single node
    main = onnx_model.graph.node
    layer_if = next(n for n in main if n.op_type == "If" and n.name.startswith(SCHEDULE_NAME)
                    and "_plan" not in n.name)
    assert sum(n.op_type == "Where" for n in main) == wheres + 1  # and the plan's choice of indices
    single = next(a.g for a in layer_if.attribute if a.name == "else_branch")
    assert [n.op_type for n in single.node] == ["LSTM"] and single.output[1].name == single.node[0].output[0]
    in_segments = next(a.g for a in layer_if.attribute if a.name == "then_branch")
    made_in_segments = {output: n for n in in_segments.node for output in n.output}
    stacked = made_in_segments[in_segments.output[1].name]
    segments = Cuts(*targets.schedule_cuts(runtime)).segments
    assert stacked.op_type == "Concat" and len(stacked.input) == segments + (runtime == "onnxruntime")
    if wheres == 0:  # the graph's output: Gather(the If's rows, Gather(Reshape(the plan's indices), ...))
        made_by = {output: n for n in main for output in n.output}
        gather = made_by[onnx_model.graph.output[0].name]
        rows, index = (made_by[name] for name in gather.input)
        assert (gather.op_type, index.op_type) == ("Gather", "Gather")
        if runtime is None:
            assert rows.op_type == "Pad"
            rows = made_by[rows.input[0]]
        assert rows.op_type == "Reshape" and list(rows.input) == [layer_if.output[1], layer_if.output[0]]
        flat = made_by[index.input[0]]
        assert flat.op_type == "Reshape"
        plan_indices = made_by[flat.input[0]] if runtime else made_by[made_by[flat.input[0]].input[0]]
        assert plan_indices.op_type == "Where"


def nested_ifs(node) -> list:
    """The If nodes directly in ``node``'s branches."""
    return [n for a in node.attribute for n in a.g.node if n.op_type == "If"]


def test_one_if_per_mask_and_one_per_layer():
    """A small batch pays for one If per mask, the plan's, and one per layer. In the plan's If, the
    sort, the segments and the gather indices are an If that a cheap bound skips (full rows), with
    no If in it. (The layers' nodes are not nested in the plan's If: a node two Ifs deep ran slower
    in onnxruntime 1.31.)"""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                                     keras.layers.GRU(UNITS, return_sequences=True))
    onnx_model = convert(model, spec, rewriter=SCHEDULED)
    ifs = [n.name for n in onnx_model.graph.node if n.op_type == "If"]
    assert len(ifs) == 3 and sum("_plan" in name for name in ifs) == 1, ifs
    plan = next(n for n in onnx_model.graph.node if n.op_type == "If" and "_plan" in n.name)
    segments = nested_ifs(plan)
    assert [n.name.startswith(SCHEDULE_NAME + "_segments") for n in segments] == [True]
    assert nested_ifs(segments[0]) == []


@functools.lru_cache(maxsize=None)
def plan_conditions(runtime=None):
    """An onnxruntime session: lengths [B] int32 -> (the cheap bound, whether the segments pay), with the
    cuts of a model for ``runtime``."""
    from tf2onnx.graph import Graph

    from masked_lstm_rewriter.plan import schedule
    g = Graph([], opset=15)
    g.add_graph_input("lengths", onnx.TensorProto.INT32, [-1])
    lengths = g.make_node("Cast", ["lengths"], attr={"to": onnx.TensorProto.INT64}).output[0]
    batch = g.make_node("Shape", [lengths]).output[0]
    cuts = Cuts(*targets.schedule_cuts(runtime))
    outputs = [schedule._may_pay(g, lengths, batch, cuts), schedule._compute_segments(g, lengths, batch, cuts)[0]]
    for output in outputs:
        g.add_graph_output(output, onnx.TensorProto.BOOL, [1])
    model = g.make_model("plan_conditions")
    model.ir_version = 8
    return onnxruntime_session(model)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(lengths=st.lists(st.integers(0, 200), min_size=MIN_BATCH, max_size=64),
       tail=st.sampled_from(["uniform", "one long", "lognormal"]), runtime=st.sampled_from([None, "openvino"]))
def test_the_cheap_bound_never_rules_out_segments_that_pay(lengths, tail, runtime):
    """:func:`_may_pay` skips the sort and the segments: it must hold wherever the full test holds
    (else a batch that would pay runs the single node: exact, but slow), with each runtime's cuts."""
    lengths = np.asarray(lengths)
    if tail == "one long":
        lengths = np.minimum(lengths, 12)
        lengths[0] = 200
    elif tail == "lognormal":
        lengths = np.minimum(np.exp(lengths / 40.0) * 3, 200).astype(np.int64)
    session = plan_conditions(runtime)
    may_pay, pays = (bool(r.all()) for r in session.run(None, {"lengths": lengths.astype(np.int32)}))
    assert may_pay or not pays, lengths


def test_a_batch_past_the_bound_that_does_not_pay():
    """Lengths spread evenly (an empty row among them) pass the cheap bound, then the full test
    finds the segments do not pay: the plan's middle path (sorted and cut, no indices) and the
    single node, exact at every position."""
    lengths = [24, 17, 6, 11, 1, 3, 0, 1, 31, 22, 30, 12, 21, 39, 27]
    bound, pays = (bool(r.all()) for r in plan_conditions().run(None, {"lengths": np.asarray(lengths, np.int32)}))
    assert (bound, pays) == (True, False)
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    check_scheduled(model, spec, [[tokens(lengths)]], {"LSTM": 1}, taken=False)


def test_the_cheap_bound_skips_full_rows_and_keeps_long_tails():
    assert [bool(plan_conditions().run(None, {"lengths": np.asarray(lengths, np.int32)})[0].all())
            for lengths in ([STEPS] * 16, [30] * 8 + [20] * 8, LONG_TAILED)] == [False, False, True]


def test_on_by_default_and_off_when_asked_or_quantized():
    """The default conversion has the schedule; ``schedule=False`` and ``quantize="int8"`` give the
    single node's graph, with no If."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    assert scheduled_layers(convert(model, spec)) == scheduled_layers(mlr.convert(model).onnx_model) == 1
    for unscheduled in (convert(model, spec, mlr.make_rewriter(schedule=False)),
                        mlr.convert(model, schedule=False).onnx_model, mlr.convert(model, quantize="int8").onnx_model):
        assert not any(n.op_type == "If" for n in unscheduled.graph.node)


def test_a_scheduled_layer_runs_on_every_runtime():
    """A scheduled model is exact on OpenVINO too (every test here runs on both runtimes): its report
    names no runtime in ``not_for``, and any target takes ``schedule=True``."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    for runtime in (None, "onnxruntime", "openvino"):
        convert(model, spec, rewriter=scheduled(runtime=runtime))
        layer = mlr.last_report().layers[0]
        assert layer.not_for == (() if runtime != "onnxruntime" else ("openvino",)), (runtime, layer.not_for)


def test_a_layer_normalization_keeps_the_schedule_out_where_openvino_may_run_the_model(caplog):
    """OpenVINO 2026.4 computes a LayerNormalization's reciprocal (Keras 3's Rsqrt, which tf2onnx makes a
    Sqrt, then a Reciprocal) as x / 1 in a graph holding the schedule's If (0.2-0.9 off): a model for any
    runtime, or for OpenVINO, with such a division gets no schedule (said at INFO); tf_keras's
    LayerNormalization (a fused batch normalization) divides by no tensor and keeps it. Exact on both
    runtimes either way; for onnxruntime the schedule stays, exact there."""
    model, spec, _ = embedding_model(keras.layers.LayerNormalization(), keras.layers.LSTM(UNITS, return_sequences=True))
    batches = [[tokens(LONG_TAILED)], [tokens([STEPS, 3, 0, 1])]]
    for runtime in (None, "openvino"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
            onnx_model = check_batches(model, spec, batches, rewriter=scheduled(runtime=runtime))
        vetoed = any("schedule is left out: OpenVINO computes" in r.getMessage()
                     and "(a division by a tensor)" in r.getMessage() for r in caplog.records)
        assert scheduled_layers(onnx_model) == (0 if vetoed else 1) and vetoed == (FLAVOUR == "keras3")
    check_scheduled(model, spec, batches[:1], {"LSTM": 1}, rewriter=scheduled(runtime="onnxruntime"))


def test_openvino_reuses_a_compiled_model_over_batches_that_grow():
    """One compiled OpenVINO model run on batches whose shapes grow and shrink, the segments' and the
    single node's in turn: OpenVINO 2026.4 hands the memory of an If's outputs to tensors computed
    after them when a run's shapes outgrow the runs before (its outputs then read as other values,
    with no error), unless a point of shape inference comes first (emit.node's Reshape)."""
    pytest.importorskip("openvino")
    model, spec, onnx_model = _bidirectional_and_states_model()
    compiled = runtimes.openvino_compiled(onnx_model)
    request = compiled.create_infer_request()
    for index, lengths in enumerate(GROWING_AND_SHRINKING):
        batch = tokens(lengths, index)
        taken = all(schedule_taken(onnx_model, {spec[0].name: batch}))
        assert taken == (len(lengths) >= MIN_BATCH and lengths != [STEPS] * 9), lengths
        _assert_openvino_matches(model, onnx_model, compiled, batch, request.infer({spec[0].name: batch}))


def test_openvino_in_throughput_mode_runs_requests_side_by_side_exactly():
    """The same model compiled as OpenVINO's docs advise for a server (``PERFORMANCE_HINT=THROUGHPUT``:
    two streams here), four requests in flight over those batches, three times over: each result is
    Keras's, whichever stream ran it and whatever ran beside it."""
    ov = pytest.importorskip("openvino")
    model, spec, onnx_model = _bidirectional_and_states_model()
    core = ov.Core()
    compiled = core.compile_model(core.read_model(onnx_model.SerializeToString(), b""), "CPU",
                                  dict(runtimes.OPENVINO_CONFIG, PERFORMANCE_HINT="THROUGHPUT"))
    batches = [tokens(lengths, index) for index, lengths in enumerate(GROWING_AND_SHRINKING * 3)]
    results = {}
    queue = ov.AsyncInferQueue(compiled, 4)
    queue.set_callback(lambda request, index: results.__setitem__(
        index, {output: request.get_tensor(output).data.copy() for output in compiled.outputs}))
    for index, batch in enumerate(batches):
        queue.start_async({spec[0].name: batch}, index)
    queue.wait_all()
    for index, batch in enumerate(batches):
        _assert_openvino_matches(model, onnx_model, compiled, batch, results[index])


# batches whose shapes grow and shrink, the segments' and the single node's in turn
GROWING_AND_SHRINKING = [[5, 0, 3], LONG_TAILED, [STEPS] * 9, LONG_TAILED + FEW_ROWS, [2, 1], TIES]


def _bidirectional_and_states_model():
    """(model, spec, scheduled ONNX model): a Bidirectional LSTM under an LSTM returning its states."""
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
                                     keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    return model, spec, convert(model, spec, rewriter=SCHEDULED)


def _assert_openvino_matches(model, onnx_model, compiled, batch, got):
    """Every output OpenVINO gave (``got``: output port -> array) equals Keras's on ``batch`` within 1e-5."""
    for output, expected in zip(onnx_model.graph.output, oracle_outputs(model, [batch])):
        error = np.max(np.abs(np.asarray(got[compiled.output(output.name)]) - expected))
        assert error <= 1e-5, (batch.shape, output.name, error)
