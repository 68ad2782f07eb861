#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""THE test command: the suite once per Keras flavour, each in its own process.

TensorFlow picks its Keras once, at import, so Keras 3 and tf_keras cannot share a process:

* ``MLR_KERAS=keras3``, ``TF_USE_LEGACY_KERAS=0``;
* ``MLR_KERAS=tf_keras``, ``TF_USE_LEGACY_KERAS=1``.

Each run is ``python -m pytest`` over the test files (plus any arguments not recognised here,
passed through to pytest: ``-x``, ``-k EXPR``, ``tests/test_guard.py``, ...). Each flavour's files
are split into ``--shards`` processes of about equal time (by the seconds per file of a past run,
``tools/test_durations.json``; ``--record-durations`` rewrites it), and ``--jobs`` processes run at
once, heaviest first (default: 2, or the cores if fewer): both cores stay busy to the end, where
one flavour per process left one core idle while the slower flavour ran on alone. Each shard's
output is printed when it ends; ``--jobs 1`` runs them one after the other, live. Given test
paths, each flavour is one process. Counts come from the JUnit XML reports. Prints each
flavour's slowest test files (minutes), the counts per flavour, then as its very last line
``N passed, N failed, N skipped`` (errors count as failed; a process that crashed, or a flavour
that ran no test, counts as one failed). Exits non-zero when any run failed, had errors,
crashed, or ran no test.

    .venv/bin/python tools/run_tests.py [--keras {keras3,tf_keras}] [--jobs N] [--shards N] [--workers N]
                                        [--record-durations] [pytest args...]
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from typing import Optional

from toolutil import ROOT  # tools/ is on sys.path when run as a script; it puts the checkout first
from masked_lstm_rewriter.flavours import FLAVOURS, flavour_env as keras_env  # pylint: disable=wrong-import-order

TESTS = "tests"
TOOLS = "tools"
FAST_TIER = f"{TESTS}/unit"  # golden-graph tests without Keras: one shard of their own, in the first flavour
FAST_TIER_SECONDS = 60       # its weight when no past run recorded it
NO_TESTS_COLLECTED = 5  # pytest's exit code when nothing ran
SLOWEST = 8             # test files listed with their time after the run
DURATIONS = os.path.join(ROOT, "tools", "test_durations.json")  # seconds per test file, per flavour
HEARTBEAT = 300         # seconds between "still running" lines while shards' output is held


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
                        help="pytest processes at once (default: 2, or the cores if fewer); 1: one after the "
                             "other, with live output")
    parser.add_argument("--shards", type=int, default=0, metavar="N",
                        help="split each flavour's test files into N processes of about equal time, by "
                             "tools/test_durations.json (default: --jobs; 1: one process per flavour). Not "
                             "when test paths are given")
    parser.add_argument("--record-durations", action="store_true",
                        help="after a run where no pytest process crashed, write each file's seconds to "
                             "tools/test_durations.json (the shards' weights)")
    args, pytest_args = parser.parse_known_args(argv)
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.shards < 0:
        parser.error("--shards must be >= 0")
    return args, pytest_args


def flavour_env(flavour: str) -> dict:
    """A pytest process's environment: ``MLR_KERAS``, which tests/conftest.py selects the flavour by."""
    return dict(keras_env(flavour), MLR_KERAS=flavour)


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


def _module_of(classname: str) -> str:
    """The test file a JUnit classname is in, from the checkout and without ".py" ("tests/unit/test_cells"),
    or "?"."""
    parts = classname.split(".")
    index = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
    if index is None:
        return "?"
    return "/".join(parts[:index + 1])  # classnames start at the rootdir


def count_junit(path: str, result: Result) -> None:
    """Counts per test case: an error or failure makes it failed, else skipped, else passed; and
    each test file's time (where CI's time goes, for sampling: docs/testing.md)."""
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        module = _module_of(case.get("classname", ""))
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


