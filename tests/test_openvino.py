# SPDX-License-Identifier: Apache-2.0
"""OpenVINO (its ONNX front end, CPU) on the emitted models, beyond the numeric tests (which run
on OpenVINO too when ``MLR_OPENVINO`` is on, see :mod:`runtimes`).

Skipped when openvino is not installed. Each test compiles the model the way a user would: with
the shapes it declares (dynamic), and where it says so with static ones too. One test pins the
runtime behaviour the emitter is built around (OpenVINO ignores ``sequence_lens`` with dynamic
shapes): if it fails, OpenVINO changed, and docs/openvino.md should say so.
"""

import logging
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kerasutil import ATOL, FLAVOUR, MAX_ERRORS, convert, keras, keras_outputs, op_counts, post_padded_tokens
from models import UNITS, embedding_model, initial_state_model

import masked_lstm_rewriter as mlr

ov = pytest.importorskip("openvino")
from masked_lstm_rewriter.sessions import openvino_compiled  # noqa: E402  pylint: disable=wrong-import-position
from runtimes import run_onnxruntime, run_openvino  # noqa: E402

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

SHAPES = ["dynamic", "static"]


def assert_exact_on_openvino(model, onnx_model, spec, inputs, static):
    feeds = {s.name: np.asarray(x) for s, x in zip(spec, inputs)}
    expected, got = keras_outputs(model, inputs), run_openvino(onnx_model, feeds, static)
    assert [e.shape for e in expected] == [g.shape for g in got]
    error = max(float(np.max(np.abs(e - g))) for e, g in zip(expected, got))
    MAX_ERRORS.append(error)
    assert error <= ATOL, f"max |keras - openvino| = {error}"


LAYERS = {
    "lstm states": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True),
    "lstm go_backwards states": lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True,
                                                          go_backwards=True),
    "bidirectional lstm states": lambda: keras.layers.Bidirectional(
        keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)),
    "gru go_backwards last": lambda: keras.layers.GRU(UNITS, go_backwards=True),
    "simple_rnn states": lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True, return_state=True),
}


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("static", [False, True], ids=SHAPES)
@pytest.mark.parametrize("name", list(LAYERS))
def test_rewritten_layers_are_exact(name, static, mode):
    """Last outputs, final states and backward layers: the numbers OpenVINO got wrong with dynamic
    shapes while the emitter relied on its sequence_lens."""
    model, spec, inputs = embedding_model(LAYERS[name]())
    if mode == "any":
        inputs = [inputs[0][:, ::-1].copy()]  # pre-padded
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    assert op_counts(onnx_model)["Loop"] == 0
    assert_exact_on_openvino(model, onnx_model, spec, inputs, static)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("static", [False, True], ids=SHAPES)
def test_zero_length_rows_with_an_initial_state(mode, static):
    """A row with no valid step keeps the initial state, as in Keras."""
    model, spec, inputs = initial_state_model(
        keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    assert_exact_on_openvino(model, onnx_model, spec, inputs, static)


@pytest.mark.parametrize("static", [False, True], ids=SHAPES)
def test_guard_fails_loudly(static):
    """"post" on a pre-padded batch: OpenVINO refuses to run, naming the guard's message."""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    tokens = inputs[0][:, ::-1].copy()  # pre-padded
    with pytest.raises(Exception, match="the mask is not post-padded"):
        run_openvino(convert(model, spec), {"tokens": tokens}, static)


def test_single_thread_synchronous_inference_drops_runtime_errors():
    """An OpenVINO 2026.4 limit docs/openvino.md documents: compiled with INFERENCE_NUM_THREADS=1, the
    synchronous infer() drops any runtime error (here the guard's) and returns empty outputs, or
    the previous request's; start_async() + wait() still raises. If this fails, OpenVINO changed:
    update docs/openvino.md."""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx_model = convert(model, spec)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(onnx_model.SerializeToString(), b""), "CPU",
                                  {"INFERENCE_NUM_THREADS": 1})
    good = compiled({"tokens": inputs[0]})[compiled.output(0)].copy()
    stale = compiled({"tokens": inputs[0][:, ::-1].copy()})[compiled.output(0)]  # pre-padded: no error
    np.testing.assert_array_equal(stale, good)
    request = compiled.create_infer_request()
    request.start_async({"tokens": inputs[0][:, ::-1].copy()})
    with pytest.raises(Exception, match="the mask is not post-padded"):
        request.wait()


_ONE_CPU = """
import os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import numpy as np, openvino as ov
compiled = ov.Core().compile_model(sys.argv[1], "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
tokens = np.load(sys.argv[2])
try:
    compiled({"tokens": tokens})
    print(compiled.get_property("INFERENCE_NUM_THREADS"), "no error")
except Exception:
    print(compiled.get_property("INFERENCE_NUM_THREADS"), "error")
"""


