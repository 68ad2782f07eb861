# SPDX-License-Identifier: Apache-2.0
"""plugin/stock_wrong.py: before opset 11 tf2onnx compares floats through int32 (a Masking layer's
mask among them): the conversion through the plugin says so, naming the op, instead of a model
that silently masks every step whose features lie between -1 and 1."""

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
import tf2onnx

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
