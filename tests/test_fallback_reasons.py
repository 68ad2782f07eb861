# SPDX-License-Identifier: Apache-2.0
"""README.md ("Why a layer stays a Loop") lists every reason the rewriter can give for leaving a
layer a Loop.

The reasons are read from the package's source: the first argument of every ``NoMatch(...)``,
every string assigned to a name ``reason`` or ``*_REASON``, and the values of a dict assigned to
a name ``*_REASONS`` (a ``NoMatch`` of a name or a subscript takes its text from there). An
f-string is matched by its constant start (its stable prefix); a reason must contain at least a
few words of fixed text.
"""

import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "README.md")
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
    for path in sorted(glob.glob(os.path.join(ROOT, "masked_lstm_rewriter", "*.py"))):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "NoMatch" and node.args:
                if not isinstance(node.args[0], (ast.Name, ast.Subscript)):  # those: a *_REASONS dict
                    found.append((path, node.lineno, stable_text(node.args[0])))
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if any(name == "reason" or name.endswith("_REASON") for name in names):
                    found.append((path, node.lineno, stable_text(node.value)))
                elif any(name.endswith("_REASONS") for name in names) and isinstance(node.value, ast.Dict):
                    found.extend((path, node.lineno, stable_text(value)) for value in node.value.values)
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
            problems.append(f"{where}: {reason!r} is not in README.md")
    assert not problems, "\n".join(problems)
