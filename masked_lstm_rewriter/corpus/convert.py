# SPDX-License-Identifier: Apache-2.0
"""Convert a corpus entry with the plugin, the three ways a user does.

* ``library``: ``tf2onnx.convert.main()`` in this process, inside
  ``masked_lstm_rewriter.enable(mask_mode, target)``; ``last_report()`` must list every masked layer
  of the model as rewritten, except those the entry expects the plugin to refuse (``left_as_loop``:
  a text each one's reason contains);
* ``cli``: ``python -m masked_lstm_rewriter ... --mask-mode MODE [--runtime R]`` in a subprocess;
* ``tf2onnx``: stock ``python -m tf2onnx.convert`` in a subprocess with ``TF2ONNX_MASKED_LSTM=MODE``
  (and ``TF2ONNX_MASKED_LSTM_TARGET=T``), which the installed start-up hook
  (``masked_lstm_rewriter.pth``) reads.

Each writes the ONNX model to ``output``; the checks are in :mod:`.check`. An ONNX-file entry is
rewritten, not converted: ``library`` is ``rewrite_onnx(file, output, mask_mode=...)`` (its report
checked the same way), ``cli`` is ``python -m masked_lstm_rewriter rewrite FILE --output OUT
--mask-mode MODE``; the ``tf2onnx`` path does not apply to it (:func:`path_applies`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from .check import CorpusFailure
from .manifest import convert_args, is_onnx_file, model_path

LOG = logging.getLogger(__name__)
PATHS = ("library", "cli", "tf2onnx")
COMMAND_TIMEOUT = 600  # seconds, one conversion in a subprocess
HOOK_ENV = "TF2ONNX_MASKED_LSTM"
HOOK_TARGET_ENV = "TF2ONNX_MASKED_LSTM_TARGET"
ONNX_FILE_PATHS = ("library", "cli")  # the paths that rewrite an ONNX file


def path_applies(path: str, entry: dict) -> tuple:
    """(True, "") when conversion path ``path`` applies to ``entry``, else (False, why)."""
    if is_onnx_file(entry) and path not in ONNX_FILE_PATHS:
        return False, (f"the {path} path converts Keras models; an ONNX file is rewritten by the library "
                       "(rewrite_onnx) and the command line (rewrite)")
    return True, ""


def convert_library(entry: dict, corpus: str, output: str):
    """``tf2onnx.convert.main()`` in this process with the plugin enabled (an ONNX-file entry:
    :func:`rewrite_library`); returns the conversion's ``last_report()``, or None when the plugin's
    rewriter did not run."""
    if is_onnx_file(entry):
        return rewrite_library(entry, corpus, output)
    import tf2onnx.convert  # pylint: disable=import-outside-toplevel

    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    LOG.debug("converting %s in this process", entry["name"])
    before = mlr.last_report()
    saved_argv = sys.argv
    sys.argv = ["tf2onnx.convert"] + convert_args(entry, corpus, output)
    try:
        with mlr.enable(entry["mask_mode"], entry.get("target")):
            tf2onnx.convert.main()
    finally:
        sys.argv = saved_argv
    report = mlr.last_report()
    return None if report is before else report


def rewrite_library(entry: dict, corpus: str, output: str):
    """``rewrite_onnx`` of an ONNX-file entry's file, written to ``output``; returns its report."""
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    LOG.debug("rewriting %s in this process", entry["name"])
    _, report = mlr.rewrite_onnx(model_path(entry, corpus), output, mask_mode=entry["mask_mode"],
                                 runtime=entry.get("target"))
    return report


