# SPDX-License-Identifier: Apache-2.0
"""``masked_lstm_rewriter.convert``: every Keras model form, object or file, natively and exactly."""

import os

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import FLAVOUR, LENGTHS, STEPS, assert_native, keras, oracle_outputs, post_padded_tokens, session
from kerasutil import randomize_weights
from models import UNITS

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.keras_source import SourceError
from masked_lstm_rewriter.output_file import OutputError

# a post-padded batch (with a full and an empty row) and the same rows pre-padded
POST = post_padded_tokens(LENGTHS, STEPS)
PRE = np.stack([np.roll(row, STEPS - length) for row, length in zip(POST, LENGTHS)])


pytestmark = pytest.mark.usefixtures("plugin_off")


def sequential():
    """Embedding -> LSTM -> TimeDistributed(Dense), built by a call (no Input): the common Sequential."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Embedding(50, 5, mask_zero=True),
                              keras.layers.LSTM(UNITS, return_sequences=True),
                              keras.layers.TimeDistributed(keras.layers.Dense(3))])
    model(POST[:2, :4])  # built on a [2, 4] batch: the signature must still be dynamic
    return randomize_weights(model)


def functional_with_states():
    """A functional model whose outputs all come from one layer (return_state)."""
    keras.utils.set_random_seed(2)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, 5, mask_zero=True)(tokens)
    outputs = keras.layers.GRU(UNITS, return_sequences=True, return_state=True)(x)
    return randomize_weights(keras.Model(tokens, outputs))


class Tagger(keras.Model):
    """A subclassed model: Embedding -> Bidirectional(LSTM)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(50, 5, mask_zero=True)
        self.rnn = keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True))

    def call(self, tokens):
        return self.rnn(self.embed(tokens))


def subclassed():
    keras.utils.set_random_seed(3)
    model = Tagger()
    model(POST[:2, :4])
    return randomize_weights(model)


MODELS = {"sequential": (sequential, 1), "functional": (functional_with_states, 1), "subclassed": (subclassed, 2)}


def run(onnx_model, tokens):
    sess = session(onnx_model)
    return sess.run(None, {sess.get_inputs()[0].name: tokens})


def assert_exact(model, onnx_model, tokens):
    expected = oracle_outputs(model, [tokens])
    got = run(onnx_model, tokens)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=1e-5)


def dims(onnx_model):
    return [[d.dim_value or None for d in i.type.tensor_type.shape.dim] for i in onnx_model.graph.input]


@pytest.mark.parametrize("form", MODELS)
def test_model_objects_convert_natively_and_exactly(form, tmp_path):
    build, layers = MODELS[form]
    model = build()
    onnx_model, report = mlr.convert(model, tmp_path / "model.onnx")
    assert len(report.rewritten) == layers and not report.left_as_loop, report
    assert dims(onnx_model) == [[None, None]], "batch and time are dynamic"
    assert onnx.load(str(tmp_path / "model.onnx")) == onnx_model
    assert os.listdir(tmp_path) == ["model.onnx"]
    assert_native(onnx_model, lstm=layers, op="GRU" if form == "functional" else "LSTM")
    assert_exact(model, onnx_model, POST)


@pytest.mark.parametrize("form", ["sequential", "functional"])
def test_keras_files_convert_and_keep_every_output(form, tmp_path):
    model = MODELS[form][0]()
    path = tmp_path / "model.keras"
    model.save(path)
    onnx_model, report = mlr.convert(path, mask_mode="any")
    assert report.rewritten and report.rewritten[0].mask_mode == "any"
    assert_exact(model, onnx_model, PRE)


def test_a_subclassed_model_file_converts_with_the_shapes_it_was_built_with(tmp_path):
    """Loaded from a .keras file, a subclassed model is built (from the shapes it was saved with) but
    was never called: its signature is read from those shapes (Keras 3's build config, tf_keras's
    build input shape), ids read by an Embedding as int32."""
    model = MODELS["subclassed"][0]()
    model.save(tmp_path / "tagger.keras")
    onnx_model, report = mlr.convert(tmp_path / "tagger.keras", custom_objects={"Tagger": Tagger})
    assert len(report.rewritten) == 2 and not report.left_as_loop
    assert onnx_model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT32
    assert_exact(model, onnx_model, POST)


