# SPDX-License-Identifier: Apache-2.0
"""``quantize="int8"`` on ONNX files (stock tf2onnx's, rewritten by the plugin; no Keras): an LSTM
becomes ``DynamicQuantizeLSTM``, a GRU stays float32 with the ``MatMul`` after it quantized, the
numbers stay within verify's int8 tolerance of the float model at every position (rows of different
lengths, a full row and an empty one), the guard still fails on a pre-padded batch, and what cannot
be quantized is refused in one line."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import cli, quantize
from masked_lstm_rewriter.cells.kind import PADDING_DRIVE
from masked_lstm_rewriter.quantize import quantize_model
from masked_lstm_rewriter.sessions import onnxruntime_session
from masked_lstm_rewriter.verify_tolerance import QUANTIZED_SHARE, choose
from _onnx_files import DATA, POST_BATCHES, feeds_for, op_counts

LSTM = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")
GRU = os.path.join(DATA, "tf2onnx", "keras3_emb_gru_seq_op15.onnx")
EXPLICIT_MASK = os.path.join(DATA, "tf2onnx", "keras3_explicit_mask_lstm_op15.onnx")  # features, any padding
LSTM_STATE = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_state_op15.onnx")  # the final cell state is used


def with_dense(model: onnx.ModelProto, units: int = 3) -> onnx.ModelProto:
    """``model`` with a ``Dense`` (MatMul + Add, random weights) on its first output, the new only output."""
    dense = onnx.ModelProto()
    dense.CopyFrom(model)
    graph, rng = dense.graph, np.random.default_rng(0)
    sequence = graph.output[0]
    width = sequence.type.tensor_type.shape.dim[-1].dim_value
    graph.initializer.extend([numpy_helper.from_array(rng.normal(0, 0.5, (width, units)).astype(np.float32), "dense_w"),
                              numpy_helper.from_array(rng.normal(0, 0.5, units).astype(np.float32), "dense_b")])
    graph.node.extend([helper.make_node("MatMul", [sequence.name, "dense_w"], ["dense_mm"], name="dense/MatMul"),
                       helper.make_node("Add", ["dense_mm", "dense_b"], ["dense"], name="dense/Add")])
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("dense", onnx.TensorProto.FLOAT, None))
    return dense


@pytest.fixture(scope="module", name="native")
def native_models() -> dict:
    """The plugin's float models (mask_mode "post"), each with a Dense after its recurrent layer."""
    return {kind: with_dense(mlr.rewrite_onnx(path, schedule=False)[0]) for kind, path in (("LSTM", LSTM), ("GRU", GRU))}


def assert_within_the_int8_tolerance(quantized, reference, lengths):
    """Every output of ``quantized`` within verify's int8 tolerance of ``reference``'s, at every position."""
    feeds = feeds_for(reference, lengths)
    expected = onnxruntime_session(reference).run(None, feeds)
    got = onnxruntime_session(quantized).run(None, feeds)
    tolerance = choose(quantized, None)
    assert tolerance.share == QUANTIZED_SHARE
    for want, have in zip(expected, got):
        assert want.shape == have.shape and np.all(np.isfinite(have))
        assert np.max(np.abs(have - want)) <= tolerance.allowed(want), (lengths, np.max(np.abs(have - want)))


def test_an_lstm_becomes_dynamic_quantize_lstm(native):
    quantized = quantize_model(native["LSTM"])
    counts = op_counts(quantized)
    assert (counts["DynamicQuantizeLSTM"], counts["LSTM"], counts["MatMulInteger"], counts["MatMul"]) == (1, 0, 1, 0)
    assert op_counts(native["LSTM"])["LSTM"] == 1  # the given model is not changed
    assert "com.microsoft" in {opset.domain for opset in quantized.opset_import}


