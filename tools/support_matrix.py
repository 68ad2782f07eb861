#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Measure which Pythons and TensorFlow lines the package works with: docs/support-matrix.md and .csv.

For each combination of Python and TensorFlow release line (with that line's Keras 3 and
tf_keras), a fresh venv under ``--workdir`` gets a wheel built from this checkout's HEAD
(``git archive``, then ``pip wheel --no-deps``: commit what you want measured), the
combination's TensorFlow, Keras and tf_keras, and the newest onnxruntime and OpenVINO the
registry has for them. Then, from an empty directory, once per Keras flavour (tf_keras with
``TF_USE_LEGACY_KERAS=1``): ``tools/demo.py --keras FLAVOUR`` (a masked model built by the
installed Keras, converted and compared), and the package's regression corpus on both runtimes
(``python -m masked_lstm_rewriter.corpus --keras FLAVOUR --runtime both``). Each combination's
installed versions, install outcome, demo results, corpus counts per flavour and runtime (with
the first failure) and times go to the page and the CSV, rewritten after every combination.
Each run's full output stays in ``--workdir/logs``.

    python tools/support_matrix.py                    # the default matrix (see DEFAULT_*)
    python tools/support_matrix.py --python 3.12 --tensorflow 2.16,2.21
    python tools/support_matrix.py --dry-run          # print the plan only
    python tools/support_matrix.py --reuse            # keep the wheel and results already in --workdir

The default matrix is every TensorFlow line on ``DEFAULT_PYTHON`` and every Python on
``DEFAULT_TENSORFLOW``: 3 to 10 minutes per combination on 2 cores once pip's cache has the
wheels (each TensorFlow wheel is several hundred MB the first time).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import glob
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run by any Python, imported by tools/test_support_matrix.py: not via toolutil
    sys.path.insert(0, ROOT)
# pylint: disable=wrong-import-position  (this checkout's modules, which import nothing outside the standard library)
from masked_lstm_rewriter.flavours import FLAVOURS, flavour_env  # noqa: E402
from masked_lstm_rewriter.sessions import RUNTIMES  # noqa: E402

LOG = logging.getLogger("support_matrix")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


@dataclasses.dataclass(frozen=True)
class Line:
    """A TensorFlow release line and the Keras 3 / tf_keras releases installed with it."""

    tensorflow: str   # "2.16": installs tensorflow==2.16.*
    keras: str        # the Keras 3 minor released with it (TensorFlow's own lower bound is older)
    pythons: tuple    # Pythons (of PYTHONS) that line publishes Linux wheels for (checked 2026-11-24)
    extra: tuple = ()  # what else it needs pinned: see ONNX_CAP

    @property
    def tf_keras(self) -> str:
        return self.tensorflow  # tf_keras's releases follow TensorFlow's


# onnx 1.19+ imports ml_dtypes.float4_e2m1fn (ml_dtypes 0.5+) but requires any ml_dtypes, and
# TensorFlow 2.16 and 2.17 cap ml_dtypes below 0.5 (~=0.3.1, <0.5): pip then installs onnx 1.19.0, whose
# import fails. Those lines are measured with onnx below 1.19 (measured 2026-11-24: see the page).
ONNX_CAP = ("onnx<1.19",)
# Keras 3 minor per line: the newest released when that TensorFlow line came out; 2.21 is the
# project's own stack (constraints.txt), where Python 3.10 takes Keras 3.12 (3.13+ need 3.11).
LINES = {line.tensorflow: line for line in (
    Line("2.16", "3.3", ("3.10", "3.11", "3.12"), ONNX_CAP),
    Line("2.17", "3.4", ("3.10", "3.11", "3.12"), ONNX_CAP),
    Line("2.18", "3.6", ("3.10", "3.11", "3.12")),
    Line("2.19", "3.9", ("3.10", "3.11", "3.12")),
    Line("2.20", "3.11", PYTHONS),
    Line("2.21", "3.15", PYTHONS),
)}
KERAS_FOR_PYTHON = {("2.21", "3.10"): "3.12"}
DEFAULT_PYTHON = "3.11"        # every line has wheels for it, it is CI's, and tf_keras 2.16/2.17 run on it
DEFAULT_TENSORFLOW = "2.21"    # the project's stack
VERSIONS = ("masked-lstm-rewriter", "tensorflow", "keras", "tf-keras", "tf2onnx", "onnx", "onnxruntime",
            "openvino", "numpy", "protobuf")