def _input_dims(onnx_model) -> list:
    """The first input's dimensions, None where dynamic."""
    return [d.dim_value or None for d in onnx_model.graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("steps", [STEPS, None], ids=["fixed", "dynamic"])
def test_a_sequential_model_keeps_the_steps_its_input_declares(steps, tmp_path):
    """A Sequential model with an ``Input`` is traced with the shape it declares, as a functional model
    is: a fixed number of steps stays fixed (tf_keras refuses other lengths, and so would ``verify``'s
    reference), a dynamic one dynamic."""
    keras.utils.set_random_seed(4)
    model = randomize_weights(keras.Sequential([keras.Input((steps,), dtype="int32"),
                                                keras.layers.Embedding(50, 5, mask_zero=True),
                                                keras.layers.LSTM(UNITS), keras.layers.Dense(3)]))
    path = str(tmp_path / "model.onnx")
    onnx_model, _ = mlr.convert(model, path)
    assert _input_dims(onnx_model) == [None, steps]
    assert mlr.verify(model, path).ok


def test_a_sequential_model_built_by_a_call_stays_dynamic_on_every_conversion(tmp_path):
    """tf_keras rebuilds such a model's inputs with a dynamic batch once it is traced: that is no
    declaration of its steps."""
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.layers.LSTM(UNITS, return_sequences=True), keras.layers.Dense(1)])
    model(np.zeros((3, STEPS, 2), np.float32))
    for _ in range(2):
        onnx_model, _ = mlr.convert(model, str(tmp_path / "model.onnx"))
        assert _input_dims(onnx_model) == [None, None, 2]


def test_a_stateful_sequential_model_verifies_on_the_steps_it_declares(tmp_path):
    """Keras's stateful_lstm example: ``input_shape=(5, 1), batch_size=4``; tf_keras refuses other lengths."""
    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input(batch_shape=(4, 5, 1)), keras.layers.LSTM(UNITS, stateful=True),
                              keras.layers.Dense(1)])
    path = str(tmp_path / "model.onnx")
    onnx_model, _ = mlr.convert(model, path)
    if FLAVOUR == "tf_keras":
        assert _input_dims(onnx_model) == [4, 5, 1]
    assert mlr.verify(model, path).ok


def test_saved_model_directory(tmp_path):
    model = MODELS["functional"][0]()
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    serve = tf.function(lambda tokens: model(tokens, training=False), input_signature=spec)
    tf.saved_model.save(model, str(tmp_path / "saved"), signatures={"serving_default": serve})
    onnx_model, report = mlr.convert(tmp_path / "saved")
    assert len(report.rewritten) == 1 and report.rewritten[0].mask_mode == "post"
    assert_exact(model, onnx_model, POST)
    with pytest.raises(ValueError, match="serving signature"):
        mlr.convert(tmp_path / "saved", input_signature=spec)


def test_given_signature_and_options_are_used():
    model = MODELS["sequential"][0]()
    spec = [tf.TensorSpec((1, STEPS), tf.int32, name="ids")]
    onnx_model, _ = mlr.convert(model, input_signature=spec, opset=17)
    assert dims(onnx_model) == [[1, STEPS]] and onnx_model.graph.input[0].name == "ids"
    for row in range(len(LENGTHS)):  # a static batch of one: the rows one by one, the empty one too
        assert_exact(model, onnx_model, POST[row:row + 1])
    assert {o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")} == {17}


def test_bad_output_fails_before_converting_and_leaves_nothing(tmp_path):
    model = MODELS["sequential"][0]()
    with pytest.raises(OutputError, match="does not exist"):
        mlr.convert(model, tmp_path / "missing" / "model.onnx")
    assert os.listdir(tmp_path) == []


def test_unreadable_inputs_are_one_line_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError, match="not a Keras model file"):
        mlr.convert(tmp_path / "notes.txt")
    (tmp_path / "model.tflite").write_bytes(b"TFL3")
    with pytest.raises(ValueError, match="a LiteRT flatbuffer, not a Keras model: convert it with python -m "
                                         "masked_lstm_rewriter --tflite"):
        mlr.convert(tmp_path / "model.tflite")
    with pytest.raises(ValueError, match="no such file"):
        mlr.convert(tmp_path / "missing.keras")
    (tmp_path / "broken.keras").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="Keras could not load it"):
        mlr.convert(tmp_path / "broken.keras")
    with pytest.raises(ValueError, match="call it once"):
        mlr.convert(Tagger())


