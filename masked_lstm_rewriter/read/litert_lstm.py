# SPDX-License-Identifier: Apache-2.0
"""Read LiteRT's fused LSTM op, ``TFL_UNIDIRECTIONAL_SEQUENCE_LSTM``: what LiteRT's converter makes of a
tf_keras ``LSTM`` without a mask (tanh and sigmoid, a bias), tf2onnx has no ONNX form for, and whose state
tensors (LiteRT's variable tensors, no node makes them) leave tf2onnx's graph unsortable.

As tf2onnx parses the flatbuffer, the op's absent optional inputs are dropped, so a Keras layer's op has
15 inputs, in LiteRT's order: the input [B, T, I] (or [T, B, I] with ``time_major``), the input weights of
the gates i, f, c, o ([H, I] each), their recurrent weights ([H, H]), their biases ([H]), and the
output and cell state tensors [B, H], LiteRT's variable tensors, which start as zeros (no node makes them:
:func:`..sources.litert_lstm.zero_states` makes them zeros constants first). Its one output is the sequence, in the
input's layout; go_backwards and a ``Bidirectional``'s backward half are reversals around the op
(``TFL_REVERSE_V2``), a last output a slice after it: those stay LiteRT ops for tf2onnx to convert.

Read into the description a loop gives (no mask, forward, zeros as initial states), the native ``LSTM``
computes Keras's layer. LiteRT's op also clips the cell state to [-cell_clip, cell_clip] (the converter
sets 10 for a Keras layer, which Keras does not do; ONNX's ``LSTM`` cannot) and carries its states from
one run to the next (variable tensors), so the two differ where a cell state passes 10 or where a run
follows another without a reset, and the report says so (the layer's ``note``). Other clips, peepholes,
projections, layer normalization and a coupled input gate (what no Keras layer fuses into), and quantized
weights are refused.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Union

import numpy as np

from ..cells.lstm import KIND as LSTM
from ..failure import Refusal
from ..graph import is_zeros
from ..layer import MaskedRecurrentLayer, RecurrentCell
from .activation import Activation

LITERT_LSTM = "TFL_UNIDIRECTIONAL_SEQUENCE_LSTM"
DEQUANTIZE = "TFL_DEQUANTIZE"  # how tf2onnx parses a quantized weight
LEFT_AS = "LiteRT's fused LSTM op, which tf2onnx cannot convert"
KERAS_CELL_CLIP = 10.0  # what LiteRT's converter gives a Keras LSTM
GATES = LSTM.keras_gates  # LiteRT's order of the weights and biases is Keras's: i, f, c, o
INPUTS = 1 + 3 * len(GATES) + LSTM.states  # the input, three blocks of weights per gate, the states
_ACTIVATIONS = tuple(Activation(name) for name in LSTM.default_activations)  # sigmoid, tanh, tanh


@dataclasses.dataclass
class LiteRTLayer(MaskedRecurrentLayer):
    """A layer read from LiteRT's fused op: its sequence as the op returns it (the op's output)."""

    batch_major: bool = True   # the op's input and output are [B, T, ...] (not ``time_major``)
    note: Optional[str] = None  # how the LiteRT file differs from Keras, for the report
    left_as = LEFT_AS

    def batch_axes(self) -> dict:
        return {self.while_node.output[0]: 0 if self.batch_major else 1}


def read_litert_lstm(graph, node) -> Union[LiteRTLayer, Refusal]:
    """The layer LiteRT's fused op computes, or why not."""
    try:
        return _read(graph, node)
    except Refusal as refusal:
        return Refusal(f"LiteRT's fused LSTM op: {refusal.reason}", refusal.node or node)
    except Exception as error:  # pylint: disable=broad-except  (a graph shape not foreseen)
        return Refusal(f"unexpected LiteRT fused LSTM op ({type(error).__name__}: {error})", node)


def _read(graph, node) -> LiteRTLayer:
    _check_not_quantized(graph, node)
    clip = _check_attributes(node)
    if len(node.input) != INPUTS:
        raise Refusal(f"the op has other inputs than a Keras LSTM's ({len(node.input)}, not {INPUTS}): peepholes, a "
                      "projection, layer normalization or a coupled input gate, which no Keras LSTM has")
    batch_major = not node.get_attr_value("time_major", 0)
    x = node.input[0]
    cell = _read_cell(graph, node, x)
    differences = ["carries its states from one run to the next (unless its variables are reset)"] + \
        ([f"clips the cell state to [-{clip:g}, {clip:g}]"] if clip else [])
    note = f"LiteRT's op {' and '.join(differences)}, which Keras does not: the native LSTM computes Keras's layer"
    return LiteRTLayer(
        layer=litert_layer_name(node), while_node=node, cells=(cell,), direction="forward", x_reader=None,
        x_source=x, mask=None, mask_post_padded=False, output_carried=True, sequence_outputs=[],
        writes_sequence=True, last_output=None, x_time_major=None if batch_major else x,
        batch_major=batch_major, note=note)


