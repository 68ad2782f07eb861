# SPDX-License-Identifier: Apache-2.0
"""The references ``verify`` checks an ONNX model against (see :mod:`.verification`).

A :class:`Reference` is a small interface: a ``label`` for the report, its inputs (``specs``,
:class:`.verify_batches.InputSpec`), ``run(inputs)`` giving its outputs in the ONNX model's
order, and what it knows of the layers reading its inputs (:class:`.verify_hints.InputHints`).
:func:`load_reference` picks one for what the user gave:

* :class:`KerasReference`: a Keras model, or a ``.keras`` / ``.h5`` file; Keras runs it eagerly
  (``model(x, training=False)``) and its ``Embedding`` and ``Masking`` layers say how to feed it.
  Its ``stateful=True`` layers are reset before each batch: every batch starts from zero states,
  as the ONNX model does (fed zero states when it streams).
* :class:`SavedModelReference`: a SavedModel directory; TensorFlow runs its ``serving_default``
  signature (the graph tf2onnx converts).
* :class:`LiteRTReference`: a LiteRT (``.tflite``) file, run by LiteRT's interpreter on the shapes
  it was made for; the ONNX model's graph says how to feed it. Its variable tensors (a fused LSTM's
  states, which LiteRT carries from one run to the next) are reset before each batch.
* :class:`OnnxReference`: an ONNX model (an ``.onnx`` file or an ``onnx.ModelProto``), typically
  the one :func:`..rewrite_onnx` rewrote; onnxruntime runs it, and its own graph says how to feed
  it: the table a ``Gather`` takes token ids into, the constant an ``Equal`` compares features
  with (else 0, Keras's ``Masking`` default). A reference must run every batch, so a file
  carrying the post-padding guard (a ``mask_mode="post"`` output) is refused. A streaming file's
  state inputs are fed zeros, and its state outputs left out, as the ONNX model's are.

Importing this module imports neither TensorFlow nor tf2onnx (loading a reference does).
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from .corpus.check import first_line
from .corpus.ops import walk_nodes
from .sessions import onnxruntime_session, runtime_available
from .verify_batches import InputSpec, input_specs, state_inputs, state_output, zero_states
from .verify_hints import InputHints, keras_mask_value, keras_vocabulary, onnx_mask_value, onnx_vocabulary

ONNX_FILES = (".onnx",)
LITERT_FILES = (".tflite",)


class Reference(InputHints):
    """The oracle: its ``label``, its inputs (``specs``, in the order ``run`` takes them), and
    ``run(inputs)``: its outputs, as arrays, in the ONNX model's output order."""

    def __init__(self, label: str, specs: list):
        self.label = label
        self.specs = [InputSpec.of(spec) for spec in specs]

    def run(self, inputs: list) -> list:
        raise NotImplementedError

    @property
    def notes(self) -> list:
        """What the report should say about how this reference runs (nothing, unless said otherwise)."""
        return []


class KerasReference(Reference):
    """A Keras model called eagerly in inference mode; its layers say how to feed it."""

    def __init__(self, model, label: str, onnx_inputs: Optional[list] = None):
        super().__init__(label, _keras_inputs(model, onnx_inputs))
        self.model = model
        self.stateful = stateful_layers(model)
        self.groups = _argument_groups(model, onnx_inputs)

    def run(self, inputs: list) -> list:
        for layer in self.stateful:  # from zeros, not from the state the previous batch left
            (getattr(layer, "reset_state", None) or layer.reset_states)()
        return keras_outputs(self.model, inputs, self.groups)

    @property
    def notes(self) -> list:
        if not self.stateful:
            return []
        names = ", ".join(layer.name for layer in self.stateful)
        return [f"stateful layer(s) {names}: reset before each batch, so that Keras starts from zero states"]

    def vocabulary(self, index: int, direct: bool = False) -> Optional[int]:
        return keras_vocabulary(self.model, index, direct)

    def mask_value(self, index: int, sole_features: bool) -> Optional[float]:
        return keras_mask_value(self.model, index, sole_features)


def _keras_inputs(model, onnx_inputs: Optional[list]) -> list:
    """The ONNX model's inputs where ``model.call`` takes them as as many arguments (a subclassed
    ``call(inputs, states)``, of which Keras 3 records the first only), else those Keras recorded
    (:func:`.keras_source.input_signature`), else the ONNX model's."""
    from . import keras_source  # pylint: disable=import-outside-toplevel
    if onnx_inputs and (_spread(model, len(onnx_inputs)) or _argument_groups(model, onnx_inputs)):
        return onnx_inputs
    try:
        return keras_source.input_signature(model)
    except keras_source.SourceError:
        if not onnx_inputs:
            raise
        return onnx_inputs


def _argument_groups(model, onnx_inputs: Optional[list]) -> Optional[list]:
    """:func:`.keras_source.argument_groups` of the ONNX model's input names (None without them)."""
    from . import keras_source  # pylint: disable=import-outside-toplevel
    return keras_source.argument_groups(model, [spec.name for spec in onnx_inputs]) if onnx_inputs else None


