# SPDX-License-Identifier: Apache-2.0
"""What the command line shows while it works, on standard error: its progress lines, the plugin's
warnings, tf2onnx's records (its INFO lines, and its warnings as it drops a stateful layer's state
writes, with ``--verbose`` only), or, with ``--quiet``, nothing but the one-line errors.

The library never prints: it logs to ``masked_lstm_rewriter``, and the command line's handlers,
installed here for the length of a run, decide what is shown. A progress line is an INFO record of
that logger marked ``progress`` (:func:`progress`), shown unless ``--quiet``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
import warnings

from .tf2onnx_logs import not_a_state_write

PROG = "masked_lstm_rewriter"
logger = logging.getLogger(PROG)
TF2ONNX_FORMAT = "%(asctime)s - %(levelname)s - %(message)s"  # tf2onnx's own, for its records
VERBOSE = 15  # tf2onnx's level between DEBUG and INFO, which its -v shows
SILENT = logging.CRITICAL + 1
FREED_FUNCTION_GONE = "Tried to remove non-existent function"  # TensorFlow's AtomicFunction.__del__


def progress(message: str, *args) -> None:
    """A progress line: ``masked_lstm_rewriter: loading model.keras``."""
    logger.info(message, *args, extra={"progress": True})


def verbosity(args: list) -> int:
    """How many times ``-v`` / ``--verbose`` was given (``-vv`` counts two, as in tf2onnx)."""
    count = 0
    for arg in args:
        if arg == "--verbose":
            count += 1
        elif len(arg) > 1 and arg[0] == "-" and set(arg[1:]) == {"v"}:
            count += len(arg) - 1
    return count


class _PluginFormatter(logging.Formatter):
    def format(self, record):
        text = record.getMessage()
        if getattr(record, "progress", False):
            return f"{PROG}: {text}"
        return f"{PROG}: {record.levelname}: {text}"


class _Renamed(logging.Filter):
    """Says the output's name where a record names the hidden file it is written to first (tf2onnx's
    "ONNX model is saved at .../.partial-XXXX.onnx": that file is renamed a moment later)."""

    def __init__(self, renames: dict):
        super().__init__()
        self.renames = renames

    def filter(self, record):
        text = record.getMessage()
        renamed = rename(text, self.renames)
        if renamed != text:
            record.msg, record.args = renamed, ()
        return True


class _WarnedOnce(logging.Filter):
    """Drops a warning or error of the plugin's already shown in this run (the plugin enabled again
    for a stateful model's streaming repeats what enabling it said)."""

    def __init__(self):
        super().__init__()
        self.shown = set()

    def filter(self, record):
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if message in self.shown:
            return False
        self.shown.add(message)
        return True


LITERT_INTERPRETER_DEPRECATED = r"\s*Warning: tf\.lite\.Interpreter is deprecated"


def rename(text: str, renames: dict) -> str:
    for hidden, shown in renames.items():
        text = text.replace(hidden, shown)
    return text


@contextlib.contextmanager
def command_logging(verbose: int, quiet: bool, renames: dict):
    """The command line's handlers for the length of a run: the plugin's records as
    ``masked_lstm_rewriter: WARNING: ...`` (its INFO records with ``verbose``), progress lines,
    and everyone else's (tf2onnx, TensorFlow) in tf2onnx's format from WARNING (from tf2onnx's
    verbose level with ``verbose``). ``quiet`` shows none. ``renames``: hidden path -> path to show.

    A handler on the root logger also keeps tf2onnx's ``main`` from installing its own (its
    ``basicConfig`` does nothing once the root logger has a handler), which shows INFO records."""
    ours = logging.StreamHandler(sys.stderr)
    ours.setFormatter(_PluginFormatter())
    ours.addFilter(lambda record: verbose or record.levelno >= logging.WARNING or getattr(record, "progress", False))
    ours.addFilter(_WarnedOnce())
    others = logging.StreamHandler(sys.stderr)
    others.setFormatter(logging.Formatter(TF2ONNX_FORMAT))
    others.setLevel(logging.NOTSET if verbose else logging.WARNING)
    if not verbose:
        others.addFilter(not_a_state_write)
    for handler in (ours, others):
        handler.addFilter(_Renamed(renames))
        if quiet:
            handler.setLevel(SILENT)
    tf2onnx = logging.getLogger("tf2onnx")
    saved = logger.level, logger.propagate, tf2onnx.level
    logger.addHandler(ours)
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    logger.propagate = False
    logging.getLogger().addHandler(others)
    if verbose:
        tf2onnx.setLevel(logging.DEBUG if verbose > 1 else VERBOSE)
    try:
        with warnings.catch_warnings():
            if not verbose:  # tf2onnx reads a .tflite file with it: nothing the user can act on
                warnings.filterwarnings("ignore", LITERT_INTERPRETER_DEPRECATED, UserWarning)
            yield
    finally:
        logger.removeHandler(ours)
        logging.getLogger().removeHandler(others)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        tf2onnx.setLevel(saved[2])


