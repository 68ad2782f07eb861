# SPDX-License-Identifier: Apache-2.0
"""Streaming export: every recurrent layer made native takes its initial states as graph inputs and
returns its final states as graph outputs, so that the model runs chunk by chunk.

The oracle is Keras's model run ONCE over the whole sequence: a batch (rows of different lengths,
a full row, an empty row; in ``"any"`` also pre-padded rows and rows with holes) is cut into
chunks of several size patterns, each fed with the states the previous chunk returned (zeros for
the first), on onnxruntime and OpenVINO. Every sequence output must equal the one call's at every
position, and every per-row output (a last output, a state) after each chunk the one call's over
the sequence so far. One chunk of the whole sequence with zero states is the model without
streaming.
"""

import logging
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

import masked_lstm_rewriter as mlr
import runtimes
from kerasutil import ATOL, FLAVOUR, MAX_ERRORS, keras, randomize_weights
from masked_lstm_rewriter.pipeline.streaming import BACKWARD_REASON, COMPUTED_STATE_REASON
from masked_lstm_rewriter.sessions import onnxruntime_session, openvino_compiled

pytestmark = pytest.mark.usefixtures("plugin_off")

BATCH, STEPS, VOCAB, UNITS = 5, 8, 20, 4
POST_ROWS = [[1] * 8, [1] * 5 + [0] * 3, [0] * 8, [1] + [0] * 7, [1] * 3 + [0] * 5]  # full, ..., empty, ...
ANY_ROWS = POST_ROWS[:3] + [[0, 0, 0, 1, 1, 1, 1, 1],   # pre-padded
                            [1, 0, 0, 1, 0, 1, 1, 0]]   # holes
# all of one chunk; one step each; uneven (rows of length 1 and 3 are all padding in the later
# chunks); two chunks, the second all padding for every row but the full one and the pre-padded one
CHUNKINGS = ([STEPS], [1] * STEPS, [3, 1, 4], [5, 3])


def valid_steps(mode):
    return np.array(POST_ROWS if mode == "post" else ANY_ROWS, bool)


def tokens_for(valid, seed=0):
    rng = np.random.default_rng(seed)
    return np.where(valid, rng.integers(1, VOCAB, valid.shape), 0).astype(np.int32)


def features_for(valid, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=valid.shape + (3,)).astype(np.float32)
    return np.where(valid[..., None], x, 0.0).astype(np.float32)


# --- models: (model, spec, input for a mask of valid steps, {state output: Keras output index}) ----

def token_input(batch=None):
    if batch is None:
        return keras.Input((None,), dtype="int32", name="tokens")
    return keras.Input(batch_shape=(batch, None), dtype="int32", name="tokens")


def embedding_lstm_gru(stateful=False, batch=None):
    """Embedding(mask_zero) -> LSTM(return_sequences) -> GRU(return_sequences), both returning their states."""
    tokens = token_input(batch)
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    seq, lstm_h, lstm_c = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True, stateful=stateful,
                                            name="lstm")(x)
    out, gru_h = keras.layers.GRU(3, return_sequences=True, return_state=True, stateful=stateful, name="gru")(seq)
    model = keras.Model(tokens, [out, lstm_h, lstm_c, gru_h])
    return model, (tf.TensorSpec((batch, None), tf.int32, name="tokens"),), tokens_for, \
        {"lstm/h_out": 1, "lstm/c_out": 2, "gru/h_out": 3}


def masking_gru():
    features = keras.Input((None, 3), name="features")
    x = keras.layers.Masking()(features)
    out, h = keras.layers.GRU(UNITS, return_sequences=True, return_state=True, name="gru")(x)
    return keras.Model(features, [out, h]), (tf.TensorSpec((None, None, 3), tf.float32, name="features"),), \
        features_for, {"gru/h_out": 1}


def simple_rnn_last_output():
    """A SimpleRNN returning its last output only (a row with no valid step in a chunk keeps it)."""
    tokens = token_input()
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    last, h = keras.layers.SimpleRNN(UNITS, return_state=True, name="rnn")(x)
    return keras.Model(tokens, [last, h]), (tf.TensorSpec((None, None), tf.int32, name="tokens"),), tokens_for, \
        {"rnn/h_out": 1}


