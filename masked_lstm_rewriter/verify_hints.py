# SPDX-License-Identifier: Apache-2.0
"""What ``verify`` knows of what reads each input of a model (:mod:`.verify_batches` feeds it by
that): from a Keras reference's layers (``Embedding``, ``Masking``), or from the ONNX model's
graph (the table an id is looked up in, the constants an input is compared with)."""

from __future__ import annotations

from typing import Optional

import numpy as np


class InputHints:
    """What a reference knows of the layers reading each of its inputs. This one knows nothing (a
    SavedModel): the ONNX model's graph is read instead."""

    def vocabulary(self, index: int, direct: bool = False) -> Optional[int]:  # pylint: disable=unused-argument
        """Token ids of input ``index`` are valid below this; None: unknown. ``direct``: only from a
        layer that reads the input itself (else also the model's smallest vocabulary)."""
        return None

    def mask_value(self, index: int, sole_features: bool) -> Optional[float]:  # pylint: disable=unused-argument
        """What features input ``index`` holds at padded steps; None: random there too."""
        return None


class KerasHints(InputHints):
    """A Keras model's ``Embedding`` and ``Masking`` layers."""

    def __init__(self, model):
        self.model = model

    def vocabulary(self, index: int, direct: bool = False) -> Optional[int]:
        return keras_vocabulary(self.model, index, direct)

    def mask_value(self, index: int, sole_features: bool) -> Optional[float]:
        return keras_mask_value(self.model, index, sole_features)


def keras_vocabulary(model, index: int, direct_only: bool = False) -> Optional[int]:
    """The smallest ``input_dim`` of the Embeddings that read input ``index``, or (unless
    ``direct_only``) of all the model's Embeddings when none reads it directly (ids below it are
    valid for each)."""
    direct, every = _layers_of(model, index, "Embedding")
    sizes = [layer.input_dim for layer in (direct if direct or direct_only else every)]
    return min(sizes) if sizes else None


def keras_mask_value(model, index: int, sole_features: bool) -> Optional[float]:
    """The ``mask_value`` of the Masking layer that reads input ``index`` (or, for a model with
    one features input, of its first Masking layer), or None."""
    direct, every = _layers_of(model, index, "Masking")
    chosen = direct or (every if sole_features else [])
    return float(chosen[0].mask_value) if chosen else None


def _layers_of(model, index: int, class_name: str) -> tuple:
    """(the layers of ``class_name`` reading input ``index`` directly, all of them in ``model``)."""
    if model is None:
        return [], []
    every = [layer for layer in _flat_layers(model)
             if any(cls.__name__ == class_name for cls in type(layer).__mro__)]
    inputs = list(getattr(model, "inputs", None) or [])
    source = inputs[index] if index < len(inputs) else None
    return [layer for layer in every if source is not None and _reads(layer, source)], every


def _flat_layers(model):
    """Every layer of ``model`` and of the models nested in it."""
    for layer in getattr(model, "layers", None) or []:
        yield layer
        if hasattr(layer, "layers"):
            yield from _flat_layers(layer)


def _reads(layer, tensor) -> bool:
    """Is ``tensor`` (a symbolic model input) an input of ``layer``?"""
    try:
        inputs = layer.input
    except (AttributeError, ValueError, RuntimeError):  # never called, or called more than once
        return False
    return any(x is tensor for x in (inputs if isinstance(inputs, (list, tuple)) else [inputs]))


def onnx_vocabulary(onnx_model, input_name: str) -> Optional[int]:
    """The smallest row count of a constant [rows, dim] table a ``Gather`` looks up with indices
    computed from ``input_name`` (an embedding), or None. A float input must be cast to integers
    first (Keras's Embedding casts float ids): a float state is not looked up."""
    graph = onnx_model.graph
    tables = {name: tensor.dims for name, tensor in _constants(graph).items() if len(tensor.dims) == 2}
    computed = set()
    for start in _integer_ids(graph, input_name):
        computed |= _computed_from(graph, start)
    sizes = [tables[node.input[0]][0] for node in graph.node
             if node.op_type == "Gather" and node.input[0] in tables and node.input[1] in computed]
    return min(sizes) if sizes else None


def onnx_mask_value(onnx_model, input_name: str) -> Optional[float]:
    """The scalar constant ``input_name`` is compared with by an ``Equal`` (a Masking layer), or None."""
    compared = _compared_with(onnx_model.graph, [input_name])
    return compared[0] if compared else None


def onnx_padding_id(onnx_model, input_name: str) -> Optional[int]:
    """The padding id of token ids ``input_name`` where it is not 0: the one constant the ids are
    compared with by an ``Equal`` (``ids != 1``), never 0 (``mask_zero``); else None."""
    compared = set(_compared_with(onnx_model.graph, _integer_ids(onnx_model.graph, input_name)))
    return int(compared.pop()) if len(compared) == 1 and 0 not in compared else None


def _compared_with(graph, tensors: list) -> list:
    """The scalar constants ``tensors`` are compared with by ``Equal`` nodes, in the graph's order."""
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
    values, found = _constants(graph), []
    for node in graph.node:
        for tensor in set(tensors) & set(node.input) if node.op_type == "Equal" else ():
            other = node.input[1] if node.input[0] == tensor else node.input[0]
            if other in values and np.prod(values[other].dims, dtype=np.int64) == 1:
                found.append(float(numpy_helper.to_array(values[other]).reshape(())))
    return found


def _constants(graph) -> dict:
    """Tensor name -> TensorProto, for the initializers and Constant nodes of ``graph``."""
    values = {init.name: init for init in graph.initializer}
    values.update({node.output[0]: attr.t for node in graph.node if node.op_type == "Constant"
                   for attr in node.attribute if attr.name == "value"})
    return values


def _integer_ids(graph, source: str) -> list:
    """``source`` if it is not a float input of ``graph``, else the outputs of its ``Cast``\\ s to integers."""
    from onnx import TensorProto  # pylint: disable=import-outside-toplevel
    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    if not any(value.name == source and value.type.tensor_type.elem_type in floats for value in graph.input):
        return [source]
    return [node.output[0] for node in graph.node if node.op_type == "Cast" and node.input[0] == source
            and any(attr.name == "to" and attr.i not in floats | {TensorProto.BOOL} for attr in node.attribute)]


def _computed_from(graph, source: str, depth: int = 8) -> set:
    """The tensors of ``graph`` computed from ``source`` within ``depth`` nodes (and ``source``)."""
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    reached, frontier = {source}, {source}
    for _ in range(depth):
        frontier = {out for name in frontier for node in consumers.get(name, []) for out in node.output} - reached
        reached |= frontier
    return reached
