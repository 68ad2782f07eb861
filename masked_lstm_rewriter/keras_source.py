# SPDX-License-Identifier: Apache-2.0
"""A Keras model to convert or check, from an object or a file, and the input signature it is traced with.

Both the library call (:mod:`.conversion`) and ``verify`` (:mod:`.verification`) start here, so they
load the same model the same way and feed it the same inputs.

* :func:`load` reads a ``.keras`` or ``.h5`` file with the Keras TensorFlow runs with (Keras 3,
  or tf_keras under ``TF_USE_LEGACY_KERAS=1``); a SavedModel directory is not a Keras model and
  is left to the caller.
* :func:`input_signature` infers a model's inputs: the shapes a functional model's ``Input``
  layers declare (a model may depend on a batch or time axis it declared fixed); for
  a ``Sequential`` or subclassed model, the shapes it was built or called with, dynamic in batch
  and, for sequences (rank 3 and more, or integer ids and boolean masks), in time. Ids read by an
  ``Embedding`` first are int32 (Keras records float32 where the model was built without a dtype).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import tensorflow as tf

from .corpus.check import first_line

logger = logging.getLogger("masked_lstm_rewriter")

KERAS_FILES = (".keras", ".h5", ".hdf5")


class SourceError(ValueError):
    """The model cannot be read or traced: a one-line reason for the user."""


def is_saved_model(path) -> bool:
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                       for name in ("saved_model.pb", "saved_model.pbtxt"))


def load(path):
    """The Keras model in a ``.keras`` or ``.h5`` file (without its training configuration)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SourceError(f"{path}: no such file or directory")
    if not path.lower().endswith(KERAS_FILES):
        raise SourceError(f"{path}: not a Keras model file ({', '.join(KERAS_FILES)}) or a SavedModel directory")
    try:
        return tf.keras.models.load_model(path, compile=False)
    except Exception as error:  # pylint: disable=broad-except  (Keras raises many kinds; the user needs one line)
        raise SourceError(f"{path}: Keras could not load it ({type(error).__name__}: {first_line(error)})") from error


def is_keras_model(obj) -> bool:
    """A Keras 3 or tf_keras model (anything with the Model API tf2onnx's from_keras uses)."""
    return all(hasattr(obj, name) for name in ("get_weights", "layers", "call"))


def input_signature(model) -> list:
    """The ``tf.TensorSpec`` list ``model`` is traced with (see the module docstring)."""
    declared = _declared_inputs(model)
    specs = declared if declared is not None else _called_inputs(model)
    if not specs:
        raise SourceError(f"cannot tell the inputs of model '{getattr(model, 'name', model)}': call it once on a "
                          "batch, or give input_signature=")
    logger.info("input signature of '%s' (%s): %s", getattr(model, "name", "model"),
                "as declared" if declared is not None else "as called, batch and time dynamic",
                ", ".join(f"{s.name} {s.dtype.name}{list(s.shape)}" for s in specs))
    return specs


def _declared_inputs(model) -> Optional[list]:
    """The inputs a functional model's ``Input`` layers declared, as declared (``Input``'s batch is
    dynamic unless ``batch_size=`` fixed it: a model may depend on that too)."""
    inputs = getattr(model, "inputs", None) if type(model).__name__ == "Functional" else None
    if not inputs:
        return None
    return [tf.TensorSpec(list(x.shape), tf.as_dtype(x.dtype), name=_input_name(x, i)) for i, x in enumerate(inputs)]


def _called_inputs(model) -> Optional[list]:
    """The inputs a model was built or called with, dynamic in batch and time.

    The time axis is axis 1 of a rank-3 input (or higher), of integer ids and boolean masks, and
    of a rank-2 input as long as a rank-3 input's steps were (a mask whose dtype went unrecorded)."""
    shapes = _recorded_shapes(model)
    if not shapes:
        return None
    first = model.layers[0] if getattr(model, "layers", None) else None
    reads_ids = type(first).__name__ == "Embedding"
    steps = {list(shape)[1] for shape, _, _ in shapes if len(shape) >= 3}
    specs = []
    for i, (shape, dtype, name) in enumerate(shapes):
        shape = [None] + list(shape)[1:]
        integer = dtype.is_integer or (reads_ids and len(shapes) == 1)
        if len(shape) >= 3 or (len(shape) == 2 and (integer or dtype == tf.bool or shape[1] in steps)):
            shape[1] = None  # a sequence: [batch, time, ...]
        specs.append(tf.TensorSpec(shape, tf.int32 if integer and not dtype.is_integer else dtype,
                                   name=name or ("inputs" if len(shapes) == 1 else f"input_{i}")))
    return specs


def _recorded_shapes(model) -> Optional[list]:
    """[(shape, dtype, name)] of the inputs a model saw, or None (never called nor built)."""
    if hasattr(model, "save_spec"):  # tf_keras
        spec = model.save_spec(dynamic_batch=True)
        if spec is None:
            return None
        flat = [s for s in tf.nest.flatten(spec[0]) if isinstance(s, tf.TensorSpec)]
        return [(s.shape, s.dtype, s.name) for s in flat]
    inputs = getattr(model, "inputs", None)
    if inputs:  # a Keras 3 Sequential: its inputs exist once it is built
        return [(x.shape, tf.as_dtype(x.dtype), None) for x in inputs]
    from keras.src.export import export_utils  # pylint: disable=import-outside-toplevel
    try:
        specs = tf.nest.flatten(export_utils.get_input_signature(model))
    except ValueError:
        return None
    if len(specs) > 1:  # one input is guessed right: ids read by an Embedding first, else float32
        logger.warning("Keras 3 records the shapes a subclassed model was called with, not their dtypes: model '%s' "
                       "is traced with float32 inputs; give input_signature= if an input is not float32 (ids, "
                       "a boolean mask)", getattr(model, "name", "model"))
    return [(s.shape, tf.as_dtype(s.dtype or "float32"), getattr(s, "name", None)) for s in specs]


def _input_name(tensor, index: int) -> str:
    """The name an input is given: its ``Input`` layer's (Keras 3 names the tensor ``keras_tensor_N``)."""
    name = getattr(tensor, "name", "") or ""
    if name.startswith("keras_tensor"):
        history = getattr(tensor, "_keras_history", None)
        name = getattr(getattr(history, "operation", None), "name", "") or f"input_{index}"
    return name.split(":")[0]

