# SPDX-License-Identifier: Apache-2.0
"""The names a converted model gives its inputs, outputs and dimensions, alike on every front door.

``mlr.convert`` of a Keras model, of its ``.keras`` and ``.h5`` files, and the command line on each
file give the same ONNX interface: the Keras model's input and output names (as tf2onnx's
``from_keras`` names them, not the traced graph's ``feats:0`` and ``Identity:0``), and ``batch``
and ``time`` for the dynamic dimensions (not tf2onnx's ``unk__N``). A SavedModel keeps tf2onnx's
names on both front doors, with the same dimension names."""

import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

from kerasutil import LENGTHS, STEPS, assert_matches_keras, keras, mask_from_lengths, randomize_weights
from models import FEATURES, UNITS

import masked_lstm_rewriter as mlr

FILES = ("keras", "h5")
INPUTS = ["feats", "mask", "speaker"]
SPEAKER = 2


def named_model():
    """Named inputs (features, their mask, a per-row vector) and several outputs: a sequence, a
    vector, and a recurrent layer's state."""
    feats = keras.Input((None, FEATURES), name="feats")
    mask = keras.Input((None,), dtype="bool", name="mask")
    speaker = keras.Input((SPEAKER,), name="speaker")
    sequence = keras.layers.LSTM(UNITS, return_sequences=True, name="encoder")(feats, mask=mask)
    frames = keras.layers.TimeDistributed(keras.layers.Dense(2), name="frames")(sequence)
    last, state = keras.layers.GRU(UNITS, return_state=True, name="gru")(sequence, mask=mask)
    summary = keras.layers.Add(name="summary")([last, keras.layers.Dense(UNITS, name="project")(speaker)])
    return randomize_weights(keras.Model([feats, mask, speaker], [frames, summary, state], name="named"))


def batch():
    rng = np.random.default_rng(3)
    feats = rng.normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)
    return [feats, mask_from_lengths(LENGTHS, STEPS), rng.normal(size=(len(LENGTHS), SPEAKER)).astype(np.float32)]


def interface(onnx_model) -> tuple:
    """(inputs, outputs): each a list of (name, [dim_param or size])."""
    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    return ([(i.name, dims(i)) for i in onnx_model.graph.input], [(o.name, dims(o)) for o in onnx_model.graph.output])


def command_line(*args):
    done = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", *map(str, args), "-q"], capture_output=True,
                          text=True, env=dict(os.environ), timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The model, and its ONNX model by each front door: {door: ModelProto}."""
    folder = tmp_path_factory.mktemp("names")
    model = named_model()
    doors = {"convert(model)": mlr.convert(model).onnx_model}
    for suffix in FILES:
        path = folder / f"model.{suffix}"
        model.save(path)
        doors[f"convert(.{suffix})"] = mlr.convert(path).onnx_model
        command_line(path, "-o", folder / f"{suffix}.onnx")
        doors[f"command line .{suffix}"] = onnx.load(str(folder / f"{suffix}.onnx"))
    return model, doors


def test_every_front_door_names_the_model_alike(converted):
    _, doors = converted
    first, *others = doors
    for door in others:
        assert interface(doors[door]) == interface(doors[first]), door


def test_inputs_and_outputs_are_named_as_from_keras_names_them(converted, plugin_off):  # pylint: disable=unused-argument
    model, doors = converted
    stock, _ = tf2onnx.convert.from_keras(model, input_signature=[
        tf.TensorSpec((None, None, FEATURES), tf.float32, name="feats"), tf.TensorSpec((None, None), tf.bool, name="mask"),
        tf.TensorSpec((None, SPEAKER), tf.float32, name="speaker")])
    inputs, outputs = interface(doors["command line .keras"])
    assert [name for name, _ in inputs] == INPUTS == [i.name for i in stock.graph.input]
    assert [name for name, _ in outputs] == [o.name for o in stock.graph.output]
    assert [name for name, _ in outputs][:2] == ["frames", "summary"]


def test_dynamic_dimensions_are_batch_and_time(converted):
    """Features and their mask share the time axis; the sequence output has it too."""
    inputs, outputs = interface(converted[1]["command line .h5"])
    assert [dims for _, dims in inputs] == [["batch", "time", FEATURES], ["batch", "time"], ["batch", SPEAKER]]
    assert [dims for _, dims in outputs] == [["batch", "time", 2], ["batch", UNITS], ["batch", UNITS]]


@pytest.mark.parametrize("door", ["convert(model)", "convert(.keras)", "convert(.h5)", "command line .keras",
                                  "command line .h5"])
def test_every_front_door_gives_keras_outputs(converted, door):
    model, doors = converted
    spec = [tf.TensorSpec(None, name=name) for name in INPUTS]  # fed by name
    assert_matches_keras(model, doors[door], spec, batch())


@pytest.mark.parametrize("batch_size, steps, expected", [
    (3, STEPS, [[3, STEPS, FEATURES], [3, STEPS], [3, SPEAKER]]),
    (None, STEPS, [["batch", STEPS, FEATURES], ["batch", STEPS], ["batch", SPEAKER]]),
    (3, None, [[3, "time", FEATURES], [3, "time"], [3, SPEAKER]]),
])
def test_fixed_sizes_stay_and_only_dynamic_axes_are_named(batch_size, steps, expected):
    model = named_model()
    spec = [tf.TensorSpec((batch_size, steps, FEATURES), tf.float32, name="feats"),
            tf.TensorSpec((batch_size, steps), tf.bool, name="mask"),
            tf.TensorSpec((batch_size, SPEAKER), tf.float32, name="speaker")]
    onnx_model = mlr.convert(model, input_signature=spec).onnx_model
    inputs, outputs = interface(onnx_model)
    assert [dims for _, dims in inputs] == expected
    assert outputs[0][1] == [batch_size or "batch", steps or "time", 2]
    if batch_size and steps:
        assert not any(isinstance(d, str) for _, dims in inputs + outputs for d in dims)
    fed = [x[:3] for x in batch()] if batch_size else batch()
    assert_matches_keras(model, onnx_model, spec, fed)


def test_sequences_of_different_lengths_keep_their_own_time_axis():
    """An encoder's and a decoder's tokens may differ in length: one name would say they do not."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    _, h, c = keras.layers.LSTM(UNITS, return_state=True)(keras.layers.Embedding(20, 3, mask_zero=True)(source))
    decoded = keras.layers.LSTM(UNITS, return_sequences=True, name="decoder")(
        keras.layers.Embedding(20, 3, mask_zero=True)(target), initial_state=[h, c])
    model = randomize_weights(keras.Model([source, target], decoded))
    onnx_model = mlr.convert(model).onnx_model
    inputs, outputs = interface(onnx_model)
    assert inputs == [("source", ["batch", "source_time"]), ("target", ["batch", "target_time"])]
    assert outputs[0][1][:2] == ["batch", "target_time"]
    rows = np.array([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]], np.int32), np.array([[6, 7, 0], [8, 9, 1]], np.int32)
    spec = [tf.TensorSpec(None, name="source"), tf.TensorSpec(None, name="target")]
    assert_matches_keras(model, onnx_model, spec, list(rows))


