# SPDX-License-Identifier: Apache-2.0
"""Static input shapes (issue 12): a fixed batch (1 or more) and a fixed number of steps in the
signature, a model built with ``Input(batch_size=2)``, and the command line's
``--inputs tokens:0[1,50]``. tf2onnx then builds other loop bodies (``Gemm`` instead of
``MatMul`` + ``Add``, squeezed batch-1 terms, folded shapes); each must become native ops, no
``Loop``, with Keras's numbers at every position.

A model with a batch of 1 takes the test batch row by row; every test batch has several rows
of different lengths, a full row and an empty row.
"""

import numpy as np
import onnx
import pytest
import tensorflow as tf

import runtimes
import signatures
from kerasutil import (FLAVOUR, assert_matches_keras, assert_native, convert, keras, op_counts, post_padded_tokens,
                       randomize_weights, session)
from models import FEATURES, UNITS, embedding_model, token_mask
from test_any_mode import KINDS, batch, mask_input_model
from test_cli import run, save_model

import masked_lstm_rewriter as mlr

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

STEPS = 50
LENGTHS = [50, 17, 0, 1, 33, 50, 2, 9]  # 8 rows: full, empty, and lengths in between
ANY = mlr.make_rewriter("any")

LAYERS = {  # name: (layer factory, {native op: count})
    "lstm": (lambda: keras.layers.LSTM(UNITS, return_sequences=True, return_state=True), {"LSTM": 1}),
    "lstm go_backwards hard_sigmoid": (lambda: keras.layers.LSTM(
        UNITS, go_backwards=True, recurrent_activation="hard_sigmoid", return_sequences=True), {"LSTM": 1}),
    "gru": (lambda: keras.layers.GRU(UNITS, return_sequences=True, return_state=True), {"GRU": 1}),
    "gru reset_after=False": (lambda: keras.layers.GRU(UNITS, reset_after=False, return_sequences=True), {"GRU": 1}),
    "simple_rnn": (lambda: keras.layers.SimpleRNN(UNITS, return_sequences=True, return_state=True), {"RNN": 1}),
    "bidirectional lstm": (lambda: keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)),
                           {"LSTM": 2}),  # a Bidirectional layer is two forward nodes
    "stacked with dropout": (lambda: [keras.layers.GRU(UNITS, return_sequences=True, dropout=0.2,
                                                       recurrent_dropout=0.2),
                                      keras.layers.Bidirectional(keras.layers.SimpleRNN(UNITS), merge_mode="sum"),
                                      ], {"GRU": 1, "RNN": 2}),
}


def check_native(onnx_model, ops):
    for op, count in ops.items():
        assert_native(onnx_model, lstm=count, op=op)


# over the 8 x 50 batch, the signature forms (tests/signatures.py) people deploy with:
# (1, None), (1, 50) and (8, 50)
DEPLOYED = ("batch 1", "static batch 1", "static")


def convert_and_check(model, spec, inputs, form, ops, rewriter="default"):
    """Converts with signature ``form`` of ``spec``; native ``ops`` and no Loop; Keras's numbers
    on ``inputs`` (row by row for a batch-1 form). Returns the converted model and its spec."""
    form_spec, batches = signatures.signature(spec, inputs, form)
    onnx_model = convert(model, form_spec, rewriter=rewriter)
    check_native(onnx_model, ops)
    assert not mlr.last_report().left_as_loop
    for rows in batches:
        assert_matches_keras(model, onnx_model, form_spec, rows)
    return onnx_model, form_spec


@pytest.mark.parametrize("form", DEPLOYED)
@pytest.mark.parametrize("layer", LAYERS)
def test_static_signature_rewrites(layer, form):
    build, ops = LAYERS[layer]
    layers = build()
    model, spec, _ = embedding_model(*(layers if isinstance(layers, list) else [layers]))
    onnx_model, form_spec = convert_and_check(model, spec, [post_padded_tokens(LENGTHS, STEPS, seed=3)], form, ops)
    assert [d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim] == \
        [d or 0 for d in form_spec[0].shape]


