# SPDX-License-Identifier: Apache-2.0
"""float64 (and float16) masked layers: what the runtimes can run, and what the rewriter does.

Measured here on bare ONNX nodes, and pinned so that these tests fail when a runtime changes:

* onnxruntime 1.31 has no float64 kernel for LSTM, GRU or RNN: LSTM and GRU load and fail at run
  time ("... operator does not support double yet"), RNN fails when the session is created.
* OpenVINO 2026.4 runs float64 LSTM, GRU and RNN nodes, but in float32: the result is exactly its
  float32 result, 1e-7 off a float64 reference.
* onnxruntime runs float16 LSTM, GRU and RNN in float32 too (exactly the float32 result rounded
  once), where Keras rounds every step to float16.

So a float64 or float16 layer stays tf2onnx's Loop, with a reason that says so, and the Loop
matches Keras (to float64 precision for float64). A float64 input (speech features) feeding a
float32 layer is cast to float32 by Keras, and that layer is rewritten as usual.
"""

import contextlib
import logging

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
from onnx import TensorProto, helper

from kerasutil import (FLAVOUR, LENGTHS, STEPS, check_conversion, convert, keras, keras_outputs, mask_from_lengths,
                       onnx_outputs, op_counts, post_padded_tokens, randomize_weights)
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.targets import DTYPE_REASONS

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

try:
    import openvino as ov
except ImportError:  # pragma: no cover - openvino is in .[test]
    ov = None

FLOAT64_ATOL = 1e-12
GATE_BLOCKS = {"LSTM": 4, "GRU": 3, "RNN": 1}
NUMPY = {TensorProto.DOUBLE: np.float64, TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def bare_node(op, dtype, hidden=3, features=2):
    """One ONNX ``op`` node of ``dtype`` with sequence_lens, random weights (float16-exact values)."""
    rng = np.random.default_rng(0)
    gates = GATE_BLOCKS[op]
    weights = {"W": (1, gates * hidden, features), "R": (1, gates * hidden, hidden), "B": (1, 2 * gates * hidden)}
    inits = [helper.make_tensor(name, TensorProto.FLOAT, shape, rng.normal(size=shape).astype(np.float16)
                                .astype(np.float32).reshape(-1)) for name, shape in weights.items()]
    casts = [helper.make_node("Cast", [name], [name + "_t"], to=dtype) for name in weights]
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W_t", "R_t", "B_t", "L"], outputs, hidden_size=hidden)
    graph = helper.make_graph(casts + [node], "bare", [
        helper.make_tensor_value_info("X", dtype, ["T", "B", features]),
        helper.make_tensor_value_info("L", TensorProto.INT32, ["B"])],
        [helper.make_tensor_value_info(name, dtype, None) for name in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def bare_feeds(dtype):
    x = np.random.default_rng(1).normal(size=(5, 3, 2)).astype(np.float16).astype(NUMPY[dtype])
    return {"X": x, "L": np.array([5, 2, 0], np.int32)}


def ort_run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_onnxruntime_has_no_float64_lstm_or_gru(op):
    """The session loads, and the node fails at run time: a rewritten float64 layer would not run."""
    model = bare_node(op, TensorProto.DOUBLE)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="does not support double yet"):
        session.run(None, bare_feeds(TensorProto.DOUBLE))


def test_onnxruntime_has_no_float64_rnn():
    with pytest.raises(Exception, match="Could not find an implementation for RNN"):
        ort.InferenceSession(bare_node("RNN", TensorProto.DOUBLE).SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.skipif(ov is None, reason="openvino is not installed")
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_openvino_runs_float64_nodes_in_float32(op):
    """OpenVINO's float64 result is its float32 result: not float64's precision."""
    results = {}
    for dtype in (TensorProto.DOUBLE, TensorProto.FLOAT):
        core = ov.Core()
        model = core.read_model(bare_node(op, dtype).SerializeToString(), b"")
        model.reshape({"X": [5, 3, 2], "L": [3]})
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        results[dtype] = np.asarray(compiled(bare_feeds(dtype))[compiled.output(0)])
    assert results[TensorProto.DOUBLE].dtype == np.float64
    np.testing.assert_array_equal(results[TensorProto.DOUBLE], results[TensorProto.FLOAT].astype(np.float64))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_onnxruntime_runs_float16_nodes_in_float32(op):
    half = ort_run(bare_node(op, TensorProto.FLOAT16), bare_feeds(TensorProto.FLOAT16))[0]
    single = ort_run(bare_node(op, TensorProto.FLOAT), bare_feeds(TensorProto.FLOAT))[0]
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, single.astype(np.float16))


# --- float64 Keras layers stay Loops, and the Loops match Keras ------------------------------------

@contextlib.contextmanager
def float64_layers(how):
    """Build layers in float64: ``"dtype"`` passes ``dtype="float64"`` to each layer (both flavours),
    ``"floatx"`` sets tf_keras's default float type (``set_floatx("float64")``) for the block."""
    if how == "floatx":
        previous = keras.backend.floatx()
        keras.backend.set_floatx("float64")
        try:
            yield {}
        finally:
            keras.backend.set_floatx(previous)
    else:
        yield {"dtype": "float64"}


LAYERS = {
    "lstm": lambda kw: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True, **kw),
    "gru": lambda kw: keras.layers.GRU(UNITS, return_sequences=True, **kw),
    "simple_rnn go_backwards": lambda kw: keras.layers.SimpleRNN(UNITS, go_backwards=True, **kw),
    "bidirectional lstm": lambda kw: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True, **kw),
                                                                **kw),
}
HOW = ["dtype", "floatx"] if FLAVOUR == "tf_keras" else ["dtype"]


