# SPDX-License-Identifier: Apache-2.0
"""A Keras model to convert or check, from an object or a file, and the input signature it is traced with.

Both the library call (:mod:`.conversion`) and ``verify`` (:mod:`.verification`) start here, so they
load the same model the same way and feed it the same inputs.

* :func:`load` reads a ``.keras`` or ``.h5`` file with the Keras TensorFlow runs with (Keras 3,
  or tf_keras under ``TF_USE_LEGACY_KERAS=1``); a SavedModel directory is not a Keras model and
  is left to the caller. Custom classes the file names come from Keras's registry or from
  ``custom_objects``; one that neither has is named in a one-line :class:`UnknownClassError`.
* :func:`input_signature` infers a model's inputs: the shapes a functional model's ``Input``
  layers declare (a model may depend on a batch or time axis it declared fixed); for
  a ``Sequential`` or subclassed model, the shapes it was built or called with, dynamic in batch
  and, for sequences (rank 3 and more, or integer ids and boolean masks), in time, unless a
  ``Sequential`` model declared its steps (an ``Input`` or ``input_shape=``). Ids read by an
  ``Embedding`` first are int32 (Keras records float32 where the model was built without a dtype).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import re
import warnings
import zipfile
from typing import Optional

import tensorflow as tf

from .corpus.check import first_line
from .flavours import current_flavour

logger = logging.getLogger("masked_lstm_rewriter")

KERAS_FILES = (".keras", ".h5", ".hdf5")
# how Keras says a model file names a class it does not know (Keras 3 and tf_keras, .keras and .h5)
UNKNOWN_CLASS_SIGNS = (re.compile(r"Could not locate (?:class|function) '([^']+)'"),
                       re.compile(r"Could not deserialize \w+ '([^']+)' because its parent module"),
                       re.compile(r"Unknown [\w ]+: '([^']+)'"))
KERAS_MODULES = ("keras", "tf_keras", "builtins")  # where a saved class's module is Keras's own
NOT_REBUILT = r".*cannot be built automatically"  # Keras 3 warns so, and loads no weights into the model
CALL_OPTIONS = ("training", "mask")  # the arguments of a Keras ``call`` that are no input tensors
_GIVEN: list = []  # the custom objects :func:`load` also gets, set by :func:`custom_objects_given`


class SourceError(ValueError):
    """The model cannot be read or traced: a one-line reason for the user."""


class UnknownInputsError(SourceError):
    """Keras did not record the model's inputs (or not all of them): ``input_signature=`` must say them."""


class UnknownClassError(SourceError):
    """The model file names a class Keras does not know: a custom class whose module was not given."""


@contextlib.contextmanager
def custom_objects_given(objects: dict):
    """Within the block, :func:`load` also gets ``objects`` (the command line's ``--custom-objects``,
    for tf2onnx's ``--keras`` loader, which takes none)."""
    _GIVEN.append(dict(objects))
    try:
        yield
    finally:
        _GIVEN.pop()


def is_saved_model(path) -> bool:
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                       for name in ("saved_model.pb", "saved_model.pbtxt"))


