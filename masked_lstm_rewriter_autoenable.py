# SPDX-License-Identifier: Apache-2.0
"""Start-up hook behind ``TF2ONNX_MASKED_LSTM=post|any``: the plugin in unmodified tf2onnx runs.

``masked_lstm_rewriter.pth`` (installed at the root of site-packages) runs :func:`install` when
the interpreter starts, but only if the variable is set. Nothing heavy happens then: this module
is standalone (importing the package would import TensorFlow), and it only arranges for
``masked_lstm_rewriter.enable(mode)`` to run right after ``tf2onnx.tfonnx`` is first imported,
that is, before any conversion work, whatever front end (``python -m tf2onnx.convert``, a
script) does the converting. A value other than ``post`` or ``any`` makes that import fail with
a message saying so; ``TF2ONNX_MASKED_LSTM_TARGET=openvino`` picks the OpenVINO target.
"""

import importlib.abc
import importlib.util
import os
import sys

ENV = "TF2ONNX_MASKED_LSTM"
TARGET_ENV = "TF2ONNX_MASKED_LSTM_TARGET"  # optional: "openvino" (see masked_lstm_rewriter.make_rewriter)
MODES = ("post", "any")
TARGET = "tf2onnx.tfonnx"


def install():
    """Arrange for the plugin to be enabled when tf2onnx loads (no-op when the variable is unset)."""
    value = os.environ.get(ENV, "").strip()
    if value and not active():
        sys.meta_path.insert(0, _EnableAfterImport(value))


def active() -> bool:
    """Is the hook waiting for tf2onnx to load (installed, with the variable set, tf2onnx not yet loaded)?"""
    return any(isinstance(f, _EnableAfterImport) for f in sys.meta_path)


class _EnableAfterImport(importlib.abc.MetaPathFinder):
    """Finds ``tf2onnx.tfonnx`` through the other finders and wraps its loader."""

    def __init__(self, value):
        self.value = value

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)  # once is enough; also avoids finding ourselves below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self.value)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, value):
        self.loader = loader
        self.value = value

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        if self.value not in MODES:
            raise ValueError(f"{ENV}={self.value!r}: expected one of {', '.join(MODES)} "
                             "(or unset for stock tf2onnx)")
        self.loader.exec_module(module)
        import masked_lstm_rewriter  # pylint: disable=import-outside-toplevel
        masked_lstm_rewriter.enable(self.value, os.environ.get(TARGET_ENV, "").strip() or None)
