# SPDX-License-Identifier: Apache-2.0
"""Read a cuDNN op: the layer Keras 3 traces on a machine with a GPU.

There, Keras runs an LSTM or GRU layer (tanh and sigmoid, a bias, not unrolled; a GRU with
``reset_after``) as one ``CudnnRNNV3`` op (``keras/src/backend/tensorflow/rnn.py``):

* its input is batch-major; ``sequence_lengths`` is ``Sum(Cast(mask, int32), axis=1)`` for a
  masked layer, ``Fill([B], T)`` for an unmasked one;
* ``go_backwards`` reverses each row's valid steps (``ReverseSequence`` by those lengths) before
  the op, and after it reverses them back and then the whole time axis (``ReverseV2``);
* the initial states enter as ``ExpandDims(h, 1)``, the final ones leave through ``Squeeze(1)``;
* the weights are one flat ``params`` constant (tf2onnx folds Keras's split, transpose and concat):
  the input kernels of every gate in cuDNN's gate order, each ``[H, I]`` row-major, then the
  recurrent kernels ``[H, H]``, then the input biases and the recurrent biases.

That is read into the same :class:`~..layer.MaskedRecurrentLayer` a While loop gives, so the
planner and emitter treat it alike, and the native node computes what Keras's generic path
(the same model on a CPU) computes: at padded steps of a returned sequence that is the last
output repeated, zeros in a ``Bidirectional`` (which the cuDNN kernel does not distinguish: its
padded steps are always zeros). Graphs traced on an AMD GPU (ROCm: another gate order, which
the folded constant does not show) are not distinguished either.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np
from onnx import TensorProto

from ..cells import KINDS, CellKind
from ..failure import Refusal
from ..graph import const_value, is_zeros, producer, shape_dim_of
from ..layer import MaskedRecurrentLayer, RecurrentCell
from .activation import Activation

CUDNN_OPS = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
CUDNN_FIX = ("convert the Keras model with masked_lstm_rewriter.convert (it traces Keras's generic path), "
             "or save the model on a machine without a GPU (CUDA_VISIBLE_DEVICES=\"\")")

LEFT_AS = "Keras's cuDNN op, which tf2onnx cannot convert"
_ACTIVATIONS = {"LSTM": (Activation("Sigmoid"), Activation("Tanh"), Activation("Tanh")),
                "GRU": (Activation("Sigmoid"), Activation("Tanh"))}
_ATTRIBUTES = {"GRU": (("linear_before_reset", 1),)}  # cuDNN's GRU is Keras's reset_after=True


@dataclasses.dataclass
class CudnnLayer(MaskedRecurrentLayer):
    """A layer read from a cuDNN op: where its outputs go, besides the common description."""

    sequence_result: Optional[str] = None  # the batch-major sequence Keras's layer returns, or None
    sequence_chain: tuple = ()              # go_backwards's reversals between the op and that sequence
    left_as = LEFT_AS
    remedy = CUDNN_FIX

    def batch_axes(self) -> dict:
        """Besides the common outputs: the op's own batch-major sequence, and what Keras makes of it."""
        axes = super().batch_axes()
        axes.update({tensor: 0 for tensor in (self.while_node.output[0], self.sequence_result) if tensor})
        return axes


def cudnn_layer_name(node) -> str:
    """Keras layer path from the op's name ("functional/bidirectional/forward_lstm/CudnnRNNV3" ->
    "bidirectional/forward_lstm")."""
    parts = node.name.split("/")
    return "/".join(parts[1:-1]) if len(parts) > 2 else node.name


def read_cudnn(graph, node) -> Union[CudnnLayer, Refusal]:
    """The layer a cuDNN op computes, or why not (the reason ends with what to do instead)."""
    try:
        return _read_cudnn(graph, node)
    except Refusal as refusal:
        return Refusal(f"Keras's cuDNN op {node.type} (the model was traced with a GPU): {refusal.reason}",
                       refusal.node or node)
    except Exception as error:  # pylint: disable=broad-except  (a graph shape not foreseen)
        return Refusal(f"unexpected cuDNN op {node.type} ({type(error).__name__}: {error})", node)