@pytest.mark.parametrize("form", DEPLOYED)
def test_static_signature_in_any_mode(form):
    """mask_mode="any" with every kind of row (pre-padded, holes, both ends, empty, full)."""
    model, spec = mask_input_model("stacked")
    convert_and_check(model, spec, batch(np.array(list(KINDS.values()), bool)), form, {"LSTM": 3}, rewriter=ANY)


@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave"])
def test_a_layer_over_a_bidirectional_layer_fully_static(merge_mode):
    """A fully static signature (tf_keras folds the upper loop's bound to a constant): the upper layer
    reads its number of steps through the lower layer's merged halves (found by the fuzzer: "ave")."""
    model, spec, _ = embedding_model(
        keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True), merge_mode=merge_mode),
        keras.layers.GRU(UNITS, return_sequences=True))
    convert_and_check(model, spec, [post_padded_tokens(LENGTHS, STEPS, seed=4)], "static", {"LSTM": 2, "GRU": 1})


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("form", ["static batch 1", "static", "static time"])
def test_stacked_layers_over_one_step(form, mode):
    """Found by the fuzzer: over one static step, reversing in time and swapping the time and batch
    axes of [1, 1, H] are the identity and TensorFlow drops those ops: a backward layer may keep the
    ReverseV2 of its mask but not of its input, and with a batch of 1 a layer reads the stacked
    outputs of the layer below directly (rewriting that one renamed them under the upper one)."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                                     keras.layers.GRU(UNITS, return_sequences=True, go_backwards=True),
                                     keras.layers.Bidirectional(keras.layers.SimpleRNN(UNITS, return_sequences=True)),
                                     keras.layers.LSTM(UNITS, return_state=True))
    tokens = np.array([[7], [0], [5]], np.int32)  # one step: rows are full or empty
    convert_and_check(model, spec, [tokens], form, {"LSTM": 2, "GRU": 1, "RNN": 2}, rewriter=mlr.make_rewriter(mode))


@pytest.mark.parametrize("mode, opset", [("post", 15), ("any", 15), ("post", 11)])
@pytest.mark.parametrize("form", ["static batch 1", "batch 1"])
@pytest.mark.parametrize("lower", ["go_backwards", "bidirectional"])
def test_a_layer_over_a_backward_one_at_a_batch_of_one_on_every_runtime(lower, form, mode, opset):
    """Found by the fuzzer: with the batch statically 1, OpenVINO 2026.4 failed to compile the Pad that
    appends the steps a backward layer's node did not run (it runs up to the longest row) before the
    layer above reads them ("Can not create StaticMemory object"); a batch of 2 or a dynamic one compiled.
    They are appended as a Concat of zeros there (targets.steps_appended_by_concat), at opset 11 too
    (where the static batch is read off the shapes of nodes spelled for that opset)."""
    backward = (keras.layers.LSTM(UNITS, return_sequences=True, go_backwards=True) if lower == "go_backwards"
                else keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True)))
    model, spec, _ = embedding_model(backward, keras.layers.LSTM(UNITS, return_sequences=True))
    form_spec, batches = signatures.signature(spec, [post_padded_tokens(LENGTHS, STEPS, seed=5)], form)
    onnx_model = convert(model, form_spec, rewriter=mlr.make_rewriter(mode), opset=opset)
    check_native(onnx_model, {"LSTM": 2 if lower == "go_backwards" else 3})
    for runtime in runtimes.runtimes():
        for rows in batches:
            assert_matches_keras(model, onnx_model, form_spec, rows, runtime=runtime)


def test_static_batch_one_guard_still_rejects_a_pre_padded_row():
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True))
    spec = (tf.TensorSpec((1, 6), tf.int32, name="tokens"),)
    onnx_model = convert(model, spec)
    assert_native(onnx_model)
    assert_matches_keras(model, onnx_model, spec, [np.array([[3, 4, 5, 0, 0, 0]], np.int32)])
    with pytest.raises(Exception, match="not post-padded"):
        session(onnx_model).run(None, {"tokens": np.array([[0, 0, 3, 4, 5, 6]], np.int32)})


def batch_size_2_model(steps):
    """``Input(batch_size=2)``: the model itself declares a static batch (and maybe steps). A
    Bidirectional GRU encoder whose summed states start an LSTM decoder (as its h and its c)."""
    keras.utils.set_random_seed(0)
    source = keras.Input((steps,), batch_size=2, dtype="int32", name="source")
    target = keras.Input((steps,), batch_size=2, dtype="int32", name="target")
    _, forward_h, backward_h = keras.layers.Bidirectional(keras.layers.GRU(UNITS, return_state=True),
                                                          merge_mode="sum")(
        keras.layers.Embedding(30, FEATURES, mask_zero=True)(source))
    state = keras.layers.Add()([forward_h, backward_h])
    decoded = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)(
        keras.layers.Embedding(30, FEATURES, mask_zero=True)(target), initial_state=[state, state],
        mask=token_mask(target))
    return randomize_weights(keras.Model([source, target], decoded))


def model_signature(model):
    """The signature a model declares: its inputs' shapes (the usual way to export it as built)."""
    return tuple(tf.TensorSpec(i.shape, i.dtype, name=name) for i, name in zip(model.inputs, ("source", "target")))


