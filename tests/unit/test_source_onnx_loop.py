# SPDX-License-Identifier: Apache-2.0
"""The ONNX Loop source (``sources/onnx_loop.py``, ``read/onnx_loop.py``) through ``rewrite_onnx``:
files written by stock tf2onnx (both Keras flavours) and by Keras 3's JAX-backend export become
native, and give the file's outputs at every position (and, for the JAX exports, Keras's); what
cannot be proven exact stays the Loop it was, byte for byte, with its reason."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.corpus.ops import scheduled_layers
from masked_lstm_rewriter.onnx_file import model_io
from _harness import (assert_same_outputs, available_runtimes, check_refuses, check_rewrites, fast_bidirectional,
                      native_nodes, run)
from _onnx_files import (DATA, JAX_FILES, LITERT_FILES, NATIVE_OPS, ONNXSIM_FILES, OLDER_TF2ONNX_FILES, TF2ONNX_FILES,
                         OnnxFile, feeds_for, name_of, op_counts, stored_outputs, stored_path)

# JAX-backend exports that stay Loops, and why (the file says what its output is at masked steps)
JAX_LOOPS = {}


def _loops(model) -> int:
    return op_counts(model)["Loop"]


def _layers(path: str, model) -> int:
    """The recurrent layers of a stock file: one per Loop, but two in the stacked cells' one."""
    return 2 if "_stacked_cells_" in name_of(path) else _loops(model)


def _file_id(path: str) -> str:
    return f"{os.path.basename(os.path.dirname(path))}/{name_of(path)}"


# the LiteRT-made files onnxruntime loads: their own outputs are the reference
LOADABLE_LITERT_FILES = [path for path in LITERT_FILES if not os.path.exists(stored_path(path))]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("path", TF2ONNX_FILES + OLDER_TF2ONNX_FILES + ONNXSIM_FILES + LOADABLE_LITERT_FILES,
                         ids=_file_id)
def test_stock_tf2onnx_files_become_native(path, mode):
    """Files of stock tf2onnx 1.17 (opsets 11-18), of 1.16, 1.15 and 1.13 (Keras 2.10, opsets 11-13), of
    1.17 after onnx-simplifier (which folds static shapes into constants, a Bidirectional's reversal
    lengths among them), and of 1.17 from LiteRT flatbuffers (its own spellings: the largest int64 as
    the trip count, a last output kept as a one-step list, tf_keras's hard_sigmoid clipped by a Relu).
    Rewritten without the schedule (whose
    segments are forward nodes) for an onnxruntime that runs a masked bidirectional LSTM node no slower
    than two (``FAST``), a Bidirectional's two Loops are one bidirectional node in "post"; for any runtime
    with the schedule, two forward nodes (OpenVINO runs a masked bidirectional LSTM node slower than two)."""
    original = onnx.load(path)
    runtime = "onnxruntime" if mode == "post" else None
    with fast_bidirectional(runtime is not None):
        model, _ = check_rewrites(OnnxFile(original, runtime, schedule=runtime is None), mode)
    directions = [next(a.s for a in node.attribute if a.name == "direction") for node in native_nodes(model)]
    assert sum(2 if d == b"bidirectional" else 1 for d in directions) == _layers(path, original)
    assert (b"bidirectional" in directions) == (runtime is not None and "_bi" in name_of(path)), directions


def test_a_bidirectional_lstm_file_for_onnxruntime_is_two_forward_nodes():
    """onnxruntime runs a masked bidirectional LSTM node slower than two forward nodes at batch 32 and more."""
    path = next(p for p in TF2ONNX_FILES if "_bilstm" in name_of(p))
    model, _ = check_rewrites(OnnxFile(onnx.load(path), "onnxruntime"), "post")
    assert [next(a.s for a in node.attribute if a.name == "direction") for node in native_nodes(model)] == [
        b"forward", b"forward"]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("path", [p for p in JAX_FILES if name_of(p) not in JAX_LOOPS], ids=name_of)
