# SPDX-License-Identifier: Apache-2.0
"""Conversions the plugin drives trace Keras's generic recurrent code where a GPU is visible.

There is no GPU here, so one is simulated: ``tf.config.list_logical_devices("GPU")`` lists one,
which is the question both Keras flavours ask (Keras 3 in
``keras.src.backend.tensorflow.rnn._is_gpu_available``, tf_keras in its ``LSTM`` and ``GRU``), and
the conversion runs under ``tf.device("/GPU:0")``, as in a training script. Keras 3 then traces
cuDNN's ``CudnnRNNV3``, which stock tf2onnx leaves in the model as a TensorFlow op (the op only
has to exist in the graph, not to run). With the plugin, every front door (``convert``, the command
line, ``enable()`` under tf2onnx's ``from_keras`` and ``from_function`` and Keras 3's
``model.export``, the environment switch) gives the native ops, exact against Keras run on the CPU.
tf_keras traces its generic code anyway (it only registers the cuDNN function for Grappler, which
tf2onnx drops): pinned here too.

The model: a masked LSTM (``Embedding(mask_zero=True)``) and an unmasked GRU, on two inputs.
"""

import contextlib
import json
import logging
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import FLAVOUR, LENGTHS, MAX_ERRORS, STEPS, keras, op_counts, post_padded_tokens, randomize_weights

import masked_lstm_rewriter as mlr
import runtimes
from masked_lstm_rewriter import cli
from masked_lstm_rewriter.patches import generic_path

pytestmark = pytest.mark.usefixtures("plugin_off")

LSTM_UNITS, GRU_UNITS, FEATURES = 4, 5, 3  # the two outputs differ in shape: they cannot be swapped unseen
ATOL = 1e-5
SPEC = [tf.TensorSpec((None, None), tf.int32, name="tokens"),
        tf.TensorSpec((None, None, FEATURES), tf.float32, name="features")]