def stacked_cells():
    """keras.layers.RNN over a GRU cell and an LSTM cell: the cell after the first is ``stack/cell_1``."""
    tokens = token_input()
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    seq, gru_h, (lstm_h, lstm_c) = keras.layers.RNN([keras.layers.GRUCell(3), keras.layers.LSTMCell(UNITS)],
                                                    return_sequences=True, return_state=True, name="stack")(x)
    return keras.Model(tokens, [seq, gru_h, lstm_h, lstm_c]), (tf.TensorSpec((None, None), tf.int32, name="tokens"),), \
        tokens_for, {"stack/h_out": 1, "stack/cell_1/h_out": 2, "stack/cell_1/c_out": 3}


def unmasked_lstm_gru():
    """No mask: the LSTM is made native by stock tf2onnx, the GRU by the plugin (Keras 3) or stock
    tf2onnx (tf_keras)."""
    features = keras.Input((None, 3), name="features")
    seq, h, c = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True, name="lstm")(features)
    out = keras.layers.GRU(3, return_sequences=True, name="gru")(seq)
    return keras.Model(features, [out, h, c]), (tf.TensorSpec((None, None, 3), tf.float32, name="features"),), \
        features_for, {"lstm/h_out": 1, "lstm/c_out": 2}


MASKED_MODELS = {"embedding_lstm_gru": embedding_lstm_gru, "masking_gru": masking_gru,
                 "simple_rnn_last_output": simple_rnn_last_output, "stacked_cells": stacked_cells}


def built(factory, seed=0, **options):
    keras.utils.set_random_seed(seed)
    model, spec, make_input, states = factory(**options)
    return randomize_weights(model, seed), spec, make_input, states


# --- converting and running ------------------------------------------------------------------------

def convert_streaming(model, spec, mode="post", keep_wrong=False, opset=15):
    with mlr.enable(mode, streaming=True, keep_wrong=keep_wrong):
        onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset)
    return onnx_model


def runner(onnx_model, runtime):
    """``run(feeds) -> {output name: value}``, the model loaded once."""
    names = [output.name for output in onnx_model.graph.output]
    if runtime == "onnxruntime":
        session = onnxruntime_session(onnx_model)
        return lambda feeds: dict(zip(names, session.run(None, feeds)))
    compiled = openvino_compiled(onnx_model)
    return lambda feeds: {name: np.asarray(value) for name, value in
                          zip(names, (compiled(feeds)[compiled.output(name)] for name in names))}


def state_inputs(onnx_model, spec) -> dict:
    """State input name -> its width H (the inputs the signature does not declare)."""
    declared = {s.name for s in spec}
    return {i.name: i.type.tensor_type.shape.dim[1].dim_value for i in onnx_model.graph.input if i.name not in declared}


def run_in_chunks(run, inputs: dict, states: dict, sizes, rows):
    """[(chunk's end step, {output: value})] feeding each chunk the states the previous one returned."""
    states = {name: np.zeros((rows, width), np.float32) for name, width in states.items()}
    results, start = [], 0
    for size in sizes:
        out = run({**{name: value[:, start:start + size] for name, value in inputs.items()}, **states})
        states = {name: out[name[:-len("in")] + "out"] for name in states}
        start += size
        results.append((start, out))
    return results


def keras_call(model, inputs: dict):
    outputs = model(list(inputs.values()) if len(inputs) > 1 else next(iter(inputs.values())), training=False)
    return [np.asarray(o) for o in tf.nest.flatten(outputs)]


def check_chunks(model, onnx_model, spec, inputs: dict, keras_states: dict, runtime, chunkings=CHUNKINGS):
    """Every chunking on ``runtime`` against Keras's one call: sequence outputs at every position, per-row
    outputs and the returned states after each chunk (Keras over the steps so far). The largest error."""
    names = [o.name for o in onnx_model.graph.output]
    whole = keras_call(model, inputs)
    is_sequence = [o.ndim >= 3 and o.shape[1] == STEPS for o in whole]
    prefixes = {}
    run = runner(onnx_model, runtime)
    worst = 0.0
    for sizes in chunkings:
        chunks = run_in_chunks(run, inputs, state_inputs(onnx_model, spec), sizes, len(whole[0]))
        for index, name in enumerate(names[:len(whole)]):
            if is_sequence[index]:
                worst = max(worst, _error(whole[index], np.concatenate([out[name] for _, out in chunks], axis=1),
                                          f"{runtime} {sizes}: {name}"))
        for end, out in chunks:
            if end not in prefixes:
                prefixes[end] = keras_call(model, {key: value[:, :end] for key, value in inputs.items()})
            expected = {name: prefixes[end][i] for i, name in enumerate(names[:len(whole)]) if not is_sequence[i]}
            expected.update({name: prefixes[end][index] for name, index in keras_states.items()})
            for name, value in expected.items():
                worst = max(worst, _error(value, out[name], f"{runtime} {sizes}: {name} after step {end}"))
    MAX_ERRORS.append(worst)
    return worst


