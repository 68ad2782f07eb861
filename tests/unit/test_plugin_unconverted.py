# SPDX-License-Identifier: Apache-2.0
"""plugin/unconverted.py: a conversion through the plugin fails on TensorFlow ops tf2onnx left in the
model as they are (it logs "Unsupported ops" and would write a model no runtime loads), as on any
model known to be wrong; ``keep_wrong`` writes it, and the report says so."""

from __future__ import annotations

import pytest

import masked_lstm_rewriter as mlr


@pytest.fixture(scope="module")
def strings_function():
    """A function of a string op tf2onnx has no ONNX form for, next to ops it converts."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None, 3], tf.float32)])
    def preprocess(text, x):
        return tf.strings.regex_replace(text, "[a-z]", "x"), x * 2.0
    return preprocess


def _convert(function):
    import tf2onnx  # pylint: disable=import-outside-toplevel
    return tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=15)


def test_a_model_with_unconverted_ops_fails_naming_them(strings_function):
    with mlr.enable():
        with pytest.raises(mlr.KnownWrong, match=r"no ONNX form for TensorFlow op\(s\) StaticRegexReplace, left"):
            _convert(strings_function)
    assert "StaticRegexReplace" in mlr.last_report().known_wrong[0]


def test_keep_wrong_writes_it_and_the_report_says_so(strings_function):
    with mlr.enable(keep_wrong=True):
        model, _ = _convert(strings_function)
    assert "StaticRegexReplace" in {node.op_type for node in model.graph.node}
    assert "KNOWN WRONG: tf2onnx has no ONNX form" in str(mlr.last_report())


def test_a_model_tf2onnx_converts_whole_is_left_alone():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    double = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    with mlr.enable():
        model, _ = _convert(double)
    assert [node.op_type for node in model.graph.node] == ["Mul"]
    assert not mlr.last_report().known_wrong
