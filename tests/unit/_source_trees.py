# SPDX-License-Identifier: Apache-2.0
"""Syntax trees of the package's own source, for tests that read the code itself.

CPython 3.11 before 3.11.8 can fail ``ast.parse`` with "AST constructor recursion depth
mismatch" when a finalizer runs while the tree is built (python/cpython#106905); TensorFlow's
function finalizers, collected late in a long test process, are such finalizers. The collector is
paused while a tree is built, so none can run then (``ast.parse`` frees nothing of anyone else's).
The package's trees are parsed once per process: the tests only read them.
"""

import ast
import functools
import gc
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "masked_lstm_rewriter")


def parse(source, filename="<unknown>"):
    """``ast.parse`` with no finalizer running while the tree is built."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if was_enabled:
            gc.enable()


def package_modules():
    """The path of each module of the package and its subpackages, sorted."""
    return sorted(glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True))


@functools.lru_cache(maxsize=1)
def _package_trees() -> tuple:
    found = []
    for path in package_modules():
        with open(path, encoding="utf-8") as handle:
            found.append((path, parse(handle.read(), path)))
    return tuple(found)


def parsed_sources():
    """(path, syntax tree) of each module of the package (the same trees every time: read them only)."""
    return iter(_package_trees())
