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
only on success, so a failed or interrupted run leaves no file. Once the file is renamed into place
the conversion is done: a Ctrl-C or SIGTERM arriving from the rename on is ignored, and the run
ends with status 0 (never a failure status beside a written file). Bad input gives one line
``masked_lstm_rewriter: error: ...`` and the exit status in :data:`EXIT_CODES`; ``--debug``
shows the traceback too (and is also tf2onnx's debug mode).

While it works, a conversion shows progress lines on standard error (loading, converting,
writing), with the plugin's warnings; ``-v`` adds tf2onnx's INFO lines and what the plugin did to
each layer; ``-q`` shows nothing but the one-line errors (:mod:`.cli_logging`). Model files and
output paths are checked before TensorFlow loads (:mod:`.cli_input`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
import traceback
from typing import Optional

from . import cli_input, dependencies
from .cli_args import QUIET, model_position, split_command
from .cli_input import (UsageError, bad_input, environment_choice, keras_on_tensorflow, model_file_problem, pop_choice,
                        pop_switch, with_litert_hint)
from .cli_logging import (command_logging, progress, quiet_run, rename, silence_exit, verbosity,
                          without_freed_function_noise)
from .cli_quantize import MODES, pop_quantize
from .cli_signals import STOPPED, Interrupted, ignored_from_now, output_written, stopped_by_signals
from .cli_streaming import pop_streaming
from .quantize import schedule_for

PROG = "masked_lstm_rewriter"
INPUT_OPTIONS = ("--saved-model", "--keras", "--graphdef", "--input", "--tflite", "--tfjs", "--checkpoint")
MODEL_FILES = {".keras": "--keras", ".h5": "--keras", ".hdf5": "--keras", ".tflite": "--tflite"}  # MODEL's suffix
MASK_MODES = ("post", "any")          # masks.MASK_MODES, without importing TensorFlow for --help
RUNTIMES = ("onnxruntime", "openvino")  # emit.TARGETS, likewise
MASK_MODE_ENV, RUNTIME_ENV = "TF2ONNX_MASKED_LSTM", "TF2ONNX_MASKED_LSTM_TARGET"
EXIT_CODES = {0: "converted (or verified)", 1: "the conversion failed (or verify found a difference)",
              2: "bad arguments: no model, a missing or malformed model file or custom class, an unwritable "
                 "output, an unknown option or --custom-objects module, a bad environment variable",
              130: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)"}

HELP = f"""usage: python -m {PROG} [convert] [MODEL] --output FILE [options] [tf2onnx options]
       python -m {PROG} rewrite ONNX --output FILE [--mask-mode post|any] [--runtime ...] [--no-schedule] [--streaming]
                                          [--quantize int8] [-q]
       python -m {PROG} verify REFERENCE ONNX [--runtime onnxruntime|openvino|all] [--tolerance T] [-q]
       python -m {PROG} --version

Convert a TensorFlow/Keras model to ONNX with tf2onnx, its masked LSTM, GRU and SimpleRNN layers
as native ONNX LSTM, GRU and RNN ops; rewrite the recurrent Loops of an ONNX file already converted
(by stock tf2onnx, or by Keras's JAX export) into those ops; or check a converted model against the
Keras model or the ONNX file it was rewritten from (rewrite ONNX --help for its options).

MODEL                   a .keras or .h5 file (short for --keras FILE), a .tflite file (--tflite FILE)
                        or a SavedModel directory (--saved-model DIR); or tf2onnx's own input option
-o, --output FILE       the ONNX file to write (written only if the conversion succeeds)

plugin options:
  --mask-mode post|any  post: masks padded at the end, checked at run time (a model fed another
                        mask fails with a clear error); any: exact for every mask, a little slower.
                        Default: ${MASK_MODE_ENV}, else "any" for --runtime openvino, else post
  --runtime onnxruntime|openvino
                        the runtime the model is for (default: any runtime). openvino keeps as
                        Loops the layers OpenVINO cannot run natively; a model for one runtime
                        may not run exactly on the other, as the log then says. Default:
                        ${RUNTIME_ENV}
  --no-schedule         no length-aware schedule: one native node per layer. Default: the schedule
                        (long-tailed batches run in length-ordered segments), except with --quantize
  --streaming           each recurrent layer's states as inputs and outputs (<layer>/h_in ...
                        <layer>/h_out), to run the model chunk by chunk. Default: on for a Keras
                        file with stateful=True layers (said on standard error), else off
  --no-streaming        no state inputs: a stateful model's states are frozen as they are saved
  --quantize int8       quantize the model for onnxruntime (LSTM as DynamicQuantizeLSTM, Dense as
                        MatMulInteger); verify applies a tolerance for int8 (docs/quantization.md)
  --keep-wrong          write a model known to compute other values than its source (a SavedModel
                        with Keras 3's broken TimeDistributed trace) instead of failing; the
                        report says what is wrong
  --custom-objects MODULE
                        the module of the model's custom layers: a name or a .py file (repeatable)
  -q, --quiet           print nothing but errors: no report, no progress, no warnings, no
                        TensorFlow or tf2onnx messages
  -v, --verbose         also show tf2onnx's INFO lines and what the plugin did to each layer (also
                        tf2onnx's --verbose)
  --debug               show the traceback of an error (also tf2onnx's --debug)
  --version             show the versions and exit
  -h, --help            show this help and exit

tf2onnx options: every option of python -m tf2onnx.convert passes through unchanged, with its
meaning there (see python -m tf2onnx.convert --help), among them --saved-model DIR, --keras FILE,
--graphdef FILE (with --inputs, --outputs), --opset N, --inputs NAME[SHAPE], --outputs,
--signature_def, --tag, --target {{rs4,rs5,rs6,caffe2,tensorrt,nhwc}}, --inputs-as-nchw,
--rename-inputs, --rename-outputs, --continue_on_error (but not --large_model: see docs/limits.md).

examples:
  python -m {PROG} model.keras -o model.onnx
  python -m {PROG} --saved-model saved_model_dir --output model.onnx --mask-mode any --opset 17
  python -m {PROG} model.keras -o model.onnx --runtime openvino -q
  python -m {PROG} verify model.keras model.onnx --runtime all
  python -m {PROG} verify original.onnx rewritten.onnx

While it converts, it shows progress lines on standard error (loading, converting, writing) and
the plugin's warnings; tf2onnx's INFO lines only with -v. The run ends with a report on standard
output: each recurrent layer, rewritten (into what) or left as a Loop (why).

exit status: {"; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())}.
No output file is left behind unless the status is 0; once the file is in place, a Ctrl-C no longer
stops the run (it ends with 0).
"""


class Failed(Exception):
    """The work failed: reported in one line (its cause's traceback with ``--debug``), exit status ``code``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def program() -> int:
    """The program (``python -m masked_lstm_rewriter``, ``masked-lstm-rewriter``): :func:`main`, and unless
    ``--debug``, no tracebacks of functions TensorFlow fails to free as the process exits (under ``--quiet``,
    nothing more at all on the terminal then), and no signal changes the exit status then."""
    debug = "--debug" in sys.argv[1:]
    sys.unraisablehook = sys.unraisablehook if debug else without_freed_function_noise(sys.unraisablehook)
    status = main()
    ignored_from_now()  # the status stands while TensorFlow tears down
    if _quiet(sys.argv[1:]) and not debug:
        silence_exit()
    return status


def _quiet(args: list) -> bool:
    return any(arg in QUIET for arg in args) and not any(arg in ("-h", "--help", "--version") for arg in args)


def main(argv: Optional[list] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    quiet = _quiet(args)
    kept: list = []  # what the run said on stderr under --quiet that is still shown: its errors
    try:
        with stopped_by_signals(), quiet_run(quiet, kept, keep_all=debug):
            command, args = split_command(args)
            if command == "verify":
                return _verify(args)
            if command == "rewrite":
                return _rewrite(args)
            return _convert_command(args)
    except UsageError as error:
        return _fail(2, str(error), debug)
    except ModuleNotFoundError as error:  # TensorFlow, tf2onnx or a runtime not installed: the extra that brings it
        return _fail(2, dependencies.explain(error), debug)
    except Failed as failure:  # with --debug, the traceback of what failed (a verdict has none)
        return _fail(failure.code, str(failure), debug and failure.__cause__ is not None, failure.__cause__)
    except Interrupted as stop:
        return _fail(stop.code, str(stop), debug)
    finally:
        if kept:
            print("\n".join(kept), file=sys.stderr)


def _fail(code: int, message: str, debug: bool, cause: Optional[BaseException] = None) -> int:
    if debug and cause is not None:
        traceback.print_exception(type(cause), cause, cause.__traceback__)
    elif debug and sys.exc_info()[0] is not None:
        traceback.print_exc()
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _convert_command(args: list) -> int:
    if any(arg in ("-h", "--help") for arg in args):
        print(HELP, end="")
        return 0
    if "--version" in args:
        print(dependencies.installed_versions())
        return 0
    quiet = any(arg in QUIET for arg in args)
    args = [arg for arg in args if arg not in QUIET]
    mask_mode, args = pop_choice(args, "--mask-mode", MASK_MODE_ENV, MASK_MODES)
    runtime, args = pop_choice(args, "--runtime", RUNTIME_ENV, RUNTIMES)
    modules, args = cli_input.pop_custom_objects(args)
    streaming, args = pop_streaming(args)
    schedule, args = pop_switch(args, "schedule")
    flags = {"--keep-wrong": "--keep-wrong" in args, "--streaming": streaming}
    flags["--quantize"], args = pop_quantize(args, runtime, schedule)
    flags["--schedule"] = schedule_for(schedule, flags["--quantize"])
    args = [arg for arg in args if arg not in flags]
    args = _expand_model(_short_output(args))
    _refuse_large_model(args)
    _check_target(args)
    _check_paths(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter, before it loads
    renames: dict = {}
    with command_logging(verbosity(args), quiet, renames):
        named = keras_on_tensorflow()
        if named:
            progress("KERAS_BACKEND=%s: converting with Keras on TensorFlow (the model file is the same on "
                     "every backend)", named)
        progress("loading %s", next(path for name, path in _inputs(args)))
        _check_with_tf2onnx_parser(args)
        with cli_input.custom_objects(modules):
            report = _convert(args, mask_mode, runtime, flags, renames)
    if not quiet:
        print(report if report is not None else f"{PROG}: no graph was rewritten")
    return 0


def _short_output(args: list) -> list:
    """``-o FILE`` as tf2onnx's ``--output FILE``."""
    return ["--output" if arg == "-o" else arg for arg in args]


def _expand_model(args: list) -> list:
    """MODEL (the first argument no option takes) as tf2onnx's ``--saved-model DIR`` or its suffix's option."""
    position = model_position(args)
    if position is None:
        return args
    model, rest = args[position], args[:position] + args[position + 1:]
    if any(_option(rest, name) for name in INPUT_OPTIONS):
        raise UsageError(f"two models given: {model} and {next(n for n in INPUT_OPTIONS if _option(rest, n))}")
    if os.path.isdir(model):
        if not any(os.path.isfile(os.path.join(model, name)) for name in ("saved_model.pb", "saved_model.pbtxt")):
            raise UsageError(f"{model}: a directory without saved_model.pb: not a SavedModel")
        return ["--saved-model", model] + rest
    if model.lower().endswith(".onnx"):
        raise UsageError(f"{model}: an ONNX file; to rewrite its Loops: python -m {PROG} rewrite {model} -o OUT.onnx")
    if option := MODEL_FILES.get(os.path.splitext(model.lower())[1]):
        return [option, model] + rest
    if not os.path.exists(model):
        raise UsageError(f"{model}: no such file or directory")
    raise UsageError(f"{model}: not a .keras, .h5 or .tflite file or a SavedModel directory (for a GraphDef, use "
                     "--graphdef FILE --inputs ... --outputs ...)")


def _refuse_large_model(args: list) -> None:
    """tf2onnx's ``--large_model`` is refused (:func:`.dependencies.check_large_model`)."""
    try:
        dependencies.check_large_model("--large_model" in args, flags=True)
    except ValueError as error:
        raise UsageError(str(error)) from None


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


def _inputs(args: list) -> list:
    """(option, path) of each model input option given."""
    return [(name, _option(args, name)) for name in INPUT_OPTIONS if _option(args, name)]


def _check_paths(args: list) -> None:
    inputs = _inputs(args)
    if not inputs:
        raise UsageError(f"no model given: python -m {PROG} MODEL --output FILE (a .keras or .h5 file, a SavedModel "
                         "directory), or --saved-model, --keras, --graphdef ...; --help for more")
    for name, path in inputs:
        if name != "--checkpoint" and not os.path.exists(path):
            raise UsageError(f"{name} {path}: no such file or directory")
        problem = model_file_problem(path) if name == "--keras" else None
        if problem:
            raise UsageError(problem)
    output = _option(args, "--output")
    if output is None:
        raise UsageError("--output FILE (or -o FILE) is required")
    _check_output(output)


def _check_output(output: str) -> None:
    from .output_file import OutputError, check_writable  # pylint: disable=import-outside-toplevel
    if not output:
        raise UsageError("--output: an empty file name")
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
    except SystemExit:
        lines = [line for line in captured.getvalue().splitlines() if line.strip()]
        raise UsageError(lines[-1].split("error: ", 1)[-1] if lines else "bad arguments") from None
    finally:
        sys.argv = saved


def _convert(args: list, mask_mode: Optional[str], runtime: Optional[str], flags: dict, renames: dict):
    """tf2onnx's ``main`` under the plugin, a Keras file or a SavedModel named as ``convert`` names it
    (:mod:`.io_names`), writing to a hidden file renamed to ``--output`` at the end; returns the
    report. ``flags``: the plugin's switches given (``--schedule``, ``--keep-wrong``; ``--streaming``:
    True, False, or None for a Keras file's stateful layers to decide, :mod:`.cli_streaming`;
    ``--quantize``: the mode, or None);
    ``renames`` gets hidden path -> output, for the log records."""
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    from . import enable, last_report  # pylint: disable=import-outside-toplevel
    from .cli_logging import conversion_progress  # pylint: disable=import-outside-toplevel
    from .cli_quantize import quantize_file  # pylint: disable=import-outside-toplevel
    from .cli_streaming import streaming_decided  # pylint: disable=import-outside-toplevel
    from .io_names import tf2onnx_main_named  # pylint: disable=import-outside-toplevel
    from .output_file import atomic_path  # pylint: disable=import-outside-toplevel
    from .report import start_conversion  # pylint: disable=import-outside-toplevel
    output = _option(args, "--output")
    saved = sys.argv
    try:
        with atomic_path(output, before_rename=output_written) as partial:
            renames[partial] = output
            start_conversion()
            plugin = functools.partial(enable, mask_mode, runtime, flags["--schedule"],
                                       keep_wrong=flags["--keep-wrong"])
            with plugin(streaming=bool(flags["--streaming"])), \
                    tf2onnx_main_named(), conversion_progress(output, partial), \
                    streaming_decided(flags["--streaming"], lambda: plugin(streaming=True)):
                sys.argv = [PROG] + _replace_option(args, "--output", partial)
                convert.main()
            if STOPPED:  # the signal's exception was lost in TensorFlow: the output is not kept
                raise STOPPED[-1]
            if flags["--quantize"]:
                quantize_file(partial, flags["--quantize"])
    except (Exception, SystemExit) as error:  # pylint: disable=broad-except
        _conversion_failed(error, args, renames)
    finally:
        sys.argv = saved
    return last_report()


def _conversion_failed(error: BaseException, args: list, renames: dict) -> None:
    """Raises what the command line says about a failed conversion."""
    if STOPPED:
        raise STOPPED[-1] from error
    if isinstance(error, SystemExit) and not error.code:
        error = RuntimeError("tf2onnx stopped without writing a model")
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    message = rename(lines[-1] if lines else type(error).__name__, renames)
    problem = bad_input(_option(args, "--keras"), error, message)
    if problem:  # a custom class whose module was not given, a tf_keras .h5 file under Keras 3
        raise UsageError(problem) from error
    raise Failed(1, f"conversion failed: {with_litert_hint(message, _option(args, '--tflite'))}") from error


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
    parser = _rewrite_parser()
    try:
        parsed = parser.parse_args(args)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    if parsed.mask_mode not in (None,) + MASK_MODES:  # argparse checks the choices of a given value only
        environment_choice(MASK_MODE_ENV, MASK_MODES)
    if not os.path.isfile(parsed.model):
        raise UsageError(f"{parsed.model}: no such file")
    _check_output(parsed.output)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .onnx_file import ModelError, rewrite_onnx  # pylint: disable=import-outside-toplevel
    from .onnx_file.model_io import save  # pylint: disable=import-outside-toplevel
    from .output_file import OutputError, atomic_path  # pylint: disable=import-outside-toplevel
    try:
        with command_logging(int(parsed.verbose), parsed.quiet, {}):
            rewritten, report = rewrite_onnx(parsed.model, mask_mode=parsed.mask_mode, runtime=parsed.runtime,
                                             schedule=parsed.schedule, streaming=parsed.streaming,
                                             keep_wrong=parsed.keep_wrong, quantize=parsed.quantize)
            with atomic_path(parsed.output, before_rename=output_written) as partial:
                save(rewritten, partial, parsed.output)
    except (ModelError, OutputError, ValueError) as error:
        raise UsageError(str(error)) from None
    except Exception as error:  # pylint: disable=broad-except
        if STOPPED:
            raise STOPPED[-1] from error
        raise Failed(1, f"rewrite failed: {type(error).__name__}: {error}") from error
    if not parsed.quiet:
        print(report)
    return 0


def _rewrite_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=f"python -m {PROG} rewrite", allow_abbrev=False,
                            description="Rewrite the recurrent Loops of an ONNX file (converted by stock tf2onnx, "
                                        "or by Keras 3's export on the JAX backend) into native ONNX LSTM, GRU and "
                                        "RNN ops; every other node stays as it was.",
                            epilog="exit status: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()))
    parser.add_argument("model", metavar="ONNX", help="the ONNX file to rewrite (its external data beside it)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the ONNX file to write (written only if the rewrite succeeds)")
    parser.add_argument("--mask-mode", choices=MASK_MODES, default=os.environ.get(MASK_MODE_ENV, "").strip() or None,
                        help="post: masks padded at the end, checked at run time; any: exact for every mask "
                             f"(default: ${MASK_MODE_ENV}, else \"any\" for --runtime openvino, else post)")
    parser.add_argument("--runtime", choices=RUNTIMES,
                        help="the runtime the model is for (default: any runtime); the log says what another "
                             "runtime would need")
    parser.add_argument("--schedule", action=argparse.BooleanOptionalAction, default=None,
                        help="the length-aware schedule for long-tailed batches (default: on, except with "
                             "--quantize)")
    parser.add_argument("--streaming", action="store_true",
                        help="each layer's states as inputs and outputs (<layer>/h_in ... <layer>/h_out)")
    parser.add_argument("--keep-wrong", action="store_true",
                        help="write the model even where it is known to be wrong (a layer that cannot stream)")
    parser.add_argument("--quantize", choices=MODES, help="quantize the model for onnxruntime (docs/quantization.md)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors (no report, no warnings)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also show what was done to each layer")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    return parser


def _verify(args: list) -> int:
    parser = _OneLineParser(prog=f"python -m {PROG} verify", allow_abbrev=False,
                            description="Check that an ONNX model gives the outputs of the model it came "
                                        "from (a Keras model, a SavedModel, or the original ONNX file "
                                        "run on onnxruntime): every output at every position, on batches "
                                        "with post-padded, pre-padded and holed masks, empty and full rows. "
                                        "A streaming model runs from zero states; its state outputs are not "
                                        "compared.",
                            epilog="exit status: 0 verified; 1 a difference past the tolerance, or the "
                                   "guard fired where it should not (or not where it should); 2 bad input")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from . import verification  # pylint: disable=import-outside-toplevel
    verification.add_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing but errors (no table, no progress; the verdict if it fails)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    try:
        parsed = parser.parse_args(args)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    problem = model_file_problem(parsed.model)
    if problem:
        raise UsageError(problem)
    if not parsed.quiet:
        return verification.run(parsed)
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        code = verification.run(parsed)
    lines = table.getvalue().strip().splitlines()
    if code == 1 and lines:  # the verdict: "NOT verified: ..."
        raise Failed(1, lines[-1])
    return code


class _OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (exit status 2) instead of usage and error."""

    def error(self, message):
        raise UsageError(message)
