# SPDX-License-Identifier: Apache-2.0
"""Keras layers without a mask that stock tf2onnx leaves as Loops become native ops, exact at every
position; the layers stock already makes native keep stock's graph.

Measured with tf2onnx 1.17 (Keras 3: GRU, GRU(reset_after=False), SimpleRNN, Bidirectional(GRU)
and LSTM(recurrent_activation="hard_sigmoid") stay Loops; tf_keras: GRU(reset_after=False) and
SimpleRNN do).
"""

import collections
import itertools
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import FLAVOUR, check_conversion, convert, keras, op_counts, randomize_weights
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr
import runtimes

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

STEPS = 6
LAYERS = {
    "gru": (lambda: keras.layers.GRU(UNITS, return_sequences=True), {"GRU": 1}),
    "gru_reset_before": (lambda: keras.layers.GRU(UNITS, reset_after=False, return_sequences=True), {"GRU": 1}),
    "gru_backwards_last": (lambda: keras.layers.GRU(UNITS, go_backwards=True), {"GRU": 1}),
    "simple_rnn": (lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True), {"RNN": 1}),
    "simple_rnn_state": (lambda: keras.layers.SimpleRNN(UNITS, return_state=True), {"RNN": 1}),
    # two layers (kerasutil.native_layers): stock tf2onnx's one bidirectional node in tf_keras (kept as it
    # is), the plugin's two forward nodes in Keras 3
    "bidirectional_gru": (lambda: keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_sequences=True)),
                          {"GRU": 2}),
    "bidirectional_simple_rnn": (lambda: keras.layers.Bidirectional(keras.layers.SimpleRNN(UNITS), merge_mode="sum"),
                                 {"RNN": 2}),
    "lstm_hard_sigmoid": (lambda: keras.layers.LSTM(UNITS, recurrent_activation="hard_sigmoid",
                                                    return_sequences=True), {"LSTM": 1}),
    "stacked": (lambda: keras.Sequential([keras.layers.GRU(UNITS, return_sequences=True),
                                          keras.layers.SimpleRNN(UNITS, return_sequences=True)]),
                {"GRU": 1, "RNN": 1}),
}


def unmasked_model(name):
    make, ops = LAYERS[name]
    inputs = keras.Input((None, FEATURES), name="features")
    outputs = make()(inputs)
    model = keras.Model(inputs, outputs)
    randomize_weights(model)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    batch = np.random.default_rng(0).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    return model, spec, [batch], ops


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_native_and_exact(name, monkeypatch):
    model, spec, inputs, ops = unmasked_model(name)
    if name == "lstm_hard_sigmoid" and FLAVOUR == "tf_keras":  # stock's native LSTM: OpenVINO compiles no
        monkeypatch.setattr(runtimes, "runtimes", lambda: ("onnxruntime",))  # HardSigmoid in it
    onnx_model = check_conversion(model, spec, inputs, ops=ops)
    counts = op_counts(onnx_model)
    assert not counts["Split"] and not counts["ScatterElements"] and not counts["CumSum"], counts  # no guard, no reorder
    assert all(not layer.masked for layer in mlr.last_report().layers), mlr.last_report()


def test_where_stock_is_native_its_graph_is_kept():
    inputs = keras.Input((None, FEATURES), name="features")
    model = keras.Model(inputs, keras.layers.LSTM(UNITS, return_sequences=True)(inputs))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    stock, rewritten = convert(model, spec, rewriter=None), convert(model, spec)
    assert [n.op_type for n in stock.graph.node] == [n.op_type for n in rewritten.graph.node]
    assert mlr.last_report().layers == ()
    assert op_counts(rewritten)["LSTM"] == 1, FLAVOUR


def _all_rows_model():
    """Every row of the table in one model: each layer over the same features, every output of each
    flattened into one output (front doors name and order several outputs each their own way)."""
    features = keras.Input((None, FEATURES), name="features")
    outputs = [make()(features) for make, _ in (LAYERS[name] for name in sorted(LAYERS))]
    outputs = [o for output in outputs for o in (output if isinstance(output, (list, tuple)) else [output])]
    model = randomize_weights(keras.Model(features, keras.layers.Concatenate()(
        [keras.layers.Flatten()(output) for output in outputs])))
    ops = collections.Counter()
    for name in sorted(LAYERS):
        ops.update(LAYERS[name][1])
    return model, ops


