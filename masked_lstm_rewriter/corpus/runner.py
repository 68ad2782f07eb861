# SPDX-License-Identifier: Apache-2.0
"""Every check of the corpus for the Keras flavour this process runs, one result at a time.

TensorFlow picks its Keras when it is first imported, so one process checks one flavour's
entries (:func:`masked_lstm_rewriter.flavours.current_flavour`); :mod:`.command` starts one process per flavour.
For each entry (at each opset asked for), each conversion path (:mod:`.convert`) makes an ONNX
model, which is checked on each runtime asked for (:func:`.check.check_onnx`). A runtime that is
not installed, a path that cannot run here, and a model a runtime is known to refuse give
``skipped`` results that say why; everything else is ``passed`` or ``failed``.

The ONNX-file entries need no Keras: the process of the first flavour checks them, once
(:func:`.manifest.entries_for`), each rewritten by the ``library`` and ``cli`` paths at its own opset.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from typing import Callable, Iterator, Optional

from ..flavours import current_flavour
from ..sessions import runtime_available
from .check import CorpusFailure, check_onnx, known_refusal
from .convert import check_command_result, check_report, convert_library, path_applies, path_available, run_command
from .manifest import DATA_DIR, at_opsets, entries_for, entry_problems, is_onnx_file, load_manifest, reference

LOG = logging.getLogger(__name__)
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclasses.dataclass(frozen=True)
class Options:
    """What to check: the corpus, which entries, paths, runtimes and opsets."""

    corpus: str = DATA_DIR
    keyword: str = ""                       # only entries whose name contains this
    paths: tuple = ("library", "cli")       # conversion paths (see .convert)
    runtimes: tuple = ("onnxruntime",)
    opsets: Optional[tuple] = None          # None: each entry's own opset
    jobs: int = 2                           # subprocess conversions at once
    quiet: Callable = contextlib.nullcontext  # context around in-process conversions (hides noise)


@dataclasses.dataclass(frozen=True)
class Result:
    """One check: an entry, converted by one path (at one opset), run on one runtime."""

    entry: str
    label: str      # "library", "cli opset 13", "library openvino", ...
    status: str     # passed, failed or skipped
    detail: str     # the largest difference and the time, or what failed, or why it was skipped


def run_flavour(options: Options) -> Iterator[Result]:
    """Every check of this process's flavour, each result as soon as it is known."""
    flavour = current_flavour()
    manifest = load_manifest(options.corpus)
    entries = at_opsets(entries_for(manifest, flavour, options.keyword), options.opsets)
    LOG.info("%s: %d entries to check in %s", flavour, len(entries), options.corpus)
    yield from check_entries(entries, options)


def check_entries(entries: list, options: Options) -> Iterator[Result]:
    """Every check of ``entries`` (at the opsets they have), by each path and on each runtime asked for."""
    sound = []
    for entry in entries:
        problems = entry_problems(entry, options.corpus)
        if problems:
            yield Result(entry["name"], "manifest", FAILED, "; ".join(problems))
        else:
            sound.append(entry)
    with tempfile.TemporaryDirectory(prefix="mlr-corpus-") as tmp:
        for path in options.paths:
            available, why = path_available(path)
            applies = [e for e in sound if path_applies(path, e)[0]]
            yield from (Result(e["name"], path, SKIPPED, path_applies(path, e)[1]) for e in sound if e not in applies)
            if not available:
                yield from (Result(e["name"], path, SKIPPED, why) for e in applies)
            elif path == "library":
                yield from _library_checks(applies, options, tmp)
            else:
                yield from _subprocess_checks(path, applies, options, tmp)


def _output(tmp: str, entry: dict, path: str) -> str:
    return os.path.join(tmp, f"{entry['name'].replace('/', '__')}.{entry['opset']}.{path}.onnx")


def _library_checks(entries: list, options: Options, tmp: str) -> Iterator[Result]:
    for entry in entries:
        output = _output(tmp, entry, "library")
        start = time.monotonic()
        try:
            with options.quiet():
                report = convert_library(entry, options.corpus, output)
            check_report(entry, report)
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            yield Result(entry["name"], _label("library", entry, options), FAILED, describe(error))
            continue
        yield from _runtime_checks(entry, "library", output, time.monotonic() - start, options)


def _subprocess_checks(path: str, entries: list, options: Options, tmp: str) -> Iterator[Result]:
    """Conversions by ``path`` run ``options.jobs`` at a time; results come in the entries' order."""
    def convert(entry):
        output = _output(tmp, entry, path)
        try:
            done, seconds = run_command(path, entry, options.corpus, output)
            check_command_result(done, output)
        except (CorpusFailure, OSError) as error:
            return output, error, 0.0
        return output, None, seconds

    with concurrent.futures.ThreadPoolExecutor(max(1, options.jobs)) as pool:
        for entry, (output, error, seconds) in zip(entries, pool.map(convert, entries)):
            if error is not None:
                yield Result(entry["name"], _label(path, entry, options), FAILED, describe(error))
            else:
                yield from _runtime_checks(entry, path, output, seconds, options)


def _runtime_checks(entry: dict, path: str, output: str, seconds: float, options: Options) -> Iterator[Result]:
    """The converted model on every runtime asked for."""
    for runtime in options.runtimes:
        label = _label(path, entry, options) + ("" if runtime == "onnxruntime" else f" {runtime}")
        available, why = runtime_available(runtime)
        if not available:
            yield Result(entry["name"], label, SKIPPED, why)
            continue
        yield _runtime_check(entry, output, runtime, seconds, label, options.corpus, path)


def _runtime_check(entry: dict, output: str, runtime: str, seconds: float, label: str, corpus: str,
                   path: str) -> Result:
    refusal = known_refusal(entry, runtime, output)
    try:
        worst = check_onnx(entry, corpus, output, runtime, path)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        if refusal and refusal[0] in str(error):
            return Result(entry["name"], label, SKIPPED, f"known: {refusal[1]} ({refusal[0]})")
        return Result(entry["name"], label, FAILED, describe(error))
    if refusal:
        return Result(entry["name"], label, FAILED,
                      f"{runtime} now runs it ({refusal[1]}): update its entry in masked_lstm_rewriter.targets")
    return Result(entry["name"], label, PASSED, f"max |onnx - {reference(entry)}| = {worst:.2g} ({seconds:.1f}s)")


def _label(path: str, entry: dict, options: Options) -> str:
    return path + ("" if options.opsets is None or is_onnx_file(entry) else f" opset {entry['opset']}")


def describe(error: BaseException) -> str:
    """A failure's text: a CorpusFailure's own message, else the exception's type and message."""
    return str(error) if isinstance(error, CorpusFailure) else f"{type(error).__name__}: {error}"
