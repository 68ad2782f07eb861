# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter``: convert with tf2onnx and the rewrite, ``rewrite`` the Loops of an
ONNX file, or ``verify`` a conversion.

    python -m masked_lstm_rewriter [convert] [MODEL] --output model.onnx [plugin options] [tf2onnx options]
    python -m masked_lstm_rewriter rewrite model.onnx --output native.onnx [plugin options]
    python -m masked_lstm_rewriter verify REFERENCE model.onnx [--runtime ...]   (a Keras model, a SavedModel or an ONNX file)

``convert`` (the default command) is ``python -m tf2onnx.convert`` with the plugin enabled: every
tf2onnx option passes through unchanged, and the plugin's options have names tf2onnx does not
use. ``MODEL``, if given first, is short for ``--keras`` (a ``.keras`` / ``.h5`` file) or
``--saved-model`` (a directory). The output is written to a hidden file next to it and renamed
only on success, so a failed or interrupted run leaves no file. Bad input gives one line
``masked_lstm_rewriter: error: ...`` and the exit status in :data:`EXIT_CODES`; ``--debug``
shows the traceback too (and is also tf2onnx's debug mode).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import signal
import sys
import traceback
from importlib import metadata
from typing import Optional

PROG = "masked_lstm_rewriter"
INPUT_OPTIONS = ("--saved-model", "--keras", "--graphdef", "--input", "--tflite", "--tfjs", "--checkpoint")
MASK_MODES = ("post", "any")          # masks.MASK_MODES, without importing TensorFlow for --help
RUNTIMES = ("onnxruntime", "openvino")  # emit.TARGETS, likewise
EXIT_CODES = {0: "converted (or verified)", 1: "the conversion failed (or verify found a difference)",
              2: "bad arguments: no model, a missing file, an unwritable output, an unknown option",
              130: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)"}

HELP = f"""usage: python -m {PROG} [convert] [MODEL] --output FILE [options] [tf2onnx options]
       python -m {PROG} rewrite ONNX --output FILE [--mask-mode post|any] [--runtime ...] [--schedule]
       python -m {PROG} verify REFERENCE ONNX [--runtime onnxruntime|openvino|all] [--tolerance T]
       python -m {PROG} --version

Convert a TensorFlow/Keras model to ONNX with tf2onnx, its masked LSTM, GRU and SimpleRNN layers
as native ONNX LSTM, GRU and RNN ops; rewrite the recurrent Loops of an ONNX file already converted
(by stock tf2onnx, or by Keras's JAX export) into those ops; or check a converted model against the
Keras model or the ONNX file it was rewritten from (rewrite ONNX --help for its options).

MODEL                   a .keras or .h5 file (short for --keras FILE) or a SavedModel directory
                        (short for --saved-model DIR); or give tf2onnx's own input option
-o, --output FILE       the ONNX file to write (written only if the conversion succeeds)

plugin options:
  --mask-mode post|any  post: masks padded at the end, checked at run time (a model fed another
                        mask fails with a clear error); any: exact for every mask, a little slower.
                        Default: $TF2ONNX_MASKED_LSTM, else "any" for --runtime openvino, else post
  --runtime onnxruntime|openvino
                        the runtime the model is for (default: any runtime). openvino keeps as
                        Loops the layers OpenVINO cannot run natively. Default:
                        $TF2ONNX_MASKED_LSTM_TARGET
  --schedule            length-aware schedule for long-tailed batches (needs --runtime onnxruntime)
  --debug               show the traceback of an error (also tf2onnx's --debug)
  -v, --verbose         also show what the plugin did to each layer (also tf2onnx's --verbose)
  --version             show the versions and exit
  -h, --help            show this help and exit

tf2onnx options: every option of python -m tf2onnx.convert passes through unchanged, with its
meaning there (see python -m tf2onnx.convert --help), among them --saved-model DIR, --keras FILE,
--graphdef FILE (with --inputs, --outputs), --opset N, --inputs NAME[SHAPE], --outputs,
--signature_def, --tag, --target {{rs4,rs5,rs6,caffe2,tensorrt,nhwc}}, --large_model,
--inputs-as-nchw, --rename-inputs, --rename-outputs, --continue_on_error.

examples:
  python -m {PROG} model.keras -o model.onnx
  python -m {PROG} --saved-model saved_model_dir --output model.onnx --mask-mode any --opset 17
  python -m {PROG} model.keras -o model.onnx --runtime openvino
  python -m {PROG} verify model.keras model.onnx --runtime all
  python -m {PROG} verify original.onnx rewritten.onnx

exit status: {"; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())}.
The run ends with a report: each masked recurrent layer, rewritten (into what) or left as a Loop (why).
"""


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: the run stops, cleaning up as for an error (exit 130 or 143).

    TensorFlow may wrap the exception raised in the middle of its work into one of its own, or
    drop it: the last signal is also kept in :data:`STOPPED`, which the conversion checks before
    it keeps its output."""

    def __init__(self, code: int, what: str):
        super().__init__(what)
        self.code = code


STOPPED: list = []  # the Interrupted of the signal that stopped this run, if any
SIGNALS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


def main(argv: Optional[list] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    STOPPED.clear()
    previous = {number: signal.signal(number, _stop) for number in SIGNALS}
    try:
        if args and args[0] == "verify":
            return _verify(args[1:])
        if args and args[0] == "rewrite":
            return _rewrite(args[1:])
        return _convert_command(args[1:] if args and args[0] == "convert" else args)
    except UsageError as error:
        return _fail(2, str(error), debug)
    except Interrupted as stop:
        return _fail(stop.code, str(stop), debug)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _stop(signum, frame):  # pylint: disable=unused-argument
    STOPPED.append(Interrupted(*SIGNALS[signum]))
    raise STOPPED[-1]


def _fail(code: int, message: str, debug: bool) -> int:
    if debug and sys.exc_info()[0] is not None:
        traceback.print_exc()
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _convert_command(args: list) -> int:
    if any(arg in ("-h", "--help") for arg in args):
        print(HELP, end="")
        return 0
    if "--version" in args:
        print(_versions())
        return 0
    mask_mode, args = _pop_option(args, "--mask-mode", os.environ.get("TF2ONNX_MASKED_LSTM", "").strip() or None,
                                  MASK_MODES)
    runtime, args = _pop_option(args, "--runtime", os.environ.get("TF2ONNX_MASKED_LSTM_TARGET", "").strip() or None,
                                RUNTIMES)
    schedule = "--schedule" in args
    args = [arg for arg in args if arg != "--schedule"]
    args = _expand_model(_short_output(args))
    _check_target(args)
    _check_paths(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter, before it loads
    _check_with_tf2onnx_parser(args)
    return _convert(args, mask_mode, runtime, schedule)


def _versions() -> str:
    names = ("masked-lstm-rewriter", "tf2onnx", "tensorflow", "keras", "tf_keras", "onnx", "onnxruntime", "openvino")
    found = []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{name} {metadata.version(name)}")
    return ", ".join(found)


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


def _short_output(args: list) -> list:
    """``-o FILE`` as tf2onnx's ``--output FILE``."""
    return ["--output" if arg == "-o" else arg for arg in args]


def _expand_model(args: list) -> list:
    """A leading MODEL as tf2onnx's ``--keras FILE`` or ``--saved-model DIR``."""
    if not args or args[0].startswith("-"):
        return args
    model, rest = args[0], args[1:]
    if any(_option(rest, name) for name in INPUT_OPTIONS):
        raise UsageError(f"two models given: {model} and {next(n for n in INPUT_OPTIONS if _option(rest, n))}")
    if os.path.isdir(model):
        return ["--saved-model", model] + rest
    if model.lower().endswith(".onnx"):
        raise UsageError(f"{model}: an ONNX file; to rewrite its Loops: python -m {PROG} rewrite {model} -o OUT.onnx")
    if model.lower().endswith((".keras", ".h5", ".hdf5")):
        return ["--keras", model] + rest
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file or directory")
    raise UsageError(f"{model}: not a .keras or .h5 file or a SavedModel directory (for a GraphDef, use "
                     "--graphdef FILE --inputs ... --outputs ...)")


def _check_target(args: list) -> None:
    """``--target`` is tf2onnx's (workarounds for rs4 ... tensorrt): point a runtime name at ``--runtime``."""
    value = _option(args, "--target")
    if value in RUNTIMES:
        raise UsageError(f"--target is tf2onnx's option (rs4, rs5, rs6, caffe2, tensorrt, nhwc); "
                         f"for the runtime the model is for, use --runtime {value}")


def _option(args: list, name: str) -> Optional[str]:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _check_paths(args: list) -> None:
    from .output_file import OutputError, check_writable  # pylint: disable=import-outside-toplevel
    inputs = [(name, _option(args, name)) for name in INPUT_OPTIONS if _option(args, name)]
    if not inputs:
        raise UsageError(f"no model given: python -m {PROG} MODEL --output FILE (a .keras or .h5 file, a SavedModel "
                         "directory), or --saved-model, --keras, --graphdef ...; --help for more")
    for name, path in inputs:
        if name != "--checkpoint" and not os.path.exists(path):
            raise UsageError(f"{name} {path}: no such file or directory")
    output = _option(args, "--output")
    if output is None:
        raise UsageError("--output FILE (or -o FILE) is required")
    try:
        check_writable(output)
    except OutputError as error:
        raise UsageError(f"--output {error}") from None


def _check_with_tf2onnx_parser(args: list) -> None:
    """Let tf2onnx's own parser judge the arguments; keep only its last line on error."""
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    captured = io.StringIO()
    saved = sys.argv
    sys.argv = [PROG] + args
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            convert.get_args()
    except SystemExit as done:
        lines = [line for line in captured.getvalue().splitlines() if line.strip()]
        raise UsageError(lines[-1].split("error: ", 1)[-1] if lines else "bad arguments") from None
    finally:
        sys.argv = saved


def _convert(args: list, mask_mode: Optional[str], runtime: Optional[str], schedule: bool) -> int:
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    from . import enable, last_report  # pylint: disable=import-outside-toplevel
    from .output_file import atomic_path  # pylint: disable=import-outside-toplevel
    from .report import start_conversion  # pylint: disable=import-outside-toplevel
    output = _option(args, "--output")
    saved = sys.argv
    try:
        with _plugin_logging("-v" in args or "--verbose" in args), atomic_path(output) as partial:
            start_conversion()
            with enable(mask_mode, runtime, schedule):
                sys.argv = [PROG] + _replace_option(args, "--output", partial)
                convert.main()
            if STOPPED:  # the signal's exception was lost in TensorFlow: the output is not kept
                raise STOPPED[-1]
    except (Exception, SystemExit) as error:  # pylint: disable=broad-except
        if STOPPED:
            raise STOPPED[-1] from error
        if isinstance(error, SystemExit) and not error.code:
            error = RuntimeError("tf2onnx stopped without writing a model")
        message = [line for line in str(error).strip().splitlines() if line.strip()]
        return _fail(1, f"conversion failed: {message[-1] if message else type(error).__name__}", "--debug" in args)
    finally:
        sys.argv = saved
    report = last_report()
    print(report if report is not None else f"{PROG}: no graph was rewritten")
    return 0


@contextlib.contextmanager
def _plugin_logging(verbose: bool):
    """The plugin's warnings (and with ``verbose`` its INFO records) on stderr, once each.

    tf2onnx's ``main`` configures the root logger for its own records; ours are shown by this
    handler only, whatever it does."""
    logger = logging.getLogger("masked_lstm_rewriter")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


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


def _rewrite(args: list) -> int:
    """``rewrite IN.onnx -o OUT.onnx``: the recurrent Loops of an ONNX file as native ops."""
    parser = _OneLineParser(prog=f"python -m {PROG} rewrite", allow_abbrev=False,
                            description="Rewrite the recurrent Loops of an ONNX file (converted by stock tf2onnx, "
                                        "or by Keras 3's export on the JAX backend) into native ONNX LSTM, GRU and "
                                        "RNN ops; every other node stays as it was.",
                            epilog="exit status: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()))
    parser.add_argument("model", metavar="ONNX", help="the ONNX file to rewrite (its external data beside it)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the ONNX file to write (written only if the rewrite succeeds)")
    parser.add_argument("--mask-mode", choices=MASK_MODES,
                        default=os.environ.get("TF2ONNX_MASKED_LSTM", "").strip() or None,
                        help="post: masks padded at the end, checked at run time; any: exact for every mask "
                             "(default: \"any\" for --runtime openvino, else post)")
    parser.add_argument("--runtime", choices=RUNTIMES, help="the runtime the model is for (default: any runtime)")
    parser.add_argument("--schedule", action="store_true",
                        help="length-aware schedule for long-tailed batches (needs --runtime onnxruntime)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show what was done to each layer")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    try:
        parsed = parser.parse_args(args)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    if not os.path.isfile(parsed.model):
        raise UsageError(f"{parsed.model}: no such file")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .onnx_file import ModelError, rewrite_onnx  # pylint: disable=import-outside-toplevel
    from .output_file import OutputError  # pylint: disable=import-outside-toplevel
    try:
        with _plugin_logging(parsed.verbose):
            _, report = rewrite_onnx(parsed.model, parsed.output, mask_mode=parsed.mask_mode,
                                     runtime=parsed.runtime, schedule=parsed.schedule)
    except (ModelError, OutputError, ValueError) as error:
        raise UsageError(str(error)) from None
    except Exception as error:  # pylint: disable=broad-except
        if STOPPED:
            raise STOPPED[-1] from error
        return _fail(1, f"rewrite failed: {type(error).__name__}: {error}", parsed.debug)
    print(report)
    return 0


def _verify(args: list) -> int:
    parser = _OneLineParser(prog=f"python -m {PROG} verify", allow_abbrev=False,
                                     description="Check that an ONNX model gives the outputs of the model it came "
                                                 "from (a Keras model, a SavedModel, or the original ONNX file "
                                                 "run on onnxruntime): every output at every position, on batches "
                                                 "with post-padded, pre-padded and holed masks, empty and full rows.",
                                     epilog="exit status: 0 verified; 1 a difference past the tolerance, or the "
                                            "guard fired where it should not (or not where it should); 2 bad input")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from . import verification  # pylint: disable=import-outside-toplevel
    verification.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    try:
        parsed = parser.parse_args(args)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    return verification.run(parsed)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (exit status 2) instead of usage and error."""

    def error(self, message):
        raise UsageError(message)