def without_freed_function_noise(hook):
    """``sys.unraisablehook`` ``hook``, but for TensorFlow's complaint, as the process exits, that a traced
    function it frees is gone already (a stateful tf_keras model's loop, which tf2onnx froze): a many-line
    "Exception ignored" after a run that went well, stock tf2onnx's too. Dropped."""
    def hook_for_the_process(unraisable):
        if FREED_FUNCTION_GONE not in str(getattr(unraisable, "exc_value", "")):
            hook(unraisable)
    return hook_for_the_process


@contextlib.contextmanager
def quiet_run(enabled: bool, kept: list, keep_all: bool = False):
    """With ``enabled``: nothing the run writes reaches the terminal, neither Python's output nor
    what TensorFlow's C++ code writes to file descriptors 1 and 2, and Python's warnings are off.
    The lines ``masked_lstm_rewriter: error: ...`` written to ``sys.stderr`` meanwhile (every line
    with ``keep_all``, as ``--debug`` wants tracebacks) are added to ``kept``, for the caller to show."""
    if not enabled:
        yield
        return
    captured = io.StringIO()
    saved = _silence_descriptors()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(captured), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _restore_descriptors(saved)
        kept += [line for line in captured.getvalue().splitlines() if keep_all or line.startswith(f"{PROG}: error:")]


def silence_exit() -> None:
    """Nothing more reaches the terminal from this process (what its exit prints is dropped)."""
    _silence_descriptors()


def _silence_descriptors() -> list:
    """Points file descriptors 1 and 2 at /dev/null; returns (descriptor, saved copy) pairs."""
    saved = []
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return saved
    for descriptor in (1, 2):
        with contextlib.suppress(OSError):
            copy = os.dup(descriptor)
            os.dup2(null, descriptor)
            saved.append((descriptor, copy))
    os.close(null)
    return saved


def _restore_descriptors(saved: list) -> None:
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()  # what Python buffered while silenced goes where it was meant to: nowhere
    for descriptor, copy in saved:
        os.dup2(copy, descriptor)
        os.close(copy)


@contextlib.contextmanager
def conversion_progress(output: str, partial: str):
    """Progress lines at tf2onnx's stages in ``python -m tf2onnx.convert``'s ``main``: converting
    (its ``process_tf_graph``, which runs the rewriter), optimizing, writing (its ``save_protobuf``
    and ``save_onnx_zip`` of the hidden file ``partial``, shown as ``output``). tf2onnx's functions
    are wrapped for the length of the block; a function tf2onnx no longer has is left out."""
    from tf2onnx import convert, utils  # pylint: disable=import-outside-toplevel
    from .report import last_report  # pylint: disable=import-outside-toplevel

    def converting(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            progress("converting with tf2onnx")
            graph = original(*args, **kwargs)
            report = last_report()
            if report is not None and report.layers:
                progress("rewrote %d of %d recurrent layer(s); optimizing", len(report.rewritten), len(report.layers))
            else:
                progress("no masked recurrent layer to rewrite; optimizing")
            return graph
        return wrapper

    def writing(original):
        @functools.wraps(original)
        def wrapper(path, *args, **kwargs):
            if os.fspath(path) == partial:
                progress("writing %s", output)
            return original(path, *args, **kwargs)
        return wrapper

    with _wrapped(convert, "process_tf_graph", converting), _wrapped(utils, "save_protobuf", writing), \
            _wrapped(utils, "save_onnx_zip", writing):
        yield


@contextlib.contextmanager
def _wrapped(module, name: str, wrap):
    original = getattr(module, name, None)
    if original is None:
        yield
        return
    setattr(module, name, wrap(original))
    try:
        yield
    finally:
        setattr(module, name, original)
