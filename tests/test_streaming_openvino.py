# SPDX-License-Identifier: Apache-2.0
"""OpenVINO keeping a streaming model's states inside the compiled model (``MakeStateful``).

``stateful_openvino`` below is the recipe of docs/streaming.md ("OpenVINO: state kept inside the
compiled model"), verbatim (a test checks it): each ``<layer>/h_in`` -> ``<layer>/h_out`` pair (and
``c``) becomes an OpenVINO variable, so that an ``InferRequest`` carries the states from one
``infer`` to the next and ``reset_state()`` starts a new sequence.

The oracle is the one of tests/test_streaming.py: Keras's model run ONCE over the whole sequence.
A batch (rows of different lengths, a full row, an empty row; in ``"any"`` also pre-padded rows and
rows with holes) is fed chunk by chunk, inputs only; every sequence output must equal the one
call's at every position, and every per-row output and every state (read with ``query_state``)
after each chunk Keras's over the sequence so far.
"""

import inspect
import pathlib

import numpy as np
import onnx
import pytest

from kerasutil import ATOL, MAX_ERRORS
from test_streaming import (CHUNKINGS, _error, STEPS, built, convert_streaming, embedding_lstm_gru, keras_call,
                            stacked_cells, valid_steps)

ov = pytest.importorskip("openvino")
from openvino.passes import MakeStateful, Manager  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.usefixtures("plugin_off")

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "streaming.md"
FACTORIES = {"embedding_lstm_gru": embedding_lstm_gru, "stacked_cells": stacked_cells}


# --- the recipe (docs/streaming.md shows these two functions as they are here) ---------------------

def stateful_openvino(path, batch=None):
    """OpenVINO's CPU model of the streaming model at ``path``, each state pair kept inside.
    ``batch`` fixes the batch, so that a reset state is zeros; None keeps it dynamic."""
    core = ov.Core()
    model = core.read_model(path)
    if batch is not None:
        model.reshape({i.get_any_name(): ov.PartialShape([batch, *list(i.get_partial_shape())[1:]])
                       for i in model.inputs})
    names = [i.get_any_name() for i in model.inputs]
    pairs = {name: name[:-len("in")] + "out" for name in names if name.endswith(("/h_in", "/c_in"))}
    manager = Manager()
    manager.register_pass(MakeStateful(pairs))
    manager.run_passes(model)
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def zero_states(request, batch):
    """With a dynamic batch, a reset state is empty ([0, units]): give it zeros of ``batch`` rows."""
    for state in request.query_state():
        state.state = ov.Tensor(np.zeros((batch, state.state.shape[1]), np.float32))


# --- helpers ---------------------------------------------------------------------------------------

def converted(kind, mode, tmp_path):
    """(Keras model, path of its streaming ONNX model, tokens of ``mode``'s batch,
    {state output: Keras output index})."""
    model, spec, make_input, keras_states = built(FACTORIES[kind])
    path = tmp_path / f"{kind}-{mode}.onnx"
    onnx.save(convert_streaming(model, spec, mode), str(path))
    return model, str(path), make_input(valid_steps(mode)), keras_states