def _spread(model, count: int) -> bool:
    """:func:`.keras_source.spreads_inputs`, False where ``count`` inputs do not fit ``model.call``."""
    from . import keras_source  # pylint: disable=import-outside-toplevel
    try:
        return keras_source.spreads_inputs(model, count)
    except keras_source.SourceError:
        return False


def keras_outputs(model, inputs: list, groups: Optional[list] = None) -> list:
    """Keras's outputs, flat, as arrays: the model called eagerly in inference mode. ``groups``: which
    inputs each argument of its ``call`` takes, where one takes several (:func:`.keras_source.argument_groups`)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from . import keras_source  # pylint: disable=import-outside-toplevel
    if groups is not None:
        tensors = [tf.convert_to_tensor(x) for x in inputs]
        outputs = model(*[tensors[g] if isinstance(g, int) else [tensors[i] for i in g] for g in groups],
                        training=False)
    elif keras_source.spreads_inputs(model, len(inputs)):  # call(inputs, states): tensors, as tf_keras wants them
        outputs = model(*[tf.convert_to_tensor(x) for x in inputs], training=False)
    else:
        outputs = model(inputs if len(inputs) > 1 else inputs[0], training=False)
    return [as_array(output) for output in tf.nest.flatten(outputs)]


def stateful_layers(model) -> list:
    """The recurrent layers of ``model`` (nested ones included) built with ``stateful=True``: each
    call starts from the state the previous one left."""
    layers, found = list(getattr(model, "layers", None) or []), []
    while layers:
        layer = layers.pop(0)
        if hasattr(layer, "layers"):  # a nested model, whose ``stateful`` says whether any of its layers is
            layers += list(layer.layers)
        elif getattr(layer, "stateful", False) is True:
            found.append(layer)
    return found


def as_array(output) -> np.ndarray:
    """An output as a numpy array. Keras on torch gives torch tensors that track gradients (its
    weights are parameters), which numpy refuses until they are detached (and on the CPU)."""
    if hasattr(output, "detach"):  # a torch tensor
        output = output.detach().cpu()
    return np.asarray(output)


class SavedModelReference(Reference):
    """TensorFlow running a SavedModel's ``serving_default`` signature. It knows nothing of its
    layers: the ONNX model's graph says how to feed it."""

    def __init__(self, path: str, onnx_output_names: list):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
        try:
            self.function = tf.saved_model.load(path).signatures["serving_default"]
        except KeyError as error:
            raise SourceError(f"{path}: the SavedModel has no serving_default signature") from error
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            raise SourceError(f"{path}: TensorFlow could not load it ({first_line(error)})") from error
        self.tf_specs = [tf.TensorSpec(spec.shape, spec.dtype, name=name)
                         for name, spec in self.function.structured_input_signature[1].items()]
        super().__init__(path, self.tf_specs)
        self.output_names = onnx_output_names

    def run(self, inputs: list) -> list:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        outputs = self.function(**{spec.name: tf.constant(x, spec.dtype) for spec, x in zip(self.tf_specs, inputs)})
        names = self.output_names if set(self.output_names) <= set(outputs) else sorted(outputs)
        return [np.asarray(outputs[name]) for name in names]


class OnnxReference(Reference):
    """An ONNX model on onnxruntime's CPU: its graph inputs (names, dtypes, fixed sizes), its
    outputs by the ONNX model's names where it has them all (else in its own order)."""

    def __init__(self, proto, label: str, onnx_output_names: list):
        from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
        if has_guard(proto):
            raise SourceError(f"{label}: the reference carries the post-padding guard (a mask_mode=\"post\" model) "
                              "and fails on other masks: give the file it was rewritten from first, the model "
                              "to check second")
        available, why = runtime_available("onnxruntime")
        if not available:
            raise SourceError(f"{label}: an ONNX reference runs on onnxruntime: {why}")
        try:
            self.session = onnxruntime_session(proto)
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except  (any onnxruntime error: one line)
            raise SourceError(f"{label}: onnxruntime cannot load the reference ({first_line(error)})") from error
        self.states = state_inputs(proto)  # a streaming reference: fed zero states, as the ONNX model is
        super().__init__(label, input_specs(proto))
        self.proto = proto
        returned = {state_output(name) for name in self.states}
        own = [output.name for output in proto.graph.output if output.name not in returned]
        self.output_names = onnx_output_names if set(onnx_output_names) <= set(own) else own

    def run(self, inputs: list) -> list:
        feeds = {spec.name: np.asarray(x).astype(spec.dtype) for spec, x in zip(self.specs, inputs)}
        rows = len(inputs[0]) if inputs else 1
        return self.session.run(self.output_names, {**feeds, **zero_states(self.states, rows)})

    def vocabulary(self, index: int, direct: bool = False) -> Optional[int]:  # pylint: disable=unused-argument
        return onnx_vocabulary(self.proto, self.specs[index].name)

    def mask_value(self, index: int, sole_features: bool) -> Optional[float]:
        value = onnx_mask_value(self.proto, self.specs[index].name)
        return 0.0 if value is None else value  # what Keras's Masking reads as padding by default