def load(path, custom_objects: Optional[dict] = None):
    """The Keras model in a ``.keras`` or ``.h5`` file (without its training configuration).
    ``custom_objects``: {name: class} of the custom classes it names that are not registered with Keras."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    if path.lower().endswith(".tflite"):
        raise SourceError(f"{path}: a LiteRT flatbuffer, not a Keras model: convert it with "
                          f"python -m masked_lstm_rewriter --tflite {path} -o MODEL.onnx")
    if not path.lower().endswith(KERAS_FILES):
        raise SourceError(f"{path}: not a Keras model file ({', '.join(KERAS_FILES)}) or a SavedModel directory")
    objects = {**(_GIVEN[-1] if _GIVEN else {}), **(custom_objects or {})}
    # Keras rebuilds the model by calling each layer symbolically: there, tf_keras would register each
    # LSTM's and GRU's cuDNN twin (seconds per layer) in a graph nothing runs
    from .patches.generic_path import generic_path  # pylint: disable=import-outside-toplevel  (imports tf2onnx)
    try:
        with generic_path(), warnings.catch_warnings():
            warnings.filterwarnings("error", NOT_REBUILT, UserWarning)
            return tf.keras.models.load_model(path, custom_objects=objects or None, compile=False)
    except UserWarning as error:  # Keras 3 goes on without the weights: the model would convert with random ones
        raise SourceError(f"{path}: Keras cannot rebuild the model from the file, so it would not load its weights "
                          f"({first_line(error).split('. ')[0]}): give its class build_from_config() (and "
                          "get_build_config()), as Keras advises, to convert it from a file or on another "
                          "backend") from error
    except Exception as error:  # pylint: disable=broad-except  (Keras raises many kinds; the user needs one line)
        unknown = unknown_class(path, error, objects)
        if unknown is not None:
            raise UnknownClassError(_unknown_class_message(path, unknown, objects)) from error
        hint = SAFE_MODE_HINT if "safe_mode" in str(error) else ""
        raise SourceError(f"{path}: Keras could not load it ({type(error).__name__}: {first_line(error)}){hint}") \
            from error


# Keras refuses a Lambda layer's Python code unless told the file is trusted: only a caller can say so
SAFE_MODE_HINT = ("; if you trust the file, load it in Python with keras.models.load_model(path, safe_mode=False) "
                  "and convert the model: mlr.convert(model, 'model.onnx')")


def unknown_class(path: str, error: BaseException, objects: dict) -> Optional[str]:
    """The class (or function) Keras failed to load ``path`` for not knowing it, or None."""
    text = "\n".join(str(link) for link in _chain(error))
    for sign in UNKNOWN_CLASS_SIGNS:
        found = sign.search(text)
        if found:
            return found.group(1).split(">")[-1]  # a registered name is 'package>Class'
    if path.lower().endswith(".keras"):  # tf_keras says "'str' object is not callable" there: read the file
        return next(iter(_unresolved_classes(path, objects)), None)
    return None


def _chain(error: BaseException) -> list:
    """``error`` and the errors it was raised from (Keras 3 wraps a layer's in its model's)."""
    chain = []
    while error is not None and error not in chain and len(chain) < 10:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _unresolved_classes(path: str, objects: dict) -> list:
    """The classes a ``.keras`` file's config names that nothing resolves: not Keras's, not in
    ``objects``, not registered (tf_keras does not import their modules)."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return []
    unresolved = []
    for entry in _saved_objects(config):
        module, registered = entry.get("module"), entry.get("registered_name")
        function = entry["class_name"] == "function" and isinstance(entry.get("config"), str)
        name = entry["config"] if function else entry["class_name"]  # a function is saved under its name
        if not module or module.split(".")[0] in KERAS_MODULES or name in objects or registered in objects:
            continue
        if tf.keras.utils.get_registered_object(registered) is None:
            unresolved.append(name)
    return unresolved


def _saved_objects(config) -> list:
    """Every object a Keras config holds ({"class_name": ..., "module": ...}), nested ones too."""
    found = []
    if isinstance(config, dict):
        if isinstance(config.get("class_name"), str):
            found.append(config)
        for value in config.values():
            found += _saved_objects(value)
    elif isinstance(config, list):
        for value in config:
            found += _saved_objects(value)
    return found


def _unknown_class_message(path: str, name: str, objects: dict) -> str:
    """One line: the class Keras does not know, and how to give it."""
    if _keras3_operation(path, name):
        return (f"{path}: Keras does not know the class '{name}', an operation Keras 3 saves in a .h5 file but "
                "cannot read back (a Masking layer's, say): save the model as .keras")
    if objects:
        given = sorted(objects)
        listed = ", ".join(given[:8]) + (", ..." if len(given) > 8 else "")
        return f"{path}: Keras does not know the class '{name}', and the custom objects given ({listed}) do not have it"
    return (f"{path}: Keras does not know the class '{name}' (a custom layer?): give the module that defines it "
            f"with --custom-objects MODULE (in Python: custom_objects={{'{name}': {name}}})")


def _keras3_operation(path: str, name: str) -> bool:
    """Is ``name`` one of Keras 3's operations, which it saves as layers in a ``.h5`` file and cannot load?"""
    if not path.lower().endswith((".h5", ".hdf5")) or current_flavour() != "keras3":
        return False
    try:
        from keras.src import ops  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    return isinstance(getattr(ops, name, None), type)


def is_keras_model(obj) -> bool:
    """A Keras 3 or tf_keras model (anything with the Model API tf2onnx's from_keras uses)."""
    return all(hasattr(obj, name) for name in ("get_weights", "layers", "call"))


