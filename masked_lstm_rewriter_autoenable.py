# SPDX-License-Identifier: Apache-2.0
"""Start-up hook behind ``TF2ONNX_MASKED_LSTM=post|any``: the plugin in unmodified tf2onnx runs.

``masked_lstm_rewriter.pth`` (installed at the root of site-packages) runs :func:`install` when
the interpreter starts, but only if the variable is set. Nothing heavy happens then: this module
is standalone (importing the package would import TensorFlow), and it only arranges for
``masked_lstm_rewriter.enable(mode)`` to run right after ``tf2onnx.tfonnx`` is first imported,
that is, before any conversion work, whatever front end (``python -m tf2onnx.convert``, a
script) does the converting. When ``tfonnx`` is imported while ``tf2onnx.convert`` or a module of
this package is still loading (a script's ``tf2onnx.convert.from_keras``, or its
``import masked_lstm_rewriter.plugin``), the plugin is enabled once the outermost of them is
complete: ``enable`` wraps functions of ``tf2onnx.convert`` and is defined by the plugin module.
A value other than ``post`` or ``any`` makes that import fail with a message saying so;
``TF2ONNX_MASKED_LSTM_TARGET=openvino`` picks the OpenVINO target.
"""

import importlib.abc
import importlib.util
import os
import sys

ENV = "TF2ONNX_MASKED_LSTM"
TARGET_ENV = "TF2ONNX_MASKED_LSTM_TARGET"  # optional: "openvino" (see masked_lstm_rewriter.make_rewriter)
MODES = ("post", "any")
TARGET = "tf2onnx.tfonnx"
CONVERT = "tf2onnx.convert"  # may import TARGET half-way through: then enable after it
PACKAGE = "masked_lstm_rewriter"  # its modules may import TARGET half-way through too


def install():
    """Arrange for the plugin to be enabled when tf2onnx loads (no-op when the variable is unset)."""
    value = os.environ.get(ENV, "").strip()
    if value and not active():
        sys.meta_path.insert(0, _EnableAfterImport(value))


def active() -> bool:
    """Is the hook waiting for tf2onnx to load (installed, with the variable set, tf2onnx not yet loaded)?"""
    return any(isinstance(f, _EnableAfterImport) for f in sys.meta_path)


class _EnableAfterImport(importlib.abc.MetaPathFinder):
    """Finds ``tf2onnx.tfonnx``, ``tf2onnx.convert`` and the package's modules through the other
    finders and wraps their loaders: the plugin is enabled once ``tfonnx`` is loaded and none of
    the others is still loading. (``target``, ``convert`` and ``package`` name other modules in tests.)"""

    def __init__(self, value, target=TARGET, convert=CONVERT, package=PACKAGE):
        self.value = value
        self.target, self.convert, self.package = target, convert, package
        self.loading = 0  # the watched modules being loaded, one inside another
        self.target_loaded = False

    def find_spec(self, fullname, path=None, target=None):
        if not self._watches(fullname):
            return None
        sys.meta_path.remove(self)  # avoid finding ourselves below
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self, fullname)
        return spec

    def _watches(self, fullname) -> bool:
        return fullname in (self.target, self.convert) or fullname.split(".")[0] == self.package

    def check(self):
        if self.value not in MODES:
            raise ValueError(f"{ENV}={self.value!r}: expected one of {', '.join(MODES)} "
                             "(or unset for stock tf2onnx)")

    def loaded(self, fullname):
        """``fullname`` finished loading (or failed to): enable the plugin if it is time."""
        self.target_loaded |= fullname == self.target
        if self.target_loaded and not self.loading:
            self.enable()

    def enable(self):
        """Once: the hook leaves, and the plugin is enabled. A failure is raised as a RuntimeError
        (an AttributeError would vanish in ``from tf2onnx import tfonnx``, which tries another way)."""
        if self not in sys.meta_path:
            return
        sys.meta_path.remove(self)
        try:
            package = importlib.import_module(self.package)
            package.enable(self.value, os.environ.get(TARGET_ENV, "").strip() or None)
        except Exception as error:
            raise RuntimeError(f"{ENV}={self.value}: could not enable {self.package}: {error}") from error


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, hook, name):
        self.loader = loader
        self.hook = hook
        self.name = name

    def __getattr__(self, name):  # get_code and the rest, for runpy (python -m tf2onnx.convert)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        if self.name == self.hook.target:
            self.hook.check()
        self.hook.loading += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.hook.loading -= 1
            self.hook.loaded(self.name)
