# SPDX-License-Identifier: Apache-2.0
"""The names :func:`masked_lstm_rewriter.io_names.name_dimensions` gives the dynamic dimensions of a
converted model's inputs and outputs: ``batch``, ``time`` (or ``<input>_time`` for sequences not
proven the same length), ``<name>_dim<axis>``, never tf2onnx's ``unk__N``; fixed sizes stay. No Keras."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter.io_names import name_dimensions

UNKNOWN = None  # a dynamic dimension as tf2onnx writes it: unk__N


def value(name: str, elem: int, dims: list):
    """A value whose dynamic dimensions are named as tf2onnx names them."""
    counter = iter(range(100, 200))
    return helper.make_tensor_value_info(name, elem, [f"unk__{next(counter)}" if d is UNKNOWN else d for d in dims])


def model(nodes: list, inputs: list, outputs: list, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def dims(values) -> list:
    return [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values]


def masked_features(feature_dims=(UNKNOWN, UNKNOWN, 3)):
    """feats [B, T, 3], mask [B, T] bool, speaker [B, 2]: the features zeroed where masked (a Where
    joins the two time axes), a Dense of the speaker, and a reshape the size of which shape
    inference cannot tell."""
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    weights = numpy_helper.from_array(np.ones((2, 5), np.float32), "weights")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    flat = numpy_helper.from_array(np.array([-1], np.int64), "flat")
    nodes = [helper.make_node("Unsqueeze", ["mask", "axes"], ["mask3"]),
             helper.make_node("Where", ["mask3", "feats", "zero"], ["masked"]),
             helper.make_node("MatMul", ["speaker", "weights"], ["summary"]),
             helper.make_node("Reshape", ["masked", "flat"], ["flat_out"])]
    inputs = [value("feats", TensorProto.FLOAT, list(feature_dims)), value("mask", TensorProto.BOOL, [UNKNOWN, UNKNOWN]),
              value("speaker", TensorProto.FLOAT, [UNKNOWN, 2])]
    outputs = [value("masked", TensorProto.FLOAT, [UNKNOWN, UNKNOWN, 3]), value("summary", TensorProto.FLOAT, [UNKNOWN, 5]),
               value("flat_out", TensorProto.FLOAT, [UNKNOWN])]
    return model(nodes, inputs, outputs, [zero, weights, axes, flat])


def test_features_and_their_mask_share_batch_and_time_and_so_do_the_outputs():
    onnx_model = masked_features()
    name_dimensions(onnx_model)
    assert dims(onnx_model.graph.input) == [["batch", "time", 3], ["batch", "time"], ["batch", 2]]
    assert dims(onnx_model.graph.output) == [["batch", "time", 3], ["batch", 5], ["batch"]]  # a flat axis 0: batch
    onnx.checker.check_model(onnx_model, full_check=True)


def test_fixed_sizes_stay():
    onnx_model = masked_features((4, 7, 3))
    for value_info, sizes in zip(list(onnx_model.graph.input)[1:] + list(onnx_model.graph.output)[:2],
                                 ([4, 7], [4, 2], [4, 7, 3], [4, 5])):
        for dim, size in zip(value_info.type.tensor_type.shape.dim, sizes):
            dim.dim_value = size
    name_dimensions(onnx_model)
    assert dims(onnx_model.graph.input) == [[4, 7, 3], [4, 7], [4, 2]]
    assert dims(onnx_model.graph.output) == [[4, 7, 3], [4, 5], ["batch"]]


def test_sequences_never_combined_keep_their_own_time_axis():
    """An encoder's and a decoder's steps may differ: one name would tell runtimes they cannot."""
    nodes = [helper.make_node("Identity", ["source"], ["source_out"]), helper.make_node("Identity", ["target"], ["decoded"])]
    onnx_model = model(nodes, [value("source", TensorProto.INT32, [UNKNOWN, UNKNOWN]),
                               value("target", TensorProto.INT32, [UNKNOWN, UNKNOWN])],
                       [value("source_out", TensorProto.INT32, [UNKNOWN, UNKNOWN]),
                        value("decoded", TensorProto.INT32, [UNKNOWN, UNKNOWN])])
    name_dimensions(onnx_model)
    assert dims(onnx_model.graph.input) == [["batch", "source_time"], ["batch", "target_time"]]
    assert dims(onnx_model.graph.output) == [["batch", "source_time"], ["batch", "target_time"]]


def test_other_axes_are_named_after_their_input():
    """An image's height and width."""
    nodes = [helper.make_node("Relu", ["image"], ["relu"])]
    onnx_model = model(nodes, [value("image", TensorProto.FLOAT, [UNKNOWN, UNKNOWN, UNKNOWN, 3])],
                       [value("relu", TensorProto.FLOAT, [UNKNOWN, UNKNOWN, UNKNOWN, 3])])
    name_dimensions(onnx_model)
    assert dims(onnx_model.graph.input) == [["batch", "image_dim1", "image_dim2", 3]]
    assert dims(onnx_model.graph.output) == [["batch", "image_dim1", "image_dim2", 3]]


def test_outputs_shape_inference_cannot_follow_are_named_after_themselves():
    """A custom op's output (here, inference fails on the whole model): batch, then its own names."""
    nodes = [helper.make_node("Custom", ["tokens"], ["custom"], domain="x")]
    onnx_model = model(nodes, [value("tokens", TensorProto.INT32, [UNKNOWN, UNKNOWN])],
                       [value("custom", TensorProto.FLOAT, [UNKNOWN, UNKNOWN, 4])])
    name_dimensions(onnx_model)
    assert dims(onnx_model.graph.input) == [["batch", "time"]]
    assert dims(onnx_model.graph.output) == [["batch", "custom_dim1", 4]]
