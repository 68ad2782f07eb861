# SPDX-License-Identifier: Apache-2.0
"""Graphs Keras 3 traces on a machine with a GPU (its cuDNN kernel, ``CudnnRNNV3``) convert to native
ops, exact against the same model run on a CPU (Keras's generic path) at every position.

There is no GPU here: Keras is made to believe there is one while the model is traced (its own
check, ``_is_gpu_available``, and a CUDA build, which orders a GRU's gates as cuDNN does). The op
only has to exist in the graph; the oracle is Keras's generic path, which an eager call on a
machine without a GPU takes.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import (FLAVOUR, check_batches, keras, native_layers, op_counts, post_padded_tokens, randomize_weights,
                       token_spec)
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import io_names
from masked_lstm_rewriter.corpus.cudnn_trace import traced_as_on_a_gpu

pytestmark = pytest.mark.skipif(FLAVOUR != "keras3", reason="CudnnRNNV3 graphs are Keras 3's (tf_keras selects its "
                                "cuDNN function at run time)")

STEPS, VOCAB = 6, 30


@pytest.fixture
def gpu_tracing(monkeypatch):
    """Conversions trace as on a GPU machine (Keras itself, the oracle, does not). Yields the traced
    graph's count of cuDNN ops (the last trace's), so a test can check its conversion really read them."""
    cudnn_ops = collections.Counter()
    from_keras, keras_graph = tf2onnx.convert.from_keras, io_names.keras_graph

    def from_keras_on_a_gpu(*args, **kwargs):
        with traced_as_on_a_gpu():
            return from_keras(*args, **kwargs)

    def keras_graph_on_a_gpu(*args, **kwargs):
        with traced_as_on_a_gpu():
            traced = keras_graph(*args, **kwargs)
        cudnn_ops.clear()
        cudnn_ops.update(node.op for node in traced.graph_def.node if node.op.startswith("CudnnRNN"))
        return traced
    monkeypatch.setattr(tf2onnx.convert, "from_keras", from_keras_on_a_gpu)
    monkeypatch.setattr(io_names, "keras_graph", keras_graph_on_a_gpu)
    return cudnn_ops


def _token_model(make_layer):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(tokens)
    outputs = make_layer()(embedded)
    return randomize_weights(keras.Model(tokens, outputs))


def _token_batches():
    """Post-padded rows of different lengths with a full row and an empty one; then a pre-padded and a
    holed batch (which the post mode's guard refuses: those go to the any mode only)."""
    post = post_padded_tokens([STEPS, 3, 1, 0, 5], STEPS, vocab=VOCAB)
    pre = np.stack([np.roll(row, STEPS - int((row > 0).sum())) for row in post])
    holed = post.copy()
    holed[0, 2] = 0
    return [post], [pre], [holed]


MASKED = {
    "lstm_state": (lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True), {"LSTM": 1}),
    "gru_sequence": (lambda: keras.layers.GRU(UNITS, return_sequences=True), {"GRU": 1}),
    "lstm_backwards": (lambda: keras.layers.LSTM(UNITS, go_backwards=True, return_sequences=True), {"LSTM": 1}),
    "gru_backwards_last": (lambda: keras.layers.GRU(UNITS, go_backwards=True, return_state=True), {"GRU": 1}),
    "bidirectional_lstm": (lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
                           {"LSTM": 2}),
    "bidirectional_gru_last": (lambda: keras.layers.Bidirectional(keras.layers.GRU(UNITS), merge_mode="sum"),
                               {"GRU": 2}),
    "stacked": (lambda: keras.Sequential([keras.layers.LSTM(UNITS, return_sequences=True),
                                          keras.layers.GRU(UNITS, return_sequences=True)]), {"LSTM": 1, "GRU": 1}),
}


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", sorted(MASKED))
def test_masked_layer_traced_on_a_gpu_is_native_and_exact(name, mode, gpu_tracing):
    make, ops = MASKED[name]
    model = _token_model(make)
    post, pre, holed = _token_batches()
    batches = [post] if mode == "post" else [post, pre, holed]
    onnx_model = check_batches(model, (token_spec(),), batches, rewriter=mlr.make_rewriter(mode), ops=ops)
    assert gpu_tracing["CudnnRNNV3"] == sum(ops.values()) and not op_counts(onnx_model)["CudnnRNNV3"], gpu_tracing
    assert all(layer.rewritten and layer.masked for layer in mlr.last_report().layers), mlr.last_report()


UNMASKED = {
    "lstm_state": (lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True), {"LSTM": 1}),
    "gru_backwards": (lambda: keras.layers.GRU(UNITS, go_backwards=True, return_sequences=True), {"GRU": 1}),
    "bidirectional_lstm": (lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
                           {"LSTM": 2}),
}