def _error(expected, got, what) -> float:
    assert expected.shape == got.shape, f"{what}: shape {got.shape}, Keras {expected.shape}"
    error = float(np.max(np.abs(expected - got))) if expected.size else 0.0
    assert error <= ATOL, f"{what}: max |keras - onnx| = {error}"
    return error


def streamed_names(onnx_model, spec):
    declared = {s.name for s in spec}
    inputs = [i.name for i in onnx_model.graph.input if i.name not in declared]
    outputs = [o.name for o in onnx_model.graph.output if o.name.endswith(("/h_out", "/c_out"))]
    return inputs, outputs


# --- tests -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("kind", sorted(MASKED_MODELS))
def test_chunk_by_chunk_equals_one_keras_call(kind, mode):
    model, spec, make_input, keras_states = built(MASKED_MODELS[kind])
    onnx_model = convert_streaming(model, spec, mode)
    report = mlr.last_report()
    assert report.rewritten and not report.left_as_loop and not report.known_wrong, str(report)
    inputs, outputs = streamed_names(onnx_model, spec)
    assert sorted(outputs) == sorted(keras_states)
    assert sorted(inputs) == sorted(name[:-len("out")] + "in" for name in outputs)
    feeds = {spec[0].name: make_input(valid_steps(mode))}
    for runtime in runtimes.runtimes():
        check_chunks(model, onnx_model, spec, feeds, keras_states, runtime)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_chunk_by_chunk_at_opset_11(mode):
    model, spec, make_input, keras_states = built(embedding_lstm_gru)
    onnx_model = convert_streaming(model, spec, mode, opset=11)
    assert mlr.last_report().rewritten and onnx_model.opset_import[0].version == 11
    feeds = {spec[0].name: make_input(valid_steps(mode))}
    for runtime in runtimes.runtimes():
        check_chunks(model, onnx_model, spec, feeds, keras_states, runtime)


def test_names_and_dynamic_batch():
    model, spec, _, _ = built(embedding_lstm_gru)
    onnx_model = convert_streaming(model, spec)
    graph = onnx_model.graph
    assert [i.name for i in graph.input] == ["tokens", "lstm/h_in", "lstm/c_in", "gru/h_in"]
    assert [o.name for o in graph.output][-3:] == ["lstm/h_out", "lstm/c_out", "gru/h_out"]
    for value in list(graph.input)[1:] + list(graph.output)[-3:]:
        batch, width = value.type.tensor_type.shape.dim
        assert not batch.HasField("dim_value") and width.dim_value in (UNITS, 3), value


@pytest.mark.parametrize("opset", [11, 15])
def test_unmasked_layers_stream_too(opset):
    """Stock tf2onnx's native LSTM gets the state inputs and outputs as well as the plugin's nodes (at
    opset 11 too, where their state nodes are spelled with axes as attributes)."""
    model, spec, make_input, keras_states = built(unmasked_lstm_gru)
    onnx_model = convert_streaming(model, spec, opset=opset)
    counts = {node.op_type for node in onnx_model.graph.node}
    assert {"LSTM", "GRU"} <= counts and "Loop" not in counts
    inputs, _ = streamed_names(onnx_model, spec)
    assert inputs == ["lstm/h_in", "lstm/c_in", "gru/h_in"]
    feeds = {"features": make_input(np.ones((BATCH, STEPS), bool))}
    for runtime in runtimes.runtimes():
        check_chunks(model, onnx_model, spec, feeds, keras_states, runtime)


def time_distributed_lstm():
    """An LSTM inside TimeDistributed runs over an inner axis of each step, afresh at every step: it has
    no state to carry between chunks. The GRU over the steps has."""
    frames = keras.Input((None, 6, 3), name="frames")
    x = keras.layers.TimeDistributed(keras.layers.LSTM(UNITS), name="td")(frames)
    out, h = keras.layers.GRU(3, return_sequences=True, return_state=True, name="gru")(x)
    spec = (tf.TensorSpec((None, None, 6, 3), tf.float32, name="frames"),)
    return keras.Model(frames, [out, h]), spec, lambda valid: np.random.default_rng(0).normal(
        size=valid.shape + (6, 3)).astype(np.float32), {"gru/h_out": 1}


