# SPDX-License-Identifier: Apache-2.0
"""Convert a Keras 3 model that lives on another backend (JAX, torch) in a TensorFlow process.

tf2onnx traces TensorFlow graphs, and a process's Keras 3 keeps the backend it was imported with.
A model on JAX or torch is therefore saved as a ``.keras`` file (the format is the same on every
backend) and converted by a child process whose Keras runs on TensorFlow; the ONNX model and the
report come back, and the child's log records are logged again here at their own levels (a layer
left as a Loop is a ``WARNING`` on every backend); the report is this thread's ``last_report()``. A
path is converted the same way when this process's Keras is not on
TensorFlow. Custom layers reach the child by the modules that define them (imported there before
the model is loaded, and given to Keras's loader registered or not), as do the ``custom_objects``
given with a path: they must be importable, not defined in ``__main__``. Where the backends
compute a layer differently, the child converts it as the model's backend does
(:mod:`.pipeline.origin`).

    python -m masked_lstm_rewriter.backend_process REQUEST.json     (the child; not for users)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
from typing import Optional

logger = logging.getLogger("masked_lstm_rewriter")

TENSORFLOW = "tensorflow"
REPORT = "report.json"
LOG = "log.jsonl"
ERROR = "error.json"
ONNX = "model.onnx"


class BackendError(RuntimeError):
    """The child conversion failed: one line saying why (its last error line)."""


def _raised_again(path: str, fallback: BackendError) -> Exception:
    """The error the child raised (:func:`_write_error`), of its own class where that is the plugin's or
    Python's (``KnownWrong``, ``ValueError`` ...: what the same call raises in a TensorFlow process),
    else ``fallback``."""
    if not os.path.exists(path):
        return fallback
    with open(path, encoding="utf-8") as file:
        module, name, message = json.load(file)
    if module != "builtins" and not module.startswith("masked_lstm_rewriter"):
        return fallback
    try:
        cls = getattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name)
        error = cls(message)
    except Exception:  # pylint: disable=broad-except  (a class this process cannot make: the child's line)
        return fallback
    return error if isinstance(error, Exception) else fallback


def _write_error(folder: str, error: Exception) -> None:
    """The child's error, for the parent to raise again (:func:`_raised_again`)."""
    with open(os.path.join(folder, ERROR), "w", encoding="utf-8") as file:
        json.dump([type(error).__module__, type(error).__qualname__, str(error)], file)


def process_backend() -> Optional[str]:
    """The backend of Keras 3 in this process: what it runs on once imported, else what
    ``KERAS_BACKEND`` will make it (None: Keras 3 is not imported and the variable is unset)."""
    keras = sys.modules.get("keras")
    config = getattr(keras, "config", None)
    if config is not None and hasattr(config, "backend"):
        return config.backend()
    return os.environ.get("KERAS_BACKEND") or None


def model_backend(model) -> Optional[str]:
    """The backend a Keras 3 model object lives on; None for anything else (a tf_keras model, a path)."""
    if not any(cls.__module__.startswith("keras.") for cls in type(model).__mro__):  # a subclass of a user's too
        return None
    return process_backend() or TENSORFLOW


def needs_tensorflow_process(model) -> bool:
    """Must ``model`` (a model object or a path) be converted in a child process on TensorFlow?"""
    backend = process_backend() if isinstance(model, (str, os.PathLike)) else model_backend(model)
    return backend not in (None, TENSORFLOW)


def custom_modules(model) -> list:
    """The modules defining the model's layer classes that are not Keras's own (imported by the child)."""
    layers = model._flatten_layers(include_self=True) if hasattr(model, "_flatten_layers") else [model]  # pylint: disable=protected-access
    modules = sorted({type(layer).__module__ for layer in layers} - {"__main__"})
    local = sorted({type(layer).__name__ for layer in layers if type(layer).__module__ == "__main__"})
    if local:
        raise BackendError(f"layer classes {', '.join(local)} are defined in __main__: a {process_backend()} "
                           "model is converted in a TensorFlow process, which imports custom layers from their "
                           "module; move them to an importable module")
    return [name for name in modules if not name.startswith(("keras.", "keras_"))]