@pytest.mark.parametrize("name", sorted(UNMASKED))
def test_unmasked_layer_traced_on_a_gpu_is_native_and_exact(name, gpu_tracing):
    make, ops = UNMASKED[name]
    features = keras.Input((None, FEATURES), name="features")
    model = randomize_weights(keras.Model(features, make()(features)))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    batch = np.random.default_rng(1).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    onnx_model = check_batches(model, spec, [[batch]], ops=ops)
    assert gpu_tracing["CudnnRNNV3"] == sum(ops.values()), gpu_tracing
    counts = op_counts(onnx_model)
    assert not counts["CudnnRNNV3"] and not counts["ScatterElements"] and not counts["CumSum"], counts
    assert all(layer.rewritten and not layer.masked for layer in mlr.last_report().layers), mlr.last_report()


def test_masking_layer_and_an_initial_state_from_an_encoder(gpu_tracing):
    """A Masking layer's mask, and a decoder starting from an encoder's final states (both cuDNN ops)."""
    features = keras.Input((None, FEATURES), name="features")
    masked = keras.layers.Masking(0.0)(features)
    _, h, c = keras.layers.LSTM(UNITS, return_state=True)(masked)
    decoded = keras.layers.LSTM(UNITS, return_sequences=True)(masked, initial_state=[h, c])
    model = randomize_weights(keras.Model(features, [decoded, h]))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    batch = np.random.default_rng(2).normal(size=(4, STEPS, FEATURES)).astype(np.float32)
    for row, length in enumerate([STEPS, 4, 1, 2]):
        batch[row, length:] = 0.0
    check_batches(model, spec, [[batch]], ops={"LSTM": 2})
    assert gpu_tracing["CudnnRNNV3"] == 2, gpu_tracing


def test_the_graph_really_holds_the_cudnn_op(gpu_tracing):  # pylint: disable=unused-argument
    """Without the plugin, the same conversion leaves the op tf2onnx cannot convert."""
    model = _token_model(MASKED["lstm_state"][0])
    stock, _ = tf2onnx.convert.from_keras(model, input_signature=(token_spec(),), opset=15)
    assert op_counts(stock)["CudnnRNNV3"] == 1


def test_a_saved_model_exported_on_a_gpu_machine_converts(tmp_path):
    model = _token_model(MASKED["bidirectional_lstm"][0])
    with traced_as_on_a_gpu():  # Keras's own export, as on the training machine
        model.export(str(tmp_path / "saved"), format="tf_saved_model", verbose=False)
    converted = mlr.convert(str(tmp_path / "saved"))
    counts = op_counts(converted.onnx_model)
    assert native_layers(converted.onnx_model)["LSTM"] == 2 and not counts["CudnnRNNV3"] and not counts["Loop"], counts
    (post,), _, _ = _token_batches()
    expected = np.asarray(model(post))
    import onnxruntime  # pylint: disable=import-outside-toplevel
    session = onnxruntime.InferenceSession(converted.onnx_model.SerializeToString())
    got = session.run(None, {session.get_inputs()[0].name: post})[0]
    assert np.max(np.abs(expected - got)) < 1e-5


def _raw_cudnn_function(time_major: int, op=tf.raw_ops.CudnnRNNV3):
    units, inputs = 3, 2
    params = np.random.default_rng(0).normal(size=4 * units * (inputs + units + 2)).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec((None, None, inputs), tf.float32, name="x")])
    def run(x):
        batch = tf.shape(x)[1 if time_major else 0]
        state = tf.zeros(tf.stack([1, batch, units]) if time_major else tf.stack([batch, 1, units]))
        kwargs = {"sequence_lengths": tf.fill([batch], tf.shape(x)[0 if time_major else 1]),
                  "time_major": bool(time_major)} if op is tf.raw_ops.CudnnRNNV3 else {}
        return op(input=x, input_h=state, input_c=state, params=params, rnn_mode="lstm", **kwargs)[0]
    return run


@pytest.mark.parametrize("op_type, reason", [("CudnnRNNV3", "time_major is 1"), ("CudnnRNN", "only CudnnRNNV3")])
def test_an_op_not_read_is_refused_with_its_name_and_the_fix(op_type, reason):
    run = _raw_cudnn_function(1, getattr(tf.raw_ops, op_type))
    onnx_model, _ = tf2onnx.convert.from_function(run, input_signature=run.input_signature, opset=15,
                                                   custom_rewriter=[mlr.rewrite_masked_lstm])
    assert op_counts(onnx_model)[op_type] == 1
    (layer,) = mlr.last_report().layers
    assert not layer.rewritten and reason in layer.detail, layer.detail
    assert op_type in layer.detail and "masked_lstm_rewriter.convert" in layer.detail and \
        "CUDA_VISIBLE_DEVICES" in layer.detail, layer.detail


def test_verify_says_why_a_cudnn_saved_model_cannot_be_the_reference(tmp_path):
    """Its cuDNN op has no CPU kernel: verify fails, and says what to verify against instead."""
    from masked_lstm_rewriter.corpus import manifest  # pylint: disable=import-outside-toplevel
    from masked_lstm_rewriter.verification import CUDNN_REFERENCE  # pylint: disable=import-outside-toplevel
    saved = f"{manifest.DATA_DIR}/keras3/cudnn_unmasked_gru/saved_model"
    converted = mlr.convert(saved)
    result = mlr.verify(saved, converted.onnx_model)
    assert not result.ok
    assert all(CUDNN_REFERENCE in check.message for check in result.checks), result.format()