def test_a_layer_inside_time_distributed_does_not_stream():
    model, spec, make_input, keras_states = built(time_distributed_lstm)
    onnx_model = convert_streaming(model, spec)
    assert streamed_names(onnx_model, spec) == (["gru/h_in"], ["gru/h_out"])
    feeds = {"frames": make_input(np.ones((BATCH, STEPS), bool))}
    for runtime in runtimes.runtimes():
        check_chunks(model, onnx_model, spec, feeds, keras_states, runtime, chunkings=([3, 1, 4],))


def reset(model):
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            (getattr(layer, "reset_states", None) or layer.reset_state)()


def text_generator(batch):
    """The stateful GRU of a character-level text generator (its batch fixed, as Keras needs)."""
    tokens = token_input(batch)
    x = keras.layers.Embedding(VOCAB, 8)(tokens)
    x = keras.layers.GRU(UNITS, return_sequences=True, stateful=True, name="gru")(x)
    spec = (tf.TensorSpec((batch, None), tf.int32, name="tokens"),)
    return keras.Model(tokens, keras.layers.Dense(VOCAB)(x)), spec, tokens_for, {}


def test_stateful_model_takes_its_state_as_inputs():
    """A stateful=True model's state variables, which tf2onnx freezes as constants, become the inputs:
    converted while its state is not zeros, the model still starts from the inputs, and chunk by
    chunk it follows Keras's stateful model from a reset state."""
    model, spec, make_input, _ = built(text_generator, batch=BATCH)
    tokens = make_input(np.ones((BATCH, STEPS), bool))
    model(tokens)  # the state is now not zeros: frozen, it would be the model's start
    onnx_model = convert_streaming(model, spec)
    assert streamed_names(onnx_model, spec) == (["gru/h_in"], ["gru/h_out"])
    logits = onnx_model.graph.output[0].name
    for runtime in runtimes.runtimes():
        reset(model)
        start = 0
        for end, out in run_in_chunks(runner(onnx_model, runtime), {"tokens": tokens}, state_inputs(onnx_model, spec),
                                      [3, 1, 4], BATCH):
            _error(np.asarray(model(tokens[:, start:end])), out[logits], f"{runtime}: steps {start} to {end}")
            start = end


def test_a_stateful_sequential_keeps_its_fixed_batch_and_verifies(tmp_path):
    """A keras.io-style stateful Sequential (a fixed batch, Masking, LSTM(stateful=True)), converted with
    the signature read off the model: its sequence input and its state inputs keep the batch Keras fixed,
    which verify feeds."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(batch_shape=(BATCH, None, 3)), keras.layers.Masking(),
                              keras.layers.LSTM(UNITS, return_sequences=True, stateful=True)])
    model(np.zeros((BATCH, STEPS, 3), np.float32))
    onnx_model, report = mlr.convert(model, tmp_path / "stateful.onnx")
    assert report.rewritten and report.rewritten[0].mask_mode == "post"
    dims = onnx_model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_value == BATCH and dims[1].dim_param, dims
    for state in onnx_model.graph.input[1:]:  # the states take that batch too
        assert [d.dim_value for d in state.type.tensor_type.shape.dim] == [BATCH, UNITS], state
    result = mlr.verify(model, tmp_path / "stateful.onnx")
    assert result.ok, result


def keras_twin(factory):
    """The model and its stateful=True twin (same weights, a fixed batch)."""
    one, _, make_input, _ = built(factory)
    twin, _, _, _ = built(factory, stateful=True, batch=BATCH)
    twin.set_weights(one.get_weights())
    return one, twin, make_input


@pytest.mark.parametrize("mode", ["post", "any"])
def test_keras_stateful_twin_differs_only_where_a_chunk_starts_in_padding(mode):
    """Keras's stateful twin run chunk by chunk agrees with the one call (and so with the streaming
    model) at every valid step, and at every padded step but those before a row's first valid step
    in a chunk, after a valid step in an earlier chunk: there the twin outputs zeros, the one call
    (and the streaming model) the row's last output."""
    one, twin, make_input = keras_twin(embedding_lstm_gru)
    valid = valid_steps(mode)
    tokens = make_input(valid)
    whole = keras_call(one, {"tokens": tokens})[0]
    for sizes in CHUNKINGS:
        reset(twin)
        got = np.concatenate([keras_call(twin, {"tokens": tokens[:, end - size:end]})[0]
                              for end, size in zip(np.cumsum(sizes), sizes)], axis=1)
        starts_in_padding = _before_first_valid_in_chunk(valid, sizes) & (np.cumsum(valid, axis=1) > 0)
        differs = np.abs(got - whole).max(axis=-1) > ATOL
        assert not (differs & valid).any()
        assert (differs == starts_in_padding).all(), (sizes, np.argwhere(differs), np.argwhere(starts_in_padding))
        assert not got[starts_in_padding].any()  # the twin's zeros