INSTALL_TIMEOUT = 3600
REVISION = "REVISION"  # next to the wheel: the commit it was built from
CORPUS_TIMEOUT = 3600


@dataclasses.dataclass(frozen=True)
class Combination:
    """One venv: a Python and a TensorFlow line."""

    python: str
    tensorflow: str

    @property
    def name(self) -> str:
        return f"py{self.python}-tf{self.tensorflow}"

    @property
    def line(self) -> Line:
        return LINES[self.tensorflow]

    @property
    def keras(self) -> str:
        return KERAS_FOR_PYTHON.get((self.tensorflow, self.python), self.line.keras)

    def requirements(self) -> List[str]:
        """What pip installs next to the wheel: this line's stack and both runtimes, newest that fit."""
        return [f"tensorflow=={self.tensorflow}.*", f"tf-keras=={self.line.tf_keras}.*", f"keras=={self.keras}.*",
                "onnxruntime", "openvino", *self.line.extra]


@dataclasses.dataclass
class CorpusRun:
    """One flavour on one runtime: its counts and the first failure (one line)."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: str = ""
    failed_formats: Dict[str, int] = dataclasses.field(default_factory=dict)  # saved format -> failures

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0


@dataclasses.dataclass
class Outcome:
    """Everything measured for one combination."""

    python: str
    tensorflow: str
    versions: Dict[str, str] = dataclasses.field(default_factory=dict)
    installed: bool = False
    install_error: str = ""
    install_seconds: float = 0.0
    runs: Dict[str, CorpusRun] = dataclasses.field(default_factory=dict)   # "keras3/onnxruntime" -> run
    corpus_seconds: Dict[str, float] = dataclasses.field(default_factory=dict)  # flavour -> seconds
    demos: Dict[str, str] = dataclasses.field(default_factory=dict)  # flavour -> "ok" or why it failed
    measured: str = ""  # when (UTC, "2026-11-24 22:24")

    @property
    def seconds(self) -> float:
        return self.install_seconds + sum(self.corpus_seconds.values())

    @property
    def ok(self) -> bool:
        return self.installed and len(self.runs) == len(FLAVOURS) * len(RUNTIMES) and all(
            run.ok for run in self.runs.values()) and all(demo == "ok" for demo in self.demos.values())

    @classmethod
    def from_json(cls, data: dict) -> "Outcome":
        runs = {key: CorpusRun(**value) for key, value in data.pop("runs", {}).items()}
        return cls(runs=runs, **data)


# ---------------------------------------------------------------- the plan

def parse_list(text: str, known: Iterable[str], what: str) -> Tuple[str, ...]:
    """``"3.10,3.12"`` -> ("3.10", "3.12"); raises ValueError for anything not in ``known``."""
    items = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [item for item in items if item not in known]
    if unknown or not items:
        raise ValueError(f"{what} are among {', '.join(known)}, comma-separated: {text!r}")
    return items


def default_plan() -> List[Combination]:
    """Every TensorFlow line on DEFAULT_PYTHON, then every other Python on DEFAULT_TENSORFLOW."""
    plan = [Combination(DEFAULT_PYTHON, tf) for tf in LINES]
    plan += [Combination(py, DEFAULT_TENSORFLOW) for py in PYTHONS if py != DEFAULT_PYTHON]
    return plan


def make_plan(pythons: Optional[Iterable[str]] = None,
              tensorflows: Optional[Iterable[str]] = None) -> List[Combination]:
    """The combinations to measure: the default matrix when neither is given, else every Python
    asked for (default all) with every line asked for (default all), wheels or not (a missing wheel
    is measured as a failed install)."""
    if pythons is None and tensorflows is None:
        return default_plan()
    return [Combination(py, tf) for py in (pythons or PYTHONS) for tf in (tensorflows or tuple(LINES))]


def describe_plan(plan: List[Combination]) -> List[str]:
    """One line per combination: what it installs (and whether that line has wheels for that Python)."""
    lines = []
    for number, combo in enumerate(plan, 1):
        note = "" if combo.python in combo.line.pythons else f"  (no tensorflow {combo.tensorflow} wheels " \
                                                             f"for Python {combo.python}: expected to fail)"
        lines.append(f"[{number}/{len(plan)}] python {combo.python}: {' '.join(combo.requirements())}{note}")
    return lines


# ---------------------------------------------------------------- running one combination

def find_python(version: str) -> Optional[str]:
    """An interpreter of ``version`` ("3.12"): ``python3.12`` on PATH if it runs, else pyenv's."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")),
                         reverse=True)
    for candidate in filter(None, candidates):
        done = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