def _front_door(door, model, tmp_path):
    """The ONNX model ``door`` makes of ``model`` (a .keras file for the command lines)."""
    if door == "convert":
        return mlr.convert(model).onnx_model
    if door == "enable":
        spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
        with mlr.enable():
            return tf2onnx.convert.from_keras(model, input_signature=spec, opset=15)[0]
    path, out = tmp_path / "model.keras", tmp_path / "model.onnx"
    model.save(path)
    env = dict(os.environ)
    if door == "cli":
        command = [sys.executable, "-m", "masked_lstm_rewriter", str(path), "-o", str(out)]
    else:  # the environment switch, under tf2onnx's own command line
        command = [sys.executable, "-m", "tf2onnx.convert", "--keras", str(path), "--output", str(out)]
        env["TF2ONNX_MASKED_LSTM"] = "post"
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return onnx.load(str(out))


@pytest.mark.parametrize("door", ["convert", "cli", "enable", "environment"])
def test_every_row_through_each_front_door(door, tmp_path):
    model, ops = _all_rows_model()
    onnx_model = _front_door(door, model, tmp_path)
    counts = op_counts(onnx_model)
    # tf_keras: stock tf2onnx may pair a forward and a backward GRU over the same input into one node
    assert not counts["Loop"] and all(0 < counts[op] <= n for op, n in ops.items()), counts
    batch = np.random.default_rng(3).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    # onnxruntime only: OpenVINO compiles no HardSigmoid (each row runs on it alone, above)
    (got,) = runtimes.run_onnxruntime(onnx_model, {onnx_model.graph.input[0].name: batch})
    np.testing.assert_allclose(got, np.asarray(model(batch)), atol=1e-5, err_msg=door)


# --- TensorFlow 1's cells under dynamic_rnn (tf_keras's compat.v1 cells): one kernel over [x, h] --------

def _v1_cell(name):
    cells = tf.compat.v1.nn.rnn_cell
    init = {"initializer": tf.random_uniform_initializer(-0.7, 0.7, seed=3)}
    return {"basic_lstm": lambda: cells.BasicLSTMCell(UNITS),  # forget_bias=1.0 added to the f gate
            "basic_rnn": lambda: cells.BasicRNNCell(UNITS),
            "lstm": lambda: cells.LSTMCell(UNITS, **init),
            "stack": lambda: cells.MultiRNNCell([cells.BasicLSTMCell(UNITS), cells.LSTMCell(UNITS, **init)]),
            "peephole": lambda: cells.LSTMCell(UNITS, use_peepholes=True, **init)}[name]()


def _v1_run(cell, lengths: bool, steps=None):
    """A tf.function over ``dynamic_rnn(cell)`` (``steps``: None, dynamic): its outputs and every final state,
    flattened."""
    spec = [tf.TensorSpec([None, steps, FEATURES], tf.float32, name="x")] + \
        ([tf.TensorSpec([None], tf.int32, name="lengths")] if lengths else [])

    @tf.function(input_signature=spec, autograph=False)
    def run(x, *given):
        outputs, state = tf.compat.v1.nn.dynamic_rnn(cell, x, sequence_length=given[0] if given else None,
                                                     dtype=tf.float32, scope=f"rnn_{next(_SCOPES)}")
        return [outputs] + tf.nest.flatten(state)
    return run, spec


_SCOPES = itertools.count()  # TensorFlow 1's variable store outlives a function: one scope per function
needs_v1_cells = pytest.mark.skipif(FLAVOUR != "tf_keras", reason="TensorFlow's v1 cells need tf_keras")


@needs_v1_cells
@pytest.mark.parametrize("steps", [None, STEPS], ids=["dynamic time", "static time"])
@pytest.mark.parametrize("name, ops", [("basic_lstm", {"LSTM": 1}), ("basic_rnn", {"RNN": 1}),
                                       ("stack", {"LSTM": 2})])
def test_tensorflow_1_cells_become_native(name, ops, steps):
    """Stock tf2onnx leaves BasicLSTMCell, BasicRNNCell and MultiRNNCell Loops; their one kernel over the
    concatenated input and state reads as the input's and the state's rows: native, every output exact,
    through tf2onnx and through stock tf2onnx's ONNX file of them."""
    run, spec = _v1_run(_v1_cell(name), lengths=False, steps=steps)
    x = np.random.default_rng(1).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    expected = [np.asarray(t) for t in run(tf.constant(x))]
    plugin, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15,
                                              custom_rewriter=[mlr.rewrite_masked_lstm])
    routes = [("tf2onnx", plugin, mlr.last_report())]
    stock, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    routes.append(("ONNX file", *mlr.rewrite_onnx(stock)))
    for route, onnx_model, report in routes:
        counts = op_counts(onnx_model)
        assert not counts["Loop"] and all(counts[op] == n for op, n in ops.items()), (route, counts)
        assert [layer.rewritten for layer in report.layers] == [True], report
        for runtime in runtimes.runtimes():
            got = runtimes.run_onnxruntime(onnx_model, {"x": x}) if runtime == "onnxruntime" else \
                runtimes.run_openvino(onnx_model, {"x": x})
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_allclose(g, e, atol=1e-5, err_msg=f"{route}, {runtime}")


