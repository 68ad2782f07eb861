# SPDX-License-Identifier: Apache-2.0
"""A Keras file with custom classes (a Dense-like layer, a hand-written recurrent cell, neither
registered with Keras): converted from the command line with ``--custom-objects MODULE`` and from
Python with ``custom_objects=``, checked with ``verify``; without the module, one line naming the
class and the option (exit status 2); a module that cannot be imported, one line naming it; a
subclassed model saved before any call (no input shapes recorded), one line saying what to do.

Keras 3 saves the model as ``.keras``, tf_keras as ``.h5``. Only the command line's successful
conversion runs in a process of its own (the module is found from the current directory there);
the failures and ``verify`` run ``cli.main`` in this process.
"""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from kerasutil import ATOL, FLAVOUR, LENGTHS, ONCE_PER_SUITE, STEPS, keras, op_counts, randomize_weights, session

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import cli, keras_source, user_modules

MODULE = "mlr_test_custom_layers"
LAYERS = '''
import tensorflow as tf

keras = tf.keras


class ScaledDense(keras.layers.Layer):
    """A Dense-like layer that passes the mask on."""

    def __init__(self, units, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.scale = units, scale
        self.supports_masking = True

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(int(input_shape[-1]), self.units))
        self.bias = self.add_weight(name="bias", shape=(self.units,))

    def call(self, inputs):
        return tf.matmul(inputs, self.kernel) * self.scale + self.bias

    def get_config(self):
        return {**super().get_config(), "units": self.units, "scale": self.scale}


class TanhCell(keras.layers.Layer):
    """A recurrent cell written by hand, SimpleRNN's step: tanh(x W + h U + b)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(int(input_shape[-1]), self.units))
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel", shape=(self.units, self.units))
        self.bias = self.add_weight(name="bias", shape=(self.units,))

    def call(self, inputs, states):
        h = tf.tanh(tf.matmul(inputs, self.kernel) + tf.matmul(states[0], self.recurrent_kernel) + self.bias)
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units}
'''
HINT = "--custom-objects MODULE (in Python: custom_objects="


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    """The module (written in a folder of its own, imported from its path), a model using its
    classes saved there, a post-padded batch and Keras's outputs on it."""
    folder = tmp_path_factory.mktemp("custom")
    (folder / f"{MODULE}.py").write_text(LAYERS)
    module = user_modules.import_module(str(folder / f"{MODULE}.py"))
    features = keras.Input((None, 3), name="features")
    masked = keras.layers.Masking(0.0)(features)
    dense = module.ScaledDense(4, scale=0.5)(masked)
    cell = keras.layers.RNN(module.TanhCell(5), return_sequences=True)(dense)
    model = randomize_weights(keras.Model(features, keras.layers.LSTM(4, return_sequences=True)(cell)))
    path = folder / ("model.keras" if FLAVOUR == "keras3" else "model.h5")
    model.save(path)
    batch = np.random.default_rng(0).normal(size=(len(LENGTHS), STEPS, 3)).astype(np.float32)
    for row, length in enumerate(LENGTHS):
        batch[row, length:] = 0.0
    objects = {"ScaledDense": module.ScaledDense, "TanhCell": module.TanhCell}
    return SimpleNamespace(folder=folder, path=path, module_file=folder / f"{MODULE}.py", objects=objects,
                           batch=batch, expected=np.asarray(model(batch)))


@pytest.fixture(scope="module")
def converted(custom):
    """The model file converted from Python with ``custom_objects=``: (ONNX model, its file)."""
    out = custom.folder / "python.onnx"
    onnx_model, _ = mlr.convert(custom.path, out, custom_objects=custom.objects)
    return onnx_model, out


def check_native_and_equal(onnx_model, custom):
    """The custom cell an ONNX RNN, the LSTM an ONNX LSTM, no Loop; Keras's numbers at every position."""
    counts = op_counts(onnx_model)
    assert (counts["RNN"], counts["LSTM"], counts["Loop"]) == (1, 1, 0), counts
    sess = session(onnx_model)
    got = sess.run(None, {sess.get_inputs()[0].name: custom.batch})[0]
    np.testing.assert_allclose(got, custom.expected, atol=ATOL)


def error_lines(stderr: str) -> list:
    return [line for line in stderr.splitlines() if line.startswith("masked_lstm_rewriter: error:")]


def test_the_command_line_converts_with_the_module_given(custom):
    """Run as a user runs it: from the module's folder, naming it as it is imported from there."""
    done = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", custom.path.name, "-o", "cli.onnx",
                           "--custom-objects", MODULE], cwd=custom.folder, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"masked_lstm_rewriter: importing {MODULE}" in done.stderr
    import onnx  # pylint: disable=import-outside-toplevel
    check_native_and_equal(onnx.load(str(custom.folder / "cli.onnx")), custom)