def custom_classes(model) -> dict:
    """{name: class} of the model's layer classes that are not Keras's own (the child loads the
    model with them, registered with Keras or not)."""
    layers = model._flatten_layers(include_self=True) if hasattr(model, "_flatten_layers") else [model]  # pylint: disable=protected-access
    return {type(layer).__name__: type(layer) for layer in layers
            if not type(layer).__module__.startswith(("keras.", "keras_", "__main__"))}


def convert_in_tensorflow_process(model, *, mask_mode=None, runtime=None, schedule=True, opset=None,
                                  input_signature=None, modules=(), custom_objects=None, keep_wrong=False,
                                  streaming=None) -> tuple:
    """(ONNX model, report) of ``model`` (a Keras 3 model object on any backend, or a ``.keras`` /
    ``.h5`` file or SavedModel path), converted by :func:`..conversion.convert` in a child process
    whose Keras runs on TensorFlow. ``custom_objects`` (``{name: class}``) reach the child by
    the modules that define them."""
    import onnx  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory(prefix="mlr-backend-") as folder:
        origin = process_backend() if isinstance(model, (str, os.PathLike)) else model_backend(model)
        if isinstance(model, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(model))
        else:
            modules = list(modules) + custom_modules(model)
            custom_objects = {**custom_classes(model), **(custom_objects or {})}
            path = os.path.join(folder, "model.keras")
            logger.info("model on the %s backend: saved to %s and converted in a TensorFlow process",
                        model_backend(model), path)
            model.save(path)
        request = {"model": path, "folder": folder, "origin": origin, "mask_mode": mask_mode, "runtime": runtime,
                   "schedule": schedule, "opset": opset, "modules": list(modules), "keep_wrong": keep_wrong,
                   "streaming": streaming,
                   "input_signature": _signature_as_json(input_signature),
                   "custom_objects": _objects_as_json(custom_objects)}
        with open(os.path.join(folder, "request.json"), "w", encoding="utf-8") as file:
            json.dump(request, file)
        try:
            _run_child(os.path.join(folder, "request.json"))
        except BackendError as failure:
            raise _raised_again(os.path.join(folder, ERROR), failure) from None
        finally:
            _log_again(os.path.join(folder, LOG))
        return onnx.load(os.path.join(folder, ONNX)), _read_report(os.path.join(folder, REPORT))


