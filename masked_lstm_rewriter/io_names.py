# SPDX-License-Identifier: Apache-2.0
"""What a converted model calls its inputs, outputs and dimensions: the same from every front door.

* Inputs and outputs of a Keras model are named as Keras names them, as tf2onnx's ``from_keras``
  names them (``feats`` -> ``frames``, ``summary``), whether the model is an object or a ``.keras``
  / ``.h5`` file, given to :func:`..conversion.convert` or to the command line. tf2onnx's own
  ``--keras`` loader names them after the traced graph's tensors instead (``feats:0`` ->
  ``Identity:0``): the command line replaces it by :func:`keras_graph` (:func:`tf2onnx_main_named`).
  A SavedModel's are the names tf2onnx gives it (its serving signature's), on every front door.
* Dimensions: tf2onnx calls every dynamic one ``unk__N``, N counting over the process, so the same
  model gets other names in another run. :func:`name_dimensions` names them instead: ``batch`` for
  axis 0; ``time`` for the time axis (axis 1 of an input of rank 2 or 3) when the model has one
  such input, or when it combines them all step by step (features and their mask), else
  ``<input>_time`` (sequences that may differ in length, as an encoder's and a decoder's; the
  inputs proven equal share the first one's name); ``<input>_dim<axis>`` for any other axis. An
  output's dynamic axis takes the name of the input axis ONNX shape inference proves it equal to
  (the time axis of a sequence output is ``time``), else ``batch`` for axis 0 (a Keras model's
  outputs are per row) and ``<output>_dim<axis>`` for the others. Fixed sizes stay as they are.
"""

from __future__ import annotations

import contextlib
import logging
from typing import NamedTuple

import onnx

logger = logging.getLogger("masked_lstm_rewriter")

BATCH, TIME = "batch", "time"
SEQUENCE_RANKS = (2, 3)  # [batch, time] ids or a mask, [batch, time, features]
# ops whose inputs broadcast against each other: the sizes they line up must be equal
ELEMENTWISE = frozenset(("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "And", "Or", "Xor",
                         "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"))
# initializers of more elements than this are left out of the copy shape inference reads (their
# values do not make shapes; small integer ones, the shapes Reshape takes, do)
INFERENCE_VALUE_LIMIT = 64


class KerasGraph(NamedTuple):
    """A Keras model traced for tf2onnx: its frozen graph, the tensors tf2onnx converts, the names
    the ONNX model gives them, and the lookup tables the graph initializes."""

    graph_def: object
    inputs: list
    outputs: list
    renames: dict
    tables: dict