@dataclasses.dataclass
class Shard:
    """One pytest process: a flavour's test files (all of them when ``files`` is None)."""

    flavour: str
    index: int
    files: Optional[list] = None
    weight: float = 0.0

    @property
    def name(self) -> str:
        return self.flavour if self.files is None else f"{self.flavour}-{self.index + 1}"


def load_durations() -> dict:
    """{flavour: {test file: seconds}} of a past run (DURATIONS), or {} where there is none."""
    try:
        with open(DURATIONS, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _files(folder: str) -> list:
    return sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, folder, "test_*.py")))


def test_files(with_tools: bool = True) -> list:
    """The suite's test files: tests/, and with ``with_tools`` the tools' own tests beside them (run in
    one flavour only: they convert nothing)."""
    return _files(TESTS) + (_files(TOOLS) if with_tools else [])


def make_shards(flavours: list, shards_per_flavour: int, durations: dict) -> list:
    """Each flavour's test files split into ``shards_per_flavour`` shards of about equal time
    (longest file first onto the lightest shard, by DURATIONS' seconds; a file with no record
    counts as the median), heaviest shards first: two cores stay busy until the end, instead of
    one flavour running alone after the other has ended."""
    if shards_per_flavour <= 1:
        return [Shard(flavour, 0) for flavour in flavours]
    shards = []
    for flavour in flavours:
        known = durations.get(flavour, {})
        median = statistics.median(known.values()) if known else 1.0
        files = sorted(test_files(with_tools=flavour == flavours[0]), key=lambda path: -known.get(path, median))
        own = [Shard(flavour, i, []) for i in range(shards_per_flavour)]
        for path in files:
            lightest = min(own, key=lambda shard: shard.weight)
            lightest.files.append(path)
            lightest.weight += known.get(path, median)
        if flavour == flavours[0] and os.path.isdir(os.path.join(ROOT, FAST_TIER)):
            fast = sum(seconds for path, seconds in known.items() if path.startswith(FAST_TIER + "/"))
            own.append(Shard(flavour, shards_per_flavour, [FAST_TIER], fast or FAST_TIER_SECONDS))
        shards += [shard for shard in own if shard.files]
    return sorted(shards, key=lambda shard: -shard.weight)


def start_shard(shard: Shard, args, pytest_args, report_dir: str, log=None):
    """The pytest process of one shard; its output goes to ``log`` if given."""
    report = os.path.join(report_dir, f"junit-{shard.name}.xml")
    command = [sys.executable, "-m", "pytest"]
    if shard.files is not None:
        command += shard.files
    elif not names_paths(pytest_args):
        command += [TESTS] + (_files(TOOLS) if shard.flavour == FLAVOURS[0] else [])
    command += ["--junitxml", report, "-o", "junit_suite_name=" + shard.flavour]
    if args.workers:
        command += ["-n", str(args.workers)]
    command += pytest_args
    shown = command[1:] if shard.files is None else command[1:3] + [f"<{len(shard.files)} files>"] + command[
        3 + len(shard.files):]
    print(f"=== {shard.name}: MLR_KERAS={shard.flavour}"
          f"{' TF_USE_LEGACY_KERAS=1' if shard.flavour == 'tf_keras' else ''} {' '.join(shown)}", flush=True)
    return subprocess.Popen(command, cwd=ROOT, env=flavour_env(shard.flavour), stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT if log else None)


def finish_shard(process, shard: Shard, report_dir: str, start: float) -> Result:
    """Wait for the shard and read its counts off its JUnit report."""
    report = os.path.join(report_dir, f"junit-{shard.name}.xml")
    result = Result(shard.name)
    result.exit_code = process.wait()
    result.seconds = time.monotonic() - start
    if os.path.exists(report):
        try:
            count_junit(report, result)
        except ElementTree.ParseError as error:
            result.problem = f"unreadable JUnit report ({error})"
    else:
        result.problem = f"pytest wrote no report (exit code {result.exit_code}): it crashed or stopped early"
    if result.exit_code == NO_TESTS_COLLECTED and not result.problem:
        result.exit_code = 0  # a shard whose tests were all deselected: judged with its flavour (merge)
    elif result.exit_code != 0 and not result.failed and not result.errors and not result.problem:
        result.problem = f"pytest exited with code {result.exit_code}"
    if result.problem and not result.failed and not result.errors:
        result.errors = 1  # so that the closing line cannot read as a success
    return result


