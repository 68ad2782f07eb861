# SPDX-License-Identifier: Apache-2.0
"""The modules that define a model's custom Keras classes, as the command line's ``--custom-objects`` names them.

A module is a dotted name importable from the current directory or ``PYTHONPATH``
(``my_layers``, ``project.layers``), or the path of a ``.py`` file (imported under its file name,
its folder put first on the import path so that it can import its neighbours). Importing it runs
its ``register_keras_serializable`` decorators; :func:`classes_of` also collects the classes it
defines, for Keras to find the ones that are not registered (passed as ``custom_objects=``).

Nothing here imports TensorFlow (a module given may: import it once the Keras flavour is chosen).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import sys
from types import ModuleType

logger = logging.getLogger("masked_lstm_rewriter")


class ModuleError(ValueError):
    """A module that cannot be imported: one line naming it."""


def split(values) -> list:
    """The module names of ``values`` (each may be comma-separated), in order, each once."""
    names = []
    for value in values:
        for name in value.split(","):
            if name.strip() and name.strip() not in names:
                names.append(name.strip())
    return names


def custom_objects(names) -> dict:
    """Import each module of ``names``; {class name: class} of the classes they define."""
    objects = {}
    for name in names:
        module = import_module(name)
        found = classes_of(module)
        logger.info("custom objects from %s: %s", name, ", ".join(sorted(found)) or "none")
        objects.update(found)
    return objects


def import_module(name: str) -> ModuleType:
    """The module ``name`` (a dotted name or a ``.py`` path), imported; :class:`ModuleError` if it cannot be."""
    try:
        if name.lower().endswith(".py"):
            return _import_file(name)
        if not all(part.isidentifier() for part in name.split(".")):
            raise ModuleError(f"{name}: not a module name (such as my_layers or project.layers) nor a .py file")
        return importlib.import_module(name)
    except ModuleError:
        raise
    except Exception as error:  # pylint: disable=broad-except  (any error of the user's code: one line)
        raise ModuleError(f"{name}: cannot import it ({type(error).__name__}: {_first_line(error)})") from error


def _import_file(path: str) -> ModuleType:
    """The ``.py`` file at ``path``, imported under its file name (once: a second import reuses it)."""
    if not os.path.isfile(path):
        raise ModuleError(f"{path}: no such file")
    path = os.path.abspath(path)
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as when the file runs as a script: it may import its neighbours
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Keras names a class's module by this name when it saves it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def classes_of(module: ModuleType) -> dict:
    """{name: class} of the public classes ``module`` defines, itself or in its submodules (not
    those it imports from elsewhere). Functions are left out: one named like a Keras activation
    would replace it everywhere in the model."""
    found = {}
    for attribute, value in vars(module).items():
        if attribute.startswith("_") or not inspect.isclass(value):
            continue
        owner = getattr(value, "__module__", "") or ""
        if owner == module.__name__ or owner.startswith(module.__name__ + "."):
            found[value.__name__] = value
    return found


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0].strip() if lines else ""