def test_a_gru_stays_float_and_the_matmul_after_it_is_quantized(native):
    quantized = quantize_model(native["GRU"])
    counts = op_counts(quantized)
    assert (counts["GRU"], counts["MatMulInteger"], counts["MatMul"]) == (1, 1, 0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("lengths", POST_BATCHES)
def test_the_numbers_stay_within_the_int8_tolerance_at_every_position(native, kind, lengths):
    assert_within_the_int8_tolerance(quantize_model(native[kind]), native[kind], lengths)


@pytest.mark.parametrize("padding", [1e4, np.nan, np.inf, -np.inf])
def test_padded_steps_may_hold_anything(padding):
    """The quantizer scales an LSTM's whole input at once: its padded steps are zeroed first, so that
    what they hold (here through an explicit mask) changes nothing, as in the float model."""
    native = with_dense(mlr.rewrite_onnx(EXPLICIT_MASK, schedule=False)[0])
    quantized = quantize_model(native)
    assert op_counts(quantized).get("DynamicQuantizeLSTM") == 1
    lengths = [9, 4, 1, 0, 6]
    feeds = feeds_for(native, lengths)
    (features,) = [name for name, value in feeds.items() if value.dtype == np.float32 and value.ndim == 3]
    (mask,) = [name for name, value in feeds.items() if value.dtype == bool]
    odd = dict(feeds, **{features: np.where(feeds[mask][..., None], feeds[features], np.float32(padding))})
    session = onnxruntime_session(quantized)
    for want, have in zip(session.run(None, feeds), session.run(None, odd)):
        np.testing.assert_array_equal(have, want)
    assert_within_the_int8_tolerance(quantized, native, lengths)


@pytest.mark.parametrize("layout", ["pre", "holes"])
def test_mask_mode_any_on_masks_that_are_not_post_padded(layout):
    """In "any" the LSTM runs over each row's valid steps moved first: the zeroing past each row's
    length keeps them, whatever the padded steps hold, and the numbers stay within the tolerance."""
    native = with_dense(mlr.rewrite_onnx(EXPLICIT_MASK, mask_mode="any", schedule=False)[0])
    quantized = quantize_model(native)
    assert op_counts(quantized).get("DynamicQuantizeLSTM") == 1 and "Loop" not in op_counts(quantized)
    lengths = [9, 4, 1, 0, 6]
    feeds = feeds_for(native, lengths, layout=layout)
    expected = onnxruntime_session(native).run(None, feeds)
    (features,) = [name for name, value in feeds.items() if value.dtype == np.float32 and value.ndim == 3]
    (mask,) = [name for name, value in feeds.items() if value.dtype == bool]
    feeds[features] = np.where(feeds[mask][..., None], feeds[features], np.float32(np.nan))
    tolerance = choose(quantized, None)
    for want, have in zip(expected, onnxruntime_session(quantized).run(None, feeds)):
        assert np.all(np.isfinite(have)) and np.max(np.abs(have - want)) <= tolerance.allowed(want)


def lstm_with_lengths(opset: int) -> onnx.ModelProto:
    """One ONNX LSTM (input 3, hidden 4, random weights) with ``sequence_lens`` as an input, at ``opset``."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.normal(0, 0.5, shape).astype(np.float32), name)
               for name, shape in (("W", (1, 16, 3)), ("R", (1, 16, 4)), ("B", (1, 32)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "lengths"], ["y", "y_h"], hidden_size=4, name="lstm")
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["T", "N", 3]),
                                               helper.make_tensor_value_info("lengths", onnx.TensorProto.INT32, ["N"])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["T", 1, "N", 4]),
                               helper.make_tensor_value_info("y_h", onnx.TensorProto.FLOAT, [1, "N", 4])],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("opset", [12, 17])  # Unsqueeze's axes: an attribute before 13, an input from 13
def test_zeroing_the_padded_steps_changes_no_valid_output(opset):
    """The zeroed model, fed NaN at padded steps, gives the LSTM's outputs on the zero-padded input."""
    model = lstm_with_lengths(opset)
    lengths = np.array([5, 2, 0, 3], np.int32)
    valid = np.arange(5)[:, None] < lengths[None, :]
    x = np.random.default_rng(2).normal(size=(5, 4, 3)).astype(np.float32)
    zeroed = quantize.zero_padded_steps(model)
    onnx.checker.check_model(zeroed)
    assert op_counts(zeroed)["Where"] == 1
    want = onnxruntime_session(model).run(None, {"x": np.where(valid[..., None], x, 0), "lengths": lengths})
    got = onnxruntime_session(zeroed).run(None, {"x": np.where(valid[..., None], x, np.nan).astype(np.float32),
                                                 "lengths": lengths})
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_the_guard_still_fails_on_a_pre_padded_batch(native):
    quantized = quantize_model(native["LSTM"])
    with pytest.raises(Exception, match="the mask is not post-padded"):
        onnxruntime_session(quantized).run(None, feeds_for(quantized, [7, 3, 1, 0], layout="pre"))


@pytest.mark.parametrize("opset", [13, 18])
def test_the_opsets_the_plugin_emits(opset):
    path = os.path.join(DATA, "tf2onnx", f"keras3_emb_lstm_seq_op{opset}.onnx")
    quantized, report = mlr.rewrite_onnx(path, quantize="int8")
    assert op_counts(quantized)["DynamicQuantizeLSTM"] == 1
    assert {o.domain or "ai.onnx": o.version for o in quantized.opset_import}["ai.onnx"] == opset
    onnx.checker.check_model(quantized)
    assert_within_the_int8_tolerance(quantized, onnx.load(path), [7, 3, 1, 0])
    assert "quantized: int8 for onnxruntime: 1 DynamicQuantizeLSTM" in str(report)


def test_an_lstm_whose_final_cell_state_is_used_stays_float():
    """Its padding column's weights would take the whole int8 range: it stays an LSTM, and the report says why."""
    quantized, report = mlr.rewrite_onnx(LSTM_STATE, quantize="int8")
    assert op_counts(quantized)["LSTM"] == 1 and not op_counts(quantized)["DynamicQuantizeLSTM"]
    assert "float32: 1 LSTM (its final cell state is used" in report.quantized


def test_the_padding_column_is_told_by_the_emitter_s_weight():
    assert quantize.PADDING_DRIVE == PADDING_DRIVE


def test_a_loop_stays_as_it_was():
    """Stock tf2onnx's file, quantized without the rewrite: the Loop stays, the MatMuls outside it are int8."""
    stock = onnx.load(LSTM)
    quantized = quantize_model(stock)
    assert op_counts(quantized)["Loop"] == 1 and op_counts(quantized)["MatMulInteger"] >= 1
    assert_within_the_int8_tolerance(quantized, stock, [7, 3, 1, 0])


@pytest.mark.parametrize("mode", ["int4", "INT8", "uint8"])
def test_a_bad_mode_names_the_value_given_and_the_valid_ones(native, mode):
    with pytest.raises(ValueError, match=f"quantize must be one of int8, not '{mode}'"):
        quantize_model(native["LSTM"], mode)
    with pytest.raises(ValueError, match=f"not '{mode}'"):
        mlr.rewrite_onnx(LSTM, quantize=mode)


@pytest.mark.parametrize("options,refusal", [
    (dict(runtime="openvino"), "makes a model for onnxruntime .* not for runtime='openvino'"),
    (dict(runtime="onnxruntime", schedule=True), "does not go with schedule=True"),
])
def test_what_does_not_go_with_int8_is_refused_in_one_line(options, refusal):
    with pytest.raises(ValueError, match=refusal) as raised:
        mlr.rewrite_onnx(LSTM, quantize="int8", **options)
    assert "\n" not in str(raised.value)


def test_quantize_leaves_the_schedule_out_and_a_scheduled_model_is_refused():
    """The schedule is on by default, but not with ``quantize``: the quantizer does not reach into an If."""
    quantized, _ = mlr.rewrite_onnx(LSTM, quantize="int8")
    assert "DynamicQuantizeLSTM" in {n.op_type for n in quantized.graph.node}
    with pytest.raises(ValueError, match="schedule's If nodes.*quantize='int8'.*schedule=False") as raised:
        quantize_model(mlr.rewrite_onnx(LSTM)[0])
    assert "\n" not in str(raised.value)


def test_a_quantized_model_and_external_data_not_loaded_are_refused(native, tmp_path):
    with pytest.raises(ValueError, match="quantized already"):
        quantize_model(quantize_model(native["LSTM"]))
    path, copy = str(tmp_path / "external.onnx"), onnx.ModelProto()
    copy.CopyFrom(native["LSTM"])  # saving with external data changes the model saved
    onnx.save_model(copy, path, save_as_external_data=True, size_threshold=0)
    with pytest.raises(ValueError, match="external data not loaded"):
        quantize_model(onnx.load(path, load_external_data=False))


def test_nothing_is_printed_and_the_root_logger_gets_no_handler(native, capsys, caplog):
    handlers = list(logging.getLogger().handlers)
    with caplog.at_level(logging.DEBUG, logger="masked_lstm_rewriter"):
        quantize_model(native["LSTM"])
    assert capsys.readouterr() == ("", "")
    assert logging.getLogger().handlers == handlers
    assert any("onnxruntime.quantization" in record.getMessage() and record.levelno == logging.DEBUG
               for record in caplog.records)


def test_verify_applies_and_names_the_int8_tolerance_and_a_given_one_wins():
    quantized, _ = mlr.rewrite_onnx(LSTM, quantize="int8")
    result = mlr.verify(LSTM, quantized)
    assert result.ok, result
    text = result.format()
    assert "tolerance 20% of each output's largest |reference value| (at least 1e-05)" in text.splitlines()[0]
    assert "note: tolerance 20% of each output's largest |reference value| (at least 1e-05): the model is " \
           "int8-quantized (DynamicQuantizeLSTM)" in text
    assert not mlr.verify(LSTM, quantized, tolerance=1e-5).ok


def test_the_command_line(tmp_path, capsys):
    output = tmp_path / "int8.onnx"
    assert cli.main(["rewrite", LSTM, "-o", str(output), "--quantize", "int8"]) == 0
    assert "quantized: int8 for onnxruntime: 1 DynamicQuantizeLSTM" in capsys.readouterr().out
    assert op_counts(onnx.load(str(output)))["DynamicQuantizeLSTM"] == 1
    assert cli.main(["rewrite", LSTM, "-o", str(tmp_path / "ov.onnx"), "--quantize", "int8", "--runtime",
                     "openvino"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not for runtime='openvino'" in err[0], err
    assert not (tmp_path / "ov.onnx").exists()


@pytest.mark.parametrize("args,message", [
    (["--quantize", "int4"], "--quantize must be one of int8, not 'int4'"),
    (["--quantize", "int8", "--runtime", "openvino"], "--quantize int8 makes a model for onnxruntime"),
    (["--quantize=int8", "--runtime", "onnxruntime", "--schedule"], "--quantize int8 does not go with --schedule"),
    (["--quantize", "int8", "--large_model"], "--large_model is not supported: tf2onnx 1.17 writes that format"),
    (["--large_model"], "--large_model is not supported"),
])
def test_the_conversion_command_refuses_in_one_line_before_it_loads_anything(tmp_path, capsys, args, message):
    assert cli.main([str(tmp_path / "model.keras"), "-o", str(tmp_path / "model.onnx")] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("masked_lstm_rewriter: error: " + message), err
