# SPDX-License-Identifier: Apache-2.0
"""tools/support_matrix.py's pure parts, and constraints.txt's markers: nothing installed, no TensorFlow.

The plan for given options, the corpus output parser, the page and CSV writers on a made-up
outcome, and for each Python 3.10-3.13 exactly one pin of each package in constraints.txt, in
agreement with setup.cfg's ``test`` extra and ``python_requires``.
"""

from __future__ import annotations

import configparser
import csv
import dataclasses
import os
import sys

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


import support_matrix as sm  # noqa: E402  (beside this file: pytest puts tools/ on sys.path)


# ---------------------------------------------------------------- the plan

def test_default_plan_is_every_line_on_one_python_and_every_python_on_the_newest():
    plan = sm.make_plan()
    assert [(c.python, c.tensorflow) for c in plan if c.python == sm.DEFAULT_PYTHON] == [
        (sm.DEFAULT_PYTHON, tf) for tf in ("2.16", "2.17", "2.18", "2.19", "2.20", "2.21")]
    assert sorted(c.python for c in plan if c.tensorflow == sm.DEFAULT_TENSORFLOW) == list(PYTHONS)
    assert len(plan) == len(set(plan)) == 9
    assert all(c.python in c.line.pythons for c in plan), "the default plan only has combinations with wheels"


def test_plan_for_options_is_their_product():
    plan = sm.make_plan(("3.10", "3.13"), ("2.16", "2.21"))
    assert [c.name for c in plan] == ["py3.10-tf2.16", "py3.10-tf2.21", "py3.13-tf2.16", "py3.13-tf2.21"]
    assert [c.name for c in sm.make_plan(("3.11",), None)] == [f"py3.11-tf{tf}" for tf in sm.LINES]
    assert [c.name for c in sm.make_plan(None, ("2.20",))] == [f"py{py}-tf2.20" for py in PYTHONS]


def test_requirements_pin_the_line_and_its_keras():
    assert sm.Combination("3.12", "2.16").requirements() == [
        "tensorflow==2.16.*", "tf-keras==2.16.*", "keras==3.3.*", "onnxruntime", "openvino", "onnx<1.19"]
    assert "keras==3.12.*" in sm.Combination("3.10", "2.21").requirements()  # Keras 3.13+ needs Python 3.11
    assert "keras==3.15.*" in sm.Combination("3.11", "2.21").requirements()


def test_dry_run_names_combinations_without_wheels():
    lines = sm.describe_plan(sm.make_plan(("3.13",), ("2.19", "2.20")))
    assert lines[0].startswith("[1/2] python 3.13: tensorflow==2.19.*") and "expected to fail" in lines[0]
    assert "expected to fail" not in lines[1]


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="among"):
        sm.parse_list("3.9,3.10", sm.PYTHONS, "Pythons")
    assert sm.parse_list(" 3.12, 3.10,3.12 ", sm.PYTHONS, "Pythons") == ("3.12", "3.10")
    with pytest.raises(SystemExit):
        sm.parse_args(["--workdir", os.path.join(ROOT, "matrix")])  # inside the checkout


# ---------------------------------------------------------------- reading the corpus's output

CORPUS_OUTPUT = """\
=== corpus /x/data: 70 entries; masked-lstm-rewriter 0.1.0 at /x
=== keras3
 PASSED library  keras3/embedding_forward/saved_model: max |onnx - keras| = 1.2e-07 (0.3s)
 PASSED library openvino keras3/embedding_forward/saved_model: max |onnx - keras| = 9e-08 (0.3s)
 FAILED cli      keras3/stacked/keras: expected 2 LSTM nodes, found 1 and a Loop
SKIPPED cli openvino keras3/hard_sigmoid/keras: known: OpenVINO's CPU plugin has no HardSigmoid
 FAILED cli openvino keras3/stacked/keras: max |onnx - keras| = 0.5 > 1e-05

=== summary
  keras3: 2 passed, 2 failed, 1 skipped in 9s: FAILED
          FAILED cli keras3/stacked/keras: expected 2 LSTM nodes, found 1 and a Loop
2 passed, 2 failed, 1 skipped
"""


def test_corpus_output_is_counted_per_runtime():
    runs = sm.parse_corpus_output(CORPUS_OUTPUT, 1)
    assert (runs["onnxruntime"].passed, runs["onnxruntime"].failed, runs["onnxruntime"].skipped) == (1, 1, 0)
    assert (runs["openvino"].passed, runs["openvino"].failed, runs["openvino"].skipped) == (1, 1, 1)
    assert runs["onnxruntime"].first_failure == "keras3/stacked/keras (cli): expected 2 LSTM nodes, found 1 and a Loop"
    assert runs["openvino"].first_failure.startswith("keras3/stacked/keras (cli openvino): max")
    assert not runs["onnxruntime"].ok


