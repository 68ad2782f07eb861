# SPDX-License-Identifier: Apache-2.0
"""``verify``: does an ONNX model compute what the model it was converted or rewritten from computes?

    result = verify(model, "model.onnx", runtime=("onnxruntime", "openvino"))   # or "all"
    result = verify("original.onnx", "rewritten.onnx")
    print(result)          # a table, one line per output, batch kind and runtime, then a verdict
    assert result.ok

The reference (:mod:`.verify_reference`) is Keras itself (eager ``model(x, training=False)``),
TensorFlow running a SavedModel's ``serving_default`` signature, or the original ONNX model
(the one :func:`.rewrite_onnx` read) on onnxruntime. Each runs the batches of
:mod:`.verify_batches` (post-padded, pre-padded, with holes, one row; random ones for an
unmasked model), and every output is compared at every position: the largest
|ONNX - reference| at valid and at padded positions apart (a sequence output is padded where
the batch's mask is False). The tolerance is 1e-5, or for an int8-quantized model a share of
each output's scale, said in the notes (:mod:`.verify_tolerance`); one given is absolute.

A model converted with ``mask_mode="post"`` carries the post-padding guard (nodes named with
:data:`.masks.GUARD_MESSAGE`): on a batch that is not post-padded it fails with that message, a pass
(or, where the mask the layers read is post-padded all the same, runs and must match); on a
post-padded batch the ONNX model must run and match. The reference itself
runs every batch (an ONNX reference with the guard is refused). Works on any ONNX model of the
same inputs: stock tf2onnx output with ``Loop``s, unmasked models, several inputs and outputs.

A streaming model (docs/streaming.md) has more inputs and outputs than its reference: its state
inputs are fed zeros (where a sequence starts, as the reference starts each batch: a stateful
Keras model is reset first), its own outputs are compared, and its state outputs are left out,
which the notes and the verdict say.

Nothing here imports TensorFlow or tf2onnx before :func:`verify` runs, so that the command line
can import :func:`add_arguments` before its process picks a Keras flavour. The library never
prints; :func:`run` (the command line's part) does.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import traceback
from typing import Callable, Optional

import numpy as np

from . import sessions, verify_batches
from .corpus.check import first_line
from .dependencies import how_to_install, needed
from .keywords import NOT_GIVEN, renamed
from .sessions import RUNTIMES, onnxruntime_session, runtime_available
from .verify_batches import OutputDifference, output_difference
from .verify_reference import Reference, has_guard, load_onnx, load_reference
from .verify_tolerance import DEFAULT_TOLERANCE, Tolerance, as_tolerance, choose

logger = logging.getLogger("masked_lstm_rewriter")

PROG = "masked_lstm_rewriter"
ROWS, STEPS = 5, 12
MATCHED = "matched"
GUARD_EXPECTED = "guard fired (expected)"
GUARD_UNEXPECTED = "guard fired (unexpected)"
# the guard did not fire on inputs that are not post-padded, and every output matched: the mask the
# guarded layers read is not the inputs' padding (a mask combined from several inputs), and post-padded
GUARD_MISSING = "matched; guard did not fire"
MISMATCH = "silent mismatch"
ERROR = "error"
PASSING = (MATCHED, GUARD_EXPECTED, GUARD_MISSING)


@dataclasses.dataclass(frozen=True)
class Check:
    """One batch on one runtime (``batch`` is "model" or "inputs" where nothing could run)."""

    runtime: str
    batch: str
    status: str               # MATCHED, GUARD_EXPECTED, GUARD_UNEXPECTED, GUARD_MISSING, MISMATCH or ERROR
    outputs: tuple = ()       # OutputDifference per output, when the ONNX model ran
    message: str = ""         # the error's line, for a run that failed
    allowed: tuple = ()       # the tolerance applied to each output (Tolerance.allowed)

    @property
    def ok(self) -> bool:
        return self.status in PASSING


@dataclasses.dataclass
class Verification:
    """What :func:`verify` found; ``ok`` when every check passed, ``format()`` for people."""

    model: str
    onnx: str
    tolerance: Tolerance
    guarded: bool                                     # the ONNX model has the post-padding guard
    checks: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)  # a streaming model's state outputs, not compared

    @property
    def ok(self) -> bool:
        """Every output within tolerance, the guard fired on no post-padded batch, no error."""
        return bool(self.checks) and all(check.ok for check in self.checks)

    @property
    def failures(self) -> list:
        return [check for check in self.by_runtime() if not check.ok]

    def by_runtime(self) -> list:
        """The checks grouped by runtime, each runtime's in batch order (the table's order)."""
        return sorted(self.checks, key=lambda check: RUNTIMES.index(check.runtime) if check.runtime in RUNTIMES else -1)

    def format(self) -> str:
        guard = "post-padding guard present" if self.guarded else "no post-padding guard"
        lines = [f"verify {self.onnx} against {self.model} (tolerance {self.tolerance}, {guard})"]
        lines += [f"note: {note}" for note in self.notes]
        lines += _table([row for check in self.by_runtime() for row in _rows(check, self.tolerance)])
        return "\n".join(lines + [self.verdict()])

    __str__ = format

    def verdict(self) -> str:
        """One line: verified, or what failed."""
        if self.ok:
            fired = sum(check.status == GUARD_EXPECTED for check in self.checks)
            missing = sum(check.status == GUARD_MISSING for check in self.checks)
            guard = f"; the guard fired on the {fired} runs whose batch is not post-padded, as it should" \
                if fired else ""
            guard += (f"; the guard did not fire on {missing} runs whose inputs are not post-padded, and every "
                      "output matched: the mask the layers read was post-padded there") if missing else ""
            runtimes = sorted({check.runtime for check in self.checks})
            ignored = f"; not compared: the state outputs {', '.join(self.ignored)}" if self.ignored else ""
            return (f"verified: {self.onnx} matches {self.model} within {self.tolerance} on "
                    f"{' and '.join(runtimes)} ({len(self.checks)} runs, every output at every position"
                    f"{ignored}){guard}")
        if not self.checks:
            return "NOT verified: nothing was checked"
        failed = self.failures
        listed = "; ".join(f"{c.runtime} {c.batch}: {c.status}{_worst(c)}" for c in failed[:3])
        more = "; ..." if len(failed) > 3 else ""
        return f"NOT verified: {len(failed)} of {len(self.checks)} runs failed ({listed}{more})"


def _rows(check: Check, tolerance: Tolerance) -> list:
    """The table's lines for one check: one per output, or one for a run that gave no output."""
    if not check.outputs:
        result = f"{check.status}: {check.message}" if check.message and check.status != GUARD_EXPECTED \
            else check.status
        return [(check.runtime, check.batch, "-", "-", "-", result)]
    allowed = check.allowed or (tolerance.absolute,) * len(check.outputs)
    return [(check.runtime, check.batch, out.name, _number(out.valid), _number(out.padded),
             _output_result(check, out, limit) + (f" (tolerance {limit:.2g})" if tolerance.share else ""))
            for out, limit in zip(check.outputs, allowed)]