def _before_first_valid_in_chunk(valid, sizes):
    """[B, T]: masked steps before the row's first valid step within their chunk."""
    before = np.zeros_like(valid)
    for end, size in zip(np.cumsum(sizes), sizes):
        chunk = valid[:, end - size:end]
        before[:, end - size:end] = np.cumsum(chunk, axis=1) == 0
    return before


def bidirectional():
    tokens = token_input()
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    return keras.Model(tokens, keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True, name="lstm"),
                                                         name="bi")(x))


def go_backwards():
    tokens = token_input()
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    return keras.Model(tokens, keras.layers.GRU(UNITS, go_backwards=True, name="gru")(x))


def decoder():
    """A decoder starting from its encoder's final states (initial_state=)."""
    tokens = token_input()
    x = keras.layers.Embedding(VOCAB, 5, mask_zero=True)(tokens)
    _, h, c = keras.layers.LSTM(UNITS, return_state=True, name="encoder")(x)
    y = keras.layers.LSTM(UNITS, return_sequences=True, name="decoder")(x, initial_state=[h, c])
    return keras.Model(tokens, y)


@pytest.mark.parametrize("factory, layer, reason", [
    (bidirectional, "bi/backward_lstm", BACKWARD_REASON), (go_backwards, "gru", BACKWARD_REASON),
    (decoder, "decoder", COMPUTED_STATE_REASON)], ids=["bidirectional", "go_backwards", "decoder"])
def test_what_cannot_stream_fails_the_conversion(factory, layer, reason):
    """A layer that cannot stream would start every chunk afresh: the conversion fails, naming it
    and the reason; with keep_wrong it is written, and the report says it is wrong."""
    keras.utils.set_random_seed(0)
    model = randomize_weights(factory())
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    with pytest.raises(mlr.KnownWrong, match="cannot stream") as failed:
        convert_streaming(model, spec)
    assert f"layer '{layer}' cannot stream: {reason}" in str(failed.value)
    convert_streaming(model, spec, keep_wrong=True)
    report = mlr.last_report()
    assert any(f"layer '{layer}' cannot stream: {reason}" in problem for problem in report.known_wrong), str(report)


def test_without_streaming_nothing_changes():
    model, spec, _, _ = built(embedding_lstm_gru)
    with mlr.enable():
        onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=15)
    assert [i.name for i in onnx_model.graph.input] == ["tokens"]
    assert not any(o.name.endswith("_out") for o in onnx_model.graph.output)



def test_convert_streams_a_stateful_model_by_default(caplog):
    """``mlr.convert``: a stateful model converts for streaming unless streaming=False (which keeps
    the state frozen), each said at INFO."""
    model, spec, make_input, _ = built(text_generator, batch=BATCH)
    model(make_input(np.ones((BATCH, STEPS), bool)))
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        streamed, _ = mlr.convert(model, input_signature=spec)
        frozen, _ = mlr.convert(model, input_signature=spec, streaming=False)
    assert streamed_names(streamed, spec) == (["gru/h_in"], ["gru/h_out"])
    assert streamed_names(frozen, spec) == ([], [])
    said = " ".join(record.getMessage() for record in caplog.records)
    assert "converted for streaming" in said and "froze" in said.lower(), said


@pytest.mark.skipif(FLAVOUR != "keras3", reason="one flavour: the switch is passed through, not computed")
def test_command_line_streaming_switch(tmp_path):
    path = tmp_path / "model.keras"
    built(masking_gru)[0].save(path)
    out = tmp_path / "model.onnx"
    done = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", str(path), "-o", str(out), "--streaming", "-q"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and not done.stdout, done.stderr
    names = {i.name for i in onnx.load(str(out)).graph.input}
    assert any(name.endswith("/h_in") for name in names), names