def test_jax_exports_become_native_and_equal_keras(path, mode):
    """Keras's own outputs on the JAX backend (stored with the file) at every position: post-padded
    rows with a full and an empty row, and in "any" rows padded elsewhere."""
    original = onnx.load(path)
    rewritten, report = check_rewrites(OnnxFile(original), mode, natives=_loops(original))
    _assert_equals_stored_keras(path, rewritten, mode)
    assert report.rewritten


def _assert_equals_stored_keras(path: str, rewritten, mode: str) -> None:
    """``rewritten`` gives the Keras outputs stored beside the file at ``path``, on every runtime (in
    "post", on its post-padded batches)."""
    for batch, feeds, expected in stored_outputs(path):
        if batch == "nonpost" and mode == "post":
            continue
        for runtime in available_runtimes():
            assert_same_outputs(expected, run(rewritten, feeds, runtime), f"Keras {batch}, {runtime}")


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("path", [p for p in LITERT_FILES if p not in LOADABLE_LITERT_FILES], ids=name_of)
def test_litert_stacks_onnxruntime_cannot_load_become_native_and_equal_keras(path, mode):
    """tf2onnx's file of a stack of layers from a LiteRT flatbuffer does not load in onnxruntime (shape
    inference of the upper Loop's body fails): rewritten, every layer is native and the model gives
    Keras's outputs (stored beside it) at every position, on a batch with a full and an empty row."""
    original = onnx.load(path)
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="TypeInferenceError"):
        run(original, stored_outputs(path)[0][1])
    rewritten, report = mlr.rewrite_onnx(original, mask_mode=mode)
    assert _loops(rewritten) == 0 and len(report.rewritten) == _layers(path, original), str(report)
    _assert_equals_stored_keras(path, rewritten, mode)


def test_a_jax_output_that_starts_from_the_initial_state_keeps_it_before_the_first_valid_step():
    """Keras on JAX outputs the state at masked steps, so a row's steps before its first valid one
    show the given initial h (TensorFlow's Keras shows zeros there): pre-padded rows and an empty
    row, fed h0 that is not zero."""
    original = onnx.load(os.path.join(DATA, "jax", "init_state_lstm_seq_t6.onnx"))
    rewritten, _ = check_rewrites(OnnxFile(original), "any", natives=1)
    rng = np.random.default_rng(3)
    mask = np.array([[0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 1, 0, 1, 1, 0]], bool)
    feeds = {"features": rng.normal(size=(4, 6, 3)).astype(np.float32), "mask": mask,
             "h0": rng.normal(size=(4, 3)).astype(np.float32), "c0": rng.normal(size=(4, 3)).astype(np.float32)}
    expected = run(original, feeds, "onnxruntime")
    assert np.allclose(expected[0][1], feeds["h0"][1]) and np.allclose(expected[0][0, :2], feeds["h0"][0])
    for runtime in available_runtimes():
        assert_same_outputs(expected, run(rewritten, feeds, runtime), f"the file, {runtime}")


def _masked_output_repeats_the_other_state(model):
    """``model`` whose Loop body outputs, at masked steps, the LSTM's other kept state (c) instead of
    the h it repeats."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    body = next(n for n in doctored.graph.node if n.op_type == "Loop").attribute[0].g
    producers = {out: node for node in body.node for out in node.output}
    node = producers[body.output[-1].name]
    while node.op_type != "Where":
        node = producers[node.input[0]]
    inputs = {i.name for i in body.input}
    slot = next(k for k in (1, 2) if node.input[k] in inputs)  # the kept value: Where(mask, new, old) or negated
    kept = {name for n in body.node if n.op_type == "Where" for name in n.input[1:] if name in inputs}
    node.input[slot] = next(iter(kept - {node.input[slot]}))
    return doctored


def test_a_masked_output_that_repeats_another_state_stays_a_loop():
    """Masked steps that output a value other than the layer's own output (here an LSTM's c) cannot be
    the native op's: the Loop stays, with the reason."""
    original = onnx.load(os.path.join(DATA, "jax", "init_state_lstm_seq_t6.onnx"))
    check_refuses(OnnxFile(_masked_output_repeats_the_other_state(original)),
                  "the output at masked steps repeats another value")


