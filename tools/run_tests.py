#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""THE test command: the suite once per Keras flavour, each in its own process.

TensorFlow picks its Keras once, at import, so Keras 3 and tf_keras cannot share a process:

* ``MLR_KERAS=keras3``, ``TF_USE_LEGACY_KERAS`` unset;
* ``MLR_KERAS=tf_keras``, ``TF_USE_LEGACY_KERAS=1``.

Each run is ``python -m pytest tests`` (plus any arguments not recognised here, passed through
to pytest: ``-x``, ``-k EXPR``, ``tests/test_guard.py``, ...). On a machine with two cores or
more the two runs go at once (``--jobs``, default: one per flavour up to the cores; measured on 2
cores: 38-60 minutes for both, against about 62 one after the other): Keras 3's output shows
live, tf_keras's is printed when both have ended. ``--jobs 1`` runs them one after the other,
both live. Counts come from each run's JUnit XML report. Prints each flavour's slowest test
files (minutes), the counts per flavour, then
as its very last line ``N passed, N failed, N skipped`` (errors count as failed; a run that
crashed or ran no test counts as one failed). Exits non-zero when any run failed, had errors, crashed, or ran no test.

    .venv/bin/python tools/run_tests.py [--keras {keras3,tf_keras}] [--jobs N] [--workers N] [pytest args...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = "tests"
FLAVOURS = ("keras3", "tf_keras")
NO_TESTS_COLLECTED = 5  # pytest's exit code when nothing ran
SLOWEST = 8             # test files listed with their time after the run


@dataclasses.dataclass
class Result:
    flavour: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    exit_code: int = 0
    seconds: float = 0.0
    problem: str = ""  # why the run counts as failed beyond its test counts
    file_seconds: dict = dataclasses.field(default_factory=dict)  # test file -> seconds of its cases

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def ok(self) -> bool:
        return not self.problem and self.exit_code == 0 and not self.failed and not self.errors and self.ran > 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Run the test suite once per Keras flavour, each in its own process. "
                    "Arguments not listed here are passed to pytest.")
    parser.add_argument("--keras", choices=FLAVOURS, action="append",
                        help="run only this flavour (repeatable; default: both)")
    parser.add_argument("--workers", type=int, default=0, metavar="N",
                        help="pytest-xdist workers per run (pytest -n N); default 0: no xdist. "
                             "TensorFlow is heavy: on 2 cores, plain runs are usually fastest")
    parser.add_argument("--jobs", type=int, default=min(len(FLAVOURS), os.cpu_count() or 1), metavar="N",
                        help="flavours run at once (default: one per flavour up to the cores); 1: one after "
                             "the other, with live output")
    args, pytest_args = parser.parse_known_args(argv)
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    return args, pytest_args


