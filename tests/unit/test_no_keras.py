# SPDX-License-Identifier: Apache-2.0
"""The fast tier never uses Keras (nor tf_keras, nor ``tf.keras``).

Run alone, the tier runs in a process where Keras cannot be imported at all (see conftest.py):
TensorFlow loads without it and every conversion of the tier works, so nothing here depends on
Keras. When the tier runs in one process with the Keras tests, Keras is loaded anyway (TensorFlow
2.21 imports it on import); then only the static check of the tier's sources applies.
"""

import ast
import glob
import importlib
import os
import sys

import pytest

from _source_trees import parse

HERE = os.path.dirname(os.path.abspath(__file__))
KERAS = ("keras", "tf_keras")


def keras_uses(source: str) -> list:
    """The lines of ``source`` that import Keras or reach for ``tf.keras`` / ``tensorflow.keras``."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "keras":
            names = ["tf.keras"]
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                and a.value.split(".")[0] in KERAS for a in node.args):
            names = [node.args[0].value]  # importlib.import_module("keras"), __import__("tf_keras")
        else:
            continue
        if any(part in KERAS for name in names for part in name.split(".")):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("source", [
    "import keras", "import tf_keras as k", "from tensorflow import keras", "from tensorflow.keras import layers",
    "import tensorflow as tf\nlayer = tf.keras.layers.LSTM(2)", "import importlib\nimportlib.import_module('keras.layers')",
    "from keras.src import backend",
])
def test_the_check_finds_keras(source):
    assert keras_uses(source)


def test_the_check_passes_raw_tensorflow():
    assert keras_uses("import tensorflow as tf\nx = tf.while_loop(c, b, v)\nname = 'keras'\n") == []


def test_no_source_of_the_tier_uses_keras():
    uses = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
        with open(path, encoding="utf-8") as f:
            lines = keras_uses(f.read())
        if os.path.basename(path) == "test_no_keras.py":
            continue  # this file names Keras in its test cases, as strings
        if lines:
            uses[os.path.basename(path)] = lines
    assert uses == {}


def test_keras_is_not_importable_when_the_tier_runs_alone(keras_isolation):
    tier_only, blocked = keras_isolation
    if not tier_only:
        pytest.skip("the tier runs with other tests in this process: they load Keras")
    assert blocked, "TensorFlow was loaded before the tier's conftest could keep Keras out"
    assert [m for m in sys.modules if m.split(".")[0] in KERAS and sys.modules[m] is not None] == []
    for name in KERAS:
        with pytest.raises(ImportError):
            importlib.import_module(name)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with pytest.raises(ImportError):
        getattr(tf, "ke" + "ras").layers  # tf.keras, spelled so that the source check above passes