@needs_v1_cells
@pytest.mark.parametrize("name, lengths, reason", [
    ("peephole", False, "pre-activation is computed by Mul"),
    ("basic_lstm", True, "comparing the step counter with lengths per row"),
])
def test_tensorflow_1_loops_left_say_why(name, lengths, reason):
    """What stays a Loop is in the report with its reason (a peephole; lengths compared with the step
    counter), and the model still computes TensorFlow's values."""
    run, spec = _v1_run(_v1_cell(name), lengths)
    onnx_model, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15,
                                                  custom_rewriter=[mlr.rewrite_masked_lstm])
    report = mlr.last_report()
    assert len(report.left_as_loop) == 1 and reason in report.left_as_loop[0].detail, report
    assert op_counts(onnx_model)["Loop"] == 1
    feeds = {"x": np.random.default_rng(2).normal(size=(3, STEPS, FEATURES)).astype(np.float32)}
    if lengths:
        feeds["lengths"] = np.array([STEPS, 2, 0], np.int32)
    expected = [np.asarray(t) for t in run(*(tf.constant(v) for v in feeds.values()))]
    for e, g in zip(expected, runtimes.run_onnxruntime(onnx_model, feeds), strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5)


def _map_dense(x, weights):
    return tf.map_fn(lambda row: tf.nn.relu(tf.matmul(row, weights)), x)


def _scan_dense_sum(x, weights):
    return tf.scan(lambda total, item: total + tf.matmul(item, weights), tf.transpose(x, [1, 0, 2]),
                   initializer=tf.zeros([tf.shape(x)[0], UNITS]))


@pytest.mark.parametrize("loop", [_map_dense, _scan_dense_sum], ids=["map_fn", "scan"])
def test_a_loop_that_multiplies_no_state_is_no_recurrent_layer(loop):
    """A map, or a scan that multiplies only each step's input by weights, is not reported as a recurrent
    layer left as a Loop, through tf2onnx or through its ONNX file."""
    weights = tf.constant(np.random.default_rng(4).normal(size=(FEATURES, UNITS)).astype(np.float32))
    spec = [tf.TensorSpec([None, None, FEATURES], tf.float32, name="x")]
    run = tf.function(lambda x: loop(x, weights), input_signature=spec, autograph=False)
    onnx_model, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15,
                                                  custom_rewriter=[mlr.rewrite_masked_lstm])
    assert mlr.last_report().layers == (), mlr.last_report()
    stock, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    assert [n.op_type for n in onnx_model.graph.node] == [n.op_type for n in stock.graph.node]
    mlr.rewrite_onnx(stock)
    assert mlr.last_report().layers == (), mlr.last_report()


def test_a_loop_writing_out_of_step_is_known_wrong():
    """tf2onnx stacks a loop's list writes in step order whatever their index: ``tf.scan(reverse=True)``
    (written at n - 1 - i) would come out reversed, so the conversion fails unless kept on request."""
    rng = np.random.default_rng(5)
    kernel, recurrent = (tf.Variable(rng.uniform(-0.6, 0.6, size).astype(np.float32))
                         for size in ((FEATURES, UNITS), (UNITS, UNITS)))
    spec = [tf.TensorSpec([None, None, FEATURES], tf.float32, name="x")]

    @tf.function(input_signature=spec, autograph=False)
    def run(x):
        return tf.scan(lambda h, item: tf.tanh(tf.matmul(item, kernel) + tf.matmul(h, recurrent)),
                       tf.transpose(x, [1, 0, 2]), initializer=tf.zeros([tf.shape(x)[0], UNITS]), reverse=True)
    with mlr.enable(), pytest.raises(mlr.KnownWrong, match=r"writes its outputs at a computed index .* another order"):
        tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    with mlr.enable(keep_wrong=True):
        onnx_model, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    x = rng.normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    (got,) = runtimes.run_onnxruntime(onnx_model, {"x": x})
    assert float(np.max(np.abs(got - np.asarray(run(tf.constant(x)))))) > 1e-2, "tf2onnx now honours the index"
