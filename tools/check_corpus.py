#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run the regression corpus (``testdata/corpus``) against the tf2onnx installed here.

One command for a converter's CI (tf2onnx's own, or a project that builds its own tf2onnx):

    python tools/check_corpus.py                      # both Keras flavours, both paths
    python tools/check_corpus.py --keras tf_keras     # one flavour
    python tools/check_corpus.py --path library       # only the in-process path
    python tools/check_corpus.py -k bidirectional     # entries whose name contains a word
    python tools/check_corpus.py --corpus DIR --jobs 2
    python tools/check_corpus.py --runtime openvino   # run the models on OpenVINO (or: both)
    python tools/check_corpus.py --opsets 13-18       # convert at each opset instead of the entry's

Set-up: a checkout of this project with its package installed next to the tf2onnx build under
test, TensorFlow with Keras 3 and tf_keras, and onnxruntime::

    pip install -e '.[test]' -c constraints.txt     # the tested stack, then replace tf2onnx:
    pip install --no-deps /path/to/your/tf2onnx     # (--no-deps: this package pins tf2onnx<1.18)

pytest is not needed. Every manifest entry (``testdata/corpus/manifest.json``: one saved Keras
model in one file format) is checked twice, each time with its ``mask_mode``:

* ``library``: ``tf2onnx.convert.main()`` (``--saved-model DIR`` or ``--keras FILE``) in this
  process, inside ``masked_lstm_rewriter.enable(mask_mode)``; ``last_report()`` must list the
  expected number of masked layers, none left as a Loop;
* ``cli``: ``python -m masked_lstm_rewriter --saved-model DIR --output OUT --mask-mode MODE`` as
  a subprocess (skipped, not failed, while the package has no command line: when
  ``python -m masked_lstm_rewriter --help`` fails).

Each ONNX model must have the manifest's op counts (``LSTM`` nodes and their directions, no
``Loop`` anywhere, Loop bodies included) and its input and output names; onnxruntime (one
intra-op thread) must reproduce the stored Keras outputs of every batch at every position
within the manifest's tolerance (1e-5); for a ``"post"`` entry the batch whose mask is not
post-padded must fail with the guard's message ("not post-padded").

Every model must also pass ``onnx.checker.check_model(full_check=True)`` and strict shape inference.
``--opsets`` converts every entry at each opset given (``13-18``, ``13,18``) instead of the
manifest's. ``--runtime openvino`` runs the models on OpenVINO's ONNX front end (CPU, f32, one
thread; ``pip install openvino`` or ``.[openvino]``) instead of onnxruntime, with every input
shape made static first (``Model.reshape``): with any dynamic dimension, OpenVINO (2024.6 to
2026.4, measured) ignores the LSTM's ``sequence_lens`` and returns wrong numbers. OpenVINO does
not check a Reshape's element count, so the post-padding guard cannot fail there: the
non-post-padded batch is not checked on OpenVINO.

Keras 3 and tf_keras cannot share a process (TensorFlow picks its Keras at import), so each
flavour runs in a subprocess of this script (``--keras X --worker``) with ``MLR_KERAS`` and
``TF_USE_LEGACY_KERAS`` set. Prints one line per entry and path, a summary, and as its last line
``N passed, N failed, N skipped``; exits 1 on any failure, or when nothing was checked.

The same functions back ``tests/test_corpus.py`` (pytest, one flavour per run, as
``tools/run_tests.py`` runs it) and the self-check of ``tools/make_corpus.py``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from toolutil import quiet_stderr  # tools/ is on sys.path when run as a script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORPUS = os.path.join(ROOT, "testdata", "corpus")
MANIFEST = "manifest.json"
FLAVOURS = ("keras3", "tf_keras")
PATHS = ("library", "cli")
CONVERT_FLAGS = {"saved_model": "--saved-model", "keras": "--keras", "h5": "--keras"}
CLI_TIMEOUT = 600  # seconds, one conversion
RUNTIMES = ("onnxruntime", "openvino")
OPSETS = tuple(range(13, 19))  # the opsets the plugin supports
# OpenVINO: exact float32 arithmetic (no bf16/f16 inference precision), one thread like onnxruntime
OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
# models the runtime refuses, loudly, by corpus model name: (text in its error, why)
KNOWN_REFUSALS = {"openvino": {"hard_sigmoid": ("Unsupported activation function",
                                                "OpenVINO's CPU plugin has no HardSigmoid activation inside an LSTM")}}