def _mirror_starting_from(model, value: float):
    """``model`` (a LiteRT-made file whose Loop keeps its last output as a one-step list, the variable
    after the two counters) whose list starts filled with ``value``."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    loop = next(n for n in doctored.graph.node if n.op_type == "Loop")
    start = next(i for i in doctored.graph.initializer if i.name == loop.input[4])
    start.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(start).shape, value, np.float32), start.name))
    return doctored


def test_a_last_output_kept_as_a_list_is_read_only_where_it_starts_as_zeros():
    """LiteRT keeps a layer's last output as a one-step list the step overwrites with the output; read
    as that output reshaped, which it is after any number of steps only where both start as zeros."""
    original = onnx.load(os.path.join(DATA, "tf2onnx-litert", "keras3_emb_lstm_last_op15.onnx"))
    check_rewrites(OnnxFile(_mirror_starting_from(original, 0.0)), "post", natives=1)
    _, report = check_refuses(OnnxFile(_mirror_starting_from(original, 1.0)), "loop variable")
    assert "is not kept at masked steps" in report.left_as_loop[0].detail, str(report)


def _upper_cell_not_native(model):
    """``model`` (a stack of two Loops) whose upper Loop's first sigmoid is a softsign: no native op computes it."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    upper = [n for n in doctored.graph.node if n.op_type == "Loop"][-1]
    next(n for n in upper.attribute[0].g.node if n.op_type == "Sigmoid").op_type = "Softsign"
    return doctored


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("shapes", ["static", "static_batch"])
def test_a_loop_body_that_reads_a_rewritten_sequence_reads_it_by_its_old_name(shapes, flavour):
    """With a static batch the upper Loop's body reads the lower Loop's sequence itself (with a dynamic
    time, the main graph reads its shape too). The lower layer becomes native; the upper one, which no
    native op computes, stays the Loop it was and reads the native sequence under the name it read before."""
    original = _upper_cell_not_native(onnx.load(os.path.join(DATA, "tf2onnx",
                                                             f"{flavour}_{shapes}_emb_gru_lstm_stack_op15.onnx")))
    upper = [n for n in original.graph.node if n.op_type == "Loop"][-1]
    rewritten, report = mlr.rewrite_onnx(original)
    assert (op_counts(rewritten)["Loop"], op_counts(rewritten)["GRU"]) == (1, 1), str(report)
    assert [n.SerializeToString() for n in rewritten.graph.node if n.op_type == "Loop"] == [upper.SerializeToString()]
    for lengths in ([6, 3], [0, 1]):
        feeds = feeds_for(original, lengths)
        for runtime in available_runtimes():
            assert_same_outputs(run(original, feeds), run(rewritten, feeds, runtime), f"rows {lengths}, {runtime}")


def _at_opset(model, opset: int):
    """``model`` moved to ``opset`` by onnx's version converter (axes become inputs, ops get new versions)."""
    return onnx.version_converter.convert_version(model, opset)


def _optimized_by_onnxruntime(model, tmp_path):
    """``model`` as onnxruntime saves it after its basic graph optimizations (constants folded, in Loop bodies too)."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("path, change", [
    ("tf2onnx/keras3_emb_bilstm_concat_op11.onnx", "opset21"),
    ("tf2onnx/tf_keras_masking_lstm_stack_states_op11.onnx", "opset21"),
    ("tf2onnx/tf_keras_emb_gru_ra_false_seq_op12.onnx", "opset18"),
    ("jax/stacked_lstm_gru.onnx", "opset18"),
    ("jax/emb_lstm_state.onnx", "opset18"),
    ("tf2onnx/keras3_emb_lstm_backwards_op15.onnx", "onnxruntime"),
    ("tf2onnx/tf_keras_emb_gru_seq_op15.onnx", "onnxruntime"),
], ids=lambda value: name_of(value) if value.endswith(".onnx") else value)
def test_files_other_tools_changed_after_their_producer_become_native(path, change, mode, tmp_path):
    """A file moved to another opset by onnx's version converter (tf2onnx's up to 21, Keras's JAX export
    down from 23 to 18), or saved by onnxruntime after its basic optimizations, spells the same loops
    with other op versions and folded constants: rewritten, it gives the changed file's outputs."""
    original = onnx.load(os.path.join(DATA, path))
    changed = (_optimized_by_onnxruntime(original, tmp_path) if change == "onnxruntime"
               else _at_opset(original, int(change[len("opset"):])))
    runtime = "onnxruntime" if mode == "post" else None
    model, _ = check_rewrites(OnnxFile(changed, runtime, schedule=runtime is None), mode)
    assert _loops(model) == 0 and len(native_nodes(model)) >= 1


