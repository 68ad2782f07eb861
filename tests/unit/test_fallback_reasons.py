# SPDX-License-Identifier: Apache-2.0
"""docs/why-a-loop.md lists every reason the rewriter can give for leaving a layer a Loop.

The reasons are read from the package's source: the first argument of every ``Refusal(...)``,
every string assigned to a name ``reason`` or ``*_REASON``, and the values of a dict assigned to
a name ``*_REASONS`` (a ``Refusal`` of a name or a subscript takes its text from there). An
f-string is matched by its constant start (its stable prefix); a reason must contain at least a
few words of fixed text. The strings returned by a function named ``*_refusal`` (a layer kept as a
Loop for a runtime: ``targets.portability_refusal``, ``targets.target_refusal``) may start with a
variable part: each of their fixed pieces of at least a few words must be on the page.
"""

import ast
import os
import re

from _source_trees import ROOT, parsed_sources

DOC_NAME = "docs/why-a-loop.md"
DOC = os.path.join(ROOT, *DOC_NAME.split("/"))
MIN_PREFIX = 12  # characters of fixed text a reason must start with


def stable_text(node):
    """The fixed start of a str constant or f-string expression, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            text += part.value
        return text
    return None


def reasons_in_source():
    found = []
    for path, tree in parsed_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Refusal" and node.args:
                if not isinstance(node.args[0], (ast.Name, ast.Subscript)):  # those: a *_REASONS dict
                    found.append((path, node.lineno, stable_text(node.args[0])))
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if any(name == "reason" or name.endswith("_REASON") for name in names):
                    found.append((path, node.lineno, stable_text(node.value)))
                elif any(name.endswith("_REASONS") for name in names) and isinstance(node.value, ast.Dict):
                    found.extend((path, node.lineno, stable_text(value)) for value in node.value.values)
    return found


def fixed_parts(node):
    """The constant pieces of a str constant or f-string expression (None for anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [part.value for part in node.values if isinstance(part, ast.Constant) and isinstance(part.value, str)]
    return None


def refusals_in_source():
    """(path, line, fixed pieces) of each string returned by a function named ``*_refusal``."""
    found = []
    for path, tree in parsed_sources():
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and function.name.endswith("_refusal"):
                for node in ast.walk(function):
                    if isinstance(node, ast.Return) and node.value is not None:
                        parts = fixed_parts(node.value)
                        if parts is not None:
                            found.append((path, node.lineno, parts))
    return found


def normalise(text):
    return re.sub(r"\s+", " ", text.replace("*", "").replace("`", "")).strip()


def test_every_reason_is_documented():
    reasons = reasons_in_source()
    assert len(reasons) >= 30, reasons  # the scan itself still works
    with open(DOC, encoding="utf-8") as handle:
        doc = normalise(handle.read())
    problems = []
    for path, line, reason in reasons:
        where = f"{os.path.relpath(path, ROOT)}:{line}"
        if reason is None or len(reason.strip()) < MIN_PREFIX:
            problems.append(f"{where}: a reason must start with fixed text (found {reason!r})")
        elif normalise(reason) not in doc:
            problems.append(f"{where}: {reason!r} is not in {DOC_NAME}")
    refusals = refusals_in_source()
    assert len(refusals) >= 2, refusals  # portability_refusal and target_refusal: the scan still works
    for path, line, parts in refusals:
        where = f"{os.path.relpath(path, ROOT)}:{line}"
        pieces = [normalise(part) for part in parts if len(part.strip()) >= MIN_PREFIX]
        if not pieces:
            problems.append(f"{where}: a refusal must hold fixed text (found {parts!r})")
        problems.extend(f"{where}: {piece!r} is not in {DOC_NAME}" for piece in pieces if piece not in doc)
    assert not problems, "\n".join(problems)
