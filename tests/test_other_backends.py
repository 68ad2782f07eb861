# SPDX-License-Identifier: Apache-2.0
"""Keras 3 on the JAX backend: a model object (``mlr.convert``), its ``.keras`` file (the command
line, with ``KERAS_BACKEND=jax`` in the environment), Keras's own ``model.export(format="onnx")``
under ``mlr.enable()``, and ``verify`` against the model run on JAX, all native and equal to the
model on JAX at every position (tests/backend_check.py runs them in a JAX process)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from kerasutil import ATOL, ONCE_PER_SUITE

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = {"LSTM", "GRU", "RNN"}

pytestmark = [ONCE_PER_SUITE, pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")]


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jax")
    env = {key: value for key, value in os.environ.items() if key not in ("TF_USE_LEGACY_KERAS", "MLR_KERAS")}
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, os.path.join(HERE, "backend_check.py"), str(folder)], capture_output=True,
                          text=True, env=env, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_check_ran_on_jax(jax_results):
    assert jax_results.pop("backend") == "jax"


@pytest.mark.parametrize("model, door", [("lstm", "convert"), ("lstm", "cli"), ("lstm", "export"),
                                         ("bidirectional_gru", "export"), ("backward_rnn_last", "convert")])
def test_every_front_door_gives_the_native_model_of_the_jax_model(jax_results, model, door):
    """Keras's JAX export writes Loops, and fails on Bidirectional layers and go_backwards."""
    found = jax_results[model][door]
    assert "failed" not in found, found
    assert NATIVE & set(found["ops"]) and "Loop" not in found["ops"], found["ops"]
    assert found["error"] <= ATOL, found
    # the report (on export, this process's last_report()): the layer, or a Bidirectional's two halves, native
    assert found["counts"] is None or (found["counts"][0] in (1, 2) and found["counts"][1] == 0), found


def test_convert_and_the_command_line_name_the_jax_model_alike(jax_results):
    """The model object (converted in a TensorFlow process) and its .keras file (the command line):
    the Keras names of its inputs and outputs, batch and time for their dynamic dimensions."""
    by_convert, by_command = jax_results["lstm"]["convert"]["names"], jax_results["lstm"]["cli"]["names"]
    assert by_convert == by_command
    inputs, outputs = by_convert
    assert inputs == [["tokens", ["batch", "time"]]]
    assert [dims for _, dims in outputs] == [["batch", "time", 3]] and ":" not in outputs[0][0]


def test_an_initial_state_shows_where_keras_on_jax_shows_it(jax_results):
    """Before a row's first valid step (and throughout an empty row), Keras on JAX outputs the
    initial state, where Keras on TensorFlow outputs zeros: the model converted from JAX gives JAX's."""
    found = jax_results["initial_state_lstm"]["convert_any"]
    assert "failed" not in found and "LSTM" in found["ops"] and "Loop" not in found["ops"], found
    assert found["error"] <= ATOL, found


def test_a_backward_layer_with_an_initial_state_from_jax_fails_loudly(jax_results):
    """Its native form would give TensorFlow's numbers, and so would the Loop: the conversion fails."""
    found = jax_results["backward_initial_state_lstm"]["convert_any"]
    assert "a backward layer with initial_state= from Keras on JAX" in found.get("failed", ""), found


def test_a_loop_left_by_an_export_is_reported_and_warned_about(jax_results):
    """Keras's export on JAX converts in a TensorFlow process: its report is this process's last one,
    and its WARNING for a layer left as a Loop is logged here (OpenVINO compiles no Softsign LSTM)."""
    found = jax_results["softsign_lstm"]["export_openvino"]
    assert "failed" not in found and "Loop" in found["ops"] and found["error"] <= ATOL, found
    assert found["counts"] == [0, 1], found
    assert any("left as a Loop" in message and "Softsign" in message for message in found["warnings"]), found


def test_an_error_of_the_tensorflow_process_is_raised_as_its_own_class(jax_results):
    """A Bidirectional layer cannot stream: mlr.KnownWrong, as in a TensorFlow process, not another class."""
    found = jax_results["bidirectional_gru"]["convert_streaming"]
    assert found.get("failed", "").startswith("KnownWrong: "), found


def test_verify_runs_the_reference_on_jax(jax_results):
    found = jax_results["lstm"]["verify"]
    assert found["status"] == 0 and found["last"][0].startswith("verified:"), found