def _read_cudnn(graph, node) -> CudnnLayer:
    if node.type != "CudnnRNNV3":
        raise Refusal("only CudnnRNNV3 (Keras 3's) is read, which carries each row's length")
    for attr, want in (("direction", "unidirectional"), ("input_mode", "linear_input"), ("time_major", 0),
                       ("num_proj", 0)):
        value = node.get_attr_value(attr, want)
        value = value.decode() if isinstance(value, bytes) else value
        if value != want:
            raise Refusal(f"an attribute no Keras layer sets: {attr} is {value!r} (Keras: {want!r})")
    kind = _kind(node.get_attr_value("rnn_mode"))
    lengths = node.input[4]
    direction, x_source = _read_input(graph, node.input[0], lengths)
    mask = _read_mask(graph, lengths, x_source)
    sequence, chain = _read_sequence(graph, node.output[0], direction, lengths)
    return CudnnLayer(
        layer=cudnn_layer_name(node), while_node=node, cells=(_read_cell(graph, node, kind, x_source),),
        direction=direction, x_reader=None, x_source=x_source, mask=mask, mask_post_padded=False,
        output_carried=True, sequence_outputs=[], writes_sequence=sequence is not None, last_output=None,
        sequence_result=sequence, sequence_chain=chain)


def _kind(rnn_mode) -> CellKind:
    mode = rnn_mode.decode() if isinstance(rnn_mode, bytes) else rnn_mode
    for kind in KINDS:
        if kind.cudnn_mode == mode:
            return kind
    raise Refusal(f"an rnn_mode no Keras layer traces: {mode!r}")


def _read_input(graph, x: str, lengths: str) -> tuple:
    """("forward", x) or, for go_backwards, ("reverse", the input before its rows were reversed)."""
    node = producer(graph, x)
    if node is None or node.type != "ReverseSequence":
        return "forward", x
    if not _reverses_rows(node, lengths):
        raise Refusal("its input is reversed other than by each row's length")
    return "reverse", node.input[0]


def _reverses_rows(node, lengths: str) -> bool:
    return node.input[1] == lengths and node.get_attr_value("seq_dim") == 1 and node.get_attr_value("batch_dim", 0) == 0


def _read_mask(graph, lengths: str, x: str) -> Optional[str]:
    """The [B, T] bool mask the lengths count, or None when every row has all T steps."""
    node = producer(graph, lengths)
    if node is not None and node.type == "Sum" and const_value(graph, node.input[1]) in (1, [1]):
        cast = producer(graph, node.input[0])
        if cast is not None and cast.type == "Cast":
            mask = cast.input[0]
            shape = graph.get_shape(mask)
            if graph.get_dtype(mask) != TensorProto.BOOL or (shape is not None and len(shape) != 2):
                raise Refusal(f"its lengths count a mask that is not a [batch, time] bool tensor (shape {shape})")
            return mask
    if _counts_every_step(graph, lengths, x):
        return None
    raise Refusal("its sequence_lengths are neither a mask's count of steps nor the number of steps", node)


def _counts_every_step(graph, lengths: str, x: str) -> bool:
    """Are the lengths ``Fill([B], T)``, T the number of steps of ``x`` (a constant when it is static)?"""
    steps = (graph.get_shape(x) or [None, None])[1]
    node = producer(graph, lengths)
    if node is not None and node.type == "Fill":
        return shape_dim_of(graph, node.input[1]) == (x, 1) or (steps is not None and steps > 0 and
                                                                const_value(graph, node.input[1]) == steps)
    value = const_value(graph, lengths)
    return steps is not None and steps > 0 and isinstance(value, list) and all(v == steps for v in value)


def _read_sequence(graph, output: str, direction: str, lengths: str) -> tuple:
    """(the batch-major sequence Keras returns, or None when the layer returns none; the reversals
    between the op and it)."""
    consumers = graph.find_output_consumers(output)
    if direction == "forward" or not consumers:
        return (output if consumers else None), ()
    back = consumers[0]
    if len(consumers) != 1 or back.type != "ReverseSequence" or not _reverses_rows(back, lengths):
        raise Refusal("the output of a go_backwards layer is not reversed back by each row's length")
    flips = graph.find_output_consumers(back.output[0])
    if len(flips) != 1 or flips[0].type != "ReverseV2" or const_value(graph, flips[0].input[1]) not in (1, [1]):
        raise Refusal("the output of a go_backwards layer is not reversed in time after its rows")
    returned = bool(graph.find_output_consumers(flips[0].output[0]))
    return (flips[0].output[0] if returned else None), (back, flips[0])


