# SPDX-License-Identifier: Apache-2.0
"""The routes a user could take instead of the plugin, timed by tools/benchmark.py beside its ONNX variants.

  tf       TensorFlow itself: the Keras model in a ``tf.function`` with a dynamic-shape input
           signature ([None, None] int32), saved as a SavedModel, loaded in the timing process and
           run through that function's concrete function; TensorFlow's intra- and inter-op threads
           set to the cell's thread count before it runs anything
  ov-tf    OpenVINO's own TensorFlow front end: ``openvino.convert_model`` on that SavedModel
           (dynamic shapes; it takes the Keras model object too, more slowly and, with Keras 3,
           with a warning), saved as IR with f32 weights, compiled on CPU in f32 with as many
           inference threads as onnxruntime's
  litert   LiteRT: ``tf.lite.TFLiteConverter``, builtin ops only, on the model traced at each
           (batch, T) (static shapes: one model per shape) with its variables frozen first (traced
           as it is, the converter leaves the recurrent ``While`` reading resource variables, which
           the interpreter cannot run; from the SavedModel or ``from_keras_model``, with dynamic
           shapes, it refuses the loop's TensorList ops); run by ai-edge-litert's ``Interpreter``
           (``tf.lite.Interpreter`` where ai-edge-litert is not installed), ``num_threads`` as
           onnxruntime's

Two halves. The main process (TensorFlow, the Keras models) builds each alternative into files,
opens it, checks it against Keras at every output position on every shape it will be timed on,
and hands the timing process a JSON-able spec. The timing process opens the spec
(:func:`open_runner`) and calls ``run(feed) -> output array``. A build or run that fails, or a
result beyond the tolerance, is reported in one line and the variant marked ``failed`` (not
timed) or ``not exact`` (timed, and marked so).

Nothing here imports TensorFlow, OpenVINO or LiteRT at module level: the timing process loads
only what the variants it times need.
"""

from __future__ import annotations

import dataclasses
import os
import time

ALTERNATIVES = ("tf", "ov-tf", "litert")
DESCRIPTIONS = {
    "tf": "TensorFlow running the Keras model (SavedModel, tf.function with a [None, None] signature)",
    "ov-tf": "OpenVINO's TensorFlow front end (openvino.convert_model on the SavedModel, dynamic shapes)",
    "litert": "LiteRT (TFLiteConverter, builtin ops, one model per (batch, T), variables frozen)",
}
INPUT = "tokens"  # the models' one input, the feed's one key
EXACT, NOT_EXACT, FAILED = "exact", "not exact", "failed"


@dataclasses.dataclass
class Outcome:
    """One alternative for one model: how it was built, whether it matches Keras, what the timing
    process opens (``spec``: None when it failed, so it is not timed)."""

    model: str
    variant: str
    status: str = FAILED
    detail: str = ""
    spec: dict | None = None
    worst: float = float("nan")
    diffs: dict = dataclasses.field(default_factory=dict)  # (batch, T, fill) -> max |alternative - Keras|
    seconds: float = 0.0  # building it (exporting, converting, compiling), without the check


# ----------------------------------------------------------------------------------------------
# pure helpers

def parse_names(text: str) -> tuple:
    """``--alternatives``' value: a comma-separated subset of ALTERNATIVES, ``all`` or ``none``."""
    text = text.strip().lower()
    if text in ("", "none"):
        return ()
    if text == "all":
        return ALTERNATIVES
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in ALTERNATIVES]
    if unknown:
        raise ValueError(f"unknown alternative(s) {', '.join(unknown)}; known: {', '.join(ALTERNATIVES)}, "
                         f"all, none")
    return tuple(name for name in ALTERNATIVES if name in names)  # in the table's order