def save_model(model, path):
    """``model`` as a SavedModel with a serving signature of two inputs."""
    spec = [tf.TensorSpec((None, None), tf.int32, name="tokens"), tf.TensorSpec((None, 2), tf.float32, name="extra")]
    function = tf.function(lambda tokens, extra: model([tokens, extra], training=False), input_signature=spec)
    module = tf.Module()
    module.model = model
    tf.saved_model.save(module, str(path), signatures={"serving_default": function})
    return path


def test_a_saved_model_is_named_alike_by_convert_and_the_command_line(tmp_path):
    tokens, extra = keras.Input((None,), dtype="int32", name="tokens"), keras.Input((2,), name="extra")
    sequence = keras.layers.GRU(UNITS, return_sequences=True)(keras.layers.Embedding(20, 3, mask_zero=True)(tokens))
    model = randomize_weights(keras.Model([tokens, extra], [sequence, keras.layers.Dense(2)(extra)]))
    path = save_model(model, tmp_path / "saved")
    command_line(path, "-o", tmp_path / "model.onnx")
    by_command = interface(onnx.load(str(tmp_path / "model.onnx")))
    assert interface(mlr.convert(path).onnx_model) == by_command
    inputs, outputs = by_command
    assert dict(inputs) == {"tokens": ["batch", "time"], "extra": ["batch", 2]}
    assert sorted((dims for _, dims in outputs), key=len) == [["batch", 2], ["batch", "time", UNITS]]


@pytest.mark.parametrize("form", ["named Input", "input_shape", "built by a call"])
def test_a_sequential_models_input_is_named_after_its_input_layer(form, tmp_path):
    """A ``Sequential`` model that starts with a named ``Input`` keeps that name (Keras 3 too), through
    ``convert`` and the command line; one whose input Keras named has Keras's name."""
    shape = {"input_shape": (None,)} if form == "input_shape" else {}
    head = [keras.Input((None,), dtype="int32", name="tokens")] if form == "named Input" else []
    with warnings.catch_warnings():  # Keras 3 prefers an Input to input_shape=
        warnings.simplefilter("ignore")
        model = keras.Sequential(head + [keras.layers.Embedding(50, 4, mask_zero=True, **shape), keras.layers.LSTM(UNITS)])
    if form == "built by a call":
        model(np.ones((2, 3), np.int32))
    names = [i.name for i in mlr.convert(model).onnx_model.graph.input]
    assert names == ["tokens"] if form == "named Input" else len(names) == 1  # else Keras's name for it
    if form != "named Input":
        return  # the command line: once is enough (a subprocess, ~25 s)
    model.save(tmp_path / "model.keras")
    command_line(tmp_path / "model.keras", "-o", tmp_path / "model.onnx")
    assert [i.name for i in onnx.load(str(tmp_path / "model.onnx")).graph.input] == names