def check_report(entry: dict, report) -> None:
    """The plugin saw every masked layer of the model and rewrote all of them but those the entry
    expects it to refuse, which it left as a Loop for the reason expected; an entry without a mask
    has every layer reported as unmasked."""
    if report is None:
        raise CorpusFailure("the conversion did not run the plugin's rewriter (last_report() unchanged)")
    if entry.get("unmasked") and any(layer.masked for layer in report.layers):
        raise CorpusFailure(f"the report marks a layer of a model without a mask as masked: {report}")
    expected = list(entry.get("left_as_loop", []))
    unexpected = []
    for layer in report.left_as_loop:
        match = next((text for text in expected if text in layer.detail), None)
        if match is None:
            unexpected.append(str(layer))
        else:
            expected.remove(match)
    if unexpected:
        raise CorpusFailure("layers left as a Loop: " + "; ".join(unexpected))
    if expected:
        raise CorpusFailure(f"no layer was left as a Loop for the reason(s) {expected}: {report}")
    if len(report.rewritten) + len(report.left_as_loop) != entry["masked_layers"]:
        raise CorpusFailure(f"{len(report.rewritten)} masked layer(s) rewritten and {len(report.left_as_loop)} "
                            f"left as a Loop, the model has {entry['masked_layers']}: {report}")


def command_for(path: str, entry: dict, corpus: str, output: str, python: str = sys.executable) -> tuple:
    """(argv, extra environment) of a subprocess conversion by ``path`` (``cli`` or ``tf2onnx``)."""
    target = entry.get("target")
    if is_onnx_file(entry) and path == "cli":
        return [python, "-m", "masked_lstm_rewriter", "rewrite", model_path(entry, corpus), "--output", output,
                "--mask-mode", entry["mask_mode"]] + (["--runtime", target] if target else []), {}
    if is_onnx_file(entry):
        raise ValueError(path_applies(path, entry)[1])
    args = convert_args(entry, corpus, output)
    if path == "cli":
        return [python, "-m", "masked_lstm_rewriter"] + args + ["--mask-mode", entry["mask_mode"]] + \
            (["--runtime", target] if target else []), {}
    if path == "tf2onnx":
        return [python, "-m", "tf2onnx.convert"] + args, {HOOK_ENV: entry["mask_mode"], HOOK_TARGET_ENV: target or ""}
    raise ValueError(f"{path!r} is not a subprocess conversion path (cli or tf2onnx)")


def path_available(path: str, python: str = sys.executable, env=None) -> tuple:
    """(True, "") when conversions by ``path`` can run here, else (False, why)."""
    if path == "library":
        return True, ""
    if path == "cli":
        return _runs([python, "-m", "masked_lstm_rewriter", "--help"], env)
    if path == "tf2onnx":
        probe = "import sys, masked_lstm_rewriter_autoenable as hook; sys.exit(0 if hook.active() else 3)"
        ok, why = _runs([python, "-c", probe], dict(env or os.environ, **{HOOK_ENV: "post"}))
        if not ok:
            return False, ("the start-up hook masked_lstm_rewriter.pth is not active in this environment "
                           f"(pip install the package, not PYTHONPATH): {why}")
        return True, ""
    raise ValueError(f"unknown conversion path {path!r}, expected one of {PATHS}")


def _runs(command: list, env) -> tuple:
    """(True, "") when ``command`` exits with 0, else (False, its last line of output)."""
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"{' '.join(command[1:])}: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return False, f"{' '.join(command[1:])} exited with {done.returncode}: {last}"
    return True, ""


def run_command(path: str, entry: dict, corpus: str, output: str, env=None) -> tuple:
    """Convert ``entry`` by ``path`` in a subprocess; returns (CompletedProcess, seconds). Raises
    CorpusFailure when it does not finish in time."""
    command, extra = command_for(path, entry, corpus, output)
    LOG.debug("converting %s: %s", entry["name"], " ".join(command))
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=dict(env or os.environ, **extra), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise CorpusFailure(f"the conversion took more than {COMMAND_TIMEOUT}s: {' '.join(command)}") from None
    return done, time.monotonic() - start


def check_command_result(done, output: str) -> None:
    """The subprocess succeeded and wrote the model; raises CorpusFailure with its last lines if not."""
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise CorpusFailure(f"the conversion exited with {done.returncode}:\n{tail}")
    if not os.path.isfile(output):
        raise CorpusFailure(f"the conversion exited with 0 but wrote no {output}")
