# SPDX-License-Identifier: Apache-2.0
"""What stock tf2onnx converts wrongly in a graph the plugin sees, said as the conversion's problems.

Before opset 11, ONNX's ``Equal`` takes no floats, and tf2onnx casts both sides of a float
``Equal`` or ``NotEqual`` to int32 first: every value between -1 and 1 then equals 0, and 2.5
equals 2. Keras's ``Masking`` layer compares its features with the mask value so, and masks the
steps whose features all have the mask value's integer part. The plugin leaves the layers after it
as stock tf2onnx makes them at that opset, so the model would compute other values than Keras without a
word; instead the conversion fails (or, kept on request, says it is known wrong).

tf2onnx makes each list write of a While loop a scan output of its ``Loop``, stacked in step order
whatever index the loop writes at: a loop that writes elsewhere (``tf.scan(reverse=True)``) gives its
values in another order. The conversion fails (or, kept on request, says it is known wrong).

tf2onnx makes a TensorFlow ``dynamic_rnn`` with ``sequence_length`` a native node with
``sequence_lens``, which OpenVINO ignores with dynamic shapes (it runs every step): a row shorter
than the longest gets other outputs and final states there. The plugin leaves such a node as stock
made it, and says so: a conversion for OpenVINO fails, one for any runtime warns. Such a node that
also starts from a given state returns zeros as a row of length 0's final state, where TensorFlow
returns that state: a warning too.
"""

from __future__ import annotations

import logging

from onnx import TensorProto

from tf2onnx.tf_loader import find_function

from ..cells import NATIVE_OPS
from ..graph import before_unsqueeze, is_increment, is_zeros, next_value, producer, skip_identity
from ..sources.tf_while import WHILE_OPS
from ..targets import ignoring_lengths

logger = logging.getLogger("masked_lstm_rewriter")
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


def writes_out_of_step(graph) -> list:
    """One sentence per While op of ``graph`` whose body writes a list at a computed index, neither a step
    counter nor a constant (``tf.scan(reverse=True)`` writes at ``n - 1 - i``): tf2onnx makes every such
    write a scan output of its Loop, stacked in step order whatever the index."""
    found = []
    for loop in graph.get_nodes():
        body = find_function(loop.get_attr_str("body")) if loop.type in WHILE_OPS else None
        write = next((node for node in body.get_nodes() if node.type == "TensorListSetItem"
                      and _computed_index(body, node.input[1])), None) if body is not None else None
        if write is not None:
            found.append(f"loop '{loop.name}' writes its outputs at a computed index ('{write.name}', as "
                         "tf.scan(reverse=True) does), and tf2onnx stacks them in step order whatever the index: "
                         "the ONNX model returns them in another order than TensorFlow's")
    return found


def _computed_index(body, index: str) -> bool:
    """Is ``index`` computed in the step, neither a loop variable the body advances by one nor a constant?"""
    index = skip_identity(body, index)
    if index in body.input_names:
        new = next_value(body, body.input_names.index(index))
        return new is None or not is_increment(producer(body, skip_identity(body, new)), index)
    node = producer(body, index)
    return node is not None and not node.is_const()


def lengths_ignored(graph, stock: set, target) -> list:
    """One sentence per native node stock tf2onnx made (``stock``: their names) that stops each row at its
    ``sequence_lens``, where a runtime of ``target`` runs every step instead: the problems of a conversion
    for that runtime; for any runtime (``target`` None), each a WARNING instead (the model is right elsewhere)."""
    titles = ignoring_lengths(target)
    found = [f"tf2onnx made '{node.name}' a native {node.type} that stops each row at its sequence length, which "
             f"{' and '.join(titles)} ignores with dynamic shapes (it runs every step): there, a row shorter than the "
             "longest gets other outputs and final states than TensorFlow's" for node in graph.get_nodes()
             if titles and node.name in stock and node.type in NATIVE_OPS and len(node.input) > 4 and node.input[4]
             and _dynamic(graph.get_shape(node.input[0]))]
    if target is not None:
        return found
    for problem in found:
        logger.warning("%s", problem)
    return []


def empty_rows_lose_their_state(graph, stock: set) -> None:
    """A WARNING per native node stock tf2onnx made (``stock``: their names) with sequence lengths, an
    initial state that is not zeros and its final states used: for a row of length 0 the runtimes return
    zeros (ONNX leaves it undefined), where TensorFlow returns the initial state."""
    for node in graph.get_nodes():
        if node.name not in stock or node.type not in NATIVE_OPS or len(node.input) < 6 or not node.input[4]:
            continue
        initial = [t for t in node.input[5:7] if t]
        used = any(graph.find_output_consumers(t) or t in graph.outputs for t in node.output[1:] if t)
        if used and not all(is_zeros(graph, before_unsqueeze(graph, t)) for t in initial):
            logger.warning("tf2onnx made '%s' a native %s with sequence lengths and an initial state: for a row of "
                           "length 0 it returns zeros as the final state (ONNX leaves it undefined), where "
                           "TensorFlow returns the initial state", node.name, node.type)


def _dynamic(shape) -> bool:
    """Is a shape unknown, or one of its dimensions?"""
    return shape is None or any(d is None or d < 0 for d in shape)
