# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter.corpus``: run the corpus against the tf2onnx installed here.

    python -m masked_lstm_rewriter.corpus                        # every entry, both Keras flavours
    python -m masked_lstm_rewriter.corpus --keras tf_keras       # one flavour
    python -m masked_lstm_rewriter.corpus --runtime openvino     # OpenVINO instead of onnxruntime (or: both)
    python -m masked_lstm_rewriter.corpus --opsets 11-18         # at each opset instead of the entry's
    python -m masked_lstm_rewriter.corpus --path library,cli,tf2onnx -k gru

Every entry of the corpus shipped with the package (or ``--corpus DIR``) is converted with the
plugin by each path (``library``: ``tf2onnx.convert.main()`` in-process with ``enable()``;
``cli``: ``python -m masked_lstm_rewriter``; ``tf2onnx``: ``python -m tf2onnx.convert`` with
``TF2ONNX_MASKED_LSTM`` set; default ``library,cli``), and the ONNX model is checked against the
entry: the native recurrent nodes recorded in the manifest and no Loop, its input and output
names, ``onnx.checker``, Keras's outputs at every position within the tolerance, and the guard.
The ONNX-file entries (Loops written by stock tf2onnx or Keras 3's JAX export) are rewritten instead,
by ``rewrite_onnx`` (``library``) and ``python -m masked_lstm_rewriter rewrite`` (``cli``), and
checked the same way; they need no Keras, so they run once, with the Keras 3 entries.

Keras 3 and tf_keras cannot share a process (TensorFlow picks its Keras when imported), so each
flavour runs in a process of its own (this command with ``--worker``). Prints a line per check,
a summary, and as its last line ``N passed, N failed, N skipped``. Exit status: 0 when every check
passed (skips allowed, at least one passed), 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time

from ..flavours import FLAVOURS, flavour_env
from ..sessions import RUNTIMES
from .convert import PATHS
from .manifest import DATA_DIR, ONNX_FILES_RUN_WITH, CorpusError, is_onnx_file, load_manifest, parse_opsets
from .quiet import quiet_loggers, quiet_stderr
from .runner import FAILED, PASSED, SKIPPED, Options, Result, run_flavour

PROG = "python -m masked_lstm_rewriter.corpus"
RESULT_PREFIX = "MLR-CORPUS-RESULT "  # a worker's result lines, read by the parent


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description="Run the regression corpus against the tf2onnx "
                                     "installed here.", epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=FLAVOURS + ("both",), default="both",
                        help="Keras flavour whose entries to check (default: both, each in its own process; "
                             "keras3 includes the ONNX-file entries)")
    parser.add_argument("--runtime", choices=RUNTIMES + ("both",), default="onnxruntime",
                        help="run the converted models on onnxruntime (default), openvino or both")
    parser.add_argument("--opsets", type=_opsets, default=None,
                        help="convert at each of these opsets (11-18, or a list: 11,18) instead of the entry's "
                             "(an ONNX file keeps its own)")
    parser.add_argument("--path", type=_paths, default=("library", "cli"),
                        help=f"conversion paths, comma-separated, among {', '.join(PATHS)} (default: library,cli)")
    parser.add_argument("-k", dest="keyword", default="", help="only entries whose name contains this text")
    parser.add_argument("--corpus", default=DATA_DIR, help="corpus directory (default: the one in this package)")
    parser.add_argument("--jobs", type=int, default=2, help="subprocess conversions at once (default: 2)")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's and tf2onnx's own messages")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.worker and args.keras == "both":
        parser.error("--worker checks one flavour: --keras keras3 or --keras tf_keras")
    args.corpus = os.path.abspath(args.corpus)
    return args