def _output_result(check: Check, out: OutputDifference, allowed: float) -> str:
    if check.status == MISMATCH:
        return f"{MISMATCH}: {out.problem}" if out.problem else (MATCHED if out.within(allowed) else MISMATCH)
    return check.status


def _worst(check: Check) -> str:
    """", largest |diff| 0.57" for a check with numbers, else ""."""
    numbers = [d for out in check.outputs for d in (out.valid, out.padded) if d is not None]
    return f", largest |diff| {max(numbers):.2g}" if numbers else ""


def _number(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2g}"


def _table(rows: list) -> list:
    """``rows`` under a header, in columns as wide as their widest cell."""
    rows = [("runtime", "batch", "output", "|diff| valid", "|diff| padded", "result")] + rows
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[5] for row in rows]


# ---------------------------------------------------------------- verify


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What every check of one verification shares."""

    roles: list
    output_names: list
    guarded: bool
    tolerance: Tolerance      # (a number: an absolute tolerance)
    states: dict = dataclasses.field(default_factory=dict)  # a streaming model's state inputs, fed zeros


def verify(model, onnx_model, *, runtime="onnxruntime", tolerance: Optional[float] = None, seed: int = 0,
           rows: int = ROWS, steps: int = STEPS, progress: Optional[Callable] = None,
           runtimes=NOT_GIVEN, custom_objects: Optional[dict] = None) -> Verification:
    """Run the reference ``model`` (a Keras model, a ``.keras``/``.h5`` path, a SavedModel directory, a
    ``.tflite`` path, or the original ONNX model: an ``.onnx`` path or ``onnx.ModelProto``) and ``onnx_model`` (a path
    or ``onnx.ModelProto``) on the same batches, ``onnx_model`` on ``runtime`` ("onnxruntime",
    "openvino", a list of them, or "all": each one installed), and compare every output (see the
    module docstring). ``tolerance``: the largest |ONNX - reference| accepted; None: 1e-5, or for an
    int8-quantized model 20% of each output's largest |reference value| on the batch (said in the
    notes; :mod:`.verify_tolerance`). Dynamic dimensions get ``rows`` x ``steps``; ``progress(message)`` is called
    before each step (default: an INFO log). ``runtimes=``: the deprecated name of ``runtime``.
    ``custom_objects``: ``{name: class}`` of the custom classes a Keras file names that are not
    registered with Keras (as in :func:`.convert`).
    Raises :class:`.keras_source.SourceError` for a model or file that cannot be read, and
    :class:`.dependencies.MissingDependency` when TensorFlow or tf2onnx is not installed."""
    runtime, keyword = renamed("verify", "runtime", runtime, "runtimes", runtimes, default="onnxruntime")
    names, skipped = runtime_names(runtime, keyword)
    if min(rows, steps) < 1:
        raise ValueError(f"rows and steps must be positive, not {rows} and {steps}")
    with needed():
        result = _verify(model, onnx_model, names, tolerance, (rows, steps, seed),
                         progress or (lambda message: logger.info("verify: %s", message)), custom_objects)
    result.notes[:0] = skipped
    return result


def runtime_names(runtime, keyword: str = "runtime") -> tuple:
    """(the runtimes ``runtime`` names, a note for each one "all" skips because it is not installed).
    ``runtime``: a name, a list of names, or "all" (each one installed; all of them if none is, so
    that each says why it cannot run). The error names ``keyword``, the argument as it was given."""
    if isinstance(runtime, str) and runtime == "all":
        available = {name: runtime_available(name) for name in RUNTIMES}
        installed = tuple(name for name in RUNTIMES if available[name][0])
        return installed or RUNTIMES, [f"skipping {name}: {available[name][1]}" for name in RUNTIMES
                                       if installed and name not in installed]
    names = (runtime,) if isinstance(runtime, str) or runtime is None else tuple(runtime)
    if not names or any(not isinstance(name, str) or name not in RUNTIMES for name in names):
        raise ValueError(f"{keyword} must be one of {', '.join(RUNTIMES)}, a list of them, or 'all'; not {runtime!r}")
    return names, []


def _verify(model, onnx_model, runtimes: tuple, tolerance: Optional[float], shape: tuple, say,
            custom_objects: Optional[dict] = None) -> Verification:
    """:func:`verify`, its arguments checked (``shape``: the batches' rows, steps and seed)."""
    proto, onnx_label = load_onnx(onnx_model)
    tolerance = choose(proto, tolerance)
    states = verify_batches.state_inputs(proto)
    ignored = [verify_batches.state_output(name) for name in states]
    output_names = [output.name for output in proto.graph.output if output.name not in ignored]
    reference = load_reference(model, output_names, custom_objects, verify_batches.input_specs(proto))
    result = Verification(reference.label, onnx_label, tolerance, has_guard(proto), ignored=ignored)
    result.notes += reference.notes + _streaming_notes(states, ignored)
    result.notes += [f"tolerance {tolerance}: {tolerance.why}"] if tolerance.why else []
    try:
        roles = verify_batches.input_roles(reference.specs, proto, reference)
    except verify_batches.InterfaceError as error:
        result.checks.append(Check("-", "inputs", ERROR, message=str(error)))
        return result
    result.notes += [f"input {role.name}: no Embedding or Gather found reading it; token ids drawn below "
                     f"{verify_batches.DEFAULT_VOCABULARY}" for role in roles
                     if role.kind == verify_batches.TOKENS and role.vocabulary is None]
    for role in roles:
        logger.debug("verify: input %s", role.describe())
    plan = _Plan(roles, output_names, result.guarded, tolerance, states)
    runners = _runners(runtimes, proto, output_names, result, say)
    batches = verify_batches.make_batches(roles, *shape) if runners else []
    for number, batch in enumerate(batches, 1):
        result.checks += _verify_batch(reference, runners, batch, plan, say, f"batch {number}/{len(batches)}")
    return result


def _streaming_notes(states: dict, ignored: list) -> list:
    """What the report says of a streaming model's state inputs and outputs (nothing for another model)."""
    if not states:
        return []
    return [f"streaming model: its state inputs {', '.join(states)} are fed zeros (a sequence's start); its state "
            f"outputs {', '.join(ignored)} are not compared"]


def _runners(runtimes, proto, output_names: list, result: Verification, say) -> dict:
    """runtime -> run(feeds), giving ``output_names``; a runtime that cannot load the model is recorded
    as a failed check."""
    runners = {}
    for runtime in runtimes:
        say(f"loading the ONNX model in {runtime}")
        available, why = runtime_available(runtime)
        try:
            if not available:
                raise RuntimeError(why)
            runners[runtime] = make_runner(runtime, proto, output_names)
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except  (any runtime error: one line)
            result.checks.append(Check(runtime, "model", ERROR, message=f"cannot load the model: {first_line(error)}"))
    return runners


CUDNN_REFERENCE = ("a model traced on a GPU runs its cuDNN op only on a GPU: verify against the Keras model "
                   "(.keras or .h5) instead, or run verify on the GPU machine")


def _verify_batch(reference: Reference, runners: dict, batch, plan: _Plan, say, where: str) -> list:
    """The checks of one batch: the reference once, then each runtime."""
    say(f"{where} ({batch.label}): reference")
    try:
        expected = reference.run(list(batch.inputs))
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        message = f"the reference model failed on this batch: {first_line(error)}"
        if "CudnnRNN" in str(error):
            message += f" ({CUDNN_REFERENCE})"
        return [Check(runtime, batch.label, ERROR, message=message) for runtime in runners]
    checks = []
    for runtime, run in runners.items():
        say(f"{where} ({batch.label}): {runtime}")
        checks.append(check_batch(runtime, run, batch, expected, plan))
    return checks


def check_batch(runtime: str, run: Callable, batch, expected: list, plan: _Plan) -> Check:
    """Run one batch on one runtime and judge the outcome against the reference's ``expected``."""
    from .plan.masks import GUARD_MESSAGE  # pylint: disable=import-outside-toplevel  (imports tf2onnx)
    guard_expected = plan.guarded and not batch.post_padded
    feeds = {role.onnx_name: np.asarray(x).astype(role.onnx_dtype) for role, x in zip(plan.roles, batch.inputs)}
    feeds.update(verify_batches.zero_states(plan.states, batch.rows))
    try:
        got = run(feeds)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        if GUARD_MESSAGE in str(error):
            return Check(runtime, batch.label, GUARD_EXPECTED if guard_expected else GUARD_UNEXPECTED)
        return Check(runtime, batch.label, ERROR, message=first_line(error))
    if len(got) != len(expected):
        return Check(runtime, batch.label, ERROR,
                     message=f"the reference gives {len(expected)} output(s), the ONNX model {len(got)}")
    outputs = tuple(output_difference(name, e, g, batch) for name, e, g in zip(plan.output_names, expected, got))
    allowed = tuple(as_tolerance(plan.tolerance).allowed(e) for e in expected)
    if not all(out.within(limit) for out, limit in zip(outputs, allowed)):
        return Check(runtime, batch.label, MISMATCH, outputs, allowed=allowed)
    return Check(runtime, batch.label, GUARD_MISSING if guard_expected else MATCHED, outputs, allowed=allowed)


# ---------------------------------------------------------------- the runtimes


def make_runner(runtime: str, proto, output_names: Optional[list] = None) -> Callable:
    """run(feeds) -> the outputs ``output_names`` (None: all, in the model's order) of ``proto`` on
    ``runtime``'s CPU."""
    if runtime == "onnxruntime":
        session = onnxruntime_session(proto)
        return lambda feeds: session.run(output_names, feeds)
    return openvino_runner(proto, output_names)


def openvino_runner(proto, output_names: Optional[list] = None) -> Callable:
    """``run(feeds)`` on OpenVINO's CPU plugin (:func:`..sessions.openvino_runner`: exact float32,
    asynchronous requests, whose errors are raised with one inference thread too), with the shapes
    the model declares, read from memory (OpenVINO refuses some of tf2onnx's Loop models read from
    a path)."""
    names = output_names or [output.name for output in proto.graph.output]
    run = sessions.openvino_runner(proto, static=False)
    return lambda feeds: run(names, feeds)


# ---------------------------------------------------------------- the command line's part


def add_arguments(parser):
    """``verify``'s arguments on an ``argparse`` parser (the command line's subcommand)."""
    parser.add_argument("model", metavar="REFERENCE",
                        help="the model it came from: a Keras .keras or .h5 file, a SavedModel directory, a "
                             "LiteRT .tflite file, or the original .onnx file (run on onnxruntime)")
    parser.add_argument("onnx", metavar="ONNX", help="the ONNX model converted or rewritten from it")
    parser.add_argument("--runtime", choices=RUNTIMES + ("all",), default="onnxruntime",
                        help="where to run the ONNX model (all: each one installed; default: onnxruntime)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help=f"largest |ONNX - reference| accepted at any position (default: {DEFAULT_TOLERANCE:g}; "
                             "for an int8-quantized model, 20%% of each output's largest |reference value|)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random batches (default: 0)")
    parser.add_argument("--rows", type=_positive, default=ROWS, help=f"rows of a dynamic batch (default: {ROWS})")
    parser.add_argument("--steps", type=_positive, default=STEPS,
                        help=f"steps of a dynamic time axis (default: {STEPS})")
    parser.add_argument("--custom-objects", action="append", default=[], metavar="MODULE",
                        help="a module defining the Keras model's custom layers or cells: a dotted name "
                             "importable from the current directory or PYTHONPATH, or a .py file "
                             "(repeatable, or comma-separated)")
    return parser


def _positive(text: str) -> int:
    import argparse  # pylint: disable=import-outside-toplevel
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return value


def run(args) -> int:
    """``verify`` on the command line: the table on stdout, progress on stderr. Exit status: 0
    verified, 1 a mismatch or a guard problem, 2 an input that cannot be read."""
    from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
    runtimes = _installed_runtimes(args.runtime)
    if not runtimes:
        why = f"no runtime is installed: {how_to_install('onnxruntime')}" if args.runtime == "all" \
            else runtime_available(args.runtime)[1]
        print(f"{PROG}: error: {why}", file=sys.stderr)
        return 2
    try:
        objects = _custom_objects(getattr(args, "custom_objects", []))
        result = verify(args.model, args.onnx, runtime=runtimes, tolerance=args.tolerance, seed=args.seed,
                        rows=args.rows, steps=args.steps, progress=_print_progress, custom_objects=objects)
    except SourceError as error:
        if getattr(args, "debug", False):  # the command line's --debug
            traceback.print_exc()
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    print(result.format())
    return 0 if result.ok else 1


def _custom_objects(values: list) -> Optional[dict]:
    """The classes of the ``--custom-objects`` modules (None: none given); :class:`.SourceError` naming a
    module that cannot be imported."""
    from . import user_modules  # pylint: disable=import-outside-toplevel
    from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
    modules = user_modules.split(values)
    if not modules:
        return None
    _print_progress(f"importing {', '.join(modules)}")
    try:
        return user_modules.custom_objects(modules)
    except user_modules.ModuleError as error:
        raise SourceError(f"--custom-objects {error}") from error


def _print_progress(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr)


def _installed_runtimes(choice: str) -> tuple:
    """The runtimes ``--runtime`` names that are installed; "all" notes on stderr each one that is not."""
    installed = []
    for runtime in RUNTIMES if choice == "all" else (choice,):
        available, why = runtime_available(runtime)
        if available:
            installed.append(runtime)
        elif choice == "all":
            print(f"{PROG}: note: skipping {runtime}: {why}", file=sys.stderr)
    return tuple(installed)