def _by_outputs(model) -> dict:
    return {tuple(node.output): node.SerializeToString() for node in model.graph.node}


@pytest.mark.parametrize("path", [os.path.join(DATA, "tf2onnx", "keras3_emb_bilstm_concat_op15.onnx"),
                                  os.path.join(DATA, "jax", "stacked_lstm_gru.onnx")], ids=name_of)
def test_nothing_else_changes(path):
    """Graph inputs, outputs, opsets and metadata stay; every node the rewritten Loops did not need
    stays byte for byte, but a batch-major Transpose of a Loop's sequence, whose tensor a Gather now
    computes; the Loops and only what fed them alone go."""
    original = onnx.load(path)
    rewritten, report = mlr.rewrite_onnx(original)
    for field in ("input", "output"):
        assert [v.SerializeToString() for v in getattr(rewritten.graph, field)] == \
            [v.SerializeToString() for v in getattr(original.graph, field)]
    assert rewritten.opset_import == original.opset_import and rewritten.ir_version == original.ir_version
    assert (rewritten.producer_name, rewritten.producer_version) == (original.producer_name, original.producer_version)
    assert list(rewritten.metadata_props) == list(original.metadata_props)
    before, after = _by_outputs(original), _by_outputs(rewritten)
    loop_outputs = {o for node in original.graph.node if node.op_type == "Loop" for o in node.output}
    transposed = {tuple(node.output) for node in original.graph.node
                  if node.op_type == "Transpose" and node.input[0] in loop_outputs}
    changed = [key for key in before if key in after and before[key] != after[key]]
    assert set(changed) <= transposed, changed
    assert all(onnx.NodeProto.FromString(after[key]).op_type == "Gather" for key in changed)
    gone = [key for key in before if key not in after]
    assert op_counts(rewritten)["Loop"] == len(report.left_as_loop) and report.rewritten
    reads_after = {name for node in rewritten.graph.node for name in node.input}
    outputs = {o.name for o in original.graph.output}
    for key in gone:  # what went was read only by what went (or nothing reads it any more)
        assert not (set(key) & (reads_after | outputs) - {o for n in rewritten.graph.node for o in n.output})


def test_the_given_model_is_not_changed():
    original = onnx.load(TF2ONNX_FILES[0])
    before = original.SerializeToString()
    mlr.rewrite_onnx(original)
    assert original.SerializeToString() == before


def _with_trip_count(model, count: int):
    """``model`` whose Loop runs at most ``count`` steps (a constant trip count)."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    loop = next(n for n in doctored.graph.node if n.op_type == "Loop")
    doctored.graph.initializer.append(numpy_helper.from_array(np.array(count, np.int64), "short_trip"))
    loop.input[0] = "short_trip"
    return doctored


def test_a_loop_that_may_stop_early_stays_as_it_was():
    original = _with_trip_count(onnx.load(os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")), 2)
    rewritten, _ = check_refuses(OnnxFile(original), "the loop may stop before its last time step")
    assert rewritten.SerializeToString() == original.SerializeToString()


def _with_softplus_cells(model):
    """``model`` whose Loop bodies compute Softplus where they computed Tanh."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    for loop in (n for n in doctored.graph.node if n.op_type == "Loop"):
        for node in loop.attribute[0].g.node:
            node.op_type = "Softplus" if node.op_type == "Tanh" else node.op_type
    return doctored