def _opsets(text: str) -> tuple:
    try:
        return parse_opsets(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _paths(text: str) -> tuple:
    paths = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [path for path in paths if path not in PATHS]
    if unknown or not paths:
        raise argparse.ArgumentTypeError(f"paths are among {', '.join(PATHS)}, comma-separated: {text!r}")
    return paths


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    try:
        manifest = load_manifest(args.corpus)
    except CorpusError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        print("0 passed, 1 failed, 0 skipped")
        return 1
    flavours = FLAVOURS if args.keras == "both" else (args.keras,)
    files = sum(1 for entry in manifest["entries"] if is_onnx_file(entry))
    counts = f"{len(manifest['entries'])} entries" + (f" ({files} of them ONNX files, checked with "
                                                      f"{ONNX_FILES_RUN_WITH})" if files else "")
    print(f"=== corpus {args.corpus}: {counts}; {stack_line()}", flush=True)
    runs = [run_worker(flavour, args) for flavour in flavours]
    return summarize(runs)


def stack_line() -> str:
    """The versions under test, read without importing TensorFlow."""
    parts = []
    for name, module in (("masked-lstm-rewriter", "masked_lstm_rewriter"), ("tf2onnx", "tf2onnx"),
                         ("tensorflow", "tensorflow"), ("onnxruntime", "onnxruntime")):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "(no distribution)"
        spec = importlib.util.find_spec(module)
        parts.append(f"{name} {version}" + (f" at {os.path.dirname(spec.origin)}" if spec and spec.origin else
                                            " (not importable)"))
    return ", ".join(parts)


# ---------------------------------------------------------------- one flavour, in its own process

def worker(args) -> int:
    """Check one flavour in this process (started by :func:`run_worker` with its environment)."""
    with quiet_stderr(not args.verbose):
        import tf2onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    if not args.verbose:
        quiet_loggers()
    options = Options(corpus=args.corpus, keyword=args.keyword, paths=args.path,
                      runtimes=RUNTIMES if args.runtime == "both" else (args.runtime,), opsets=args.opsets,
                      jobs=args.jobs, quiet=quiet_stderr if not args.verbose else Options.quiet)
    try:
        for result in run_flavour(options):
            print(RESULT_PREFIX + json.dumps(dataclasses.asdict(result)), flush=True)
    except CorpusError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


@dataclasses.dataclass
class Run:
    """A worker's outcome: its results, exit code and duration."""

    flavour: str
    results: list
    exit_code: int
    seconds: float


def run_worker(flavour: str, args) -> Run:
    """This command with ``--worker`` for ``flavour``; prints each result as it comes."""
    command = [sys.executable, "-m", "masked_lstm_rewriter.corpus", "--worker", "--keras", flavour,
               "--runtime", args.runtime, "--path", ",".join(args.path), "-k", args.keyword,
               "--corpus", args.corpus, "--jobs", str(args.jobs)]
    command += ["--opsets", ",".join(map(str, args.opsets))] if args.opsets else []
    command += ["--verbose"] if args.verbose else []
    print(f"=== {flavour}", flush=True)
    start = time.monotonic()
    results = []
    with subprocess.Popen(command, env=flavour_env(flavour), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          text=True) as process:
        for line in process.stdout:
            if line.startswith(RESULT_PREFIX):
                result = Result(**json.loads(line[len(RESULT_PREFIX):]))
                results.append(result)
                print(format_result(result), flush=True)
            else:
                print(line, end="", flush=True)
    return Run(flavour, results, process.returncode, time.monotonic() - start)


def format_result(result: Result) -> str:
    return f"{result.status.upper():>7} {result.label:<8} {result.entry}: {result.detail}"


def summarize(runs: list) -> int:
    """Prints each flavour's counts and failures, then ``N passed, N failed, N skipped``."""
    print("\n=== summary")
    totals = collections.Counter()
    for run in runs:
        counts = collections.Counter(result.status for result in run.results)
        problem = "" if run.exit_code == 0 else f"; the worker exited with {run.exit_code}"
        problem += "" if run.results else "; no entry checked"
        counts[FAILED] += 1 if problem else 0
        print(f"{run.flavour:>8}: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped "
              f"in {run.seconds:.0f}s{problem}: {'FAILED' if counts[FAILED] else 'ok'}")
        for result in run.results:
            if result.status == FAILED:
                print(f"          FAILED {result.label} {result.entry}: {result.detail.splitlines()[0]}")
        totals.update(counts)
    print(f"{totals[PASSED]} passed, {totals[FAILED]} failed, {totals[SKIPPED]} skipped", flush=True)
    return 0 if totals[FAILED] == 0 and totals[PASSED] > 0 else 1