def keras_graph(model, input_signature) -> KerasGraph:
    """``model`` traced with ``input_signature`` as tf2onnx's ``from_keras`` traces it (its trace,
    while :func:`..plugin.enable` is on, the plugin's fixes of it), with its input and output names."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf2onnx import convert, tf_loader  # pylint: disable=import-outside-toplevel
    duplicates = convert._rename_duplicate_keras_model_names(model)  # pylint: disable=protected-access
    try:
        function = convert._get_concrete_function(model, input_signature)  # pylint: disable=protected-access
        inputs, outputs, renames = _keras_names(model, function)
    finally:
        if duplicates is not None:
            convert._set_output_names(model, duplicates)  # pylint: disable=protected-access
    with tf.device("/cpu:0"):
        graph_def, tables = tf_loader.from_trackable(model, function, inputs, outputs, False)  # no large_model
    return KerasGraph(graph_def, inputs, outputs, renames, tables)


def _keras_names(model, function) -> tuple:
    """(input tensors, output tensors in the model's order, tensor -> Keras name), as ``from_keras`` has them."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tf2onnx import convert  # pylint: disable=import-outside-toplevel
    graph = function.graph
    if hasattr(graph, "_captures"):  # the resources and constants the function captured are no inputs
        captured = {tensor.name for _, tensor in graph._captures.values()}  # pylint: disable=protected-access
    else:
        captured = {tensor.name for tensor in graph.function_captures.by_val_internal.values()}
    inputs = [tensor.name for tensor in function.inputs if tensor.name not in captured]
    outputs = [tensor.name for tensor in function.outputs if tensor.dtype != tf.dtypes.resource]
    renames = convert.tensor_names_from_structed(function, inputs, outputs)
    tensor_of = {name: tensor for tensor, name in renames.items()}
    keras_outputs = convert._get_output_names(model)  # pylint: disable=protected-access
    if keras_outputs:
        outputs = [tensor_of[name] for name in keras_outputs]
    elif isinstance(function.structured_outputs, dict):
        outputs = [tensor_of[name] for name in function.structured_outputs]
    return inputs, outputs, renames


@contextlib.contextmanager
def tf2onnx_main_named():
    """Within the block, tf2onnx's ``main`` (the command line's conversion) loads and traces a Keras
    file as :func:`..conversion.convert` does (:func:`keras_graph`, names included), and names the
    dimensions of a Keras file's or a SavedModel's model (:func:`name_dimensions`; a GraphDef's,
    a TFLite model's stay tf2onnx's). To be entered within :func:`..plugin.enable`, which
    replaces the same loader: the plugin's is back on exit."""
    from tf2onnx import convert, tf_loader  # pylint: disable=import-outside-toplevel
    loaded: list = []  # the Keras file's trace (None: a SavedModel), for the conversion that follows
    originals = tf_loader.from_keras, tf_loader.from_saved_model, convert._convert_common  # pylint: disable=protected-access

    def from_keras(model_path, input_names, output_names):  # pylint: disable=unused-argument
        loaded.append(_trace_keras_file(model_path))  # every input and output, as the plugin's loader
        return loaded[-1].graph_def, loaded[-1].inputs, loaded[-1].outputs

    def from_saved_model(*args, **kwargs):
        loaded.append(None)
        return originals[1](*args, **kwargs)

    def named_convert_common(frozen_graph, *args, output_path=None, **kwargs):
        traced = loaded[-1] if loaded else None
        if traced is not None:  # the Keras names first: --rename-inputs and --rename-outputs still win
            kwargs["tensors_to_rename"] = {**traced.renames, **(kwargs.get("tensors_to_rename") or {})}
            kwargs["initialized_tables"] = kwargs.get("initialized_tables") or traced.tables
        onnx_model, storage = originals[2](frozen_graph, *args, **kwargs)
        if loaded:
            name_dimensions(onnx_model)
        if output_path:
            _save(onnx_model, output_path)
        return onnx_model, storage

    tf_loader.from_keras, tf_loader.from_saved_model, convert._convert_common = \
        from_keras, from_saved_model, named_convert_common  # pylint: disable=protected-access
    try:
        yield
    finally:
        tf_loader.from_keras, tf_loader.from_saved_model, convert._convert_common = originals  # pylint: disable=protected-access


def _trace_keras_file(path: str) -> KerasGraph:
    """The Keras model in ``path``, loaded and traced as :func:`..conversion.convert` does."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from . import keras_source  # pylint: disable=import-outside-toplevel
    with tf.device("/cpu:0"):
        model = keras_source.load(path)
        return keras_graph(model, keras_source.input_signature(model))


def _save(onnx_model, path: str) -> None:
    """Write the model as tf2onnx's conversion does (through its function, which the command line watches;
    its large model format is refused before: :func:`.dependencies.check_large_model`)."""
    from tf2onnx import utils  # pylint: disable=import-outside-toplevel
    utils.save_protobuf(path, onnx_model)


def name_dimensions(onnx_model) -> None:
    """Name the dynamic dimensions of ``onnx_model``'s inputs and outputs (see the module docstring)."""
    graph = onnx_model.graph
    initialized = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initialized]
    for value, names in zip(inputs, _input_dimension_names(inputs)):  # one time axis per input, first
        _set_names(value, names)
    given = [name for value in inputs for name in _dim_params(value) if name]
    inferred = _inferred(onnx_model)
    final = _time_names([name for name in given if name.endswith(f"_{TIME}")], _joined(inferred, set(given)))
    if any(final[name] != name for name in final):  # inferred again: two names met make a new one
        for value in inputs:
            _set_names(value, [final.get(name, name) for name in _dim_params(value)])
        given = [name for value in inputs for name in _dim_params(value) if name]
        inferred = _inferred(onnx_model)
    found = {value.name: _dim_params(value) for value in inferred.graph.output} if inferred is not None else {}
    for value in graph.output:
        names = [name if name in given else None for name in found.get(value.name, [])]
        _set_names(value, [names[axis] if axis < len(names) and names[axis] else
                           BATCH if axis == 0 else f"{value.name}_dim{axis}" for axis in range(_rank(value))])