def input_signature(model) -> list:
    """The ``tf.TensorSpec`` list ``model`` is traced with (see the module docstring)."""
    declared = _declared_inputs(model)
    specs = declared if declared is not None else _called_inputs(model)
    if not specs:
        raise UnknownInputsError(f"cannot tell the inputs of model '{getattr(model, 'name', model)}': call it once "
                                 "on a batch, or give input_signature=")
    _check_recorded_arguments(model, specs)
    logger.info("input signature of '%s' (%s): %s", getattr(model, "name", "model"),
                "as declared" if declared is not None else "as called, None where dynamic",
                ", ".join(f"{s.name} {s.dtype.name}{list(s.shape)}" for s in specs))
    return specs


def spreads_inputs(model, count: int) -> bool:
    """Does ``model`` take its ``count`` input tensors as as many arguments (a subclassed model's
    ``call(inputs, states)``) rather than as one list? :class:`SourceError` where its ``call`` takes neither."""
    if count < 2 or type(model).__name__ in ("Functional", "Sequential"):
        return False
    required, positional = _call_arguments(model)
    if positional is None or len(positional) >= count:
        return positional is None or len(positional) > 1
    if len(required) <= 1:
        return False
    raise SourceError(f"model '{model.name}' is called as call({', '.join(positional)}): {count} input tensors do not "
                      "fit it; give input_signature= with one spec (or one nested list of specs) per argument")


def named_after_arguments(model, specs: list) -> list:
    """``specs`` for a ``call(inputs, states)`` (:func:`spreads_inputs`), each unnamed one named after its
    argument, the j-th of an argument's nested list ``<argument>_<j>`` (TensorFlow would call them
    ``args_0``, ``args_1_0``)."""
    names = _call_arguments(model)[1] or []
    return [_named(spec, names[i]) if i < len(names) else spec for i, spec in enumerate(specs)]


def _named(spec, name: str):
    """``spec`` named ``name`` where unnamed; in a nested structure, each unnamed spec ``<name>_<j>``."""
    if isinstance(spec, tf.TensorSpec):
        return spec if spec.name else tf.TensorSpec(spec.shape, spec.dtype, name=name)
    leaves = tf.nest.flatten(spec)
    return tf.nest.pack_sequence_as(spec, [leaf if not isinstance(leaf, tf.TensorSpec) or leaf.name else
                                           tf.TensorSpec(leaf.shape, leaf.dtype, name=f"{name}_{j}")
                                           for j, leaf in enumerate(leaves)])


def argument_groups(model, names: list) -> Optional[list]:
    """How a subclassed model's ``call`` takes the input tensors named ``names`` where one argument takes
    several (``call(tokens, states)`` given ``[h, c]``): per argument, in order, the index of the input
    named after it, or for the first argument no input is named after, the indices of the inputs named
    after no argument (the arguments after it keep their defaults). None where no argument takes several,
    or no input is named after an argument (the names then say nothing of the grouping)."""
    if type(model).__name__ in ("Functional", "Sequential"):
        return None
    required, positional = _call_arguments(model)
    rest = [i for i, name in enumerate(names) if name not in (positional or [])]
    groups = []
    for argument in positional or []:
        if argument in names:
            groups.append(names.index(argument))
        elif len(rest) > 1:
            groups.append(rest)
            rest = []
        else:
            break
    several, named = (any(isinstance(group, kind) for group in groups) for kind in (list, int))
    return groups if several and named and not rest and len(groups) >= len(required) else None


def _call_arguments(model) -> tuple:
    """(required, all) names of the positional arguments of ``model.call`` that take tensors (not
    ``training``, nor a ``mask`` with a default, which Keras fills in itself); ``all`` None where ``call``
    takes ``*args`` or hides its signature."""
    try:
        parameters = list(inspect.signature(model.call).parameters.values())
    except (TypeError, ValueError):
        return [], None
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return [], None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and (p.name not in CALL_OPTIONS or (p.name == "mask" and p.default is p.empty))]
    return [p.name for p in positional if p.default is p.empty], [p.name for p in positional]


def _check_recorded_arguments(model, specs: list) -> None:
    """:class:`UnknownInputsError` where Keras recorded fewer inputs than ``model.call`` requires (Keras 3
    records a subclassed model's first argument only); a WARNING where Keras 3 may have dropped some that
    have defaults (they keep them in the ONNX model)."""
    required, positional = _subclassed_call(model)
    if len(required) > len(specs):
        raise UnknownInputsError(f"model '{model.name}' is called as call({', '.join(required)}) but Keras "
                                 f"recorded the shape of {len(specs)} input(s): give input_signature= with one spec "
                                 "per argument")
    if not hasattr(model, "save_spec") and positional and len(positional) > len(specs):
        logger.warning("model '%s' is traced as call(%s): Keras 3 records the shape of its first argument only, so "
                       "%s keep their defaults in the ONNX model; give input_signature= with a spec for each "
                       "tensor argument to take it as an input", model.name, ", ".join(positional[:len(specs)]),
                       ", ".join(positional[len(specs):]))