def state_values(request) -> dict:
    """State output name -> its value. MakeStateful names a variable after its pair, ``<in><out>``
    (``lstm/h_inlstm/h_out``): the output's name is its second half."""
    values = {}
    for state in request.query_state():
        out = state.name[len(state.name) // 2:]
        assert state.name == out[:-len("out")] + "in" + out, state.name
        values[out] = np.array(state.state.data)
    return values


def run_stateful(compiled, request, tokens, sizes):
    """[(chunk's end step, {output: value}, {state output: value})], the tokens fed chunk by chunk."""
    names = [output.get_any_name() for output in compiled.outputs]
    results, start = [], 0
    for size in sizes:
        out = request.infer({"tokens": tokens[:, start:start + size]})
        start += size
        results.append((start, {name: np.array(out[compiled.output(name)]) for name in names},
                        state_values(request)))
    return results


def check_stateful(model, compiled, request, tokens, keras_states, sizes, before_each=lambda: None):
    """Chunk by chunk against Keras's one call: sequence outputs at every position, per-row outputs
    and the states after each chunk (Keras over the steps so far). The largest error."""
    whole = keras_call(model, {"tokens": tokens})
    names = [output.get_any_name() for output in compiled.outputs]
    assert len(names) == len(whole), names  # the state outputs are gone: they are variables now
    before_each()
    chunks = run_stateful(compiled, request, tokens, sizes)
    worst = 0.0
    for index, name in enumerate(names):
        if whole[index].ndim >= 3 and whole[index].shape[1] == STEPS:
            got = np.concatenate([out[name] for _, out, _ in chunks], axis=1)
            worst = max(worst, _error(whole[index], got, f"{sizes}: {name}"))
    for end, out, states in chunks:
        prefix = keras_call(model, {"tokens": tokens[:, :end]})
        for index, name in enumerate(names):
            if not (whole[index].ndim >= 3 and whole[index].shape[1] == STEPS):
                worst = max(worst, _error(prefix[index], out[name], f"{sizes}: {name} after step {end}"))
        assert sorted(states) == sorted(keras_states)
        for name, index in keras_states.items():
            worst = max(worst, _error(prefix[index], states[name], f"{sizes}: state {name} after step {end}"))
    MAX_ERRORS.append(worst)
    return worst


# --- tests -------------------------------------------------------------------------------------------

def test_the_doc_shows_the_recipe_as_tested():
    text = DOC.read_text()
    assert "## OpenVINO: state kept inside the compiled model" in text
    for function in (stateful_openvino, zero_states):
        assert inspect.getsource(function) in text, f"docs/streaming.md does not show {function.__name__} as tested"


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_state_kept_inside_equals_one_keras_call(kind, mode, tmp_path):
    """A fixed batch: every chunking, each sequence started with reset_state() alone."""
    model, path, tokens, keras_states = converted(kind, mode, tmp_path)
    compiled = stateful_openvino(path, batch=len(tokens))
    request = compiled.create_infer_request()
    for sizes in CHUNKINGS:
        check_stateful(model, compiled, request, tokens, keras_states, sizes, before_each=request.reset_state)


def test_dynamic_batch_needs_zeros_after_a_reset(tmp_path):
    """A dynamic batch compiles, but a reset state is empty ([0, units]): the first infer fails on
    its batch until the states are given zeros (zero_states), and then every chunking is exact."""
    model, path, tokens, keras_states = converted("embedding_lstm_gru", "post", tmp_path)
    compiled = stateful_openvino(path)
    request = compiled.create_infer_request()
    assert {tuple(state.state.shape) for state in request.query_state()} == {(0, 4), (0, 3)}
    request.start_async({"tokens": tokens[:, :1]})  # one inference thread (one CPU) drops a synchronous error
    with pytest.raises(RuntimeError, match="batch_size"):
        request.wait()
    for sizes in CHUNKINGS:
        request.reset_state()
        check_stateful(model, compiled, request, tokens, keras_states, sizes,
                       before_each=lambda: zero_states(request, len(tokens)))


def test_reset_state_starts_a_new_sequence_from_zeros(tmp_path):
    """After one sequence, reset_state() zeroes every state: a second sequence then equals Keras's
    call on it alone. Without the reset it would go on from the first sequence's states."""
    model, path, tokens, keras_states = converted("embedding_lstm_gru", "post", tmp_path)
    compiled = stateful_openvino(path, batch=len(tokens))
    request = compiled.create_infer_request()
    other = np.random.default_rng(1).permutation(tokens)  # other rows, the full one among them
    run_stateful(compiled, request, tokens, [3, 1, 4])
    assert any(value.any() for value in state_values(request).values())
    request.reset_state()
    assert not any(value.any() for value in state_values(request).values())
    check_stateful(model, compiled, request, other, keras_states, [1] * STEPS)
    carried_on = run_stateful(compiled, request, other, [STEPS])[0][1]
    name = compiled.outputs[0].get_any_name()
    assert np.abs(carried_on[name] - keras_call(model, {"tokens": other})[0]).max() > ATOL