# the simulation, also run first in a subprocess
SIMULATED_GPU = """
import tensorflow as tf
_listed = tf.config.list_logical_devices
def _with_a_gpu(device_type=None):
    gpu = [tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    return gpu if device_type == "GPU" else _listed(device_type) + (gpu if device_type is None else [])
tf.config.list_logical_devices = _with_a_gpu
"""
# what tf2onnx is given, also run first in a subprocess: the op types of each function it freezes
RECORD_TRACES = """
import tf2onnx.tf_loader
TRACED = []
_freeze = tf2onnx.tf_loader.from_function
def _recording(function, *args, **kwargs):
    TRACED.append(sorted({op.type for op in function.graph.get_operations()}))
    return _freeze(function, *args, **kwargs)
tf2onnx.tf_loader.from_function = _recording
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(model, its .keras file, inputs, Keras's outputs on the CPU)."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    features = keras.Input((None, FEATURES), name="features")
    embedded = keras.layers.Embedding(50, FEATURES, mask_zero=True)(tokens)
    masked = keras.layers.LSTM(LSTM_UNITS, return_sequences=True)(embedded)
    unmasked = keras.layers.GRU(GRU_UNITS, return_sequences=True)(features)
    model = randomize_weights(keras.Model([tokens, features], [masked, unmasked]))
    inputs = [post_padded_tokens(LENGTHS, STEPS),
              np.random.default_rng(1).normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)]
    expected = [np.asarray(output) for output in model(inputs, training=False)]
    path = tmp_path_factory.mktemp("gpu") / "model.keras"
    model.save(path)
    return model, path, inputs, expected


@pytest.fixture
def simulated_gpu():
    """A GPU is listed and the test's graphs are built for it; yields the op types of each function
    tf2onnx freezes meanwhile (the same text runs in a subprocess)."""
    namespace = {}
    saved = tf.config.list_logical_devices, tf2onnx.tf_loader.from_function
    exec(SIMULATED_GPU + RECORD_TRACES, namespace)  # pylint: disable=exec-used
    try:
        assert tf.config.list_logical_devices("GPU")
        with tf.device("/GPU:0"):
            yield namespace["TRACED"]
    finally:
        tf.config.list_logical_devices, tf2onnx.tf_loader.from_function = saved


def check_native_and_exact(onnx_model, case, traced):
    """tf2onnx was given Keras's generic code (no cuDNN op: the plugin could also rewrite that one);
    one native LSTM and one native GRU, no Loop; every output equal to Keras's at every position, on
    every runtime."""
    _, _, inputs, expected = case
    assert traced and not any("CudnnRNNV3" in ops for ops in traced), traced
    counts = op_counts(onnx_model)
    assert (counts["LSTM"], counts["GRU"], counts["Loop"], counts["CudnnRNNV3"]) == (1, 1, 0, 0), counts
    feeds = {i.name: inputs[0] if i.type.tensor_type.elem_type == onnx.TensorProto.INT32 else inputs[1]
             for i in onnx_model.graph.input}
    worst = 0.0
    for runtime in runtimes.runtimes():
        got = runtimes.RUNNERS[runtime](onnx_model, feeds)
        assert sorted(g.shape for g in got) == sorted(e.shape for e in expected), runtime
        for want in expected:
            worst = max(worst, float(np.max(np.abs(next(g for g in got if g.shape == want.shape) - want))))
    MAX_ERRORS.append(worst)
    assert worst <= ATOL, f"max |keras - onnx| = {worst}"
    return worst


@pytest.mark.registers_cudnn_twin
def test_stock_tf2onnx_under_a_gpu(case, simulated_gpu):  # pylint: disable=redefined-outer-name
    """Without the plugin: Keras 3 traces CudnnRNNV3 for both layers, and tf2onnx leaves it in the
    model; tf_keras traces the generic functions and only registers the cuDNN ones, which tf2onnx drops."""
    model = case[0]
    counts = op_counts(tf2onnx.convert.from_keras(model, input_signature=SPEC)[0])
    (called,) = simulated_gpu
    function = tf.function(lambda tokens, features: model([tokens, features], training=False), input_signature=SPEC)
    graph = function.get_concrete_function().graph.as_graph_def()
    registered = {node.op for function_def in graph.library.function for node in function_def.node_def}
    if FLAVOUR == "keras3":
        assert "CudnnRNNV3" in called, called
        assert counts["CudnnRNNV3"] == 2, counts
    else:
        assert "CudnnRNNV3" not in called and "CudnnRNNV3" in registered, called
        assert counts["CudnnRNNV3"] == 0 and counts["GRU"] == 1 and counts["Loop"] == 1, counts


def test_convert(case, simulated_gpu, caplog):  # pylint: disable=redefined-outer-name
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        onnx_model, report = mlr.convert(case[0])
    check_native_and_exact(onnx_model, case, simulated_gpu)
    assert report.rewritten and not report.left_as_loop, report
    if FLAVOUR == "keras3":
        assert any("a GPU is visible" in record.getMessage() for record in caplog.records)


def test_command_line(case, simulated_gpu, tmp_path):  # pylint: disable=redefined-outer-name
    out = tmp_path / "model.onnx"
    assert cli.main([str(case[1]), "-o", str(out)]) == 0
    check_native_and_exact(onnx.load(str(out)), case, simulated_gpu)


def _export(model, path):
    model.export(str(path), format="onnx", input_signature=[SPEC], verbose=False)  # one argument: the list
    return onnx.load(str(path))


FRONT_DOORS = {
    "from_keras": lambda model, path: tf2onnx.convert.from_keras(model, input_signature=SPEC)[0],
    "from_function": lambda model, path: tf2onnx.convert.from_function(
        tf.function(lambda tokens, features: model([tokens, features], training=False)), input_signature=SPEC)[0],
    "keras_export": _export,
}


@pytest.mark.parametrize("front_door", sorted(FRONT_DOORS))
def test_enable(case, simulated_gpu, tmp_path, front_door):  # pylint: disable=redefined-outer-name
    if front_door == "keras_export" and FLAVOUR != "keras3":
        pytest.skip("tf_keras models have no model.export(format='onnx')")
    with mlr.enable():
        onnx_model = FRONT_DOORS[front_door](case[0], tmp_path / "model.onnx")
    check_native_and_exact(onnx_model, case, simulated_gpu)


def test_a_layer_that_requires_cudnn(simulated_gpu):  # pylint: disable=redefined-outer-name
    """Keras 3's ``use_cudnn=True`` raises rather than run the generic code (so a CPU cannot run it):
    the conversion runs that code all the same, and the layer keeps its setting."""
    if FLAVOUR != "keras3":
        pytest.skip("use_cudnn is a Keras 3 option")
    features = keras.Input((None, FEATURES), name="features")
    layer = keras.layers.GRU(GRU_UNITS, return_sequences=True, use_cudnn=False)
    model = randomize_weights(keras.Model(features, layer(features)))
    batch = np.random.default_rng(2).normal(size=(3, STEPS, FEATURES)).astype(np.float32)
    expected = np.asarray(model(batch, training=False))
    layer.use_cudnn = True
    with mlr.enable():
        onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=SPEC[1:])
    assert layer.use_cudnn is True
    assert simulated_gpu and not any("CudnnRNNV3" in ops for ops in simulated_gpu), simulated_gpu
    assert (op_counts(onnx_model)["GRU"], op_counts(onnx_model)["Loop"]) == (1, 0), op_counts(onnx_model)
    error = float(np.max(np.abs(runtimes.run_onnxruntime(onnx_model, {"features": batch})[0] - expected)))
    MAX_ERRORS.append(error)
    assert error <= ATOL, error


def test_environment_switch(case, tmp_path):  # pylint: disable=redefined-outer-name
    """An unmodified ``python -m tf2onnx.convert --keras``, the simulation run first in its process."""
    out = tmp_path / "model.onnx"
    run_tf2onnx = ("import json, runpy, sys\nsys.argv[0] = 'tf2onnx.convert'\ntry:\n"
                   "    runpy.run_module('tf2onnx.convert', run_name='__main__', alter_sys=True)\n"
                   "finally:\n    print('TRACED', json.dumps(TRACED), file=sys.stderr)\n")
    env = dict(os.environ, TF2ONNX_MASKED_LSTM="post")
    done = subprocess.run([sys.executable, "-c", SIMULATED_GPU + RECORD_TRACES + run_tf2onnx, "--keras", str(case[1]),
                           "--output", str(out)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    traced = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("TRACED "))[7:])
    check_native_and_exact(onnx.load(str(out)), case, traced)


def test_only_the_conversions_trace_without_the_gpu(simulated_gpu):  # pylint: disable=unused-argument,protected-access
    """Outside a conversion Keras keeps its answer (training in the same process keeps cuDNN), and
    disable() gives tf2onnx back its own functions."""
    rnn = sys.modules.get(generic_path.KERAS_RNN)
    if FLAVOUR != "keras3" or rnn is None:
        pytest.skip("tf_keras: nothing is patched (its traces never choose cuDNN)")
    before = tf2onnx.convert._get_concrete_function, tf2onnx.convert.from_function
    with mlr.enable():
        assert rnn._is_gpu_available()
        with generic_path.generic_path(), generic_path.generic_path():
            assert not rnn._is_gpu_available()
        assert rnn._is_gpu_available()
        with contextlib.suppress(ZeroDivisionError), generic_path.generic_path():
            raise ZeroDivisionError
        assert rnn._is_gpu_available()
    assert (tf2onnx.convert._get_concrete_function, tf2onnx.convert.from_function) == before


@pytest.mark.registers_cudnn_twin
def test_tf_keras_converts_the_same_without_registering_the_cudnn_twin(case):
    """tf_keras registers a cuDNN function for each LSTM and GRU it traces; tf2onnx drops it. The
    plugin's conversions (and the suite's, see conftest) skip that registration: the ONNX graph
    must have the same nodes, with the same weights."""
    if FLAVOUR != "tf_keras":
        pytest.skip("Keras 3 registers no cuDNN twin")
    model = case[0]
    registered = tf2onnx.convert.from_keras(model, input_signature=SPEC, custom_rewriter=[mlr.rewrite_masked_lstm])[0]
    with generic_path.generic_path():
        skipped = tf2onnx.convert.from_keras(model, input_signature=SPEC, custom_rewriter=[mlr.rewrite_masked_lstm])[0]
    # the same nodes; their order among independent ones follows tf2onnx's name counters, which the
    # process's earlier traces move
    assert sorted(n.op_type for n in registered.graph.node) == sorted(n.op_type for n in skipped.graph.node)
    assert sorted(map(_tensor_bytes, registered.graph.initializer)) == sorted(map(_tensor_bytes, skipped.graph.initializer))
    assert op_counts(skipped)["Loop"] == 0
    feeds = dict(zip(("tokens", "features"), case[2]))
    for same, other in zip(runtimes.run_onnxruntime(registered, feeds), runtimes.run_onnxruntime(skipped, feeds)):
        np.testing.assert_array_equal(same, other)


def _tensor_bytes(tensor) -> bytes:
    return onnx.numpy_helper.to_array(tensor).tobytes()


@pytest.mark.registers_cudnn_twin
def test_loading_a_tf_keras_file_registers_no_cudnn_twin(case, monkeypatch):
    """Keras rebuilds a loaded model by calling each layer symbolically, where tf_keras registers
    each LSTM's and GRU's cuDNN twin in a graph nothing runs (seconds per layer, in every command-line
    conversion of a Keras file): the plugin's loader skips it, and the model computes the same."""
    if FLAVOUR != "tf_keras":
        pytest.skip("Keras 3 registers no cuDNN twin")
    from masked_lstm_rewriter import keras_source  # pylint: disable=import-outside-toplevel
    module, name = generic_path.TF_KERAS_REGISTER
    registered = []
    original = getattr(sys.modules[module], name)
    monkeypatch.setattr(sys.modules[module], name, lambda *a, **k: registered.append(a) or original(*a, **k))
    keras.models.load_model(case[1], compile=False)
    assert registered, "tf_keras's own loader registers the twin (the test's premise)"
    registered.clear()
    model = keras_source.load(case[1])
    assert not registered
    got = [np.asarray(output) for output in model(case[2], training=False)]
    for expected, output in zip(case[3], got):
        np.testing.assert_allclose(output, expected, atol=1e-6)