def test_enable_makes_tf2onnx_from_keras_take_a_sequential_model():
    """Stock tf2onnx 1.17 fails on every Keras 3 Sequential model (KeyError: 'keras_tensor_N')."""
    model = MODELS["sequential"][0]()
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    if FLAVOUR == "keras3":
        with pytest.raises(KeyError, match="keras_tensor"):
            tf2onnx.convert.from_keras(model, input_signature=spec)
    with mlr.enable():
        onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=spec)
    assert [o.name for o in onnx_model.graph.output] == [model.layers[-1].name]
    assert_exact(model, onnx_model, POST)


def test_openvino_default_is_exact_in_single_thread_synchronous_inference():
    """OpenVINO drops the post guard's error with INFERENCE_NUM_THREADS=1 and synchronous
    inference: converting for OpenVINO without a mask mode must give a model exact there."""
    ov = pytest.importorskip("openvino")
    model = MODELS["functional"][0]()
    onnx_model, report = mlr.convert(model, runtime="openvino")
    assert report.rewritten[0].mask_mode == "any"
    compiled = ov.Core().compile_model(ov.Core().read_model(onnx_model.SerializeToString(), b""), "CPU",
                                       {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"})
    results = compiled({"tokens": PRE})
    got = [np.asarray(results[compiled.output(o.name)]) for o in onnx_model.graph.output]
    for e, g in zip(oracle_outputs(model, [PRE]), got):
        np.testing.assert_allclose(g, e, atol=1e-5)


def test_explicit_post_for_openvino_warns(caplog):
    with caplog.at_level("WARNING", logger="masked_lstm_rewriter"):
        assert mlr.make_rewriter("post", runtime="openvino").mask_mode == "post"
    assert "INFERENCE_NUM_THREADS=1" in caplog.text
    assert mlr.make_rewriter(runtime="openvino").mask_mode == "any"
    assert mlr.make_rewriter().mask_mode == "post" and mlr.make_rewriter(runtime="onnxruntime").mask_mode == "post"


def test_opsets_before_11_keep_the_loop_with_a_reason():
    """The emitted nodes need opset 11 (Range, Pad's inputs): at an older opset the layer stays a valid Loop."""
    model = MODELS["sequential"][0]()
    onnx_model, report = mlr.convert(model, opset=10)
    assert not report.rewritten and "opset 10: the native form is emitted for opset 11" in report.layers[0].detail
    onnx.checker.check_model(onnx_model, full_check=True)
    assert_exact(model, onnx_model, POST)


class FeaturesAndMask(keras.Model):
    """A subclassed model whose call takes its two inputs as one list: features and a boolean mask."""

    def __init__(self):
        super().__init__()
        self.rnn = keras.layers.GRU(UNITS, return_sequences=True)

    def call(self, inputs):
        features, mask = inputs
        return self.rnn(features, mask=mask)


def test_a_subclassed_model_with_a_list_of_inputs(caplog):
    """tf2onnx calls a Keras 3 model with one argument per input; Keras 3 records no input dtypes."""
    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(4)
    features = rng.normal(size=(len(LENGTHS), STEPS, 3)).astype(np.float32)
    mask = np.arange(STEPS)[None, :] < np.asarray(LENGTHS)[:, None]
    model = FeaturesAndMask()
    model([features[:2, :4], mask[:2, :4]])
    randomize_weights(model)
    spec = [tf.TensorSpec((None, None, 3), tf.float32, name="features"), tf.TensorSpec((None, None), tf.bool,
                                                                                       name="mask")]
    onnx_model, report = mlr.convert(model, input_signature=spec)
    assert len(report.rewritten) == 1 and not report.left_as_loop
    sess = session(onnx_model)
    got = sess.run(None, {"features": features, "mask": mask})[0]
    np.testing.assert_allclose(got, np.asarray(model([features, mask])), atol=1e-5)
    with caplog.at_level("WARNING", logger="masked_lstm_rewriter"):
        inferred, _ = mlr.convert(model)
    assert dims(inferred) == [[None, None, 3], [None, None]], "batch and time are dynamic"
    if FLAVOUR == "keras3":
        assert "give input_signature=" in caplog.text


class DecoderStep(keras.Model):
    """A subclassed model whose call takes token ids and the GRU's state as two arguments (a decoder step)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(50, 5, mask_zero=True)
        self.rnn = keras.layers.GRU(UNITS, return_sequences=True, return_state=True)

    def call(self, tokens, states):
        return self.rnn(self.embed(tokens), initial_state=states, mask=self.embed.compute_mask(tokens))


class DecoderStepFromZeros(DecoderStep):
    """The same, whose states default to zeros and whose state output is asked for (the text-generation tutorial's)."""

    def call(self, tokens, states=None, return_state=False):  # pylint: disable=arguments-differ
        sequences, state = super().call(tokens, states)
        return (sequences, state) if return_state else sequences


@pytest.mark.parametrize("model_class", [DecoderStep, DecoderStepFromZeros])
def test_a_subclassed_model_whose_call_takes_tokens_and_states(model_class, caplog):
    """tf2onnx calls a tf_keras model with one list of its inputs: ``call(tokens, states)`` wants two arguments."""
    keras.utils.set_random_seed(6)
    states = np.random.default_rng(6).normal(size=(len(LENGTHS), UNITS)).astype(np.float32)
    model = model_class()
    model(tf.constant(POST[:2, :4]), tf.constant(states[:2]))
    randomize_weights(model)
    spec = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, UNITS), tf.float32)]
    onnx_model, report = mlr.convert(model, input_signature=spec)
    assert len(report.rewritten) == 1 and not report.left_as_loop, report
    assert_native(onnx_model, lstm=1, op="GRU")
    assert [i.name for i in onnx_model.graph.input] == ["tokens", "states"], "named after call's arguments"
    got = session(onnx_model).run(None, {"tokens": POST, "states": states})
    expected = tf.nest.flatten(model(tf.constant(POST), tf.constant(states), training=False))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), atol=1e-5)
    assert mlr.verify(model, onnx_model).ok
    if FLAVOUR == "keras3" and model_class is DecoderStep:  # Keras 3 records the first argument's shape only
        with pytest.raises(SourceError, match=r"called as call\(tokens, states\) but Keras recorded the shape of "
                                              r"1 input\(s\): give input_signature="):
            mlr.convert(model)
        return
    with caplog.at_level("WARNING", logger="masked_lstm_rewriter"):
        inferred, _ = mlr.convert(model)
    assert [i.name for i in inferred.graph.input] == ["tokens", "states"] if FLAVOUR == "tf_keras" else ["tokens"]
    assert ("traced as call(tokens): Keras 3 records the shape of its first argument only, so states, return_state "
            "keep their defaults" in caplog.text) == (FLAVOUR == "keras3"), caplog.text