@pytest.mark.parametrize("signature", ["model.inputs", "none"])
@pytest.mark.parametrize("steps", [None, 9], ids=["dynamic steps", "static steps"])
def test_model_built_with_a_static_batch_size(steps, signature):
    """Converted with the model's own shapes: a signature made of ``model.inputs``, or none at all
    (tf_keras then traces the model's shapes; Keras 3 traces dynamic ones, as model.export does)."""
    model = batch_size_2_model(steps)
    spec = model_signature(model)
    onnx_model = convert(model, spec if signature == "model.inputs" else None)
    assert_native(onnx_model, lstm=2, op="GRU")
    assert_native(onnx_model, lstm=1, op="LSTM")
    if signature == "model.inputs" or FLAVOUR == "tf_keras":
        assert [d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim] == [2, steps or 0]
    spec = tuple(tf.TensorSpec(None, tf.int32, name=i.name) for i in onnx_model.graph.input)
    sources = post_padded_tokens([9, 0, 4, 1], 9, 30, seed=1)
    targets = post_padded_tokens([0, 9, 2, 7], 9, 30, seed=2)
    for rows in (slice(0, 2), slice(2, 4)):  # [full, empty] and two rows in between, in each input
        assert_matches_keras(model, onnx_model, spec, [sources[rows], targets[rows]])


# --- the command line ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A SavedModel (dynamic signature) of LSTM -> GRU -> SimpleRNN, and Keras's outputs on a batch."""
    model, spec, _ = embedding_model(keras.layers.LSTM(UNITS, return_sequences=True),
                                     keras.layers.GRU(UNITS, return_sequences=True, go_backwards=True),
                                     keras.layers.SimpleRNN(UNITS))
    path = save_model(model, spec, tmp_path_factory.mktemp("static") / "saved")
    tokens = post_padded_tokens(LENGTHS, STEPS, seed=5)
    return path, tokens, np.asarray(model(tokens))


@pytest.mark.parametrize("command", ["drop-in", "environment"])
@pytest.mark.parametrize("shape", [[1, STEPS], [len(LENGTHS), STEPS]], ids=str)
def test_command_line_inputs_with_a_static_shape(saved_model, tmp_path, command, shape):
    """``--inputs tokens:0[1,50]``: tf2onnx fixes the shape before the rewriters run."""
    path, tokens, expected = saved_model
    out = tmp_path / "model.onnx"
    args = ["--saved-model", path, "--output", out, "--inputs", f"tokens:0[{shape[0]},{shape[1]}]"]
    done = run("masked_lstm_rewriter", *args) if command == "drop-in" else run("tf2onnx.convert", *args,
                                                                                env_mode="post")
    assert done.returncode == 0, done.stderr[-2000:]
    onnx_model = onnx.load(str(out))
    counts = op_counts(onnx_model)
    assert (counts["LSTM"], counts["GRU"], counts["RNN"], counts["Loop"]) == (1, 1, 1, 0), counts
    assert [d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim] == shape
    sess = session(onnx_model)
    name = sess.get_inputs()[0].name
    if shape[0] == 1:
        got = np.concatenate([sess.run(None, {name: tokens[row:row + 1]})[0] for row in range(len(tokens))])
    else:
        got = sess.run(None, {name: tokens})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)