def state_shape(graph, node) -> Optional[list]:
    """[B, H] of the op's states, where its input's batch and its weights' size are static; else None."""
    shape = graph.get_shape(node.input[0])
    weights = graph.get_shape(node.input[1]) if len(node.input) > 1 else None
    if not shape or len(shape) != 3 or not weights:
        return None
    batch = shape[0 if not node.get_attr_value("time_major", 0) else 1]
    return [batch, weights[0]] if batch > 0 and weights[0] > 0 else None


def litert_layer_name(node) -> str:
    """The op's output tensor, as LiteRT names it (it keeps no Keras layer name): "tfl.unidirectional_sequence_lstm"."""
    return re.sub(r"(:0)?(_raw_output___\d+)?$", "", node.output[0])  # tf2onnx renames a graph output's producer


def _check_not_quantized(graph, node) -> None:
    """LiteRT's converter quantizes the weights with optimizations on (and the op its inputs at run time):
    no float LSTM computes that exactly."""
    dequantized = [name for name in node.input if getattr(graph.get_node_by_output(name), "type", None) == DEQUANTIZE]
    if dequantized or node.get_attr_value("asymmetric_quantize_inputs", 0):
        raise Refusal("its weights are quantized (LiteRT's converter with optimizations), which a float LSTM does "
                      "not compute exactly: convert the float model")


def _check_attributes(node) -> float:
    """The op's cell clip, once its other attributes are a Keras layer's."""
    activation = node.get_attr_value("fused_activation_function", b"TANH")
    activation = activation.decode() if isinstance(activation, bytes) else activation
    if activation != "TANH":
        raise Refusal(f"its activation is {activation}, where the Keras layers LiteRT fuses have tanh")
    for attr in ("proj_clip", "diagonal_recurrent_tensors"):
        if node.get_attr_value(attr, 0):
            raise Refusal(f"an attribute no Keras layer sets: {attr} is {node.get_attr_value(attr)!r}")
    clip = float(node.get_attr_value("cell_clip", 0.0))
    if clip not in (0.0, KERAS_CELL_CLIP):
        raise Refusal(f"it clips the cell state at {clip:g}, which the native LSTM cannot do")
    return clip


def _read_cell(graph, node, x: str) -> RecurrentCell:
    input_size = (graph.get_shape(x) or [None])[-1]
    blocks = [_constant(graph, name) for name in node.input[1:1 + 3 * len(GATES)]]
    hidden = blocks[0].shape[0] if blocks[0].ndim == 2 else None
    shapes = [(hidden, input_size)] * len(GATES) + [(hidden, hidden)] * len(GATES) + [(hidden,)] * len(GATES)
    if input_size is None or hidden is None or [block.shape for block in blocks] != shapes:
        raise Refusal(f"its weights are not a Keras LSTM's over {input_size} inputs: shapes "
                      f"{[list(block.shape) for block in blocks]}")
    for state in node.input[1 + 3 * len(GATES):]:
        if not is_zeros(graph, state):
            raise Refusal("a state does not start from zeros, as Keras's layer does", graph.get_node_by_output(state))
    kernel, recurrent, bias = (blocks[k * len(GATES):(k + 1) * len(GATES)] for k in range(3))
    return RecurrentCell(
        kind=LSTM.name, hidden_size=int(hidden), kernel={g: w.T for g, w in zip(GATES, kernel)},
        recurrent={g: r.T for g, r in zip(GATES, recurrent)}, bias=dict(zip(GATES, bias)), recurrent_bias={},
        activations=_ACTIVATIONS, attributes=(), graph=graph, h_at=(node, INPUTS - LSTM.states),
        c_at=(node, INPUTS - 1), zero_initial_state=True, final_h=None, final_c=None)


def _constant(graph, name: str) -> np.ndarray:
    """A weight's float32 value; a quantized or computed one is refused."""
    if not graph.is_const(name):
        raise Refusal(f"a weight is not a constant (quantized, or computed in the graph: {name})",
                      graph.get_node_by_output(name))
    value = np.asarray(graph.get_tensor_value(name, as_list=False))
    if value.dtype != np.float32:
        raise Refusal(f"a weight is not float32 ({value.dtype}: '{name}')")
    return value
