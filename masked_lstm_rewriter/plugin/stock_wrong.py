# SPDX-License-Identifier: Apache-2.0
"""What stock tf2onnx converts wrongly in a graph the plugin sees, said as the conversion's problems.

Before opset 11, ONNX's ``Equal`` takes no floats, and tf2onnx casts both sides of a float
``Equal`` or ``NotEqual`` to int32 first: every value between -1 and 1 then equals 0, and 2.5
equals 2. Keras's ``Masking`` layer compares its features with the mask value so, and masks the
steps whose features all have the mask value's integer part. The plugin leaves the layers after it
as stock tf2onnx makes them at that opset, so the model would compute other values than Keras without a
word; instead the conversion fails (or, kept on request, says it is known wrong).
"""

from __future__ import annotations

from onnx import TensorProto

FLOAT_EQUALITY = 11  # the first opset whose Equal takes floats
_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def float_equality(graph, ops) -> list:
    """One sentence per mask made as ``Masking`` makes it (``Any`` of a float ``Equal``/``NotEqual``)
    among ``ops`` that tf2onnx will convert through int32 (before opset 11), naming the comparison.
    A comparison not reduced so is left out: an ``Embedding`` fed float ids (a ``Sequential`` model
    without an ``Input``) compares whole numbers, which int32 keeps."""
    if graph.opset >= FLOAT_EQUALITY:
        return []
    return [f"opset {graph.opset}: tf2onnx compares floats as int32 before opset {FLOAT_EQUALITY} (ONNX's Equal "
            f"has no float type there), so '{node.name}' compares only the integer parts (0.5 equals 0: a "
            f"Masking layer masks such steps); convert with opset {FLOAT_EQUALITY} or later"
            for node in ops if node.type in ("Equal", "NotEqual") and graph.get_dtype(node.input[0]) in _FLOATS
            and any(consumer.type == "Any" for consumer in graph.find_output_consumers(node.output[0]))]
