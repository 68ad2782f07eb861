# SPDX-License-Identifier: Apache-2.0
"""``pip install .`` brings no TensorFlow (nor a runtime): the first use of the package that needs one
raises one error naming what is missing and the extra that brings it, not a traceback ending in
``No module named 'tensorflow'``. Each case runs in a child process where the package is
unimportable (``None`` in ``sys.modules``, as if it were not installed). No Keras."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile

import pytest

from masked_lstm_rewriter import dependencies, sessions
from _onnx_files import DATA

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")
NEEDS_TENSORFLOW = ("masked_lstm_rewriter needs TensorFlow: pip install 'masked-lstm-rewriter[keras]' (TensorFlow "
                    "with Keras 3; 'masked-lstm-rewriter[tf_keras]' for tf_keras), or your own TensorFlow build")


def run_without(module: str, code: str) -> subprocess.CompletedProcess:
    """Python ``code`` in a child process where ``module`` cannot be imported."""
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, check=False)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.mark.parametrize("call", [
    "mlr.convert('model.keras')", "mlr.enable()", "mlr.make_rewriter()", f"mlr.rewrite_onnx({STOCK!r})",
    f"mlr.verify({STOCK!r}, {STOCK!r})", "mlr.MASK_MODES",
])
def test_without_tensorflow_the_first_use_says_which_extra_brings_it(call):
    done = run_without("tensorflow", f"import masked_lstm_rewriter as mlr\n{call}")
    assert done.returncode == 1
    assert last_line(done.stderr) == f"masked_lstm_rewriter.dependencies.MissingDependency: {NEEDS_TENSORFLOW}"
    assert "No module named" not in done.stderr and len(done.stderr.splitlines()) < 12, done.stderr


def test_the_error_is_catchable_as_the_import_error_it_replaces():
    done = run_without("tensorflow", "import masked_lstm_rewriter as mlr\n"
                                     "try:\n    mlr.convert('model.keras')\n"
                                     "except ModuleNotFoundError as error:\n"
                                     "    print(type(error).__name__, error.name, isinstance(error, mlr.MissingDependency))")
    assert done.stdout.split() == ["MissingDependency", "tensorflow", "True"], done.stderr


def test_without_tf2onnx():
    done = run_without("tf2onnx", "import masked_lstm_rewriter as mlr\nmlr.enable()")
    assert last_line(done.stderr).endswith("masked_lstm_rewriter needs tf2onnx 1.17: pip install 'tf2onnx>=1.17,<1.18'")


def test_importing_the_package_needs_no_tensorflow():
    done = run_without("tensorflow", "import masked_lstm_rewriter as mlr, masked_lstm_rewriter.cli\n"
                                     "print(mlr.__version__, sorted(mlr.TARGETS))")
    assert done.returncode == 0 and "onnxruntime" in done.stdout, done.stderr


@pytest.mark.parametrize("args", [["model.keras", "-o", "model.onnx"], ["rewrite", STOCK, "-o", "model.onnx"],
                                  ["verify", STOCK, STOCK]], ids=["convert", "rewrite", "verify"])
def test_the_command_line_says_it_in_one_line(tmp_path, args):
    with zipfile.ZipFile(tmp_path / "model.keras", "w") as archive:  # as much of a .keras file as is read first
        archive.writestr("config.json", "{}")
    code = (f"import os; os.chdir({str(tmp_path)!r})\nfrom masked_lstm_rewriter import cli\n"
            f"sys.exit(cli.main({args!r}))")
    done = run_without("tensorflow", code)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or line.startswith(" ")]
    assert done.returncode == 2 and errors == [f"masked_lstm_rewriter: error: {NEEDS_TENSORFLOW}"], done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_runtime_names_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)
    assert sessions.runtime_available("openvino") == (
        False, "openvino is not installed: pip install 'masked-lstm-rewriter[openvino]'")
    with pytest.raises(dependencies.MissingDependency, match=r"needs OpenVINO to run the model: pip install "
                                                             r"'masked-lstm-rewriter\[openvino\]'"):
        sessions.openvino_compiled(None)


def test_explain_gives_one_line_for_any_import_error():
    assert dependencies.explain(ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")) == \
        NEEDS_TENSORFLOW
    assert dependencies.explain(ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")) == \
        "masked_lstm_rewriter needs onnxruntime to run the model: pip install 'masked-lstm-rewriter[runtime]'"
    broken = ModuleNotFoundError("No module named 'tensorflow.python'\nmore", name="tensorflow.python")
    assert dependencies.explain(broken) == "ModuleNotFoundError: No module named 'tensorflow.python'"


def test_the_extras_named_exist_and_the_python_versions_are_stated():
    setup = configparser.ConfigParser()
    setup.read(os.path.join(ROOT, "setup.cfg"))
    extras = set(setup["options.extras_require"])
    named = {text.split("[")[1].split("]")[0] for _, how in dependencies.PACKAGES.values() for text in how.split("'")
             if text.startswith(dependencies.PROJECT + "[")}
    assert named and named <= extras, (named, extras)
    assert setup["options"]["python_requires"].strip() == ">=3.10"
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        assert "Python 3.10 or newer" in handle.read()


def test_large_model_is_refused_in_one_line_naming_the_option():
    """tf2onnx 1.17's large model format fails with numpy 2, and its frozen layers are not read: refused
    before any work, as the keyword or the flag the user gave."""
    dependencies.check_large_model(False)
    with pytest.raises(ValueError, match=r"^large_model=True is not supported: .* needs no large_model$"):
        dependencies.check_large_model(True)
    with pytest.raises(ValueError, match=r"^--large_model is not supported: .* needs no --large_model$"):
        dependencies.check_large_model(True, flags=True)
