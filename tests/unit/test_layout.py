# SPDX-License-Identifier: Apache-2.0
"""The package's layout shows the flow: read -> plan -> emit -> sources -> pipeline -> plugin, and no
stage reaches ahead.

Shared modules (``graph``, ``failure``, ``targets``, ``layer``, ``report``) and the cell kinds
(``cells``) import no stage after reading; every module stays small enough to read whole.
"""

import ast
import glob
import os

import pytest

from _source_trees import PACKAGE, parsed_sources

# each part of the rewriter, and the parts it may not import (the stages after it)
STAGES = ("read", "plan", "emit", "sources", "pipeline", "plugin")
LATER = {stage: set(STAGES[STAGES.index(stage) + 1:]) for stage in STAGES}
LATER.update({name: set(STAGES[1:]) for name in ("cells", "graph", "failure", "layer")})
LATER.update({name: set(STAGES) | {"cells", "layer"} for name in ("graph", "failure", "targets", "report")})
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def modules():
    """(path, part of the package it belongs to, syntax tree) of every module of the package."""
    for path, tree in parsed_sources():
        relative = os.path.relpath(path, PACKAGE)
        yield relative, relative.split(os.sep)[0].removesuffix(".py"), tree


def imported_parts(relative: str, tree) -> set:
    """The top-level parts of the package a module imports (relative imports resolved)."""
    depth = relative.count(os.sep)
    parts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level == depth + 1:  # from the package's top (a shallower import stays in a subpackage)
                names = [node.module.split(".")[0]] if node.module else [alias.name for alias in node.names]
                parts.update(names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("masked_lstm_rewriter."):
            parts.add(node.module.split(".")[1])
    return parts


def test_no_stage_imports_a_later_one():
    problems = [f"{relative} imports {sorted(imported_parts(relative, tree) & LATER[part])}"
                for relative, part, tree in modules()
                if part in LATER and imported_parts(relative, tree) & LATER[part]]
    assert not problems, problems


def test_the_scan_sees_imports():
    found = {relative: imported_parts(relative, tree) for relative, _, tree in modules()}
    assert {"graph", "failure", "cells"} <= found[os.path.join("read", "body.py")]
    assert {"emit", "plan"} <= found[os.path.join("pipeline", "__init__.py")]
    assert {"read", "emit"} <= found[os.path.join("sources", "cudnn.py")]
    assert {"pipeline", "sources"} <= found[os.path.join("plugin", "__init__.py")]


@pytest.mark.parametrize("relative,part,tree", list(modules()), ids=lambda value: value if isinstance(value, str) else "")
def test_modules_and_functions_stay_small(relative, part, tree):  # pylint: disable=unused-argument
    lines = max((getattr(node, "end_lineno", 0) or 0) for node in ast.walk(tree))
    long_functions = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert lines <= MAX_MODULE_LINES and not long_functions, (relative, lines, long_functions)
