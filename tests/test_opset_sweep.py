# SPDX-License-Identifier: Apache-2.0
"""The opset sweep: at every opset tf2onnx 1.17 converts to, the plugin is no worse than stock.

tf2onnx 1.17 makes a model at opsets 1 to 18 (the keys of ``tf2onnx.constants.OPSET_TO_IR_VERSION``;
``opset=None`` means 15) and refuses 19 and later ("Opset 19 is not supported yet"), after the
conversion, plugin or not. What stock tf2onnx makes of these recurrent layers, measured with onnx
1.23 and onnxruntime 1.31 (:func:`stock_outcome` pins it):

| opset | stock tf2onnx | with the plugin |
| --- | --- | --- |
| 1-6 | invalid: TensorFlow ops it cannot express there stay in the graph (``SelectV2``, ``TensorListFromTensor``); neither ``onnx.checker`` nor onnxruntime takes it | stock's graph, the report naming the opset |
| 7-8 | a ``Loop`` that onnxruntime loads and runs exactly, which ``onnx.checker``'s full check rejects (shape inference of the ``Loop``) | stock's graph, the report naming the opset |
| 9-10 | a valid ``Loop`` | stock's graph, the report naming the opset |
| 11-18 | a valid ``Loop`` | the native op, valid, exact |

Models: a masked LSTM (``"post"`` mode), a masked GRU (``"any"`` mode, fed pre-padded rows and
rows with holes) and an unmasked SimpleRNN, each compared with Keras at every position wherever
onnxruntime loads the model.
"""

import numpy as np
import onnx
import pytest
import tensorflow as tf
from tf2onnx import constants

from kerasutil import (ATOL, LENGTHS, MAX_ERRORS, STEPS, convert, keras, max_error, op_counts, post_padded_tokens,
                       randomize_weights, session)

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.emit.node import MIN_OPSET

pytestmark = [pytest.mark.usefixtures("plugin_off"), pytest.mark.grid]

ACCEPTED = sorted(constants.OPSET_TO_IR_VERSION)  # every opset tf2onnx 1.17 makes a model at
UNITS, FEATURES, VOCAB = 3, 2, 20
TOKENS = tf.TensorSpec((None, None), tf.int32, name="tokens")
NATIVE = {"lstm_masked_post": "LSTM", "gru_masked_any": "GRU", "simple_rnn_unmasked": "RNN"}


def stock_outcome(opset: int) -> str:
    """What stock tf2onnx's model of these layers is at ``opset`` (see the table above)."""
    return "invalid" if opset < 7 else "loads" if opset < 9 else "valid"


def _tokens_model(layer):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(tokens)
    return randomize_weights(keras.Model(tokens, layer(embedded)))


def _holes_and_pre_padding():
    """Token rows that only ``"any"`` takes: pre-padded, with holes, empty, full."""
    tokens = post_padded_tokens([STEPS] * 4, STEPS, VOCAB)
    tokens[0, :3] = 0                 # pre-padded
    tokens[1, 1::2] = 0               # holes
    tokens[2, :] = 0                  # empty
    return tokens


@pytest.fixture(scope="module")
def models():
    """name -> (model, spec, batch, mask mode)."""
    keras.utils.set_random_seed(0)
    features = keras.Input((None, FEATURES), name="features")
    simple_rnn = randomize_weights(keras.Model(features, keras.layers.SimpleRNN(UNITS, return_sequences=True)(features)))
    return {
        "lstm_masked_post": (_tokens_model(keras.layers.LSTM(UNITS, return_sequences=True)), [TOKENS],
                             [post_padded_tokens(LENGTHS, STEPS, VOCAB)], "post"),
        "gru_masked_any": (_tokens_model(keras.layers.GRU(UNITS, return_sequences=True)), [TOKENS],
                           [_holes_and_pre_padding()], "any"),
        "simple_rnn_unmasked": (simple_rnn, [tf.TensorSpec((None, None, FEATURES), tf.float32, name="features")],
                                [np.random.default_rng(1).normal(size=(3, STEPS, FEATURES)).astype(np.float32)],
                                "post"),
    }


def outcome(onnx_model) -> str:
    """"valid" (onnx.checker's full check and onnxruntime take it), "loads" (onnxruntime only) or "invalid"."""
    try:
        onnx.checker.check_model(onnx_model, full_check=True)
        checked = True
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        checked = False
    try:
        session(onnx_model)
    except Exception:  # pylint: disable=broad-except  (onnxruntime raises its own kinds)
        return "invalid"
    return "valid" if checked else "loads"


RANK = {"invalid": 0, "loads": 1, "valid": 2}


@pytest.mark.parametrize("opset", ACCEPTED)
@pytest.mark.parametrize("name", sorted(NATIVE))
def test_every_accepted_opset(models, name, opset):  # pylint: disable=redefined-outer-name
    model, spec, batch, mask_mode = models[name]
    stock = convert(model, spec, rewriter=None, opset=opset)
    ours = convert(model, spec, rewriter=mlr.make_rewriter(mask_mode), opset=opset)
    report = mlr.last_report()
    assert outcome(stock) == stock_outcome(opset), f"stock tf2onnx at opset {opset} is not as documented"
    assert RANK[outcome(ours)] >= RANK[outcome(stock)], f"worse than stock at opset {opset}"
    if opset >= MIN_OPSET:
        counts = op_counts(ours)
        assert (counts[NATIVE[name]], counts["Loop"]) == (1, 0), counts
        assert outcome(ours) == "valid"
        assert [layer.rewritten for layer in report.layers] == [True], report
    else:
        assert op_counts(ours) == op_counts(stock), "not stock's graph"
        assert report.layers and all(not layer.rewritten and f"opset {opset}:" in layer.detail
                                     for layer in report.layers), report
    if outcome(ours) != "invalid":
        error = max_error(model, ours, spec, batch)
        MAX_ERRORS.append(error)
        assert error <= ATOL, f"max |keras - onnx| = {error} at opset {opset}"


@pytest.mark.parametrize("opset", [max(ACCEPTED) + 1, max(ACCEPTED) + 2])
def test_tf2onnx_refuses_later_opsets_plugin_or_not(models, opset):  # pylint: disable=redefined-outer-name
    model, spec, _, _ = models["simple_rnn_unmasked"]
    for rewriter in (None, mlr.rewrite_masked_lstm):
        with pytest.raises(ValueError, match=f"Opset {opset} is not supported yet"):
            convert(model, spec, rewriter=rewriter, opset=opset)
