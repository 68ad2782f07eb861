# SPDX-License-Identifier: Apache-2.0
"""What the package needs beyond its own requirements, and the one error that says what is missing.

``pip install .`` installs tf2onnx, onnx and numpy only: TensorFlow comes from an extra (or the
user's own build), and so do the runtimes. Where the package first imports one of them, an
import that fails because it is not installed becomes :class:`MissingDependency`, one line that
names the package and the extra that brings it (:func:`needed`, around the lazy imports of the
package's public names and inside ``verify``). :func:`explain` gives that line for any import
error, for a caller (the command line) that catches it; :func:`installed_versions` says what is
installed (``--version``). Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
from importlib import metadata
from typing import Optional

PROJECT = "masked-lstm-rewriter"
# module -> (what it is called, how to install it); the extras are setup.cfg's [options.extras_require]
PACKAGES = {
    "tensorflow": ("TensorFlow", f"pip install '{PROJECT}[keras]' (TensorFlow with Keras 3; '{PROJECT}[tf_keras]' "
                                 "for tf_keras), or your own TensorFlow build"),
    "tf_keras": ("tf_keras (TF_USE_LEGACY_KERAS=1 is set)",
                 f"pip install '{PROJECT}[tf_keras]', or unset TF_USE_LEGACY_KERAS to use Keras 3"),
    "tf2onnx": ("tf2onnx 1.17", "pip install 'tf2onnx>=1.17,<1.18'"),
    "onnx": ("onnx", "pip install onnx"),
    "onnxruntime": ("onnxruntime to run the model", f"pip install '{PROJECT}[runtime]'"),
    "onnxruntime.quantization": ("onnxruntime to quantize the model", f"pip install '{PROJECT}[runtime]'"),
    "openvino": ("OpenVINO to run the model", f"pip install '{PROJECT}[openvino]'"),
}


class MissingDependency(ModuleNotFoundError):
    """A package the plugin needs is not installed: the message names it and how to install it."""

    def __init__(self, module: str):
        what, how = PACKAGES[module]
        super().__init__(f"masked_lstm_rewriter needs {what}: {how}", name=module)


def missing(error: BaseException) -> Optional[MissingDependency]:
    """The :class:`MissingDependency` ``error`` means, when it says that one of :data:`PACKAGES` is not
    installed (a module inside one that is, which a broken install lacks, is another problem); else None."""
    if isinstance(error, MissingDependency):
        return error
    if isinstance(error, ModuleNotFoundError) and error.name in PACKAGES:
        return MissingDependency(error.name)
    return None


def explain(error: BaseException) -> str:
    """One line for an import error: what is missing and the extra that brings it, for a package the
    plugin needs; else the error's own first line."""
    found = missing(error)
    if found is not None:
        return str(found)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


@contextlib.contextmanager
def needed():
    """Inside: an import of a package the plugin needs that is not installed raises :class:`MissingDependency`
    instead (the original error kept as its ``__context__``, not shown). Also a decorator."""
    try:
        yield
    except ModuleNotFoundError as error:
        found = missing(error)
        if found is None or found is error:
            raise
        raise found from None


def how_to_install(module: str) -> str:
    """The command that installs ``module`` (one of :data:`PACKAGES`), with the extra that brings it."""
    return PACKAGES[module][1]


# tf2onnx's large model format (models over 2 GB): refused before any work
LARGE_MODEL_REFUSAL = ("{} is not supported: tf2onnx 1.17 writes that format with numpy.product, which numpy 2 "
                       "removed, and freezes recurrent layers for it in a form the plugin does not read; a model "
                       "under 2 GB needs no {}")


def check_large_model(large_model: bool, flags: bool = False) -> None:
    """A ``ValueError`` for tf2onnx's ``large_model`` (``flags``: the command line's spelling)."""
    if large_model:
        name = "--large_model" if flags else "large_model=True"
        raise ValueError(LARGE_MODEL_REFUSAL.format(name, name.split("=")[0]))


def installed_versions() -> str:
    """"masked-lstm-rewriter 0.x, tf2onnx 1.17.0, ...": the versions of the packages that are installed."""
    names = ("masked-lstm-rewriter", "tf2onnx", "tensorflow", "keras", "tf_keras", "onnx", "onnxruntime", "openvino")
    found = []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{name} {metadata.version(name)}")
    return ", ".join(found)
