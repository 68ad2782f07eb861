# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter``: ``python -m tf2onnx.convert`` plus the rewrite.

    python -m masked_lstm_rewriter --saved-model DIR --output model.onnx [--mask-mode post|any]
                                   [--target openvino|onnxruntime]

Every tf2onnx.convert argument works as it does there. ``--mask-mode`` defaults to
``$TF2ONNX_MASKED_LSTM`` or ``post``; ``--target`` to ``$TF2ONNX_MASKED_LSTM_TARGET`` (unset:
any runtime). The output is written to a temporary file next to it and
moved into place only when the conversion succeeded, so a failure leaves no partial file.
Bad input gives a one-line error and a non-zero exit. The run ends with a short report: each
masked recurrent layer, rewritten (into what, in which mode) or left as a Loop (why).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from typing import Optional

PROG = "masked_lstm_rewriter"
INPUT_OPTIONS = ("--saved-model", "--keras", "--graphdef", "--input", "--tflite", "--tfjs", "--checkpoint")


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


def main(argv: Optional[list] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        from .emit import TARGETS  # pylint: disable=import-outside-toplevel
        from .masks import MASK_MODES  # pylint: disable=import-outside-toplevel
        mask_mode, args = _pop_option(args, "--mask-mode", os.environ.get("TF2ONNX_MASKED_LSTM", "").strip() or "post",
                                      MASK_MODES)
        target, args = _pop_option(args, "--target", os.environ.get("TF2ONNX_MASKED_LSTM_TARGET", "").strip() or None,
                                   TARGETS)
        _check_with_tf2onnx_parser(args)
        _check_paths(args)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except SystemExit as done:  # --help
        return int(done.code or 0)
    return _convert(args, mask_mode, target)


def _pop_option(args: list, name: str, default: Optional[str], choices: tuple) -> tuple:
    """(the value of our own option ``name``, the other arguments, for tf2onnx)."""
    value, rest = default, []
    it = iter(args)
    for arg in it:
        if arg == name:
            value = next(it, None)
            if value is None:
                raise UsageError(f"{name} needs a value: {' or '.join(choices)}")
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if value is not None and value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value, rest


def _check_with_tf2onnx_parser(args: list) -> None:
    """Let tf2onnx's own parser judge the arguments; keep only its last line on error."""
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    captured = io.StringIO()
    saved = sys.argv
    sys.argv = [PROG] + args
    try:
        with contextlib.redirect_stderr(captured):
            convert.get_args()
    except SystemExit as done:
        if done.code:
            lines = [line for line in captured.getvalue().splitlines() if line.strip()]
            raise UsageError(lines[-1].split("error: ", 1)[-1] if lines else "bad arguments") from None
        raise
    finally:
        sys.argv = saved


def _option(args: list, name: str) -> Optional[str]:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _check_paths(args: list) -> None:
    inputs = [(name, _option(args, name)) for name in INPUT_OPTIONS if _option(args, name)]
    if not inputs:
        raise UsageError("no model given: use --saved-model, --keras, --graphdef, ...")
    for name, path in inputs:
        if name != "--checkpoint" and not os.path.exists(path):
            raise UsageError(f"{name} {path}: no such file or directory")
    output = _option(args, "--output")
    if output is None:
        raise UsageError("--output is required")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise UsageError(f"--output {output}: directory {folder} does not exist")


def _convert(args: list, mask_mode: str, target: Optional[str]) -> int:
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    from . import enable, last_report  # pylint: disable=import-outside-toplevel
    output = _option(args, "--output")
    handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".onnx", dir=os.path.dirname(os.path.abspath(output)))
    os.close(handle)
    args = _replace_option(args, "--output", partial)
    saved = sys.argv
    sys.argv = [PROG] + args
    try:
        with enable(mask_mode, target):
            convert.main()
        if not os.path.getsize(partial):
            raise RuntimeError("tf2onnx wrote no model")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        os.replace(partial, output)
    except (Exception, SystemExit) as error:  # pylint: disable=broad-except
        if isinstance(error, SystemExit) and not error.code:
            error = RuntimeError("tf2onnx stopped without writing a model")
        message = str(error).strip().splitlines()
        print(f"{PROG}: error: conversion failed: {message[-1] if message else type(error).__name__}",
              file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
        if os.path.exists(partial):
            os.remove(partial)
    report = last_report()
    print(report if report is not None else f"{PROG}: no graph was rewritten")
    return 0


def _replace_option(args: list, name: str, value: str) -> list:
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == name and i + 1 < len(args):
            out += [name, value]
            skip = True
        elif arg.startswith(name + "="):
            out.append(f"{name}={value}")
        else:
            out.append(arg)
    return out
