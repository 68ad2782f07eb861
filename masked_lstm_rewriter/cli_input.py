# SPDX-License-Identifier: Apache-2.0
"""The command line's checks of the files and values it is given, made before TensorFlow loads, its
hints for a Keras file the Keras in use cannot read and a LiteRT file tf2onnx cannot, and its
``--custom-objects`` modules.

A ``.keras`` file must be a zip archive holding a ``config.json``, a ``.h5`` / ``.hdf5`` file must
carry the HDF5 signature: anything else (a truncated download, a text file with a model's name)
is refused in one line naming the file, instead of Keras's "File not found" or h5py's "file
signature not found" after seconds of loading.
"""

from __future__ import annotations

import contextlib
import os
import sys
import zipfile
from typing import Optional

from .cli_logging import progress

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
HDF5_SUFFIXES = (".h5", ".hdf5")
KERAS_ARCHIVE_SUFFIX = ".keras"
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
# how Keras 3 fails on a layer saved by tf_keras (Keras 2), e.g. LSTM's {'time_major': False}
LEGACY_KERAS_SIGNS = ("Unrecognized keyword arguments passed to",)
CUSTOM_OBJECTS = "--custom-objects"
LITERT_VARIABLE_OPS = ("VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")  # a stateful layer's states in LiteRT


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


def model_file_problem(path: str) -> Optional[str]:
    """Why the file at ``path`` cannot be the Keras model its name says, or None (it may be; or it
    is not a Keras file, or not a regular file: those are judged elsewhere)."""
    if not os.path.isfile(path):
        return None
    lower = path.lower()
    if lower.endswith(KERAS_ARCHIVE_SUFFIX):
        return _keras_archive_problem(path)
    if lower.endswith(HDF5_SUFFIXES) and not _has_hdf5_signature(path):
        suffix = os.path.splitext(path)[1]
        return f"{path}: not a valid {suffix} file (no HDF5 signature: not a Keras .h5 model, or truncated?)"
    return None


def _keras_archive_problem(path: str) -> Optional[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return f"{path}: not a valid .keras file (not a zip archive; truncated?)"
    if "config.json" not in names:
        return f"{path}: not a valid .keras file (a zip archive without a Keras model's config.json)"
    return None


def _has_hdf5_signature(path: str) -> bool:
    """The HDF5 signature at the start of the file, or after a user block (at 512, 1024, 2048, ... bytes)."""
    size = os.path.getsize(path)
    offset = 0
    with open(path, "rb") as handle:
        while offset + len(HDF5_SIGNATURE) <= size:
            handle.seek(offset)
            if handle.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
    return False


def bad_input(model_path: Optional[str], error: BaseException, message: str) -> Optional[str]:
    """The line to say (exit status 2) when a conversion failed on its input, or None: a custom
    class whose module was not given, a model whose inputs Keras did not record, a tf_keras ``.h5``
    file under Keras 3."""
    source = sys.modules.get(f"{__package__}.keras_source")  # not loaded: the error cannot be one of its
    if source is not None and isinstance(error, source.UnknownClassError):
        return message
    if source is not None and isinstance(error, source.UnknownInputsError):
        return f"{message} (from Python: masked_lstm_rewriter.convert(model, input_signature=[...]))"
    hint = legacy_keras_hint(model_path, message)
    return f"{message}; {hint}" if hint else None


def legacy_keras_hint(model_path: Optional[str], message: str) -> Optional[str]:
    """What to do when Keras 3 failed to load a tf_keras (Keras 2) ``.h5`` file, or None."""
    if not model_path or not model_path.lower().endswith(HDF5_SUFFIXES):
        return None
    if os.environ.get(LEGACY_KERAS_ENV, "").strip().lower() in ("1", "true"):
        return None
    if not any(sign in message for sign in LEGACY_KERAS_SIGNS):
        return None
    return f"a tf_keras (Keras 2) .h5 file: run with {LEGACY_KERAS_ENV}=1"


def with_litert_hint(message: str, tflite_path: Optional[str]) -> str:
    """``message``, and where the ``.tflite`` file converted holds LiteRT resource variables (a stateful
    layer's states, which tf2onnx cannot parse: it fails with "list index out of range"), what to do."""
    if not tflite_path or not litert_ops(tflite_path) & set(LITERT_VARIABLE_OPS):
        return message
    return (f"{message}; {tflite_path} holds LiteRT resource variables (a stateful layer's states), which tf2onnx "
            "cannot read: convert the Keras model instead (with --streaming to take the states as inputs)")


def litert_ops(path: str) -> set:
    """The names of the builtin ops a LiteRT flatbuffer uses (empty where it cannot be read)."""
    try:
        from tf2onnx.tflite.BuiltinOperator import BuiltinOperator  # pylint: disable=import-outside-toplevel
        from tf2onnx.tflite.Model import Model  # pylint: disable=import-outside-toplevel
        with open(path, "rb") as handle:
            model = Model.GetRootAsModel(handle.read(), 0)
        names = {code: name for name, code in vars(BuiltinOperator).items() if not name.startswith("_")}
        codes = (model.OperatorCodes(k) for k in range(model.OperatorCodesLength()))
        return {names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())) for code in codes}
    except Exception:  # noqa: BLE001  pylint: disable=broad-except  (a file flatbuffers cannot read: no hint)
        return set()