def first_line(error: BaseException, limit: int = 160) -> str:
    """The first non-empty line of an error's message (converters print pages), else its type."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def status_of(diff: float, tolerance: float) -> str:
    """``exact`` within the tolerance, else ``not exact`` (NaN and a wrong shape's inf included)."""
    return EXACT if diff <= tolerance else NOT_EXACT


def static_shapes(shapes) -> list:
    """The distinct (batch, T) of (batch, T, fill) shapes, in order: LiteRT's models."""
    return list(dict.fromkeys((batch, steps) for batch, steps, _ in shapes))


def shape_key(batch: int, steps: int) -> str:
    """A static shape as a JSON key: ``"32x100"``."""
    return f"{batch}x{steps}"


def max_difference(np, got, want) -> float:
    """max |got - want| over every position; inf when the shapes differ."""
    got = np.asarray(got)
    return float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")


def largest(diffs) -> float:
    """The largest of some differences; NaN when any is NaN (max() would depend on their order)."""
    diffs = list(diffs)
    return float("nan") if any(diff != diff for diff in diffs) else max(diffs)


def summary_line(outcome: Outcome, tolerance: float, name: str) -> str:
    """The one line the benchmark prints for an alternative of a model."""
    head = f"  {name:<13} {outcome.variant:<7}"
    if outcome.status == FAILED:
        return f"{head} FAILED, not timed: {outcome.detail}"
    # the shape of the largest difference (a NaN counts as the largest)
    where = max(outcome.diffs, key=lambda shape: (outcome.diffs[shape] != outcome.diffs[shape], outcome.diffs[shape]),
                default=None)
    worst = f"max |diff| {outcome.worst:.2g} over {len(outcome.diffs)} shapes"
    if outcome.status == NOT_EXACT:
        return (f"{head} NOT EXACT (timed, marked): {worst} (> {tolerance:g}), the largest at batch {where[0]}, "
                f"T={where[1]}, fill {where[2]!r}; {outcome.detail}")
    return f"{head} exact: {worst}; {outcome.detail}; built in {outcome.seconds:.1f} s"


# ----------------------------------------------------------------------------------------------
# the main process: building and checking

def saved_model_for(tf, keras_model, folder: str, model: str) -> str:
    """The Keras model as a SavedModel whose ``serve`` (and serving signature) is a tf.function
    with a dynamic [None, None] int32 input; exported once per model, shared by tf and ov-tf."""
    path = os.path.join(folder, f"{model}-savedmodel")
    if os.path.isdir(path):
        return path
    spec = tf.TensorSpec((None, None), tf.int32, name=INPUT)
    module = tf.Module()
    # its variables tracked, so that they are saved; not the model itself: tf_keras would then save
    # every layer's call functions too (8x slower to export)
    module.weights = list(keras_model.variables)
    module.serve = tf.function(lambda tokens: keras_model(tokens, training=False), input_signature=[spec])
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def build_tf(tf, keras_model, folder: str, model: str, shapes) -> dict:
    """The ``tf`` variant's spec: the SavedModel."""
    return dict(kind="tf", path=saved_model_for(tf, keras_model, folder, model))


def build_ov_tf(tf, keras_model, folder: str, model: str, shapes) -> dict:
    """The ``ov-tf`` variant's spec: OpenVINO's TensorFlow front end on the SavedModel, saved as IR
    (f32 weights: ``save_model`` would compress them to f16 by default)."""
    import openvino as ov  # pylint: disable=import-outside-toplevel
    converted = ov.convert_model(saved_model_for(tf, keras_model, folder, model))
    path = os.path.join(folder, f"{model}-ov-tf.xml")
    ov.save_model(converted, path, compress_to_fp16=False)
    return dict(kind="ov-tf", path=path, version=ov.__version__.split("-")[0])


def build_litert(tf, keras_model, folder: str, model: str, shapes) -> dict:
    """The ``litert`` variant's spec: one .tflite file per static (batch, T) of ``shapes``."""
    from tensorflow.python.framework.convert_to_constants import (  # pylint: disable=import-outside-toplevel
        convert_variables_to_constants_v2)
    paths = {}
    for batch, steps in static_shapes(shapes):
        spec = tf.TensorSpec((batch, steps), tf.int32, name=INPUT)
        traced = tf.function(lambda tokens: keras_model(tokens, training=False)).get_concrete_function(spec)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([convert_variables_to_constants_v2(traced)])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        paths[shape_key(batch, steps)] = path = os.path.join(folder, f"{model}-{batch}x{steps}.tflite")
        with open(path, "wb") as handle:
            handle.write(converter.convert())
    return dict(kind="litert", paths=paths, interpreter=litert_interpreter_name())


BUILDERS = {"tf": build_tf, "ov-tf": build_ov_tf, "litert": build_litert}


def check(np, runner, keras_model, shapes, batches_for) -> dict:
    """max |runner - Keras| at every output position (padded ones too) for each (batch, T, fill), over
    its batches (``batches_for(batch, T, fill)``: a list)."""
    diffs = {}
    for batch, steps, fill in shapes:
        diffs[(batch, steps, fill)] = max(max_difference(np, runner.run({INPUT: tokens}),
                                                         np.asarray(keras_model(tokens, training=False)))
                                          for tokens in batches_for(batch, steps, fill))
    return diffs


def prepare(np, tf, variant: str, model: str, keras_model, shapes, folder: str, batches_for,
            tolerance: float) -> Outcome:
    """Builds ``variant`` for ``model``, opens it (1 thread) and checks it on ``shapes``; any error
    makes the outcome ``failed`` with the error's first line."""
    outcome = Outcome(model=model, variant=variant)
    stage = "convert"
    try:
        start = time.perf_counter()
        spec = BUILDERS[variant](tf, keras_model, folder, model, shapes)
        stage = "open"
        runner = open_runner(spec, threads=1)
        outcome.seconds = time.perf_counter() - start
        stage = "run"
        outcome.diffs = check(np, runner, keras_model, shapes, batches_for)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        outcome.detail = f"cannot {stage} it: {type(error).__name__}: {first_line(error)}"
        return outcome
    outcome.worst = largest(outcome.diffs.values())
    outcome.status = status_of(outcome.worst, tolerance)
    outcome.spec, outcome.detail = spec, describe_spec(spec)
    return outcome


def prepare_all(np, tf, names, keras_models: dict, shapes, folder: str, batches_for, tolerance: float,
                report, model_names: dict, quiet: bool = True) -> dict:
    """Every alternative in ``names`` for every model (``keras_models``: name -> the masked Keras
    model), each reported in one line; returns (model, variant) -> Outcome."""
    from masked_lstm_rewriter.corpus.quiet import quiet_stderr  # pylint: disable=import-outside-toplevel
    outcomes = {}
    for variant in names:
        for model, keras_model in keras_models.items():
            with quiet_stderr(quiet):  # converters and interpreters print pages to stderr
                outcome = prepare(np, tf, variant, model, keras_model, shapes, folder, batches_for, tolerance)
            outcomes[(model, variant)] = outcome
            report(summary_line(outcome, tolerance, model_names.get(model, model)))
    return outcomes


def describe_spec(spec: dict) -> str:
    """What was built, for the report: the runtime and its version where it has one."""
    if spec["kind"] == "litert":
        return f"{len(spec['paths'])} static-shape models on {spec['interpreter']}"
    if spec["kind"] == "ov-tf":
        return f"OpenVINO {spec['version']} IR, dynamic shapes"
    return "SavedModel, dynamic shapes"


# ----------------------------------------------------------------------------------------------
# the timing process: opening and running

def configure_tensorflow(threads: int):
    """Imports TensorFlow with ``threads`` intra- and inter-op threads: to be called before
    TensorFlow runs anything (it fixes its pools at the first op)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.get_logger().setLevel("ERROR")
    return tf


def open_runner(spec: dict, threads: int):
    """The runner of a spec from :func:`prepare`: an object with ``run(feed) -> array``."""
    kind = spec["kind"]
    if kind == "tf":
        return TensorFlowRunner(spec["path"])
    if kind == "ov-tf":
        return OpenVinoRunner(spec["path"], threads)
    if kind == "litert":
        return LiteRTRunner(spec["paths"], spec["interpreter"], threads)
    raise ValueError(f"unknown alternative kind {kind!r}")


class TensorFlowRunner:
    """The SavedModel's ``serve`` function, called through its concrete function (the cheapest
    call: no retracing check, no dict of outputs)."""

    def __init__(self, path: str):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self.tf = tf
        loaded = tf.saved_model.load(path)
        self.keep = loaded  # the function's variables live as long as the loaded object
        self.function = loaded.serve.get_concrete_function(tf.TensorSpec((None, None), tf.int32))

    def run(self, feed: dict):
        return self.function(self.tf.constant(feed[INPUT])).numpy()


class OpenVinoRunner:
    """An OpenVINO IR compiled on CPU, f32, ``threads`` inference threads, dynamic shapes."""

    def __init__(self, path: str, threads: int):
        import openvino as ov  # pylint: disable=import-outside-toplevel
        from masked_lstm_rewriter.sessions import OPENVINO_CONFIG  # pylint: disable=import-outside-toplevel
        self.compiled = ov.Core().compile_model(path, "CPU", dict(OPENVINO_CONFIG, INFERENCE_NUM_THREADS=threads))
        self.request = self.compiled.create_infer_request()

    def run(self, feed: dict):
        self.request.infer({0: feed[INPUT]})
        return self.request.get_output_tensor(0).data


def litert_interpreter_name() -> str:
    """Which LiteRT interpreter runs the models: ai-edge-litert's where installed."""
    try:
        import ai_edge_litert  # pylint: disable=import-outside-toplevel
    except ImportError:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return f"tf.lite.Interpreter (TensorFlow {tf.__version__})"
    return f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '?')}"


class LiteRTRunner:
    """One LiteRT interpreter per static (batch, T); ``run`` picks the one of the feed's shape."""

    def __init__(self, paths: dict, interpreter_name: str, threads: int):
        if interpreter_name.startswith("ai-edge-litert"):
            from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
        else:
            from tensorflow.lite import Interpreter  # pylint: disable=import-outside-toplevel
        self.by_shape = {}
        for key, path in paths.items():
            shape = tuple(int(n) for n in key.split("x"))
            engine = Interpreter(model_path=path, num_threads=threads)
            engine.allocate_tensors()
            self.by_shape[shape] = (engine, engine.get_input_details()[0]["index"],
                                    engine.get_output_details()[0]["index"])

    def run(self, feed: dict):
        tokens = feed[INPUT]
        interpreter, source, result = self.by_shape[tokens.shape]
        interpreter.set_tensor(source, tokens)
        interpreter.invoke()
        return interpreter.get_tensor(result)