@pytest.mark.parametrize("name", ["tf2onnx/keras3_emb_lstm_seq_op15", "tf2onnx/tf_keras_emb_gru_seq_op15",
                                  "jax/emb_lstm_seq", "jax/plain_gru_seq"])
def test_a_softplus_cell_stays_a_loop_on_every_runtime(name):
    """The native ops compute Softplus as log(1 + exp(x)), inf from x > 88; the file's own Softplus op is right."""
    original = _with_softplus_cells(onnx.load(os.path.join(DATA, f"{name}.onnx")))
    for runtime in (None, "onnxruntime", "openvino"):
        rewritten, _ = check_refuses(OnnxFile(original, runtime=runtime), "softplus activation: onnxruntime's native")
        assert rewritten.SerializeToString() == original.SerializeToString()


def _output_variable_starting_at_ones(model):
    """``model`` (tf2onnx's file of a Keras LSTM) whose loop variable carrying the last output starts at
    ones: a row's steps before its first valid one output ones."""
    doctored = onnx.ModelProto()
    doctored.CopyFrom(model)
    loop = next(n for n in doctored.graph.node if n.op_type == "Loop")
    doctored.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "one_f"))
    doctored.graph.node.insert(list(doctored.graph.node).index(loop),
                               helper.make_node("Add", [loop.input[3], "one_f"], ["output_starts_at_ones"]))
    loop.input[3] = "output_starts_at_ones"
    return doctored


@pytest.mark.parametrize("name", ["keras3_emb_lstm_seq_op15", "tf_keras_emb_lstm_seq_op15"])
def test_an_output_that_does_not_start_as_zeros_stays_a_loop(name):
    original = _output_variable_starting_at_ones(onnx.load(os.path.join(DATA, "tf2onnx", f"{name}.onnx")))
    rewritten, _ = check_refuses(OnnxFile(original), "the output at masked steps does not start as zeros")
    assert rewritten.SerializeToString() == original.SerializeToString()