def _log_again(path: str) -> None:
    """The child's log records (:class:`_RecordWriter`'s lines), logged here at their own levels."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as file:
        for line in file:
            level, message = json.loads(line)
            logger.log(level, "%s", message)


def _read_report(path: str):
    """The child's report, made this thread's last one."""
    from .report import ConversionReport, LayerReport, adopt  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as file:
        written = json.load(file)
    layers = tuple(LayerReport(**_tuples(entry)) for entry in written["layers"])
    return adopt(ConversionReport(layers, tuple(written["known_wrong"]), streams=tuple(written.get("streams", ()))))


class _RecordWriter(logging.Handler):
    """The child's handler: each record of the plugin's logger as a JSON line [level, message]."""

    def __init__(self, path: str):
        super().__init__(logging.DEBUG)
        self.path = path

    def emit(self, record):
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps([record.levelno, record.getMessage()]) + "\n")


def _signature_as_json(signature) -> Optional[list]:
    """``input_signature`` as JSON: each ``tf.TensorSpec`` a dict, a nested list of them (a ``call(tokens,
    [h, c])``'s) a list."""
    if signature is None:
        return None
    if isinstance(signature, (list, tuple)):
        return [_signature_as_json(spec) for spec in signature]
    return {"name": getattr(signature, "name", None), "shape": [None if d is None else int(d) for d in signature.shape],
            "dtype": getattr(signature.dtype, "name", str(signature.dtype))}


def _signature_from_json(value):
    """:func:`_signature_as_json`'s ``tf.TensorSpec``\ s, nested as they were."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if value is None or isinstance(value, list):
        return None if value is None else [_signature_from_json(item) for item in value]
    return tf.TensorSpec(value["shape"], value["dtype"], name=value["name"])


def _objects_as_json(objects) -> dict:
    """{name: [module, qualified name]} of custom objects, for the child to import them by."""
    named = {}
    for name, value in (objects or {}).items():
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
        if module in (None, "__main__") or not qualname or "<locals>" in qualname:
            raise BackendError(f"custom object {name!r} is not importable ({module}.{qualname or value!r}): a "
                               f"{process_backend()} model is converted in a TensorFlow process, which imports "
                               "custom classes from their module; define it in an importable module")
        named[name] = [module, qualname]
    return named


def _objects_from_json(named: dict) -> dict:
    """The custom objects :func:`_objects_as_json` named, imported."""
    import importlib  # pylint: disable=import-outside-toplevel
    objects = {}
    for name, (module, qualname) in named.items():
        value = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
        objects[name] = value
    return objects


def _tuples(entry: dict) -> dict:
    return {key: tuple(value) if isinstance(value, list) else value for key, value in entry.items()}


def child_env(base=None) -> dict:
    """The environment of a process whose Keras 3 runs on TensorFlow."""
    from .flavours import flavour_env  # pylint: disable=import-outside-toplevel
    env = flavour_env("keras3", base)
    env["KERAS_BACKEND"] = TENSORFLOW
    return env


def _run_child(request: str) -> None:
    done = subprocess.run([sys.executable, "-m", __name__, request], capture_output=True, text=True,
                          env=child_env(), check=False)
    for line in done.stderr.splitlines():
        logger.debug("conversion process: %s", line)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise BackendError(lines[-1] if lines else f"the conversion process exited with status {done.returncode}")


def _child(request_path: str) -> None:
    """The child: convert as the request says, and write the ONNX model and the report beside it."""
    import importlib  # pylint: disable=import-outside-toplevel
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    for module in request["modules"]:
        importlib.import_module(module)
    signature = _signature_from_json(request["input_signature"])
    folder = request["folder"]
    logger.addHandler(_RecordWriter(os.path.join(folder, LOG)))
    logger.setLevel(logging.DEBUG)  # the parent's logger filters
    try:
        _convert_as_asked(request, folder, signature)
    except Exception as error:
        _write_error(folder, error)
        raise


def _convert_as_asked(request: dict, folder: str, signature) -> None:
    """The child's conversion, written beside the request."""
    import onnx  # pylint: disable=import-outside-toplevel
    from .conversion import convert  # pylint: disable=import-outside-toplevel
    from .pipeline import origin  # pylint: disable=import-outside-toplevel
    with origin.model_from(request["origin"]):
        onnx_model, report = convert(request["model"], mask_mode=request["mask_mode"], runtime=request["runtime"],
                                     schedule=request["schedule"], opset=request["opset"],
                                     keep_wrong=request.get("keep_wrong", False), streaming=request.get("streaming"),
                                     custom_objects=_objects_from_json(request.get("custom_objects") or {}) or None,
                                     input_signature=signature)
    wrong = [layer.layer for layer in report.left_as_loop if layer.detail.startswith(origin.BACKWARD_FROM_STATE_REASON)]
    if wrong:  # left a Loop, it would compute TensorFlow's numbers, not the model's
        raise BackendError(f"layers {', '.join(wrong)}: {origin.BACKWARD_FROM_STATE_REASON} cannot be converted exactly")
    onnx.save_model(onnx_model, os.path.join(folder, ONNX))  # a temporary file: not logged as written
    with open(os.path.join(folder, REPORT), "w", encoding="utf-8") as file:
        json.dump({"layers": [dataclasses.asdict(layer) for layer in report.layers],
                   "known_wrong": list(report.known_wrong), "streams": list(report.streams)}, file)


if __name__ == "__main__":
    try:
        _child(sys.argv[1])
    except Exception as error:  # pylint: disable=broad-except  (the parent shows the last line)
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        print(f"{type(error).__name__}: {lines[-1] if lines else ''}", file=sys.stderr)
        sys.exit(1)