def check_given_signature(model, specs: list) -> None:
    """:class:`SourceError` in one line where the ``input_signature`` given does not fit ``model.call`` (a
    subclassed model's): fewer specs than it requires, or a keyword-only argument it requires."""
    required, _ = _subclassed_call(model)
    if len(required) > len(specs):
        raise SourceError(f"input_signature= gives {len(specs)} spec(s), but model '{model.name}' is called as "
                          f"call({', '.join(required)}): give one spec per argument")


def _subclassed_call(model) -> tuple:
    """:func:`_call_arguments` of a subclassed model (([], []) for a functional or ``Sequential`` one, which
    Keras calls on its inputs itself); :class:`SourceError` where its ``call`` requires a keyword-only argument."""
    if type(model).__name__ in ("Functional", "Sequential"):
        return [], []
    _check_keyword_only(model)
    return _call_arguments(model)


def _check_keyword_only(model) -> None:
    """:class:`SourceError` where ``model.call`` requires a keyword-only argument, which no traced
    signature gives (it passes the inputs by position)."""
    try:
        parameters = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return
    keyword_only = [p.name for p in parameters if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if keyword_only:
        raise SourceError(f"model '{model.name}' requires the keyword-only argument(s) {', '.join(keyword_only)} in "
                          "its call, which the conversion cannot give (it passes the inputs by position): make them "
                          "positional")


def _declared_inputs(model) -> Optional[list]:
    """The inputs a functional model's ``Input`` layers declared, as declared (``Input``'s batch is
    dynamic unless ``batch_size=`` fixed it: a model may depend on that too)."""
    inputs = getattr(model, "inputs", None) if type(model).__name__ == "Functional" else None
    if not inputs:
        return None
    return [tf.TensorSpec(list(x.shape), tf.as_dtype(x.dtype), name=_input_name(x, i)) for i, x in enumerate(inputs)]


def _called_inputs(model) -> Optional[list]:
    """The inputs a model was built or called with, dynamic in batch and time; a stateful model keeps
    its batch (its states have that many rows), a ``Sequential`` model that declared its inputs its steps.

    The time axis is axis 1 of a rank-3 input (or higher), of integer ids and boolean masks, and
    of a rank-2 input as long as a rank-3 input's steps were (a mask whose dtype went unrecorded)."""
    keep_batch, keep_steps = bool(stateful_layers(model)), _declares_its_steps(model)
    shapes = _recorded_shapes(model, keep_batch)
    if not shapes:
        return None
    first = model.layers[0] if getattr(model, "layers", None) else None
    reads_ids = type(first).__name__ == "Embedding"
    steps = {list(shape)[1] for shape, _, _ in shapes if len(shape) >= 3}
    specs, names = [], _input_names(model, [name for _, _, name in shapes])
    for i, (shape, dtype, name) in enumerate(shapes):
        shape = ([shape[0]] if keep_batch else [None]) + list(shape)[1:]
        integer = dtype.is_integer or (reads_ids and len(shapes) == 1)
        if not keep_steps and (len(shape) >= 3 or (len(shape) == 2 and (integer or dtype == tf.bool or
                                                                        shape[1] in steps))):
            shape[1] = None  # a sequence: [batch, time, ...]
        specs.append(tf.TensorSpec(shape, tf.int32 if integer and not dtype.is_integer else dtype, name=names[i]))
    return specs


def _input_names(model, recorded: list) -> list:
    """Distinct names for the inputs Keras recorded: a ``call(inputs, states)``'s argument names, else
    the recorded ones (tf_keras may give two inputs the same one), ``input_<i>`` where none is."""
    if spreads_inputs(model, len(recorded)):
        names = _call_arguments(model)[1]
        if names:
            return names[:len(recorded)]
    names = [name or ("inputs" if len(recorded) == 1 else f"input_{i}") for i, name in enumerate(recorded)]
    return [name if name not in names[:i] else f"{name}_{i}" for i, name in enumerate(names)]


def _declares_its_steps(model) -> bool:
    """Did a ``Sequential`` model declare its input shapes (an ``Input``, ``input_shape=``, or ``build()``
    without a batch size), as a functional model does? tf_keras records it; in Keras 3 a model built by
    a call has that call's batch size in its inputs."""
    if type(model).__name__ != "Sequential":
        return False
    explicit = getattr(model, "_has_explicit_input_shape", None)  # tf_keras (its inputs lose a call's batch size)
    if explicit is not None:
        return bool(explicit)
    inputs = getattr(model, "inputs", None)
    return bool(inputs) and all(x.shape[0] is None for x in inputs)


def _recorded_shapes(model, keep_batch: bool = False) -> Optional[list]:
    """[(shape, dtype, name)] of the inputs a model saw, or None (never called nor built)."""
    if hasattr(model, "save_spec"):  # tf_keras
        spec = model.save_spec(dynamic_batch=not keep_batch)
        if spec is None:  # loaded from a file: built with the shapes it was saved with
            return _guessed_dtypes(model, _built_shapes(getattr(model, "_build_input_shape", None)))
        flat = [s for s in tf.nest.flatten(spec[0]) if isinstance(s, tf.TensorSpec)]
        return [(s.shape, s.dtype, s.name) for s in flat]
    inputs = getattr(model, "inputs", None)
    if inputs:  # a Keras 3 Sequential: its inputs exist once it is built (named where its Input was)
        return [(x.shape, tf.as_dtype(x.dtype), _given_input_name(x, i)) for i, x in enumerate(inputs)]
    from keras.src.export import export_utils  # pylint: disable=import-outside-toplevel
    try:
        specs = tf.nest.flatten(export_utils.get_input_signature(model))
    except ValueError:  # never called; loaded from a file, it is built from the shapes it was saved with
        built = export_utils._infer_input_signature_from_model(model) if model.built else None  # pylint: disable=protected-access
        if not built:
            return None
        specs = tf.nest.flatten(built)
    return _guessed_dtypes(model, [(s.shape, None, getattr(s, "name", None)) for s in specs])  # no dtypes recorded


def _built_shapes(shape) -> Optional[list]:
    """[(shape, None, None)] of a tf_keras model's ``_build_input_shape`` (one shape, or a structure of them)."""
    if shape is None:
        return None
    if isinstance(shape, tf.TensorShape) or all(isinstance(d, (int, type(None))) for d in shape):
        return [(tf.TensorShape(shape), None, None)]
    values = shape.values() if isinstance(shape, dict) else shape
    return [item for value in values for item in (_built_shapes(value) or [])] or None


def _guessed_dtypes(model, shapes: Optional[list]) -> Optional[list]:
    """``shapes`` [(shape, dtype or None, name)] with float32 where Keras recorded no dtype (Keras 3's
    subclassed model, a tf_keras model loaded from a file), said in a warning where several inputs
    are guessed; ids read by an Embedding first are guessed right by :func:`_called_inputs`."""
    if not shapes:
        return None
    if sum(dtype is None for _, dtype, _ in shapes) > 1:
        logger.warning("Keras records the shapes model '%s' was called or built with, not their dtypes: it is traced "
                       "with float32 inputs; give input_signature= if an input is not float32 (ids, a boolean mask)",
                       getattr(model, "name", "model"))
    return [(shape, tf.as_dtype(dtype or "float32"), name) for shape, dtype, name in shapes]


def _given_input_name(tensor, index: int) -> Optional[str]:
    """The name of the ``Input`` a Keras 3 ``Sequential`` model starts with, None where Keras named it
    (``input_layer``, ``input_layer_1``: an input made by a call or ``input_shape=``)."""
    name = _input_name(tensor, index)
    return None if re.fullmatch(r"input_layer(_\d+)?|input_\d+", name) else name


def _input_name(tensor, index: int) -> str:
    """The name an input is given: its ``Input`` layer's (Keras 3 names the tensor ``keras_tensor_N``)."""
    name = getattr(tensor, "name", "") or ""
    if name.startswith("keras_tensor"):
        history = getattr(tensor, "_keras_history", None)
        name = getattr(getattr(history, "operation", None), "name", "") or f"input_{index}"
    return name.split(":")[0]



def stateful_layers(model) -> list:
    """The names of ``model``'s layers built with ``stateful=True``, wrapped and nested ones included."""
    flatten = getattr(model, "_flatten_layers", None)
    layers = flatten(include_self=False, recursive=True) if flatten else getattr(model, "layers", [])
    return [layer.name for layer in layers if getattr(layer, "stateful", False) is True]