def pop_choice(args: list, name: str, variable: str, choices: tuple) -> tuple:
    """(the value of the command line's own option ``name``, else of the environment ``variable``;
    the other arguments, for tf2onnx)."""
    value, rest = None, []
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
    if value is None:
        return environment_choice(variable, choices), rest
    if value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value, rest


def pop_switch(args: list, name: str) -> tuple:
    """(True for ``--name``, False for ``--no-name``, None for neither; the other arguments)."""
    flags = {f"--{name}": True, f"--no-{name}": False}
    given = {flags[arg] for arg in args if arg in flags}
    if len(given) > 1:
        raise UsageError(f"--{name} and --no-{name} contradict each other: give one")
    return (given.pop() if given else None), [arg for arg in args if arg not in flags]


def environment_choice(variable: str, choices: tuple) -> Optional[str]:
    """The value of the environment ``variable`` (None when unset or empty); a UsageError naming the
    variable when it is not one of ``choices``."""
    value = os.environ.get(variable, "").strip() or None
    if value is not None and value not in choices:
        raise UsageError(f"{variable} must be one of {', '.join(choices)} (or empty), not {value!r}")
    return value


def keras_on_tensorflow() -> Optional[str]:
    """Make this process's Keras 3 run on TensorFlow, whatever ``KERAS_BACKEND`` says (a ``.keras``
    file is the same on every backend, and tf2onnx traces TensorFlow); the backend it named, if
    another. Must come before Keras is imported."""
    named = os.environ.get("KERAS_BACKEND", "").strip()
    if named in ("", "tensorflow"):
        return None
    os.environ["KERAS_BACKEND"] = "tensorflow"
    return named


def pop_custom_objects(args: list) -> tuple:
    """(the modules ``--custom-objects`` names, repeated or comma-separated; the other arguments)."""
    from .user_modules import split  # pylint: disable=import-outside-toplevel
    values, rest = [], []
    it = iter(args)
    for arg in it:
        if arg == CUSTOM_OBJECTS or arg.startswith(CUSTOM_OBJECTS + "="):
            value = next(it, None) if arg == CUSTOM_OBJECTS else arg.split("=", 1)[1]
            if not value or value.startswith("-") or not split([value]):
                raise UsageError(f"{CUSTOM_OBJECTS} needs a value: a module name (my_layers) or a .py file")
            values.append(value)
        else:
            rest.append(arg)
    return split(values), rest


def custom_objects(modules: list):
    """The context within which Keras loads a model file with the classes of ``modules``, imported
    now (once the Keras flavour and backend are set); one that cannot be imported is bad input."""
    if not modules:
        return contextlib.nullcontext()
    from .keras_source import custom_objects_given  # pylint: disable=import-outside-toplevel
    from .user_modules import ModuleError, custom_objects as classes  # pylint: disable=import-outside-toplevel
    progress("importing %s", ", ".join(modules))
    try:
        return custom_objects_given(classes(modules))
    except ModuleError as error:
        raise UsageError(f"{CUSTOM_OBJECTS} {error}") from error