def _read_cell(graph, node, kind: CellKind, x: str) -> RecurrentCell:
    input_size = (graph.get_shape(x) or [None])[-1]
    params = graph.get_tensor_value(node.input[3], as_list=False) if graph.is_const(node.input[3]) else None
    if params is None or input_size is None or input_size < 1:
        raise Refusal("its weights are not constant or its input size is not known")
    hidden, weights = _split_params(np.asarray(params, np.float32).ravel(), kind, input_size)
    h_at, h0 = _initial_state(graph, node, 1)
    c_at, c0 = _initial_state(graph, node, 2) if kind.states == 2 else (None, None)
    return RecurrentCell(
        kind=kind.name, hidden_size=hidden, **weights, activations=_ACTIVATIONS[kind.name],
        attributes=_ATTRIBUTES.get(kind.name, ()), graph=graph, h_at=h_at, c_at=c_at,
        zero_initial_state=all(is_zeros(graph, state) for state in (h0, c0) if state is not None),
        final_h=_final_state(graph, node.output[1]),
        final_c=_final_state(graph, node.output[2]) if kind.states == 2 else None)


def _split_params(params: np.ndarray, kind: CellKind, input_size: int) -> tuple:
    """(H, the weights in Keras's layout by gate) from cuDNN's flat params (see the module's doc)."""
    gates = kind.cudnn_gates
    per_unit = len(gates) * (input_size + 2)  # size = G * (H*I + H*H + 2H): solve for H
    hidden = int(round((-per_unit + np.sqrt(per_unit ** 2 + 4 * len(gates) * params.size)) / (2 * len(gates))))
    if hidden < 1 or len(gates) * hidden * (input_size + hidden + 2) != params.size:
        raise Refusal(f"the weights do not fit the op: {params.size} values for a {kind.keras_name} over "
                      f"{input_size} inputs")
    sizes = [hidden * input_size] * len(gates) + [hidden * hidden] * len(gates) + [hidden] * (2 * len(gates))
    blocks = np.split(params, np.cumsum(sizes)[:-1])
    w, r, bw, br = (blocks[i * len(gates):(i + 1) * len(gates)] for i in range(4))
    return hidden, {
        "kernel": {g: w[i].reshape(hidden, input_size).T for i, g in enumerate(gates)},
        "recurrent": {g: r[i].reshape(hidden, hidden).T for i, g in enumerate(gates)},
        "bias": dict(zip(gates, bw)), "recurrent_bias": dict(zip(gates, br))}


def _initial_state(graph, node, index: int) -> tuple:
    """((the ExpandDims node, 0), the [B, H] initial state it expands); (None, the op's input) for
    zeros TensorFlow folded into a constant (a static batch)."""
    expand = producer(graph, node.input[index])
    if is_zeros(graph, node.input[index]):
        return None, node.input[index]
    if expand is None or expand.type != "ExpandDims" or const_value(graph, expand.input[1]) not in (1, [1]):
        raise Refusal("an initial state does not enter as Keras expands it (ExpandDims(state, 1))", expand)
    return (expand, 0), expand.input[0]


def _final_state(graph, output: str) -> Optional[str]:
    """The [B, H] final state Keras squeezes out of the op's ``output``, or None when unused."""
    consumers = graph.find_output_consumers(output)
    if not consumers:
        return None
    squeeze = consumers[0]
    if len(consumers) != 1 or squeeze.type != "Squeeze" or squeeze.get_attr_value("squeeze_dims") not in ([1], [-2]):
        raise Refusal("a final state is read other than as Keras squeezes it (Squeeze(state, 1))", squeeze)
    return squeeze.output[0]


def mark_bidirectional(layers: list) -> None:
    """Keras's ``Bidirectional`` outputs zeros at padded steps (``zero_output_for_mask``) where a lone
    layer repeats its last output; the cuDNN op is the same for both. A forward and a backward
    layer over the same input and mask, both returning their sequence, are a ``Bidirectional``'s."""
    for layer in layers:
        if layer.mask is not None and layer.writes_sequence and any(
                other.direction != layer.direction and other.writes_sequence and other.x_source == layer.x_source
                and other.mask == layer.mask for other in layers):
            layer.output_carried = False