def test_one_cpu_is_one_thread_whose_synchronous_inference_drops_errors(tmp_path):
    """Why docs/openvino.md says "a machine or container with one CPU": where the process may use one
    CPU, OpenVINO 2026.4 runs one inference thread by default, and its synchronous inference drops
    the guard's error as with INFERENCE_NUM_THREADS=1. If this fails, OpenVINO changed: update the docs
    and the guard's note."""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    onnx.save(convert(model, spec), tmp_path / "post.onnx")
    np.save(tmp_path / "pre_padded.npy", inputs[0][:, ::-1].copy())
    run = subprocess.run([sys.executable, "-c", _ONE_CPU, str(tmp_path / "post.onnx"), str(tmp_path / "pre_padded.npy")],
                         capture_output=True, text=True, timeout=300, check=True)
    assert run.stdout.split()[-3:] == ["1", "no", "error"], run.stdout + run.stderr


def test_hard_sigmoid_for_openvino_stays_a_loop_that_openvino_runs(caplog):
    """OpenVINO compiles no HardSigmoid inside its LSTM: by default the layer is native (for
    onnxruntime) and the report says to target OpenVINO; with ``runtime="openvino"`` it stays the
    Loop, which OpenVINO runs exactly."""
    model, spec, inputs = embedding_model(
        keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="hard_sigmoid"))
    native = convert(model, spec)
    assert mlr.last_report().layers[0].not_for == ("openvino",)
    with pytest.raises(Exception, match="Unsupported activation function"):
        run_openvino(native, {"tokens": inputs[0]}, static=False)
    with caplog.at_level(logging.WARNING, logger="masked_lstm_rewriter"):
        targeted = convert(model, spec, rewriter=mlr.make_rewriter("post", runtime="openvino"))
    assert op_counts(targeted)["Loop"] == 1
    reason = mlr.last_report().left_as_loop[0].detail
    assert "OpenVINO" in reason and "HardSigmoid" in reason, reason
    assert any(reason in r.getMessage() for r in caplog.records)
    for static in (False, True):
        assert_exact_on_openvino(model, targeted, spec, inputs, static)


def test_loops_load_from_memory_not_from_a_path(tmp_path):
    """An OpenVINO 2026.4 limit docs/openvino.md documents: its ONNX front end reads tf2onnx's masked
    Loop from memory (``read_model(bytes, b"")``) but not from a file path (it miscounts the
    body's inputs); the plugin's native models load both ways. If this fails, OpenVINO changed."""
    model, spec, inputs = embedding_model(
        keras.layers.LSTM(UNITS, return_sequences=True, recurrent_activation="hard_sigmoid"))
    core = ov.Core()
    for onnx_model in (convert(model, spec, rewriter=mlr.make_rewriter("post", runtime="openvino")),
                       convert(model, spec, rewriter=None)):
        path = str(tmp_path / "loop.onnx")
        onnx.save(onnx_model, path)
        core.compile_model(core.read_model(onnx_model.SerializeToString(), b""), "CPU")
        with pytest.raises(Exception, match="Loop"):
            core.compile_model(core.read_model(path), "CPU")
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    native = convert(model, spec)
    assert op_counts(native)["LSTM"] == 1
    onnx.save(native, str(tmp_path / "native.onnx"))
    core.compile_model(core.read_model(str(tmp_path / "native.onnx")), "CPU")


def test_openvino_still_ignores_sequence_lens_with_dynamic_shapes():
    """The runtime behaviour the emitter does not rely on: a bare LSTM node with sequence_lens,
    compiled with a dynamic batch, returns Y_h after the last step of every row, not at its
    length (compiled static, it honours them). If this fails, OpenVINO changed."""
    steps, batch, features, hidden = 5, 2, 3, 4
    rng = np.random.default_rng(0)
    initializers = [helper.make_tensor(name, TensorProto.FLOAT, value.shape, value.ravel()) for name, value in (
        ("W", rng.normal(size=(1, 4 * hidden, features)).astype(np.float32)),
        ("R", rng.normal(size=(1, 4 * hidden, hidden)).astype(np.float32)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "", "lengths"], ["Y", "Y_h"], hidden_size=hidden)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, "batch", features]),
                         helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, 1, "batch", hidden]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, "batch", hidden])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onnx.checker.check_model(model)
    feeds = {"x": rng.normal(size=(steps, batch, features)).astype(np.float32),
             "lengths": np.array([2, steps], np.int32)}
    y, y_h = run_openvino(model, feeds, static=True)
    np.testing.assert_allclose(y_h[0, 0], y[1, 0, 0], atol=ATOL)  # static: Y_h at the row's length
    y, y_h = run_openvino(model, feeds, static=False)
    assert not np.allclose(y_h[0, 0], y[1, 0, 0], atol=1e-3), \
        "OpenVINO now honours sequence_lens with dynamic shapes: update docs/openvino.md"


