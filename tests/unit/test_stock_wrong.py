# SPDX-License-Identifier: Apache-2.0
"""plugin/stock_wrong.py: before opset 11 tf2onnx compares floats through int32 (a Masking layer's
mask among them): the conversion through the plugin says so, naming the op, instead of a model
that silently masks every step whose features lie between -1 and 1. A native node stock tf2onnx
made with sequence lengths (TensorFlow's ``dynamic_rnn(sequence_length=)``), which OpenVINO
ignores: known wrong for OpenVINO, a warning for any runtime, nothing for onnxruntime; from an
initial state, a warning that a row of length 0 loses it."""

import logging

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
import tf2onnx
from onnx import TensorProto, helper, numpy_helper

import masked_lstm_rewriter as mlr

SIGNATURE = (tf.TensorSpec((None, 3), tf.float32, name="x"), tf.TensorSpec((None, 3), tf.int32, name="ids"))


@tf.function
def masked_sum(x, ids):
    """A Masking-like mask of floats; one of ints and an Embedding-like one of float ids (whole
    numbers, which tf2onnx's int32 compares exactly)."""
    keep = tf.reduce_any(tf.not_equal(x, 0.0), axis=-1)
    kept_ids = tf.reduce_any(tf.not_equal(ids, 0), axis=-1)
    id_mask = tf.not_equal(tf.cast(ids, tf.float32), 0.0)
    return tf.cast(keep, tf.float32) + tf.cast(kept_ids, tf.float32) + tf.reduce_sum(tf.cast(id_mask, tf.float32), -1)


def _convert(opset: int, keep_wrong: bool = False):
    model, _ = tf2onnx.convert.from_function(masked_sum, input_signature=SIGNATURE, opset=opset,
                                             custom_rewriter=[mlr.make_rewriter(keep_wrong=keep_wrong)])
    return model, mlr.last_report()


def test_before_opset_11_a_float_comparison_is_known_wrong():
    model, report = _convert(10, keep_wrong=True)
    (problem,) = report.known_wrong
    assert problem.startswith("opset 10: tf2onnx compares floats as int32") and "NotEqual'" in problem
    assert "convert with opset 11 or later" in problem and "KNOWN WRONG" in report.headline()
    feeds = {"x": np.array([[0.5, 0, 0]], np.float32), "ids": np.array([[1, 0, 0]], np.int32)}
    got = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    assert got.tolist() == [2.0]  # what the report warns of: 0.5 compared as 0 (TensorFlow gives 3)


@pytest.mark.parametrize("opset", [11, 15])
def test_from_opset_11_nothing_is_said(opset):
    _, report = _convert(opset)
    assert not report.known_wrong


def _native_lstm_with_lengths(initial_state: bool = False):
    """An ONNX file as tf2onnx writes ``dynamic_rnn(LSTMCell, sequence_length=lengths)``: one native node
    (``initial_state``: starting from an input state, its final h an output too)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)
               for name, shape in (("W", (1, 8, 3)), ("R", (1, 8, 2)), ("B", (1, 16)))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 3]),
              helper.make_tensor_value_info("lengths", TensorProto.INT32, [None])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1, None, 2])]
    if initial_state:
        inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, None, 2]))
        outputs.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, None, 2]))
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "lengths"] + (["h0"] if initial_state else []),
                            [o.name for o in outputs], name="LSTM__7", hidden_size=2)
    graph = helper.make_graph([node], "stock", inputs, outputs, initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


LENGTHS_IGNORED = ("tf2onnx made 'LSTM__7' a native LSTM that stops each row at its sequence length, which OpenVINO "
                   "ignores with dynamic shapes (it runs every step)")


def test_stock_sequence_lengths_are_known_wrong_for_openvino_and_a_warning_for_any_runtime(caplog):
    with pytest.raises(mlr.KnownWrong, match=r"^tf2onnx made 'LSTM__7' a native LSTM that stops each row at its "
                                             r"sequence length, which OpenVINO ignores with dynamic shapes"):
        mlr.rewrite_onnx(_native_lstm_with_lengths(), runtime="openvino")
    kept = mlr.rewrite_onnx(_native_lstm_with_lengths(), runtime="openvino", keep_wrong=True)
    assert kept.report.known_wrong[0].startswith(LENGTHS_IGNORED)
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        anywhere = mlr.rewrite_onnx(_native_lstm_with_lengths())
    assert not anywhere.report.known_wrong and LENGTHS_IGNORED in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        assert not mlr.rewrite_onnx(_native_lstm_with_lengths(), runtime="onnxruntime").report.known_wrong
    assert not caplog.text


def test_stock_lengths_with_an_initial_state_warn_that_an_empty_row_loses_it(caplog):
    """TensorFlow returns the initial state as a row of length 0's final state; the native node, zeros."""
    empty = "tf2onnx made 'LSTM__7' a native LSTM with sequence lengths and an initial state: for a row of length 0"
    for initial_state in (False, True):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
            mlr.rewrite_onnx(_native_lstm_with_lengths(initial_state), runtime="onnxruntime")
        assert (empty in caplog.text) == initial_state, caplog.text
    feeds = {"x": np.ones((3, 2, 3), np.float32), "lengths": np.array([3, 0], np.int32),
             "h0": np.full((1, 2, 2), 0.5, np.float32)}
    final = ort.InferenceSession(_native_lstm_with_lengths(True).SerializeToString()).run(None, feeds)[1]
    assert final[0, 1].tolist() == [0.0, 0.0], "onnxruntime: zeros, not the initial state (what the warning says)"