def float64_masking_model(layer, kw, seed=0):
    """float64 speech-like features -> Masking(0.0) -> ``layer``, all in float64."""
    keras.utils.set_random_seed(seed)
    features = keras.Input((None, FEATURES), dtype="float64", name="features")
    model = randomize_weights(keras.Model(features, layer(keras.layers.Masking(0.0, **kw)(features))), seed)
    x = np.random.default_rng(seed).normal(size=(len(LENGTHS), STEPS, FEATURES))
    x[~mask_from_lengths(LENGTHS, STEPS)] = 0.0
    return model, (tf.TensorSpec((None, None, FEATURES), tf.float64, name="features"),), [x]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name", list(LAYERS))
def test_float64_layer_stays_a_loop_with_the_reason(caplog, name, how):
    with float64_layers(how) as kw:
        model, spec, inputs = float64_masking_model(LAYERS[name](kw), kw)
        with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
            onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("any"))
    halves = 2 if name.startswith("bidirectional") else 1
    assert op_counts(onnx_model)["Loop"] == halves
    report = mlr.last_report()
    assert [layer.detail for layer in report.left_as_loop] == [DTYPE_REASONS[TensorProto.DOUBLE]] * halves
    assert "onnxruntime" in report.left_as_loop[0].detail and "OpenVINO" in report.left_as_loop[0].detail
    assert any("left as a Loop: float64 layer" in r.getMessage() for r in caplog.records)
    expected = keras_outputs(model, inputs)
    got = onnx_outputs(onnx_model, spec, inputs)
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype == np.float64
        assert float(np.max(np.abs(e - g))) <= FLOAT64_ATOL


def test_float64_embedding_stays_a_loop():
    """An Embedding in float64 (mask_zero=True) feeding a float64 LSTM: the same reason."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, FEATURES, mask_zero=True, dtype="float64")(tokens)
    model = randomize_weights(keras.Model(tokens, keras.layers.LSTM(UNITS, dtype="float64")(x)))
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    onnx_model = convert(model, spec)
    assert [layer.detail for layer in mlr.last_report().left_as_loop] == [DTYPE_REASONS[TensorProto.DOUBLE]]
    inputs = [post_padded_tokens(LENGTHS, STEPS)]
    assert float(np.max(np.abs(keras_outputs(model, inputs)[0] - onnx_outputs(onnx_model, spec, inputs)[0]))) \
        <= FLOAT64_ATOL


@pytest.mark.parametrize("policy", ["float16", "mixed_float16"])
def test_half_precision_reason_says_why(policy):
    dtype = keras.mixed_precision.Policy(policy) if (policy == "mixed_float16" and FLAVOUR == "tf_keras") else policy
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, FEATURES, mask_zero=True)(tokens)
    model = keras.Model(tokens, keras.layers.GRU(UNITS, return_sequences=True, dtype=dtype)(x))
    convert(model, (tf.TensorSpec((None, None), tf.int32, name="tokens"),))
    assert [layer.detail for layer in mlr.last_report().left_as_loop] == [DTYPE_REASONS[TensorProto.FLOAT16]]


# --- a float64 input before float32 layers: Keras casts, and the layer is rewritten -----------------

@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("layer", [
    lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True),
    lambda: keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True)),
    lambda: keras.layers.SimpleRNN(UNITS, go_backwards=True, return_sequences=True),
], ids=["lstm", "bidirectional gru", "simple_rnn go_backwards"])
def test_float64_features_into_float32_layers_are_rewritten(layer, mode):
    """Speech models feed float64 features to a Masking and float32 recurrent layers: Keras casts the
    input to float32 (the padded steps are masked by exact equality, before the cast), and the
    layer is a float32 layer like any other."""
    model, spec, inputs = float64_masking_model(layer(), {})
    onnx_model = check_conversion(model, spec, inputs, rewriter=mlr.make_rewriter(mode))
    assert op_counts(onnx_model)["Loop"] == 0, op_counts(onnx_model)