class LstmDecoderStep(keras.Model):
    """A decoder step whose call takes token ids and the LSTM's states as one list ``[h, c]``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(50, 5, mask_zero=True)
        self.rnn = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)

    def call(self, tokens, states):
        return self.rnn(self.embed(tokens), initial_state=list(states), mask=self.embed.compute_mask(tokens))


@pytest.mark.parametrize("state_names", [(None, None), ("h", "c")], ids=["unnamed", "named"])
def test_a_subclassed_call_taking_a_list_of_states(state_names):
    """``call(tokens, [h, c])`` from a nested signature: the list's inputs are named after the argument
    (``states_0``, ``states_1``) unless named, and ``verify`` calls Keras with the list rebuilt."""
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    states = [rng.normal(size=(len(LENGTHS), UNITS)).astype(np.float32) for _ in range(2)]
    model = LstmDecoderStep()
    model(tf.constant(POST[:2, :4]), [tf.constant(s[:2]) for s in states])
    randomize_weights(model)
    spec = [tf.TensorSpec((None, None), tf.int32),
            [tf.TensorSpec((None, UNITS), tf.float32, name=name) for name in state_names]]
    onnx_model, report = mlr.convert(model, input_signature=spec)
    assert len(report.rewritten) == 1 and not report.left_as_loop, report
    assert_native(onnx_model, lstm=1)
    names = [i.name for i in onnx_model.graph.input]
    assert names == ["tokens"] + [name or f"states_{j}" for j, name in enumerate(state_names)]
    got = session(onnx_model).run(None, dict(zip(names, [POST] + states)))
    expected = tf.nest.flatten(model(tf.constant(POST), [tf.constant(s) for s in states], training=False))
    assert len(got) == len(expected) == 3, report
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), atol=1e-5)
    assert mlr.verify(model, onnx_model, runtime="all").ok


class MaskTakingModel(keras.Model):
    """A subclassed model whose call requires the mask as a tensor argument of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rnn = keras.layers.LSTM(UNITS, return_sequences=True)

    def call(self, features, mask):  # pylint: disable=arguments-differ
        return self.rnn(features, mask=mask)