# whether the runtime rejects the guard's Reshape to a wrong element count (OpenVINO does not check it)
GUARD_ENFORCED = {"onnxruntime": True, "openvino": False}


class CorpusFailure(AssertionError):
    """An entry does not convert or check as the manifest says."""


# ---------------------------------------------------------------- the manifest

def load_manifest(corpus: str = DEFAULT_CORPUS) -> dict:
    path = os.path.join(corpus, MANIFEST)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def entries_for(manifest: dict, flavour: str) -> list:
    return [entry for entry in manifest["entries"] if entry["flavour"] == flavour]


def current_flavour() -> str:
    """The flavour this process runs (MLR_KERAS, as tests/conftest.py reads it)."""
    return "tf_keras" if os.environ.get("MLR_KERAS") == "tf_keras" else "keras3"


def flavour_env(flavour: str, base=None) -> dict:
    """The environment of a process that runs ``flavour`` (set before TensorFlow is imported)."""
    env = dict(os.environ if base is None else base)
    env["MLR_KERAS"] = flavour
    env["TF_USE_LEGACY_KERAS"] = "1" if flavour == "tf_keras" else "0"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # Keras's cuDNN LSTM path cannot be converted
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def at_opset(entry: dict, opset) -> dict:
    """The entry converted at ``opset`` instead of the manifest's (``None``: the manifest's)."""
    return entry if opset is None else dict(entry, opset=opset)


def parse_opsets(text: str) -> tuple:
    """``"13-18"`` or ``"13,15,18"`` -> (13, ..., 18); raises ValueError outside 13-18."""
    opsets = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        opsets.extend(range(int(first), int(last or first) + 1))
    if not opsets or any(opset not in OPSETS for opset in opsets):
        raise ValueError(f"opsets must be within {OPSETS[0]}-{OPSETS[-1]}: {text!r}")
    return tuple(sorted(set(opsets)))


def model_path(entry: dict, corpus: str = DEFAULT_CORPUS) -> str:
    return os.path.join(corpus, entry["path"])


def convert_args(entry: dict, corpus: str, output: str) -> list:
    """The tf2onnx.convert arguments of an entry (``--saved-model DIR`` or ``--keras FILE``)."""
    return [CONVERT_FLAGS[entry["format"]], model_path(entry, corpus), "--output", output,
            "--opset", str(entry["opset"])]


# ---------------------------------------------------------------- converting

def convert_library(entry: dict, corpus: str, output: str):
    """``tf2onnx.convert.main()`` in this process with the plugin enabled; returns last_report()."""
    import tf2onnx.convert  # pylint: disable=import-outside-toplevel

    mlr = import_plugin()
    before = mlr.last_report()
    saved_argv = sys.argv
    sys.argv = ["tf2onnx.convert"] + convert_args(entry, corpus, output)
    try:
        with mlr.enable(entry["mask_mode"]):
            tf2onnx.convert.main()
    finally:
        sys.argv = saved_argv
    report = mlr.last_report()
    return None if report is before else report


def check_report(entry: dict, report) -> None:
    """The plugin saw the expected number of masked layers and rewrote all of them."""
    if report is None:
        raise CorpusFailure("the conversion did not run the plugin's rewriter (last_report() unchanged)")
    if report.left_as_loop:
        raise CorpusFailure("layers left as a Loop: " + "; ".join(str(layer) for layer in report.left_as_loop))
    if len(report.rewritten) != entry["masked_layers"]:
        raise CorpusFailure(f"{len(report.rewritten)} masked layer(s) rewritten, expected "
                            f"{entry['masked_layers']}: {report}")