def test_below_opset_11_every_loop_stays_with_the_reason():
    original = onnx.load(os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op13.onnx"))
    original.opset_import[0].version = 10
    check_refuses(OnnxFile(original), "opset 10: the native form is emitted for opset 11 and later")


def test_a_loop_of_another_kind_is_left_alone():
    """A Loop that reads no sequence step by step is none of the rewriter's business: not reported."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "body", [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", onnx.TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", onnx.TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1, np.float32), "one")])
    graph = helper.make_graph([helper.make_node("Loop", ["n", "", "start"], ["total"], body=body)], "g",
                              [helper.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
                               helper.make_tensor_value_info("start", onnx.TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("total", onnx.TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    rewritten, report = mlr.rewrite_onnx(model)
    assert not report.layers and rewritten.SerializeToString() == model.SerializeToString()


def test_a_file_with_external_data_loads_and_saves(tmp_path):
    source = onnx.load(os.path.join(DATA, "tf2onnx", "keras3_emb_gru_seq_op15.onnx"))
    path = tmp_path / "external.onnx"
    onnx.save_model(source, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="external.data", size_threshold=0)
    output = tmp_path / "native.onnx"
    rewritten, _ = mlr.rewrite_onnx(str(path), str(output))
    again = onnx.load(str(output))
    assert [n.op_type for n in native_nodes(again)] == ["GRU"] and op_counts(again)["Loop"] == 0
    assert again.SerializeToString() == rewritten.SerializeToString()


EMB_LSTM = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")


def _same_on_onnxruntime(original_path: str, rewritten_path: str) -> None:
    """The file as saved (loaded by onnxruntime from its path, data file included) gives the original's outputs."""
    original = onnx.load(original_path)
    session = onnxruntime.InferenceSession(rewritten_path, providers=["CPUExecutionProvider"])
    for lengths in ([6, 3, 0, 1], [2, 2]):
        feeds = feeds_for(original, lengths, "post")
        got = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
        assert_same_outputs(run(original, feeds, "onnxruntime"), got, f"the saved file, rows {lengths}")


def test_a_model_past_the_protobuf_limit_is_written_with_its_tensors_beside_it(tmp_path, monkeypatch):
    monkeypatch.setattr(model_io, "PROTOBUF_LIMIT", 1000)  # every model is "large" now,
    monkeypatch.setattr(model_io, "INLINE_BYTES", 100)     # and its weights go to the data file
    output = tmp_path / "native.onnx"
    mlr.rewrite_onnx(EMB_LSTM, str(output))
    data = tmp_path / "native.onnx.data"
    assert data.exists() and data.stat().st_mode & 0o044, "readable as an ordinary new file"
    reloaded = onnx.load(str(output))
    assert len(native_nodes(reloaded)) == 1
    assert not list(tmp_path.glob(".partial-*"))
    _same_on_onnxruntime(EMB_LSTM, str(output))


def test_a_tensor_past_the_protobuf_limit_is_kept_as_it_was(tmp_path, monkeypatch):
    """An embedding table past 2 GB cannot enter tf2onnx's graph: the rewrite reads the model without
    its values (the layer does not need them) and the rewritten model keeps the table as it was.
    Here the table is grown past every other tensor and the limit lowered to its size
    (tools/check_large_model.py runs this on a real 2.2 GB model)."""
    original = onnx.load(EMB_LSTM)
    initializers = {t.name: t for t in original.graph.initializer}
    table = next(initializers[n.input[0]] for n in original.graph.node if n.op_type == "Gather" and n.input[0] in initializers)
    values = numpy_helper.to_array(table)
    grown = np.concatenate([values, np.zeros((1000, values.shape[1]), values.dtype)])
    table.CopyFrom(numpy_helper.from_array(grown, table.name))
    source = str(tmp_path / "grown.onnx")
    onnx.save(original, source)
    assert all(model_io.tensor_bytes(t) < model_io.tensor_bytes(table) for t in initializers.values() if t is not table)
    monkeypatch.setattr(model_io, "HUGE_TENSOR", model_io.tensor_bytes(table))
    output = tmp_path / "native.onnx"
    rewritten, report = mlr.rewrite_onnx(source, str(output))
    assert report.rewritten and not report.left_as_loop, str(report)
    kept = [t for t in rewritten.graph.initializer if t.name == table.name]
    assert [t.SerializeToString() for t in kept] == [table.SerializeToString()]
    assert [i.name for i in rewritten.graph.input] == [i.name for i in original.graph.input]
    _same_on_onnxruntime(source, str(output))


def test_no_file_is_written_when_the_model_cannot_be_read(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    with pytest.raises(ValueError, match="not an ONNX model"):
        mlr.rewrite_onnx(str(bad), str(tmp_path / "out.onnx"))
    assert not (tmp_path / "out.onnx").exists()


def test_a_file_that_divides_by_a_tensor_gets_the_schedule_for_onnxruntime_only(caplog):
    """OpenVINO 2026.4 computes a Reciprocal wrongly beside the schedule's If (targets.schedule_veto): a
    file holding one is rewritten without the schedule for any runtime (said at INFO), with it for
    onnxruntime; the file's outputs either way."""
    original = onnx.load(EMB_LSTM)
    original.graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    original.graph.node.extend([helper.make_node("Add", [original.graph.output[0].name, "two"], ["shifted"]),
                                helper.make_node("Reciprocal", ["shifted"], ["reciprocal"])])  # within 1/3 and 1
    original.graph.output.append(helper.make_tensor_value_info("reciprocal", onnx.TensorProto.FLOAT, None))
    with caplog.at_level("INFO", logger="masked_lstm_rewriter"):
        model, _ = check_rewrites(OnnxFile(original), "post")
    assert not scheduled_layers(model) and any("left out: OpenVINO computes Reciprocal" in r.getMessage()
                                               for r in caplog.records)
    model, _ = check_rewrites(OnnxFile(original, "onnxruntime"), "post")
    assert scheduled_layers(model) == 1