def _input_dimension_names(inputs: list) -> list:
    """For each input, the name of each of its axes (used where the axis is dynamic); every time
    axis ``<input>_time`` for now (:func:`_time_names` decides)."""
    return [[BATCH if axis == 0 else f"{value.name}_{TIME}" if axis == 1 and _is_sequence(value) else
             f"{value.name}_dim{axis}" for axis in range(_rank(value))] for value in inputs]


def _is_sequence(value) -> bool:
    return _rank(value) in SEQUENCE_RANKS and _dynamic(value, 1)


def _time_names(names: list, joined: dict) -> dict:
    """{input time axis name: its final name}: ``time`` when every one is proven the same length
    (a sole sequence input, features and their mask), else each group of those proven equal by
    the name of its first."""
    groups = {}
    for name in names:
        groups.setdefault(_root(joined, name), []).append(name)
    if len(groups) == 1:
        return {name: TIME for name in names}
    return {name: group[0] for group in groups.values() for name in group}


def _inferred(onnx_model):
    """``onnx_model``'s shapes as ONNX shape inference gives them from its inputs' (a copy
    without weights: :func:`_shapes_only`), or None when inference fails (the names then fall
    back on the others)."""
    try:
        return onnx.shape_inference.infer_shapes(_shapes_only(onnx_model), data_prop=True)
    except Exception as error:  # pylint: disable=broad-except  (any failure only costs the inferred names)
        logger.debug("dimension names not inferred: %s: %s", type(error).__name__, error)
        return None


def _joined(inferred, given: set) -> dict:
    """Union-find parents of the input dimension names ``given`` that an elementwise node of the
    inferred model lines up (the same axis of its broadcast inputs: the model needs them equal)."""
    parents: dict = {}
    if inferred is None:
        return parents
    graph = inferred.graph
    shapes = {value.name: _dim_params(value) for value in list(graph.input) + list(graph.value_info)}
    for node in graph.node:
        if node.op_type not in ELEMENTWISE:
            continue
        operands = [shapes.get(name) or [] for name in node.input if name]
        for axis in range(1, max(map(len, operands), default=0) + 1):  # broadcasting lines up the last axes
            names = [dims[-axis] for dims in operands if len(dims) >= axis and dims[-axis] in given]
            for name in names[1:]:
                parents[_root(parents, name)] = _root(parents, names[0])
    return parents


def _root(parents: dict, name: str) -> str:
    while parents.get(name, name) != name:
        name = parents[name]
    return name


def _shapes_only(onnx_model):
    """A copy of ``onnx_model`` for shape inference: without its large initializers (declared as
    inputs of their shape instead), and with the dynamic dimensions of its outputs and its other
    values unnamed, so that only the inputs' names propagate."""
    source = onnx_model.graph
    graph = onnx.GraphProto(name=source.name, node=source.node, input=source.input, output=source.output,
                            sparse_initializer=source.sparse_initializer)
    for tensor in source.initializer:
        if _elements(tensor) <= INFERENCE_VALUE_LIMIT and tensor.data_location != onnx.TensorProto.EXTERNAL:
            graph.initializer.append(tensor)
        elif not any(value.name == tensor.name for value in source.input):
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    for value in graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    return onnx.ModelProto(ir_version=onnx_model.ir_version, opset_import=onnx_model.opset_import,
                           functions=onnx_model.functions, graph=graph)


def _elements(tensor) -> int:
    count = 1
    for size in tensor.dims:
        count *= size
    return count


def _rank(value) -> int:
    tensor = value.type.tensor_type
    return len(tensor.shape.dim) if tensor.HasField("shape") else 0


def _dynamic(value, axis: int) -> bool:
    return not value.type.tensor_type.shape.dim[axis].HasField("dim_value")


def _dim_params(value) -> list:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return []
    return [None if dim.HasField("dim_value") else dim.dim_param or None for dim in tensor.shape.dim]


def _set_names(value, names: list) -> None:
    """Name each dynamic axis of ``value`` (a fixed size stays)."""
    for dim, name in zip(value.type.tensor_type.shape.dim, names):
        if not dim.HasField("dim_value"):
            dim.dim_param = name
