# SPDX-License-Identifier: Apache-2.0
"""The start-up hook enables the plugin once tf2onnx's ``tfonnx`` is loaded, whatever imports it
first, and never while a module the enabling needs is half-loaded. Fake packages stand in for
tf2onnx and the plugin (the real ones: tests/test_cli.py)."""

import importlib
import sys
import textwrap

import pytest

import masked_lstm_rewriter_autoenable as autoenable

FAKE_TF2ONNX = {
    "__init__.py": "",
    "tfonnx.py": "",
    "convert.py": "from . import tfonnx\nfrom_keras = 'convert'\n",  # imports tfonnx half-way through
}
FAKE_PLUGIN = {
    "__init__.py": textwrap.dedent("""\
        import importlib
        enabled = []
        def __getattr__(name):
            if name != 'enable':
                raise AttributeError(name)
            return importlib.import_module(__name__ + '.plugin').enable
        """),
    # imports tfonnx before it defines enable, as the real plugin module does
    "plugin/__init__.py": "from fake_tf2onnx import tfonnx\nfrom .. import enabled\n"
                          "def enable(mode, target):\n    enabled.append(mode)\n",
    "sources.py": "from fake_tf2onnx import tfonnx\nfrom . import plugin\n",
    "broken.py": "from fake_tf2onnx import tfonnx\nraise OSError('broken')\n",
}


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """A hook watching the fake packages, installed as the start-up hook installs it."""
    for package, files in (("fake_tf2onnx", FAKE_TF2ONNX), ("fake_plugin", FAKE_PLUGIN)):
        for name, text in files.items():
            path = tmp_path / package / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = autoenable._EnableAfterImport("post", target="fake_tf2onnx.tfonnx", convert="fake_tf2onnx.convert",
                                              package="fake_plugin")
    monkeypatch.setattr(sys, "meta_path", [installed] + sys.meta_path)
    yield installed
    for name in [m for m in sys.modules if m.split(".")[0] in ("fake_tf2onnx", "fake_plugin")]:
        del sys.modules[name]


def _enabled():
    return importlib.import_module("fake_plugin").enabled


@pytest.mark.parametrize("imports", [
    ["fake_tf2onnx.tfonnx"],
    ["fake_tf2onnx.convert"],
    ["fake_plugin", "fake_tf2onnx.convert"],
    ["fake_plugin.plugin"],  # the plugin module imports tfonnx before it defines enable
    ["fake_plugin.sources"],  # a module importing tfonnx, then the plugin module
])
def test_enabled_once_whatever_imports_tfonnx_first(hook, imports):
    for name in imports:
        importlib.import_module(name)
    assert _enabled() == ["post"]
    assert hook not in sys.meta_path
    importlib.import_module("fake_tf2onnx.convert")
    assert _enabled() == ["post"]


def test_not_enabled_before_tfonnx_loads(hook):
    importlib.import_module("fake_plugin")
    assert _enabled() == [] and hook in sys.meta_path


def test_convert_is_complete_when_the_plugin_is_enabled(hook, monkeypatch):
    seen = []
    monkeypatch.setattr(hook, "enable", lambda: seen.append(sys.modules["fake_tf2onnx.convert"].from_keras))
    importlib.import_module("fake_tf2onnx.convert")
    assert seen == ["convert"]


def test_a_failing_import_still_enables_and_raises_its_own_error(hook):
    with pytest.raises(OSError, match="broken"):
        importlib.import_module("fake_plugin.broken")
    assert _enabled() == ["post"]


def test_an_enabling_that_fails_is_loud(hook, monkeypatch):
    """An AttributeError would vanish inside ``from tf2onnx import tfonnx``: it is raised as a RuntimeError."""
    monkeypatch.setattr(hook, "package", "fake_tf2onnx")  # no enable there
    with pytest.raises(RuntimeError, match="TF2ONNX_MASKED_LSTM=post: could not enable fake_tf2onnx"):
        importlib.import_module("fake_tf2onnx.tfonnx")


def test_another_value_fails_the_import_of_tfonnx(hook):
    hook.value = "yes"
    with pytest.raises(ValueError, match="TF2ONNX_MASKED_LSTM='yes': expected one of post, any"):
        importlib.import_module("fake_tf2onnx.convert")
