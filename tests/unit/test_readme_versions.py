# SPDX-License-Identifier: Apache-2.0
"""The README names the pinned stack CI tests as ``constraints.txt`` pins it."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINNED_LINE = re.compile(r"The stack CI tests, pinned in `constraints.txt`.*?\n\n", re.S)
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^;\s]+)(?:;\s*(.*))?$")


def pins_for_the_ci_python() -> dict:
    """Package -> version pinned for Python 3.11 (the lines without a marker, or with one 3.11 meets)."""
    pins = {}
    with open(os.path.join(ROOT, "constraints.txt"), encoding="utf-8") as file:
        for line in file:
            match = PIN.match(line.strip())
            if match and (not match.group(3) or "< \"3.11\"" not in match.group(3)):
                pins[match.group(1).lower().replace("-", "_")] = match.group(2)
    return pins


def test_the_readme_names_the_pinned_versions():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as file:
        said = PINNED_LINE.search(file.read())
    assert said, "the README's paragraph on the pinned stack is gone"
    named = dict(re.findall(r"\b([a-z_][a-z0-9_]*) (\d[\w.]*\w)", said.group(0).replace("\n", " ")))
    pins = pins_for_the_ci_python()
    for package in ("tensorflow", "keras", "tf_keras", "tf2onnx", "onnx", "onnxruntime", "openvino", "jax"):
        assert named.get(package) == pins[package], (package, named.get(package), pins[package])