def clean_env(**extra) -> dict:
    """This process's environment without what would point a child at the checkout or a flavour."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MLR_KERAS", "TF_USE_LEGACY_KERAS", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


def run_logged(command: List[str], log_path: str, timeout: int, env=None, cwd=None) -> Tuple[int, str]:
    """Run ``command`` with its output in ``log_path``; returns the exit code and the output."""
    try:
        done = subprocess.run(command, cwd=cwd, env=env or clean_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              check=False)
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else error.stdout or ""
        code, output = -1, output + f"\ntimed out after {timeout} s"
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n{output}\n(exit {code})\n")
    return code, output


def error_line(output: str) -> str:
    """The one line that says why a command failed: pip's first ERROR, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:") and "Location" not in line]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:300]


def build_wheel(workdir: str) -> str:
    """``pip wheel --no-deps`` of the checkout's committed files at HEAD (``git archive``), so that
    neither uncommitted work nor setuptools' build/ in the checkout end up in the wheel."""
    source = os.path.join(workdir, "source")
    shutil.rmtree(source, ignore_errors=True)
    os.makedirs(source)
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", source], input=archive.stdout, check=True)
    wheel_dir = os.path.join(workdir, "wheel")
    shutil.rmtree(wheel_dir, ignore_errors=True)
    code, output = run_logged([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", source, "-w", wheel_dir],
                              os.path.join(workdir, "logs", "wheel.log"), INSTALL_TIMEOUT)
    wheels = glob.glob(os.path.join(wheel_dir, "masked_lstm_rewriter-*.whl"))
    if code != 0 or len(wheels) != 1:
        raise RuntimeError(f"pip wheel failed: {error_line(output)}")
    with open(os.path.join(wheel_dir, REVISION), "w", encoding="utf-8") as handle:
        handle.write(checkout_revision())
    return wheels[0]


def stored_wheel(workdir: str) -> Tuple[Optional[str], str]:
    """The wheel an earlier run built in ``workdir`` and its commit, or (None, "")."""
    wheels = glob.glob(os.path.join(workdir, "wheel", "masked_lstm_rewriter-*.whl"))
    try:
        with open(os.path.join(workdir, "wheel", REVISION), encoding="utf-8") as handle:
            revision = handle.read().strip()
    except OSError:
        return None, ""
    return (wheels[0], revision) if len(wheels) == 1 else (None, "")


def installer() -> List[str]:
    """``uv pip install`` when uv is on PATH (faster), else None: the venv's own pip."""
    uv = shutil.which("uv")
    return [uv, "pip", "install"] if uv else []


def install(combo: Combination, wheel: str, venv: str, log_path: str, outcome: Outcome) -> None:
    """A fresh venv with the wheel and the combination's stack; fills the outcome's install fields."""
    interpreter = find_python(combo.python)
    if interpreter is None:
        outcome.install_error = f"no python{combo.python} on this machine"
        return
    shutil.rmtree(venv, ignore_errors=True)
    code, output = run_logged([interpreter, "-m", "venv", venv], log_path, 600)
    if code != 0:
        outcome.install_error = f"venv: {error_line(output)}"
        return
    python = os.path.join(venv, "bin", "python")
    uv = installer()
    command = uv + ["--python", python] if uv else [python, "-m", "pip", "install", "--progress-bar", "off"]
    code, output = run_logged(command + [wheel] + combo.requirements(), log_path, INSTALL_TIMEOUT)
    if code != 0:
        outcome.install_error = error_line(output)
        return
    outcome.versions = installed_versions(python)
    outcome.installed = True


def installed_versions(python: str) -> Dict[str, str]:
    """The versions of VERSIONS in the venv of ``python`` (read from metadata, nothing imported)."""
    script = ("import importlib.metadata as m, json, sys\nv = {}\nfor n in sys.argv[1:]:\n"
              "    try: v[n] = m.version(n)\n    except m.PackageNotFoundError: v[n] = ''\nprint(json.dumps(v))")
    done = subprocess.run([python, "-c", script, *VERSIONS], capture_output=True, text=True, env=clean_env(),
                          check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


RESULT_LINE = re.compile(r"^ ?(PASSED|FAILED|SKIPPED) (.+?) (\S+): (.*)$")


def result_lines(output: str) -> List[Tuple[str, str, str, str, str]]:
    """The corpus's result lines (``PASSED cli openvino ENTRY: detail``) as (status, path label,
    runtime, entry, detail); a label without a runtime is onnxruntime's, or a failed conversion."""
    results = []
    for line in output.splitlines():
        match = RESULT_LINE.match(line)
        if match:
            status, label, entry, detail = match.groups()
            words = label.split()  # padded to 8 characters
            runtime = words.pop() if words[-1] in RUNTIMES else "onnxruntime"
            results.append((status.lower(), " ".join(words), runtime, entry, detail))
    return results


def parse_corpus_output(output: str, exit_code: int) -> Dict[str, CorpusRun]:
    """Counts per runtime from a ``--runtime both`` run. A conversion that failed has one line and
    no runtime, and counts as failed on both; a run that checked nothing, or exited non-zero with no
    failure listed, fails on both with its last line as the reason."""
    runs = {runtime: CorpusRun() for runtime in RUNTIMES}
    results = result_lines(output)
    on_openvino = {(entry, path) for _, path, runtime, entry, _ in results if runtime == "openvino"}
    for status, path, runtime, entry, detail in results:
        targets = [runtime]
        if status == "failed" and runtime == "onnxruntime" and (entry, path) not in on_openvino:
            targets = list(RUNTIMES)  # the conversion failed: neither runtime ran it
        for target in targets:
            run = runs[target]
            setattr(run, status, getattr(run, status) + 1)
            if status == "failed":
                form = entry.rsplit("/", 1)[-1]
                run.failed_formats[form] = run.failed_formats.get(form, 0) + 1
                label = path if target == "onnxruntime" or len(targets) > 1 else f"{path} {target}"
                run.first_failure = run.first_failure or f"{entry} ({label}): {detail}"[:300]
    if exit_code != 0 and not any(run.failed for run in runs.values()):
        reason = error_line("\n".join(line for line in output.splitlines()
                                      if not line.startswith(("===", "   ")) and "passed," not in line))
        for run in runs.values():
            run.failed += 1
            run.first_failure = run.first_failure or f"exit {exit_code}: {reason}"
    return runs


def run_corpus(venv: str, flavour: str, workdir: str, log_path: str) -> Tuple[Dict[str, CorpusRun], float]:
    """The corpus for one flavour in the venv, from an empty directory (not the checkout)."""
    empty = os.path.join(workdir, "empty")
    os.makedirs(empty, exist_ok=True)
    env = flavour_env(flavour, base=clean_env())
    start = time.monotonic()
    code, output = run_logged([os.path.join(venv, "bin", "python"), "-m", "masked_lstm_rewriter.corpus",
                               "--keras", flavour, "--runtime", "both"], log_path, CORPUS_TIMEOUT, env=env, cwd=empty)
    return parse_corpus_output(output, code), time.monotonic() - start


def run_demo(venv: str, flavour: str, workdir: str, log_path: str) -> str:
    """tools/demo.py of the wheel's commit (``source``: it builds a masked model with the installed
    Keras itself, so no saved file's Keras version matters) for one flavour: "ok" or its last line."""
    demo = os.path.join(workdir, "source", "tools", "demo.py")
    if not os.path.exists(demo):
        return f"not run: no {demo}"
    code, output = run_logged([os.path.join(venv, "bin", "python"), demo, "--keras", flavour, "--runs", "20"],
                              log_path, CORPUS_TIMEOUT, cwd=os.path.join(workdir, "empty"))
    last = error_line(output)
    return "ok" if code == 0 and last.startswith("OK:") else f"exit {code}: {last}"


def utc_now(seconds: Optional[float] = None) -> str:
    """A time (now, or ``seconds`` since the epoch) as the page writes it: ``2026-11-24 22:24``."""
    moment = datetime.datetime.fromtimestamp(time.time() if seconds is None else seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M")


def load_outcome(path: str) -> Outcome:
    """A stored result; one stored without its time gets the file's."""
    with open(path, encoding="utf-8") as handle:
        outcome = Outcome.from_json(json.load(handle))
    outcome.measured = outcome.measured or utc_now(os.path.getmtime(path))
    return outcome


def measure(combo: Combination, wheel: str, workdir: str, keep: bool, step: str) -> Outcome:
    """Install and run one combination; removes its venv unless ``keep``."""
    outcome = Outcome(combo.python, combo.tensorflow, measured=utc_now())
    venv = os.path.join(workdir, "venvs", combo.name)
    log_path = os.path.join(workdir, "logs", f"{combo.name}.log")
    open(log_path, "w", encoding="utf-8").close()
    LOG.info("%s %s: installing %s", step, combo.name, " ".join(combo.requirements()))
    start = time.monotonic()
    install(combo, wheel, venv, log_path, outcome)
    outcome.install_seconds = round(time.monotonic() - start, 1)
    if not outcome.installed:
        LOG.info("%s %s: install failed in %.0f s: %s", step, combo.name, outcome.install_seconds,
                 outcome.install_error)
    else:
        LOG.info("%s %s: installed in %.0f s: %s", step, combo.name, outcome.install_seconds,
                 ", ".join(f"{k} {v}" for k, v in outcome.versions.items() if v))
        for flavour in FLAVOURS:
            outcome.demos[flavour] = run_demo(venv, flavour, workdir, log_path)
            LOG.info("%s %s: tools/demo.py --keras %s: %s", step, combo.name, flavour, outcome.demos[flavour])
            LOG.info("%s %s: corpus, %s, onnxruntime and openvino", step, combo.name, flavour)
            runs, seconds = run_corpus(venv, flavour, workdir, log_path)
            outcome.corpus_seconds[flavour] = round(seconds, 1)
            for runtime, run in runs.items():
                outcome.runs[f"{flavour}/{runtime}"] = run
                LOG.info("%s %s: %s on %s: %d passed, %d failed, %d skipped (%.0f s)%s", step, combo.name,
                         flavour, runtime, run.passed, run.failed, run.skipped, seconds,
                         f"; first failure: {run.first_failure}" if run.first_failure else "")
    if not keep:
        shutil.rmtree(venv, ignore_errors=True)
    return outcome


# ---------------------------------------------------------------- the page and the CSV

CSV_FIELDS = ("python", "tensorflow_line", "installed", "install_error", "flavour", "demo", "runtime", "passed",
              "failed", "skipped", "failed_by_format", "first_failure", "corpus_seconds", "install_seconds") + tuple(
                  f"version_{name.replace('-', '_')}" for name in VERSIONS)


def csv_rows(outcomes: List[Outcome]) -> List[dict]:
    """One row per combination, flavour and runtime (one row for a combination that did not install)."""
    rows = []
    for outcome in outcomes:
        base = {"python": outcome.python, "tensorflow_line": outcome.tensorflow,
                "installed": "yes" if outcome.installed else "no", "install_error": outcome.install_error,
                "install_seconds": f"{outcome.install_seconds:.0f}"}
        base.update({f"version_{name.replace('-', '_')}": outcome.versions.get(name, "") for name in VERSIONS})
        if not outcome.runs:
            rows.append(dict(base))
        for key, run in outcome.runs.items():
            flavour, runtime = key.split("/")
            rows.append(dict(base, flavour=flavour, demo=outcome.demos.get(flavour, ""), runtime=runtime,
                             passed=run.passed, failed=run.failed,
                             skipped=run.skipped, first_failure=run.first_failure,
                             failed_by_format=formats_text(run),
                             corpus_seconds=f"{outcome.corpus_seconds.get(flavour, 0):.0f}"))
    return rows


def formats_text(run: CorpusRun) -> str:
    """``keras 22, h5 3``: a run's failures per saved format of the entries."""
    return ", ".join(f"{form} {count}" for form, count in sorted(run.failed_formats.items()))


def write_csv(outcomes: List[Outcome], path: str) -> None:
    """docs/support-matrix.csv: the rows of :func:`csv_rows`."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_rows(outcomes))


SAVED_FORMATS = {"keras", "h5"}  # Keras's own files (the corpus's were saved by the newest Keras)
PASS, PASS_BUT_FILES, FAIL, NO_INSTALL = "pass", "pass but newer Keras files", "FAILED", "does not install"
FIRST_FAILURE_CHARS = 200  # on the page; the CSV keeps 300


def verdict(outcome: Outcome) -> str:
    """``pass``; ``pass but newer Keras files`` when the only failures are corpus entries in Keras's
    own formats and the demo (a model this Keras built) passed in both flavours; else ``FAILED``,
    or ``does not install``."""
    if not outcome.installed:
        return NO_INSTALL
    if outcome.ok:
        return PASS
    complete = len(outcome.runs) == len(FLAVOURS) * len(RUNTIMES) and all(
        outcome.demos.get(flavour) == "ok" for flavour in FLAVOURS)
    failed = [run for run in outcome.runs.values() if not run.ok]
    only_files = all(run.passed and sum(run.failed_formats.values()) == run.failed
                     and set(run.failed_formats) <= SAVED_FORMATS for run in failed)
    return PASS_BUT_FILES if complete and only_files else FAIL


def cell(run: Optional[CorpusRun]) -> str:
    """A table cell: ``ok 40`` (checks passed), ``FAILED 3 of 40 (keras 3)``, or ``-`` when it did not run."""
    if run is None:
        return "-"
    total = run.passed + run.failed
    if run.ok:
        return f"ok {run.passed}"
    return f"FAILED {run.failed} of {total}" + (f" ({formats_text(run)})" if run.failed_formats else "")


def markdown_table(outcomes: List[Outcome]) -> List[str]:
    """The page's table: one row per combination."""
    header = ["Python", "TensorFlow", "Keras 3", "tf_keras", "onnxruntime", "OpenVINO", "verdict"] + [
        f"{'Keras 3' if f == 'keras3' else 'tf_keras'} on {'ORT' if r == 'onnxruntime' else 'OV'}"
        for f in FLAVOURS for r in RUNTIMES] + ["demo", "time"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for o in outcomes:
        v = o.versions
        if o.installed:
            stack = [v.get("tensorflow", ""), v.get("keras", ""), v.get("tf-keras", ""), v.get("onnxruntime", ""),
                     v.get("openvino", "")]
            runs = [cell(o.runs.get(f"{f}/{r}")) for f in FLAVOURS for r in RUNTIMES]
            runs.append(" / ".join("ok" if o.demos.get(f) == "ok" else "FAILED" if o.demos.get(f) else "-"
                                   for f in FLAVOURS))
        else:
            stack = [f"{o.tensorflow}.*", "", "", "", ""]
            runs = [""] * (len(FLAVOURS) * len(RUNTIMES) + 1)
        result = verdict(o)
        result = result if result == PASS else f"**{result}**"
        lines.append("| " + " | ".join([o.python] + stack + [result] + runs + [f"{o.seconds / 60:.0f} min"]) + " |")
    return lines


def failure_lines(outcomes: List[Outcome]) -> List[str]:
    """A bullet per failed install, failed demo, and flavour whose corpus failed on some runtime:
    the counts per runtime and the first failure (where both runtimes failed alike, the first one's)."""
    lines = []
    for o in outcomes:
        where = f"Python {o.python}, TensorFlow {o.tensorflow}"
        if not o.installed:
            lines.append(f"- {where}: install failed: `{o.install_error}`")
        for flavour, demo in o.demos.items():
            if demo != "ok":
                lines.append(f"- {where}, tools/demo.py --keras {flavour}: `{demo[:FIRST_FAILURE_CHARS]}`")
        for flavour in FLAVOURS:
            failed = [(runtime, o.runs[f"{flavour}/{runtime}"]) for runtime in RUNTIMES
                      if f"{flavour}/{runtime}" in o.runs and not o.runs[f"{flavour}/{runtime}"].ok]
            if failed:
                counts = ", ".join(f"{run.failed} on {runtime}" + (f" ({formats_text(run)})" if run.failed_formats
                                                                    else "") for runtime, run in failed)
                first = (failed[0][1].first_failure or "nothing passed")[:FIRST_FAILURE_CHARS]
                lines.append(f"- {where}, {flavour} corpus: failed {counts}; first: `{first}`")
    return lines


def machine() -> str:
    """This machine in one line: OS, CPU model, cores, memory."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
        with open("/proc/meminfo", encoding="utf-8") as handle:
            kib = int(next(line.split()[1] for line in handle if line.startswith("MemTotal")))
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = ""
    return f"{platform.system()} {platform.machine()} ({platform.libc_ver()[0]} {platform.libc_ver()[1]}), " \
           f"{model or platform.processor() or 'unknown CPU'}, {os.cpu_count()} cores{memory}, no GPU used"


def checkout_revision() -> str:
    """The commit the wheel is built from (HEAD), short, with its date."""
    done = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h (%cs)"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or "unknown"


def committed_on(revision: str) -> str:
    """`` as committed on DATE`` from ``checkout_revision()``'s text (the docs carry no commit hashes)."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", revision or "")
    return f" as committed on {found.group(0)}" if found else ""


KERAS_FILES_NOTE = (
    "`pass but newer Keras files`: every failure is a corpus entry saved as a `.keras` or `.h5` file, and "
    "the corpus's files were saved with Keras 3.15 and tf_keras 2.21, which older Keras releases cannot "
    "read (the conversion fails while Keras loads the file, before the plugin runs). On those lines the "
    "plugin is tested by the corpus's SavedModel entries, which older TensorFlow reads, on both runtimes, "
    "and by tools/demo.py, whose model the installed Keras builds itself; all of them passed.")


def when(outcomes: List[Outcome]) -> str:
    """The span of the combinations' measurements: ``2026-11-24 22:24 to 23:15 UTC``."""
    times = sorted(o.measured for o in outcomes if o.measured)
    if not times:
        return "unknown"
    last = times[-1][len("2026-11-24 "):] if times[-1][:10] == times[0][:10] else times[-1]
    return f"{times[0]} UTC" if times[0] == times[-1] else f"{times[0]} to {last} UTC"


def render_page(outcomes: List[Outcome], meta: dict) -> str:
    """docs/support-matrix.md: what was tested, when, where, the table, the failures, how to re-run."""
    ok = [o for o in outcomes if o.ok]
    files = sum(verdict(o) == PASS_BUT_FILES for o in outcomes)
    failures = failure_lines(outcomes)
    parts = [
        "# Support matrix (measured)",
        "",
        "Generated by `tools/support_matrix.py`; do not edit by hand. For each Python and TensorFlow "
        "line below, a fresh venv got the package's wheel (built from the checkout's commit), that line's "
        "TensorFlow, Keras 3 and tf_keras, and the newest onnxruntime and OpenVINO the registry had for "
        "them; then the package's regression corpus (`python -m masked_lstm_rewriter.corpus --keras FLAVOUR "
        "--runtime both`: every entry converted by the library and the command line, compared with Keras "
        "on both runtimes) ran once per Keras flavour. A cell counts the corpus's checks: `ok N` means N "
        "passed and none failed (skips are the corpus's known runtime refusals); `FAILED 22 of 76 (keras 22)` "
        "counts the failures and the saved format of the failing entries. `demo` is "
        "`tools/demo.py --keras keras3` / `--keras tf_keras`: a masked model built by the installed Keras "
        "itself, converted with and without the plugin and compared with Keras on onnxruntime.",
        "",
        f"- when: {when(outcomes)}",
        f"- machine: {meta['machine']}",
        f"- package: a wheel of the checkout's committed files{committed_on(meta['revision'])}; tf2onnx 1.17",
        f"- matrix: {meta['matrix']}",
        f"- result: {len(ok)} of {len(outcomes)} combinations pass everything; {files} more pass everything "
        "but the corpus's Keras files saved by a newer Keras (see below)",
        "",
    ] + markdown_table(outcomes) + [""]
    if failures:
        parts += ["What failed (the first failure of each):", ""] + failures + [""]
    if any(verdict(o) == PASS_BUT_FILES for o in outcomes):
        parts += [KERAS_FILES_NOTE, ""]
    parts += [
        "Keras 3 per line: the newest Keras minor when that TensorFlow line was released (2.16: 3.3, "
        "2.17: 3.4, 2.18: 3.6, 2.19: 3.9, 2.20: 3.11, 2.21: 3.15, or 3.12 on Python 3.10, where Keras 3.13+ "
        "does not install). TensorFlow 2.16-2.19 publish no wheels for Python 3.13. The lines are swept on "
        "Python 3.11: on 3.12, tf_keras 2.16 and 2.17 cannot build an Embedding layer (`TypeError: 'float' "
        "object cannot be interpreted as an integer`, from random.randint, measured with "
        "`--python 3.12 --tensorflow 2.16,2.17`) before the plugin is involved. TensorFlow 2.16 and 2.17 "
        "are installed with `onnx<1.19`: onnx 1.19 needs ml_dtypes 0.5 but does not say so, those lines cap "
        "ml_dtypes below it, and without the cap pip installs onnx 1.19.0, whose import fails "
        "(`AttributeError: module 'ml_dtypes' has no attribute 'float4_e2m1fn'`), before any conversion.",
        "",
        "Re-run (from a checkout; the venvs go under `--workdir`, default /tmp/mlr-matrix, and are removed "
        "unless `--keep`):",
        "",
        "```bash",
        ".venv/bin/python tools/support_matrix.py                 # the default matrix above",
        ".venv/bin/python tools/support_matrix.py --python 3.11 --tensorflow 2.18,2.19",
        ".venv/bin/python tools/support_matrix.py --dry-run       # the plan only",
        "```",
        "",
        "The same results, one row per combination, flavour and runtime with every installed version: "
        "[support-matrix.csv](support-matrix.csv).",
        "",
    ]
    return "\n".join(parts)


def write_outputs(outcomes: List[Outcome], meta: dict, out_dir: str) -> str:
    """Write the page and the CSV into ``out_dir``; returns the page's path."""
    os.makedirs(out_dir, exist_ok=True)
    page = os.path.join(out_dir, "support-matrix.md")
    with open(page, "w", encoding="utf-8") as handle:
        handle.write(render_page(outcomes, meta))
    write_csv(outcomes, os.path.join(out_dir, "support-matrix.csv"))
    return page


# ---------------------------------------------------------------- command line

def parse_args(argv=None) -> argparse.Namespace:
    """The options; --python and --tensorflow are checked against PYTHONS and LINES."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--python", help=f"Pythons, comma-separated (among {', '.join(PYTHONS)})")
    parser.add_argument("--tensorflow", help=f"TensorFlow lines, comma-separated (among {', '.join(LINES)})")
    parser.add_argument("--workdir", default="/tmp/mlr-matrix", help="venvs, wheel and logs (default: %(default)s)")
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "docs"),
                        help="where support-matrix.md and .csv go (default: the checkout's docs/)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--keep", action="store_true", help="keep each combination's venv")
    parser.add_argument("--reuse", action="store_true",
                        help="take the wheel and the combinations already measured in --workdir instead of "
                             "building and measuring them again (delete a results/*.json to measure it again)")
    args = parser.parse_args(argv)
    try:
        args.pythons = parse_list(args.python, PYTHONS, "Pythons") if args.python else None
        args.tensorflows = parse_list(args.tensorflow, tuple(LINES), "TensorFlow lines") if args.tensorflow else None
    except ValueError as error:
        parser.error(str(error))
    workdir = os.path.abspath(args.workdir)
    if workdir == ROOT or workdir.startswith(ROOT + os.sep):
        parser.error("--workdir must be outside the checkout")
    args.workdir = workdir
    return args


def matrix_text(args) -> str:
    """How the page names the matrix that was asked for."""
    if args.pythons is None and args.tensorflows is None:
        return (f"the default: every TensorFlow line on Python {DEFAULT_PYTHON}, and every Python on "
                f"TensorFlow {DEFAULT_TENSORFLOW}")
    return (f"Pythons {', '.join(args.pythons or PYTHONS)} x TensorFlow "
            f"{', '.join(args.tensorflows or tuple(LINES))}")


def main(argv=None) -> int:
    """Measure the plan, rewriting the page and CSV after each combination; 0 when all pass."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    plan = make_plan(args.pythons, args.tensorflows)
    if args.dry_run:
        print("\n".join(describe_plan(plan)))
        return 0
    for sub in ("logs", "results", "venvs"):
        os.makedirs(os.path.join(args.workdir, sub), exist_ok=True)
    wheel, revision = stored_wheel(args.workdir) if args.reuse else (None, "")
    if wheel:
        LOG.info("reusing %s (%s)", wheel, revision)
    else:
        LOG.info("building the wheel from %s (%s)", ROOT, checkout_revision())
        wheel = build_wheel(args.workdir)
        revision = checkout_revision()
    meta = {"machine": machine(), "revision": revision, "matrix": matrix_text(args)}
    outcomes = []
    for number, combo in enumerate(plan, 1):
        stored = os.path.join(args.workdir, "results", f"{combo.name}.json")
        step = f"[{number}/{len(plan)}]"
        if args.reuse and os.path.exists(stored):
            outcomes.append(load_outcome(stored))
            LOG.info("%s %s: reused %s", step, combo.name, stored)
        else:
            outcomes.append(measure(combo, wheel, args.workdir, args.keep, step))
            with open(stored, "w", encoding="utf-8") as handle:
                json.dump(dataclasses.asdict(outcomes[-1]), handle, indent=1)
        page = write_outputs(outcomes, meta, args.out_dir)
        LOG.info("%s %s: %s in %.0f min; %s updated", step, combo.name,
                 "ok" if outcomes[-1].ok else "FAILED", outcomes[-1].seconds / 60, page)
    print(page)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