def test_a_failed_conversion_fails_on_both_runtimes():
    output = (" PASSED library  keras3/a/saved_model: max 1e-07 (0.3s)\n"
              " PASSED library openvino keras3/a/saved_model: max 1e-07 (0.3s)\n"
              " FAILED library  keras3/a/keras: TypeError: could not be deserialized\n"
              " FAILED cli      keras3/a/keras: the conversion exited with 1:\n")
    runs = sm.parse_corpus_output(output, 1)
    for run in runs.values():
        assert (run.passed, run.failed, run.failed_formats) == (1, 2, {"keras": 2})
        assert run.first_failure == "keras3/a/keras (library): TypeError: could not be deserialized"
    assert sm.cell(runs["openvino"]) == "FAILED 2 of 3 (keras 2)"


def test_a_worker_that_checked_nothing_fails_with_its_last_line():
    output = ("=== keras3\nTraceback (most recent call last):\n  File \"x\"\nImportError: numpy.core.multiarray "
              "failed to import\n\n=== summary\n  keras3: 0 passed, 1 failed, 0 skipped in 3s; the worker exited "
              "with 1; no entry checked: FAILED\n0 passed, 1 failed, 0 skipped\n")
    runs = sm.parse_corpus_output(output, 1)
    for run in runs.values():
        assert run.failed == 1 and run.passed == 0
        assert run.first_failure == "exit 1: ImportError: numpy.core.multiarray failed to import"


def test_pip_errors_give_the_first_error_line():
    output = ("WARNING: Location 'file:///x' is ignored\nERROR: Could not find a version that satisfies the "
              "requirement tensorflow==2.16.*\nERROR: No matching distribution found for tensorflow==2.16.*\n")
    assert sm.error_line(output) == "ERROR: Could not find a version that satisfies the requirement tensorflow==2.16.*"
    assert sm.error_line("") == "no output"


# ---------------------------------------------------------------- the page and the CSV

def fake_outcomes():
    versions = {"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.21.0", "onnxruntime": "1.32.0",
                "openvino": "2026.4.1"}
    good = sm.Outcome("3.12", "2.21", versions=versions, installed=True, install_seconds=100.0,
                      runs={f"{f}/{r}": sm.CorpusRun(passed=70, skipped=2) for f in sm.FLAVOURS for r in sm.RUNTIMES},
                      corpus_seconds={"keras3": 200.0, "tf_keras": 300.0}, demos={"keras3": "ok", "tf_keras": "ok"})
    bad = sm.Outcome("3.12", "2.16", versions=dict(versions, tensorflow="2.16.2"), installed=True,
                     install_seconds=60.0, corpus_seconds={"keras3": 10.0, "tf_keras": 10.0},
                     demos={"keras3": "ok", "tf_keras": "exit 1: ValueError: boom"},
                     runs={f"{f}/{r}": sm.CorpusRun(passed=70) for f in sm.FLAVOURS for r in sm.RUNTIMES})
    bad.runs["tf_keras/openvino"] = sm.CorpusRun(passed=60, failed=10, first_failure="tf_keras/x/h5 (cli): boom")
    missing = sm.Outcome("3.13", "2.16", install_error="ERROR: No matching distribution found for tensorflow==2.16.*",
                         measured="2026-11-24 23:10")
    good.measured, bad.measured = "2026-11-24 22:00", "2026-11-24 22:30"
    return [good, bad, missing]


def test_table_marks_passes_failures_and_failed_installs():
    good, bad, missing = fake_outcomes()
    assert good.ok and not bad.ok and not missing.ok
    lines = sm.markdown_table([good, bad, missing])
    assert len(lines) == 5 and lines[0].count("|") == lines[2].count("|") == lines[4].count("|")
    assert lines[2] == ("| 3.12 | 2.21.0 | 3.15.1 | 2.21.0 | 1.32.0 | 2026.4.1 | pass | ok 70 | ok 70 | ok 70 | ok 70 "
                        "| ok / ok | 10 min |")
    assert "| **FAILED** |" in lines[3] and "| FAILED 10 of 70 |" in lines[3] and lines[3].count("ok 70") == 3
    assert "| ok / FAILED |" in lines[3]
    assert "| **does not install** |" in lines[4] and "2.16.*" in lines[4]


def test_verdict_tells_newer_keras_files_from_real_failures():
    good, bad, missing = fake_outcomes()
    assert [sm.verdict(o) for o in (good, bad, missing)] == [sm.PASS, sm.FAIL, sm.NO_INSTALL]
    files = sm.Outcome.from_json(dataclasses.asdict(good))
    files.runs["keras3/openvino"] = sm.CorpusRun(passed=50, failed=22, failed_formats={"keras": 22})
    assert sm.verdict(files) == sm.PASS_BUT_FILES
    files.runs["keras3/onnxruntime"] = sm.CorpusRun(passed=50, failed=23, failed_formats={"keras": 22,
                                                                                           "saved_model": 1})
    assert sm.verdict(files) == sm.FAIL, "a SavedModel failure is the plugin's"
    files.runs["keras3/onnxruntime"] = sm.CorpusRun(passed=50)
    files.demos["tf_keras"] = "exit 1: boom"
    assert sm.verdict(files) == sm.FAIL, "the demo's model is this Keras's own"
    files.demos["tf_keras"] = "ok"
    files.runs["tf_keras/openvino"] = sm.CorpusRun(passed=0, failed=1, first_failure="exit 1: ImportError")
    assert sm.verdict(files) == sm.FAIL