def cli_command(entry: dict, corpus: str, output: str, python: str = sys.executable) -> list:
    return [python, "-m", "masked_lstm_rewriter"] + convert_args(entry, corpus, output) + [
        "--mask-mode", entry["mask_mode"]]


def cli_available(python: str = sys.executable, env=None):
    """(True, "") when ``python -m masked_lstm_rewriter --help`` works, else (False, why)."""
    try:
        done = subprocess.run([python, "-m", "masked_lstm_rewriter", "--help"], env=env, cwd=ROOT,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"python -m masked_lstm_rewriter --help: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return False, f"python -m masked_lstm_rewriter --help exited with {done.returncode}: {last}"
    return True, ""


def run_cli(entry: dict, corpus: str, output: str, python: str = sys.executable, env=None):
    """Convert with the command line; returns (CompletedProcess, seconds)."""
    start = time.monotonic()
    done = subprocess.run(cli_command(entry, corpus, output, python), env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                          check=False)
    return done, time.monotonic() - start


def check_cli_result(done, output: str) -> None:
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise CorpusFailure(f"the command line exited with {done.returncode}:\n{tail}")
    if not os.path.isfile(output):
        raise CorpusFailure(f"the command line exited with 0 but wrote no {output}")


# ---------------------------------------------------------------- checking an ONNX model

def op_summary(model_proto):
    """(op type counts over every graph, Loop bodies included; directions of the LSTM nodes)."""
    counts = collections.Counter()
    directions = []

    def visit(graph):
        for node in graph.node:
            counts[node.op_type] += 1
            if node.op_type == "LSTM":
                direction = "forward"
                for attr in node.attribute:
                    if attr.name == "direction":
                        direction = attr.s.decode()
                directions.append(direction)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    visit(sub)

    visit(model_proto.graph)
    return counts, sorted(directions)


def session(model_proto):
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # the guard's failure is expected: no error log for it
    return ort.InferenceSession(model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def runtime_available(runtime: str):
    """(True, "") when ``runtime`` can be imported, else (False, why)."""
    try:
        __import__(runtime)
    except ImportError as error:
        return False, f"{runtime} is not installed ({error}); pip install {runtime}"
    return True, ""


def runner(model_proto, onnx_path: str, runtime: str = "onnxruntime"):
    """``run(output_names, feeds) -> [arrays]`` on ``runtime``."""
    if runtime == "onnxruntime":
        sess = session(model_proto)
        return sess.run
    if runtime == "openvino":
        return openvino_runner(onnx_path)
    raise ValueError(f"unknown runtime {runtime!r}, expected one of {RUNTIMES}")


def openvino_runner(onnx_path: str):
    """OpenVINO's ONNX front end, the model compiled for each set of input shapes, made static first:
    with a dynamic dimension, OpenVINO's CPU plugin ignores the LSTM's sequence_lens."""
    import openvino as ov  # pylint: disable=import-outside-toplevel
    core = ov.Core()
    compiled = {}

    def run(output_names, feeds):
        key = tuple(sorted((name, value.shape) for name, value in feeds.items()))
        if key not in compiled:
            model = core.read_model(onnx_path)
            model.reshape({name: ov.PartialShape(list(value.shape)) for name, value in feeds.items()})
            compiled[key] = core.compile_model(model, "CPU", OPENVINO_CONFIG)
        model = compiled[key]
        results = model(feeds)
        return [results[model.output(name)] for name in output_names]

    return run


def check_valid(model_proto) -> list:
    """Problems found by ``onnx.checker`` (full check) and strict shape inference, if any."""
    import onnx  # pylint: disable=import-outside-toplevel
    problems = []
    try:
        onnx.checker.check_model(model_proto, full_check=True)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        problems.append(f"onnx.checker (full_check): {first_line(error)}")
    try:
        onnx.shape_inference.infer_shapes(model_proto, check_type=True, strict_mode=True)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        problems.append(f"strict shape inference: {first_line(error)}")
    return problems


def load_npz(corpus: str, relative: str) -> dict:
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(os.path.join(corpus, relative), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def feeds_for(entry: dict, arrays: dict) -> dict:
    return {spec["onnx_name"]: arrays[spec["name"]] for spec in entry["inputs"]}


def check_onnx(entry: dict, corpus: str, onnx_path: str, runtime: str = "onnxruntime") -> float:
    """Check one converted model against the manifest entry on ``runtime``; returns the largest
    |difference|. Raises CorpusFailure with every problem found."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel

    model_proto = onnx.load(onnx_path)
    counts, directions = op_summary(model_proto)
    expected = entry["expected_ops"]
    problems = []
    if counts["Loop"] != expected["Loop"]:
        problems.append(f"{counts['Loop']} Loop node(s), expected {expected['Loop']}")
    if counts["LSTM"] != expected["LSTM"]:
        problems.append(f"{counts['LSTM']} LSTM node(s), expected {expected['LSTM']}")
    elif directions != sorted(expected["lstm_directions"]):
        problems.append(f"LSTM directions {directions}, expected {sorted(expected['lstm_directions'])}")
    graph_inputs = [i.name for i in model_proto.graph.input]
    graph_outputs = [o.name for o in model_proto.graph.output]
    want_inputs = [spec["onnx_name"] for spec in entry["inputs"]]
    want_outputs = [spec["onnx_name"] for spec in entry["outputs"]]
    if sorted(graph_inputs) != sorted(want_inputs):
        problems.append(f"model inputs {graph_inputs}, expected {want_inputs}")
    if graph_outputs != want_outputs:
        problems.append(f"model outputs {graph_outputs}, expected {want_outputs} (in this order)")
    problems.extend(check_valid(model_proto))
    if problems:
        raise CorpusFailure(f"{onnx_path}: " + "; ".join(problems))

    run = runner(model_proto, onnx_path, runtime)
    tolerance = entry["tolerance"]
    worst = 0.0
    for number, batch in enumerate(entry["batches"]):
        inputs = load_npz(corpus, batch["inputs"])
        reference = load_npz(corpus, batch["expected"])
        try:
            got = run(want_outputs, feeds_for(entry, inputs))
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            problems.append(f"batch {number} ({batch['description']}): {runtime} failed: {first_line(error)}")
            continue
        for spec, value in zip(entry["outputs"], got):
            keras_value = reference[spec["name"]]
            if value.shape != keras_value.shape:
                problems.append(f"batch {number}, output {spec['name']}: shape {value.shape}, "
                                f"Keras {keras_value.shape}")
                continue
            if not value.size:
                continue
            diff = np.abs(value.astype(np.float64) - keras_value.astype(np.float64))
            error = float(np.max(diff))
            worst = max(worst, error)
            if not error <= tolerance:  # NaN fails too
                where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
                problems.append(f"batch {number} ({batch['description']}), output {spec['name']}: "
                                f"max |onnx - keras| = {error:.3g} > {tolerance} at index {where}")
    must_fail = entry.get("must_fail")
    if must_fail and GUARD_ENFORCED[runtime]:
        inputs = load_npz(corpus, must_fail["inputs"])
        try:
            run(want_outputs, feeds_for(entry, inputs))
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            if must_fail["message"] not in str(error):
                problems.append(f"the non-post-padded batch failed, but without '{must_fail['message']}': "
                                f"{first_line(error)}")
        else:
            problems.append(f"the non-post-padded batch ({must_fail['description']}) ran without error; "
                            f"expected a failure with '{must_fail['message']}'")
    if problems:
        raise CorpusFailure(f"{onnx_path}: " + "; ".join(problems))
    return worst


def first_line(error) -> str:
    """The telling line of an error: the first, or for OpenVINO's nested 'Exception from <source
    file>' lines the last, which names the cause."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Exception from "):
        lines = [line for line in lines if not line.startswith("Exception from ")][-1:] or lines
    return (lines or [type(error).__name__])[0]


def known_refusal(entry: dict, runtime: str):
    """(text expected in the runtime's error, why) when ``runtime`` is known to refuse this model."""
    return KNOWN_REFUSALS.get(runtime, {}).get(entry["name"].split("/")[1])


def import_plugin():
    try:
        import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    except ImportError:  # a checkout that is not installed: use its copy
        sys.path.insert(0, ROOT)
        import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    return mlr


# ---------------------------------------------------------------- the command

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=FLAVOURS + ("both",), default="both",
                        help="flavour to check (default: both, each in its own process)")
    parser.add_argument("--path", choices=PATHS + ("both",), default="both",
                        help="library (in-process), cli (python -m masked_lstm_rewriter) or both (default)")
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"corpus directory (default: {DEFAULT_CORPUS})")
    parser.add_argument("-k", dest="keyword", default="", help="only entries whose name contains this text")
    parser.add_argument("--jobs", type=int, default=2, help="command-line conversions run at once (default: 2)")
    parser.add_argument("--runtime", choices=RUNTIMES + ("both",), default="onnxruntime",
                        help="run the converted models on onnxruntime (default), openvino or both")
    parser.add_argument("--opsets", type=_opsets_arg, default=None,
                        help="convert at each of these opsets (13-18, or a list: 13,18) instead of the manifest's")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's and tf2onnx's own messages")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one flavour, JSON summary
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    args.corpus = os.path.abspath(args.corpus)
    return args


def _opsets_arg(text):
    try:
        return parse_opsets(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


RESULT_PREFIX = "CORPUS-RESULT "


def worker(args) -> int:
    """One flavour in this process: prints a line per check, then one JSON line for the parent."""
    import logging  # pylint: disable=import-outside-toplevel

    flavour = current_flavour()
    manifest = load_manifest(args.corpus)
    entries = [at_opset(e, opset) for e in entries_for(manifest, flavour) if args.keyword in e["name"]
               for opset in (args.opsets or (None,))]
    paths = PATHS if args.path == "both" else (args.path,)
    runtimes = RUNTIMES if args.runtime == "both" else (args.runtime,)
    missing = {runtime: why for runtime in runtimes for ok, why in [runtime_available(runtime)] if not ok}
    results = []  # (name, path, status, detail)

    def record(entry, path, status, detail):
        results.append((entry["name"], path, status, detail))
        print(f"{status.upper():>7} {path:<7} {entry['name']}: {detail}", flush=True)

    def check(entry, path, output, seconds):
        """The converted model on every runtime asked for."""
        for runtime in runtimes:
            label = path + ("" if args.opsets is None else f" opset {entry['opset']}") + \
                ("" if runtime == "onnxruntime" else f" {runtime}")
            if runtime in missing:
                record(entry, label, "skipped", missing[runtime])
                continue
            refusal = known_refusal(entry, runtime)
            try:
                worst = check_onnx(entry, args.corpus, output, runtime)
            except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
                if refusal and refusal[0] in str(error):
                    record(entry, label, "skipped", f"known: {refusal[1]} ({refusal[0]})")
                    continue
                record(entry, label, "failed", str(error) if isinstance(error, CorpusFailure)
                       else f"{type(error).__name__}: {error}")
            else:
                if refusal:
                    record(entry, label, "failed", f"{runtime} now runs it: remove it from KNOWN_REFUSALS")
                    continue
                note = "" if GUARD_ENFORCED[runtime] or not entry.get("must_fail") else \
                    f"; guard not checked ({runtime} does not enforce Reshape sizes)"
                record(entry, label, "passed", f"max |onnx - keras| = {worst:.2g} ({seconds:.1f}s){note}")

    quiet = contextlib.nullcontext if args.verbose else quiet_stderr  # a fresh one each time
    with tempfile.TemporaryDirectory(prefix="mlr-corpus-") as tmp:
        if "library" in paths:
            with quiet():
                import tf2onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
            if not args.verbose:
                for name in ("tf2onnx", "tensorflow"):
                    logging.getLogger(name).setLevel(logging.ERROR)
            for entry in entries:
                output = os.path.join(tmp, f"{entry['name'].replace('/', '__')}.{entry['opset']}.library.onnx")
                start = time.monotonic()
                try:
                    with quiet():
                        report = convert_library(entry, args.corpus, output)
                    check_report(entry, report)
                except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
                    record(entry, "library", "failed", str(error) if isinstance(error, CorpusFailure)
                           else f"{type(error).__name__}: {error}")
                else:
                    check(entry, "library", output, time.monotonic() - start)
        if "cli" in paths and entries:
            available, why = cli_available(env=os.environ)
            if not available:
                for entry in entries:
                    record(entry, "cli", "skipped", f"no command line: {why}")
            else:
                def convert(entry):
                    output = os.path.join(tmp, f"{entry['name'].replace('/', '__')}.{entry['opset']}.cli.onnx")
                    return entry, output, run_cli(entry, args.corpus, output, env=os.environ)

                with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                    for entry, output, (done, seconds) in pool.map(convert, entries):
                        try:
                            check_cli_result(done, output)
                        except CorpusFailure as error:
                            record(entry, "cli", "failed", str(error))
                        else:
                            check(entry, "cli", output, seconds)
    print(RESULT_PREFIX + json.dumps({"flavour": flavour, "results": results}), flush=True)
    return 0


def run_flavour(flavour: str, args, argv) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--keras", flavour, "--worker"] + argv
    print(f"=== {flavour}: {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    process = subprocess.Popen(command, env=flavour_env(flavour), cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, text=True)
    summary = None
    for line in process.stdout:
        if line.startswith(RESULT_PREFIX):
            summary = json.loads(line[len(RESULT_PREFIX):])
        else:
            print(line, end="", flush=True)
    code = process.wait()
    return {"flavour": flavour, "exit_code": code, "seconds": time.monotonic() - start,
            "results": summary["results"] if summary else None}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        if args.keras == "both":
            print("check_corpus: --worker needs --keras keras3 or --keras tf_keras")
            return 2
        os.environ.update(flavour_env(args.keras))  # before TensorFlow is imported
        return worker(args)
    try:
        manifest = load_manifest(args.corpus)
    except (OSError, ValueError) as error:
        print(f"check_corpus: cannot read the manifest: {error}")
        print("0 passed, 1 failed, 0 skipped")
        return 1
    passthrough = list(_strip_keras(argv))
    flavours = FLAVOURS if args.keras == "both" else (args.keras,)
    runs = [run_flavour(flavour, args, passthrough) for flavour in flavours]

    print()
    print(f"=== summary: corpus {args.corpus} ({len(manifest['entries'])} entries)")
    passed = failed = skipped = 0
    for run in runs:
        results = run["results"]
        if results is None:
            print(f"{run['flavour']:>8}: the worker crashed (exit code {run['exit_code']}): FAILED")
            failed += 1
            continue
        counts = collections.Counter(status for _, _, status, _ in results)
        ok = run["exit_code"] == 0 and not counts["failed"] and results
        print(f"{run['flavour']:>8}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped in {run['seconds']:.0f}s: {'ok' if ok else 'FAILED'}")
        for name, path, status, detail in results:
            if status == "failed":
                print(f"          FAILED {path} {name}: {detail.splitlines()[0]}")
        passed += counts["passed"]
        failed += counts["failed"] + (0 if run["exit_code"] == 0 else 1)
        skipped += counts["skipped"]
        if not results:
            print(f"          no entry checked for {run['flavour']}")
            failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 0 if failed == 0 and passed > 0 else 1


def _strip_keras(argv):
    """The arguments without --keras (each worker gets its own)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--keras":
            skip = True
            continue
        if arg.startswith("--keras="):
            continue
        yield arg


if __name__ == "__main__":
    sys.exit(main())