def run_all(shards: list, args, pytest_args, report_dir: str) -> list:
    """Every shard's run, up to ``args.jobs`` at once: with one job, one after the other, all live;
    else each shard's output is logged and printed when it ends."""
    jobs = min(args.jobs, len(shards))
    results, pending, running = {}, list(shards), []
    heartbeat = time.monotonic()
    while pending or running:
        while pending and len(running) < jobs:
            shard = pending.pop(0)
            path = None if jobs == 1 else os.path.join(report_dir, f"{shard.name}.log")
            with open(path or os.devnull, "wb") as log:
                process = start_shard(shard, args, pytest_args, report_dir, None if jobs == 1 else log)
            running.append((process, shard, time.monotonic(), path))
        time.sleep(1)
        if jobs > 1 and time.monotonic() - heartbeat >= HEARTBEAT:  # output is held until a shard ends
            heartbeat = time.monotonic()
            print("=== running: " + ", ".join(f"{shard.name} ({(heartbeat - start) / 60:.0f} min)"
                                             for _, shard, start, _ in running), flush=True)
        for item in [item for item in running if item[0].poll() is not None]:
            running.remove(item)
            process, shard, start, path = item
            results[shard.name] = finish_shard(process, shard, report_dir, start)
            if path:
                with open(path, encoding="utf-8", errors="replace") as log:
                    print(f"\n=== {shard.name}: output ({results[shard.name].seconds / 60:.1f} min)", flush=True)
                    sys.stdout.write(log.read())
                sys.stdout.flush()
    return [results[shard.name] for shard in shards]


def merge(flavour: str, results: list) -> Result:
    """A flavour's counts over its shards (its time: the longest shard's)."""
    merged = Result(flavour)
    for result in results:
        merged.passed += result.passed
        merged.failed += result.failed
        merged.errors += result.errors
        merged.skipped += result.skipped
        merged.exit_code = merged.exit_code or result.exit_code
        merged.seconds = max(merged.seconds, result.seconds)
        merged.problem = "; ".join(filter(None, [merged.problem, result.problem and f"{result.flavour}: "
                                                 f"{result.problem}"]))
        for name, seconds in result.file_seconds.items():
            merged.file_seconds[name] = merged.file_seconds.get(name, 0.0) + seconds
    if merged.ran == 0 and not merged.problem:
        merged.problem = "no test ran (none collected or all deselected)"
        merged.errors = 1
    return merged


def record_durations(results: list) -> None:
    """Write each flavour's seconds per test file to DURATIONS, for the next run's shards."""
    durations = load_durations()
    for result in results:
        durations[result.flavour] = {f"{name}.py": round(seconds, 1)
                                     for name, seconds in sorted(result.file_seconds.items()) if name != "?"}
    with open(DURATIONS, "w", encoding="utf-8") as handle:
        json.dump(durations, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"=== seconds per test file written to {os.path.relpath(DURATIONS, ROOT)}")


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

    per_flavour = 1 if names_paths(pytest_args) else (args.shards or args.jobs)
    shards = make_shards(flavours, per_flavour, load_durations())
    with tempfile.TemporaryDirectory(prefix="mlr-junit-") as report_dir:
        shard_results = run_all(shards, args, pytest_args, report_dir)
    results = [merge(flavour, [r for s, r in zip(shards, shard_results) if s.flavour == flavour])
               for flavour in flavours]
    if args.record_durations and not any(r.problem for r in shard_results):  # failed tests still timed
        record_durations(results)

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