@pytest.mark.skipif(FLAVOUR != "tf_keras", reason="TensorFlow's v1 LSTMCell needs tf_keras")
def test_stock_sequence_lengths_fail_a_conversion_for_openvino():
    """``dynamic_rnn(sequence_length=)``: stock tf2onnx's native node with sequence_lens, exact on onnxruntime
    and wrong on OpenVINO with dynamic shapes (short rows), is known wrong for OpenVINO."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel
    cell = tf.compat.v1.nn.rnn_cell.LSTMCell(UNITS, initializer=tf.random_uniform_initializer(-1, 1, seed=5))
    spec = [tf.TensorSpec([None, None, 2], tf.float32, name="x"), tf.TensorSpec([None], tf.int32, name="lengths")]

    @tf.function(input_signature=spec)
    def run(x, lengths):
        outputs, state = tf.compat.v1.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
        return outputs, state.c, state.h

    with mlr.enable(runtime="openvino"), pytest.raises(mlr.KnownWrong, match="which OpenVINO ignores with dynamic"):
        tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    with mlr.enable(runtime="openvino", keep_wrong=True):
        onnx_model, _ = tf2onnx.convert.from_function(run, input_signature=spec, opset=15)
    feeds = {"x": np.random.default_rng(0).normal(size=(4, 5, 2)).astype(np.float32),
             "lengths": np.array([5, 3, 0, 1], np.int32)}
    expected = [np.asarray(t) for t in run(tf.constant(feeds["x"]), tf.constant(feeds["lengths"]))]
    for e, g in zip(expected, run_onnxruntime(onnx_model, feeds)):
        np.testing.assert_allclose(g, e, atol=ATOL)
    assert max(float(np.max(np.abs(e - g))) for e, g in zip(expected, run_openvino(onnx_model, feeds, False))) > 1e-3


@pytest.mark.parametrize("mode", ["post", "any"])
def test_static_shapes_keep_the_native_sequence_op(mode):
    """OpenVINO compiles a recurrent node with sequence_lens and every dimension static into a
    per-step loop (TensorIterator), several times slower than its sequence op; cut to the longest
    row, the node's steps stay dynamic and it keeps the sequence op. Exact either way. (The single node
    without the schedule: OpenVINO's runtime model does not show what it compiled inside an If's
    branch; the scheduled model, whose single node's branch cuts the same way, is checked exact.)"""
    model, spec, inputs = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True, return_state=True))
    assert_exact_on_openvino(model, convert(model, spec, rewriter=mlr.make_rewriter(mode)), spec, inputs, static=True)
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode, schedule=False))
    feeds = {spec[0].name: np.asarray(inputs[0])}
    compiled = openvino_compiled(onnx_model, {name: value.shape for name, value in feeds.items()})
    kinds = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
    assert "RNNSeq" in kinds and "TensorIterator" not in kinds, sorted(kinds)
    assert_exact_on_openvino(model, onnx_model, spec, inputs, static=True)


def test_pre_padded_bidirectional_any_mode_on_openvino():
    model, spec, _ = embedding_model(keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    tokens = post_padded_tokens([7, 3, 0, 1, 6], 7)[:, ::-1].copy()  # pre-padded, an empty row
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("any"))
    for static in (False, True):
        assert_exact_on_openvino(model, onnx_model, spec, [tokens], static)


def _two_lstms_over_one_swap(barrier: bool):
    """Two LSTM nodes over one [B, T, F] input swapped to time-major (parallel layers after
    tf2onnx merges their Transposes), T static, B dynamic; the second reads it through a Max
    when ``barrier``."""
    steps, features, hidden = 5, 3, 4
    rng = np.random.default_rng(0)
    initializers, nodes = [], [helper.make_node("Transpose", ["a"], ["x"], perm=[1, 0, 2])]
    for i in range(2):
        for name, shape in ((f"W{i}", (1, 4 * hidden, features)), (f"R{i}", (1, 4 * hidden, hidden))):
            value = rng.normal(size=shape).astype(np.float32)
            initializers.append(helper.make_tensor(name, TensorProto.FLOAT, shape, value.ravel()))
        x = "x"
        if barrier and i:
            nodes.append(helper.make_node("Max", ["x", "x"], ["x_alone"]))
            x = "x_alone"
        nodes.append(helper.make_node("LSTM", [x, f"W{i}", f"R{i}"], [f"Y{i}"], hidden_size=hidden))
    graph = helper.make_graph(
        nodes, "lstms", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", steps, features])],
        [helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, [steps, 1, "batch", hidden]) for i in range(2)],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)  # onnxruntime's too
    onnx.checker.check_model(model)
    return model, {"a": rng.normal(size=(3, steps, features)).astype(np.float32)}


def test_openvino_still_scrambles_a_swap_shared_by_recurrent_nodes():
    """The runtime bug emit._read_alone avoids: two recurrent nodes reading one Transpose (with a
    static dimension) give the first node scrambled steps (OpenVINO's CPU plugin turns the shared
    Transpose into a Reshape for both); one Max in front of the second node makes both exact.
    If the first assertion fails, OpenVINO changed: update docs/openvino.md."""
    model, feeds = _two_lstms_over_one_swap(barrier=False)
    expected, got = run_onnxruntime(model, feeds), run_openvino(model, feeds)
    assert np.abs(expected[0] - got[0]).max() > 0.1, "OpenVINO now keeps a shared Transpose: update docs/openvino.md"
    model, feeds = _two_lstms_over_one_swap(barrier=True)
    for e, g in zip(run_onnxruntime(model, feeds), run_openvino(model, feeds)):
        np.testing.assert_allclose(g, e, atol=ATOL)