class LiteRTReference(Reference):
    """LiteRT's interpreter running a ``.tflite`` file (``ai_edge_litert``'s where installed, else
    TensorFlow's), on the shapes the file was made for. It knows nothing of its layers: the ONNX
    model's graph says how to feed it. Its outputs are taken by the ONNX model's names (tf2onnx keeps
    LiteRT's), else in its own order."""

    def __init__(self, path: str, onnx_output_names: list):
        from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
        try:
            self.interpreter = litert_interpreter(path)
            self.interpreter.allocate_tensors()
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except  (LiteRT raises several kinds)
            raise SourceError(f"{path}: LiteRT could not load it ({first_line(error)})") from error
        self.inputs = self.interpreter.get_input_details()
        super().__init__(path, [InputSpec(d["name"], np.dtype(d["dtype"]), tuple(int(n) for n in d["shape"]))
                                for d in self.inputs])
        outputs = {d["name"]: d["index"] for d in self.interpreter.get_output_details()}
        self.outputs = [outputs[name] for name in onnx_output_names] if set(onnx_output_names) <= set(outputs) \
            else list(outputs.values())

    def run(self, inputs: list) -> list:
        self.interpreter.reset_all_variables()  # from zeros, not from the states the previous batch left
        for detail, value in zip(self.inputs, inputs):
            self.interpreter.set_tensor(detail["index"], np.asarray(value).astype(detail["dtype"]))
        self.interpreter.invoke()
        return [np.array(self.interpreter.get_tensor(index)) for index in self.outputs]

    @property
    def notes(self) -> list:
        return ["LiteRT's variable tensors (a fused LSTM's states, which LiteRT carries from one run to the next) "
                "are reset before each batch, so that it starts from zeros as Keras does"]


def litert_interpreter(path: str):
    """A LiteRT interpreter of the file at ``path``: ``ai_edge_litert``'s where installed, else
    TensorFlow's (whose deprecation warning, which names the other, is not shown)."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
    except ImportError:
        import warnings  # pylint: disable=import-outside-toplevel
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return tf.lite.Interpreter(model_path=path)
    return Interpreter(model_path=path)


def load_reference(model, onnx_output_names: list, custom_objects: Optional[dict] = None,
                   onnx_inputs: Optional[list] = None) -> Reference:
    """The :class:`Reference` for ``model``: a Keras model object or file (loaded with
    ``custom_objects``), a SavedModel directory, or an ONNX model (a path ending in ``.onnx``, or
    an ``onnx.ModelProto``). ``onnx_inputs`` (:class:`.InputSpec`): the checked model's inputs, a
    Keras model's where Keras did not record all of them (a subclassed ``call(inputs, states)``)."""
    from . import keras_source  # pylint: disable=import-outside-toplevel
    if _is_model_proto(model):
        return OnnxReference(model, "the reference ONNX model", onnx_output_names)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.lower().endswith(ONNX_FILES):
            return OnnxReference(load_onnx(path)[0], path, onnx_output_names)
        if path.lower().endswith(LITERT_FILES) and os.path.isfile(path):
            return LiteRTReference(path, onnx_output_names)
        if keras_source.is_saved_model(path):
            return SavedModelReference(path, onnx_output_names)
        if os.path.isfile(path) and not path.lower().endswith(keras_source.KERAS_FILES):
            raise keras_source.SourceError(f"{path}: not a reference model: a Keras file "
                                           f"({', '.join(keras_source.KERAS_FILES)}), a SavedModel directory, "
                                           "a LiteRT file (.tflite) or an ONNX file (.onnx)")
        return KerasReference(keras_source.load(path, custom_objects), path, onnx_inputs)
    if not keras_source.is_keras_model(model):
        raise TypeError(f"expected a Keras model, an onnx.ModelProto or a path, not {type(model).__name__}")
    return KerasReference(model, f"Keras model '{getattr(model, 'name', type(model).__name__)}'", onnx_inputs)


def _is_model_proto(model) -> bool:
    import onnx  # pylint: disable=import-outside-toplevel
    return isinstance(model, onnx.ModelProto)


def load_onnx(onnx_model) -> tuple:
    """(the ModelProto, a label for it) from a path or a ModelProto."""
    import onnx  # pylint: disable=import-outside-toplevel
    from .keras_source import SourceError  # pylint: disable=import-outside-toplevel
    if isinstance(onnx_model, onnx.ModelProto):
        return onnx_model, "the ONNX model"
    path = os.fspath(onnx_model)
    if not os.path.isfile(path):
        raise SourceError(f"{path}: no such file")
    try:
        proto = onnx.load(path)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except  (protobuf raises several kinds)
        raise SourceError(f"{path}: not an ONNX model ({first_line(error)})") from error
    if not proto.graph.node or not proto.opset_import:
        raise SourceError(f"{path}: not an ONNX model (no graph)")
    return proto, path


def has_guard(proto) -> bool:
    """Does the model carry the post-padding guard (mask_mode="post")?"""
    from .plan.masks import GUARD_MESSAGE  # pylint: disable=import-outside-toplevel  (imports tf2onnx)
    return any(GUARD_MESSAGE in node.name for node in walk_nodes(proto.graph, segments=True))