def test_python_converts_with_custom_objects(custom, converted):
    check_native_and_equal(converted[0], custom)


@pytest.mark.parametrize("given", [None, "other"])
def test_without_the_module_the_error_names_the_class_and_the_option(custom, tmp_path, capsys, given):
    """Exit status 2 and one line: the class Keras does not know, and how to give its module (or,
    when a module was given, that it does not define the class)."""
    args = [str(custom.path), "-o", str(tmp_path / "out.onnx")]
    if given:
        other = tmp_path / "mlr_test_other_layers.py"
        other.write_text("class Unrelated:\n    pass\n")
        args += ["--custom-objects", str(other)]
    assert cli.main(args) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "Keras does not know the class 'ScaledDense'" in lines[0]
    assert (HINT in lines[0]) == (given is None)
    assert given is None or "the custom objects given (Unrelated) do not have it" in lines[0]
    assert not (tmp_path / "out.onnx").exists()


def test_python_without_custom_objects_names_the_class(custom):
    with pytest.raises(keras_source.UnknownClassError, match=r"Keras does not know the class 'ScaledDense'"):
        mlr.convert(custom.path)


@ONCE_PER_SUITE
@pytest.mark.parametrize("module, text, message", [
    ("mlr_no_such_module", None, "--custom-objects mlr_no_such_module: cannot import it (ModuleNotFoundError: "
                                 "No module named 'mlr_no_such_module')"),
    ("{folder}/mlr_test_failing.py", "raise RuntimeError('no GPU here')\n",
     "--custom-objects {folder}/mlr_test_failing.py: cannot import it (RuntimeError: no GPU here)"),
])
def test_a_module_that_cannot_be_imported_is_one_line(custom, tmp_path, capsys, module, text, message):
    module, message = module.format(folder=tmp_path), message.format(folder=tmp_path)
    if text is not None:
        (tmp_path / "mlr_test_failing.py").write_text(text)
    assert cli.main([str(custom.path), "-o", str(tmp_path / "out.onnx"), "--custom-objects", module]) == 2
    assert error_lines(capsys.readouterr().err) == [f"masked_lstm_rewriter: error: {message}"]


def test_verify_loads_the_model_with_the_module(custom, converted, capsys):
    reference, onnx_file = str(custom.path), str(converted[1])
    assert cli.main(["verify", reference, onnx_file, "--custom-objects", str(custom.module_file), "-q"]) == 0
    assert cli.main(["verify", reference, onnx_file, "-q"]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "Keras does not know the class 'ScaledDense'" in lines[0] and HINT in lines[0], lines


@pytest.mark.skipif(FLAVOUR != "keras3", reason="Keras 3 saves its operations as layers in a .h5 file")
def test_an_operation_keras3_cannot_read_back_is_not_called_a_custom_class(tmp_path):
    """Keras 3 saves a Masking layer's NotEqual as a layer in a .h5 file, and cannot load it: no
    module to give there, but another format."""
    features = keras.Input((None, 3))
    model = keras.Model(features, keras.layers.LSTM(2)(keras.layers.Masking(0.0)(features)))
    model.save(tmp_path / "model.h5")
    with pytest.raises(keras_source.UnknownClassError, match="'NotEqual', an operation Keras 3 saves in a .h5 file "
                                                             "but cannot read back .*: save the model as .keras$"):
        keras_source.load(tmp_path / "model.h5")


UNBUILT = '''
import tensorflow as tf

keras = tf.keras


@keras.utils.register_keras_serializable(package="mlr_test")
class Tagger(keras.Model):
    """A subclassed model, saved before any call: Keras records no input shapes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rnn = keras.layers.LSTM(4, return_sequences=True)

    def call(self, features):
        return self.rnn(features)
'''


@pytest.mark.filterwarnings("ignore:You are saving a model that has not yet been built")
def test_a_model_saved_before_any_call_says_how_to_give_its_inputs(tmp_path, capsys):
    """The command line has no signature to give: exit status 2 and one line saying the Python call."""
    (tmp_path / "mlr_test_unbuilt.py").write_text(UNBUILT)
    module = user_modules.import_module(str(tmp_path / "mlr_test_unbuilt.py"))
    module.Tagger(name="tagger").save(tmp_path / "unbuilt.keras")
    args = [str(tmp_path / "unbuilt.keras"), "-o", str(tmp_path / "out.onnx"),
            "--custom-objects", str(tmp_path / "mlr_test_unbuilt.py")]
    assert cli.main(args) == 2
    assert error_lines(capsys.readouterr().err) == [
        "masked_lstm_rewriter: error: cannot tell the inputs of model 'tagger': call it once on a batch, or give "
        "input_signature= (from Python: masked_lstm_rewriter.convert(model, input_signature=[...]))"]
    assert not (tmp_path / "out.onnx").exists()
