# SPDX-License-Identifier: Apache-2.0
"""Read an ONNX model (a path or a ``ModelProto``, its tensors inline or in external files, over
2 GB included) into tf2onnx's graph, which the pipeline works on; write the rewritten one back."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
from onnx import helper, shape_inference
from onnx.external_data_helper import set_external_data
from tf2onnx import utils
from tf2onnx.graph import GraphUtil

logger = logging.getLogger("masked_lstm_rewriter")

PROTOBUF_LIMIT = 2 ** 31 - 1   # bytes: a larger model is saved with its tensors in a file beside it
HUGE_TENSOR = 2 ** 31 - 1      # bytes: a tensor protobuf cannot write alone (tf2onnx's graph cannot hold it)
_LARGE = 1 << 20               # bytes: initializers left out of shape inference (their shapes are enough)
INLINE_BYTES = 1024            # tensors up to this size stay in the model file when the rest go beside it
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")


class ModelError(ValueError):
    """The model cannot be read: a one-line reason naming what the user gave."""


def load(model) -> onnx.ModelProto:
    """``model`` as a ``ModelProto`` with its tensors loaded (a path: its external data too)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"expected an onnx.ModelProto or the path of an .onnx file, not {type(model).__name__}")
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise ModelError(f"{path}: no such file")
    try:
        return onnx.load(path)
    except Exception as error:  # pylint: disable=broad-except  (protobuf's DecodeError, a missing data file...)
        raise ModelError(f"{path}: not an ONNX model ({type(error).__name__}: {error})") from None


def opset_of(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ModelError("the model imports no version of the default ONNX domain")
    return versions[0]


def to_graph(model: onnx.ModelProto):
    """tf2onnx's graph of ``model``, with the shapes and types ONNX's shape inference gives."""
    inferred = _with_inferred_shapes(model)
    _huge_tensors_as_inputs(inferred.graph)
    _constants_as_tensors(inferred.graph)
    for node in inferred.graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _outputs_computed_inside(subgraph)
    utils.initialize_name_counter(inferred)
    extra = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
    return GraphUtil.create_graph_from_onnx_graph(inferred.graph, opset_of(model), extra)


_CONSTANT_FIELDS = {"value_int": (onnx.TensorProto.INT64, False), "value_ints": (onnx.TensorProto.INT64, True),
                    "value_float": (onnx.TensorProto.FLOAT, False), "value_floats": (onnx.TensorProto.FLOAT, True)}


def _constants_as_tensors(graph) -> None:
    """Each ``Constant`` given as ``value_int(s)`` or ``value_float(s)`` (here and in the graphs nodes hold)
    given as the ``value`` tensor tf2onnx's graph reads."""
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name in _CONSTANT_FIELDS:
            attribute = node.attribute[0]
            dtype, many = _CONSTANT_FIELDS[attribute.name]
            values = onnx.helper.get_attribute_value(attribute)
            tensor = onnx.helper.make_tensor("value", dtype, [len(values)] if many else [],
                                             list(values) if many else [values])
            del node.attribute[:]
            node.attribute.append(onnx.helper.make_attribute("value", tensor))
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _constants_as_tensors(subgraph)


def _outputs_computed_inside(graph) -> None:
    """Give each output of a loop body or branch that is not computed in it (an input passed through,
    a tensor of the graph around it) an ``Identity`` of its own: tf2onnx's graph takes no other."""
    produced = {o for node in graph.node for o in node.output}
    for output in graph.output:
        if output.name not in produced:
            inner = f"{output.name}__passed"
            graph.node.append(onnx.helper.make_node("Identity", [output.name], [inner]))
            output.name = inner
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _outputs_computed_inside(subgraph)


def _with_inferred_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with inferred shapes, run on a copy without its large tensors' data (shape
    inference serializes the model, which protobuf cannot do past 2 GB), then given it back."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    large = set()
    for tensor in stripped.graph.initializer:
        if tensor_bytes(tensor) > _LARGE:
            large.add(tensor.name)
            for field in _DATA_FIELDS:
                tensor.ClearField(field)
    try:
        inferred = shape_inference.infer_shapes(stripped)
    except Exception as error:  # pylint: disable=broad-except  (shapes are an aid, not a need)
        logger.info("ONNX shape inference failed (%s); reading the model without it", error)
        inferred = stripped
    if large:
        originals = {t.name: t for t in model.graph.initializer if t.name in large and tensor_bytes(t) < HUGE_TENSOR}
        for tensor in inferred.graph.initializer:
            if tensor.name in originals:
                tensor.CopyFrom(originals[tensor.name])
    return inferred


def _huge_tensors_as_inputs(graph: onnx.GraphProto) -> None:
    """Each initializer past 2 GB (an embedding table, not a recurrent layer's weights) as a graph
    input of its type and shape: tf2onnx's graph cannot hold it (it makes each initializer a node
    attribute, which protobuf cannot write past 2 GB), and no reader needs its values. A layer that
    would read it finds no constant and stays a Loop; the model keeps the initializer
    (:mod:`.splice` changes only what the rewrite changed)."""
    huge = [t for t in graph.initializer if tensor_bytes(t) >= HUGE_TENSOR]
    for tensor in huge:
        graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    kept = [t for t in graph.initializer if tensor_bytes(t) < HUGE_TENSOR]
    if huge:
        del graph.initializer[:]
        graph.initializer.extend(kept)


def save(model: onnx.ModelProto, path: str, final_path: str) -> None:
    """Write ``model`` to ``path`` (to become ``final_path``); past protobuf's 2 GB, its tensors go to
    ``<final name>.data`` beside it (``model`` then refers to that file for them)."""
    if _needs_external_data(model):
        # small tensors stay inline: runtimes read an Unsqueeze's axes or a Reshape's shape while
        # loading the model, and onnxruntime refuses to read them from the data file then; so do the
        # tensors of subgraphs (the schedule's If branches hold only small constants of that kind)
        data = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(final_path) + ".data")
        for tensor in model.graph.initializer:
            if tensor.HasField("raw_data") and len(tensor.raw_data) > INLINE_BYTES:
                set_external_data(tensor, os.path.basename(data))
        onnx.save_model(model, path)
        if os.path.exists(data):  # not written when every tensor is small
            os.chmod(data, 0o666 & ~_umask())  # as an ordinary new file (onnx writes it 0600)
    else:
        onnx.save_model(model, path)


def _needs_external_data(model: onnx.ModelProto) -> bool:
    """Is ``model`` past what protobuf can write in one file? (``ByteSize()`` itself fails past 2 GB, so
    the initializers are measured first.)"""
    tensors = sum(tensor_bytes(t) for t in model.graph.initializer)
    return tensors >= PROTOBUF_LIMIT or model.ByteSize() >= PROTOBUF_LIMIT


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """The size of ``tensor``'s data, from its shape and type: ``ByteSize()`` fails on a tensor past 2 GB."""
    if tensor.data_type == onnx.TensorProto.STRING or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return tensor.ByteSize()
    count = int(np.prod(tensor.dims, dtype=np.int64)) if len(tensor.dims) else 1
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