def flavour_env(flavour: str) -> dict:
    env = dict(os.environ)
    env["MLR_KERAS"] = flavour
    if flavour == "tf_keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    else:
        env.pop("TF_USE_LEGACY_KERAS", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def names_paths(pytest_args) -> bool:
    """Do the pass-through arguments name test files or directories (then ``tests`` is not added)?"""
    previous = ""
    for arg in pytest_args:
        takes_value = previous in ("-k", "-m", "-p", "-o", "-c", "-W", "--rootdir", "--junitxml",
                                   "--deselect", "--ignore", "--maxfail", "-n", "--basetemp")
        if not arg.startswith("-") and not takes_value and os.path.exists(arg.split("::")[0]):
            return True
        previous = arg
    return False


def count_junit(path: str, result: Result) -> None:
    """Counts per test case: an error or failure makes it failed, else skipped, else passed; and
    each test file's time (where CI's time goes, for sampling: docs/testing.md)."""
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        module = next((part for part in case.get("classname", "").split(".") if part.startswith("test_")), "?")
        result.file_seconds[module] = result.file_seconds.get(module, 0.0) + float(case.get("time") or 0)
        tags = {child.tag for child in case}
        if "error" in tags:
            result.errors += 1
        elif "failure" in tags:
            result.failed += 1
        elif "skipped" in tags:
            result.skipped += 1
        else:
            result.passed += 1


def start_flavour(flavour: str, args, pytest_args, report_dir: str, log=None) -> tuple:
    """(the pytest process of one flavour, its Result to fill in); its output goes to ``log`` if given."""
    report = os.path.join(report_dir, f"junit-{flavour}.xml")
    command = [sys.executable, "-m", "pytest"]
    if not names_paths(pytest_args):
        command.append(TESTS)
    command += ["--junitxml", report, "-o", "junit_suite_name=" + flavour]
    if args.workers:
        command += ["-n", str(args.workers)]
    command += pytest_args
    print(f"=== {flavour}: MLR_KERAS={flavour}"
          f"{' TF_USE_LEGACY_KERAS=1' if flavour == 'tf_keras' else ''} {' '.join(command[1:])}", flush=True)
    process = subprocess.Popen(command, cwd=ROOT, env=flavour_env(flavour), stdin=subprocess.DEVNULL,
                               stdout=log, stderr=subprocess.STDOUT if log else None)
    return process, Result(flavour)


def finish_flavour(process, result: Result, report_dir: str, start: float) -> Result:
    """Wait for the run and read its counts off its JUnit report."""
    report = os.path.join(report_dir, f"junit-{result.flavour}.xml")
    result.exit_code = process.wait()
    result.seconds = time.monotonic() - start
    if os.path.exists(report):
        try:
            count_junit(report, result)
        except ElementTree.ParseError as error:
            result.problem = f"unreadable JUnit report ({error})"
    else:
        result.problem = f"pytest wrote no report (exit code {result.exit_code}): it crashed or stopped early"
    if result.exit_code == NO_TESTS_COLLECTED or (not result.problem and result.ran == 0):
        result.problem = "no test ran (none collected or all deselected)"
    elif result.exit_code != 0 and not result.failed and not result.errors and not result.problem:
        result.problem = f"pytest exited with code {result.exit_code}"
    if result.problem and not result.failed and not result.errors:
        result.errors = 1  # so that the closing line cannot read as a success
    return result


def run_all(flavours: list, args, pytest_args, report_dir: str) -> list:
    """Every flavour's run: up to ``args.jobs`` at once, the first one's output live and the
    others' logged to files, printed once every run has ended; with one job, one after the other,
    all live."""
    jobs = 1 if len(flavours) == 1 else args.jobs
    results, pending, running, logs = {}, list(flavours), [], []
    while pending or running:
        while pending and len(running) < jobs:
            flavour = pending.pop(0)
            live = jobs == 1 or flavour == flavours[0]
            path = None if live else os.path.join(report_dir, f"{flavour}.log")
            with open(path or os.devnull, "wb") as log:
                process, result = start_flavour(flavour, args, pytest_args, report_dir, None if live else log)
            running.append((process, result, time.monotonic()))
            if path:
                logs.append((flavour, path))
        time.sleep(1)
        for item in [item for item in running if item[0].poll() is not None]:
            running.remove(item)
            results[item[1].flavour] = finish_flavour(*item[:2], report_dir, item[2])
    for flavour, path in logs:
        with open(path, encoding="utf-8", errors="replace") as log:
            print(f"\n=== {flavour}: output (it ran at the same time as {flavours[0]})", flush=True)
            sys.stdout.write(log.read())
        sys.stdout.flush()
    return [results[flavour] for flavour in flavours]


def main(argv=None) -> int:
    args, pytest_args = parse_args(argv)
    flavours = [f for f in FLAVOURS if f in (args.keras or FLAVOURS)]
    tests_dir = os.path.join(ROOT, TESTS)
    has_tests = os.path.isdir(tests_dir) and any(
        name.startswith("test_") and name.endswith(".py") or name.endswith("_test.py")
        for _, _, names in os.walk(tests_dir) for name in names)
    if not has_tests:
        print(f"run_tests: no test files (test_*.py) under {tests_dir}: nothing to run, which counts as a failure")
        print("0 passed, 1 failed, 0 skipped")
        return 1

    with tempfile.TemporaryDirectory(prefix="mlr-junit-") as report_dir:
        results = run_all(flavours, args, pytest_args, report_dir)

    print()
    print(f"=== the {SLOWEST} slowest test files (minutes)")
    for r in results:
        slowest = sorted(r.file_seconds.items(), key=lambda item: -item[1])[:SLOWEST]
        print(f"{r.flavour:>8}: " + ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in slowest))
    print("=== summary (errors count as failed)")
    for r in results:
        status = "ok" if r.ok else "FAILED"
        extra = f"; {r.problem}" if r.problem else ""
        print(f"{r.flavour:>8}: {r.passed} passed, {r.failed} failed, {r.errors} errors, {r.skipped} skipped "
              f"in {r.seconds:.0f}s, pytest exit code {r.exit_code}: {status}{extra}")
    passed = sum(r.passed for r in results)
    failed = sum(r.failed + r.errors for r in results)
    skipped = sum(r.skipped for r in results)
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