def test_page_says_what_when_where_and_how_to_rerun(tmp_path):
    meta = {"machine": "Linux x86_64, 2 cores", "revision": "abc1234 (2026-11-24)", "matrix": "the default"}
    page = sm.write_outputs(fake_outcomes(), meta, str(tmp_path))
    text = open(page, encoding="utf-8").read()
    assert "abc1234" not in text, "the docs carry no commit hashes"
    for needle in ("when: 2026-11-24 22:00 to 23:10 UTC", "Linux x86_64, 2 cores", "as committed on 2026-11-24",
                   "1 of 3 combinations pass everything; 0",
                   "tools/support_matrix.py --dry-run",
                   "TensorFlow 2.16, tf_keras corpus: failed 10 on openvino; first: `tf_keras/x/h5 (cli): boom`",
                   "install failed: `ERROR: No matching distribution found for tensorflow==2.16.*`",
                   "tools/demo.py --keras tf_keras: `exit 1: ValueError: boom`"):
        assert needle in text
    with open(tmp_path / "support-matrix.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 + 4 + 1
    assert rows[0]["version_tensorflow"] == "2.21.0" and rows[0]["passed"] == "70" and rows[0]["installed"] == "yes"
    assert rows[0]["demo"] == "ok" and rows[7]["flavour"] == "tf_keras" and rows[7]["demo"].startswith("exit 1")
    assert [r["failed"] for r in rows if r["tensorflow_line"] == "2.16" and r["runtime"] == "openvino"] == ["0", "10"]
    assert rows[-1]["installed"] == "no" and rows[-1]["flavour"] == ""
    assert "tensorflow==2.16" in rows[-1]["install_error"]


def test_stored_outcomes_round_trip():
    for outcome in fake_outcomes():
        assert sm.Outcome.from_json(dataclasses.asdict(outcome)) == outcome


# ---------------------------------------------------------------- constraints.txt and setup.cfg

def constraint_pins(python: str) -> dict:
    """constraints.txt's pins that apply on ``python``: normalised name -> list of versions."""
    pins = {}
    with open(os.path.join(ROOT, "constraints.txt"), encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            requirement = Requirement(line)
            assert str(requirement.specifier).startswith("=="), f"not an exact pin: {line}"
            if requirement.marker is None or requirement.marker.evaluate(environment(python)):
                pins.setdefault(requirement.name.lower().replace("_", "-"), []).append(str(requirement.specifier)[2:])
    return pins


def environment(python: str) -> dict:
    return {"python_version": python, "python_full_version": python + ".0", "extra": ""}


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"), encoding="utf-8")
    return config


@pytest.mark.parametrize("python", PYTHONS)
def test_constraints_pin_each_package_once_per_python(python):
    pins = constraint_pins(python)
    assert {name: versions for name, versions in pins.items() if len(versions) != 1} == {}
    assert pins["tensorflow"] == ["2.21.0"] and pins["tf-keras"] == ["2.21.0"]
    assert pins["numpy"] == (["2.2.6"] if python == "3.10" else ["2.4.6"])  # numpy 2.3+ needs Python 3.11


@pytest.mark.parametrize("python", PYTHONS)
def test_test_extra_agrees_with_the_constraints(python):
    """Every pin of the ``test`` extra that applies on ``python`` admits the constraints' version."""
    pins = constraint_pins(python)
    lines = [line for line in setup_cfg()["options.extras_require"]["test"].splitlines() if line.strip()]
    for requirement in map(Requirement, lines):
        if requirement.marker is not None and not requirement.marker.evaluate(environment(python)):
            continue
        name = requirement.name.lower().replace("_", "-")
        if requirement.specifier and name in pins:
            assert requirement.specifier.contains(pins[name][0]), f"{requirement} vs {name}=={pins[name][0]}"


def test_python_requires_and_classifiers_agree():
    config = setup_cfg()
    requires = SpecifierSet(config["options"]["python_requires"])
    classified = [line.rsplit("::", 1)[1].strip() for line in config["metadata"]["classifiers"].splitlines()
                  if line.strip().startswith("Programming Language :: Python :: 3.")]
    assert classified == [python for python in PYTHONS if requires.contains(python + ".0")]


def test_extras_start_at_the_oldest_line_that_installs_as_is():
    """The ``keras`` and ``tf_keras`` extras' lower bound is the oldest TensorFlow line the matrix
    installs without extra pins (2.16 and 2.17 need onnx<1.19 by hand: docs/support-matrix.md)."""
    oldest = min((line.tensorflow for line in sm.LINES.values() if not line.extra),
                 key=lambda text: tuple(map(int, text.split("."))))
    extras = setup_cfg()["options.extras_require"]
    for extra, names in (("keras", {"tensorflow"}), ("tf_keras", {"tensorflow", "tf-keras"})):
        requirements = [Requirement(line) for line in extras[extra].splitlines() if line.strip()]
        assert {r.name for r in requirements} == names
        assert all(str(r.specifier) == f">={oldest}" for r in requirements), (extra, oldest)