def test_a_subclassed_call_requiring_its_mask_takes_it_as_an_input():
    """``call(features, mask)``: ``mask`` is no Keras option here (no default) but the second input."""
    keras.utils.set_random_seed(8)
    model = MaskTakingModel()
    features = np.random.default_rng(8).normal(size=(len(LENGTHS), STEPS, 3)).astype(np.float32)
    mask = np.arange(STEPS)[None, :] < np.array(LENGTHS)[:, None]
    model(tf.constant(features[:2]), tf.constant(mask[:2]))
    randomize_weights(model)
    spec = [tf.TensorSpec((None, None, 3), tf.float32), tf.TensorSpec((None, None), tf.bool)]
    onnx_model, report = mlr.convert(model, input_signature=spec)
    assert len(report.rewritten) == 1 and not report.left_as_loop, report
    assert [i.name for i in onnx_model.graph.input] == ["features", "mask"]
    got = session(onnx_model).run(None, {"features": features, "mask": mask})[0]
    np.testing.assert_allclose(got, np.asarray(model(tf.constant(features), tf.constant(mask))), atol=1e-5)
    assert mlr.verify(model, onnx_model).ok


@pytest.mark.skipif(FLAVOUR == "tf_keras", reason="tf_keras refuses to load such a file, in one line")
def test_a_file_keras_cannot_rebuild_fails_where_its_weights_would_be_lost(tmp_path):
    """Keras 3 loads a subclassed ``call(tokens, states)`` model it cannot build from its file without
    its weights (a UserWarning only): converting it would give random weights, so it fails in one line.
    (A model on JAX is converted so too, through such a file, in a TensorFlow process.)"""
    model = DecoderStep()
    model(tf.constant(POST[:2, :4]), tf.zeros((2, UNITS)))
    model.save(tmp_path / "step.keras")
    spec = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, UNITS), tf.float32)]
    with pytest.raises(SourceError, match=r"step.keras: Keras cannot rebuild the model from the file, so it would "
                                          r"not load its weights \(Model '.*' had a build config.*build_from_config"):
        mlr.convert(tmp_path / "step.keras", input_signature=spec, custom_objects={"DecoderStep": DecoderStep})


def test_a_functional_model_on_a_dict_of_inputs():
    """tf2onnx calls a Keras 3 model with one argument per input, where it wants the dict."""
    keras.utils.set_random_seed(5)
    words = keras.Input((None,), dtype="int32", name="words")
    tags = keras.Input((None,), dtype="int32", name="tags")
    x = keras.layers.Concatenate()([keras.layers.Embedding(50, 4, mask_zero=True)(words),
                                    keras.layers.Embedding(5, 2)(tags)])
    model = randomize_weights(keras.Model({"words": words, "tags": tags},
                                          keras.layers.LSTM(UNITS, return_sequences=True)(x)))
    onnx_model, report = mlr.convert(model)
    assert len(report.rewritten) == 1 and not report.left_as_loop
    batch = {"words": POST, "tags": np.minimum(POST, 4)}
    sess = session(onnx_model)
    got = sess.run(None, {i.name: batch[i.name] for i in sess.get_inputs()})[0]
    np.testing.assert_allclose(got, np.asarray(model(batch)), atol=1e-5)


@pytest.mark.skipif(FLAVOUR == "tf_keras", reason="Keras 3's safe_mode")
def test_a_lambda_keras_refuses_to_load_says_how_to_load_it_anyway(tmp_path):
    inputs = keras.Input(shape=(None, 3))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2.0)(inputs))
    model.save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match=r"safe_mode=False\) and convert the model: mlr.convert"):
        mlr.convert(tmp_path / "lambda.keras")
