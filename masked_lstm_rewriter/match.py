# SPDX-License-Identifier: Apache-2.0
"""Stage 1, match: find a masked Keras LSTM loop and describe it, or say why not.

tf2onnx hands custom rewriters each While body first (as its own graph, still in TensorFlow
ops), then the main graph, where the While op still stands. So matching has two halves:

* :func:`match_body` reads the cell out of a body graph into a :class:`BodyMatch` (which loop
  variable is what, the gate algebra, the activations). It is kept on the body graph.
* :func:`match_loop` looks at a While op of the main graph whose body matched, checks how the
  loop is fed and consumed, resolves the weights, and returns one :class:`MaskedLstm`.

Either returns a :class:`NoMatch` with a human-readable reason instead.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np
from onnx import TensorProto
from tf2onnx.graph_matcher import GraphMatcher, OpTypePattern

from .cell import Activation, ConstRef, LinearReader, producer, read_activation, skip_identity

BODY_MATCH_ATTR = "_masked_lstm_rewriter_body"
GATES = ("i", "f", "c", "o")  # Keras's order of the gate blocks in its kernels


@dataclasses.dataclass(frozen=True)
class NoMatch:
    """Why a loop is left as tf2onnx made it."""

    reason: str

    def __bool__(self):
        return False


@dataclasses.dataclass(frozen=True)
class BodyMatch:
    """What one While body computes, by loop-variable index (body inputs == While inputs)."""

    time_index: int          # the step counter the lists are read and written with
    x_list_index: int        # TensorList of the time-major input
    mask_list_index: int     # TensorList of the time-major mask ([T, B, 1] bool)
    h_index: int
    c_index: int
    output_index: int        # the step's output (the last one, after the loop)
    masked_output_index: int  # what a masked step outputs: output_index (carried) or a loop input
    output_list_index: int   # TensorList the outputs are written to
    writes_sequence: bool    # one list element per step (else a single slot, return_sequences=False)
    gates: dict              # gate name -> LinearForm
    recurrent_activation: Activation
    cell_activation: Activation
    hidden_activation: Activation

    @property
    def output_carried(self) -> bool:
        """Keras repeats the previous output at a masked step (else: zero_output_for_mask)."""
        return self.masked_output_index == self.output_index


@dataclasses.dataclass
class MaskedLstm:
    """One masked Keras LSTM layer, read off tf2onnx's graph: all the emitter needs."""

    layer: str
    while_node: object
    hidden_size: int
    kernel: dict             # gate -> [input_size, hidden] array, Keras layout
    recurrent: dict          # gate -> [hidden, hidden]
    bias: Optional[dict]     # gate -> [hidden], or None
    activations: tuple       # (recurrent, cell, hidden) Activation, ONNX LSTM order f, g, h
    direction: str           # "forward", or "reverse": the loop runs over the time-reversed
                             # input and mask (go_backwards, a Bidirectional's backward half)
    x: str                   # time-major input [T, B, I], float32, in the model's time order
    x_source: str            # the batch-major tensor x is transposed from (to pair directions)
    mask: str                # batch-major mask [B, T], bool, in the model's time order
    mask_post_padded: bool   # the mask is post-padded by construction (sequence_mask of lengths)
    h_input: int             # While input holding the initial h [B, H] (read through the node:
    c_input: int             # rewriting an encoder renames what a decoder starts from)
    zero_initial_state: bool  # initial h and c are zeros by construction (no initial_state given)
    output_carried: bool
    sequence_outputs: list   # tensors holding the stacked outputs, time-major [T or 1, B, H]
    writes_sequence: bool
    last_output: str         # While output: last output
    final_h: str
    final_c: str

    @property
    def initial_h(self) -> str:
        return self.while_node.input[self.h_input]

    @property
    def initial_c(self) -> str:
        return self.while_node.input[self.c_input]


# ---------------------------------------------------------------------------------------------
# body

def _state_select_pattern():
    """SelectV2(mask_t, new_value, previous_value): how Keras skips a masked step."""
    mask_item = OpTypePattern("TensorListGetItem", name="mask_item",
                              inputs=[OpTypePattern("Placeholder", name="mask_list"),
                                      OpTypePattern("Placeholder", name="time"), "*"])
    return OpTypePattern("SelectV2|Select", name="select",
                         inputs=[mask_item, OpTypePattern("*", name="new"), OpTypePattern("*", name="old")])


def is_masked_recurrent_body(graph) -> bool:
    """Does this graph look like the body of a masked Keras recurrent loop?"""
    return bool(_mask_selects(graph)) and any(n.type == "TensorListSetItem" for n in graph.get_nodes())


def _mask_selects(graph):
    matcher = GraphMatcher(_state_select_pattern(), allow_reorder=False)
    return [m for m in matcher.match_ops(graph.get_nodes())
            if m.get_op("mask_item").get_attr_value("element_dtype") == TensorProto.BOOL]


def _loop_output_producer(graph, index: int):
    """The node computing loop variable ``index``'s next value (None when there is no such output)."""
    if index >= len(graph.outputs):
        return None
    return producer(graph, skip_identity(graph, graph.outputs[index]))


def _passes_through(graph, index: int) -> bool:
    """Is loop variable ``index`` loop-invariant (the body returns its input unchanged)?"""
    return index < len(graph.outputs) and skip_identity(graph, graph.outputs[index]) == graph.input_names[index]


def _input_index(graph, tensor: str) -> Optional[int]:
    names = graph.input_names
    return names.index(tensor) if tensor in names else None


def match_body(graph) -> Union[BodyMatch, NoMatch]:
    """Read a masked LSTM step out of a While body graph."""
    writes = [n for n in graph.get_nodes() if n.type == "TensorListSetItem"]
    if len(writes) != 1:
        return NoMatch(f"expected one output list write per step, found {len(writes)}")
    write = writes[0]
    selects = {m.get_op("select").output[0]: m for m in _mask_selects(graph)}
    out_sel = selects.get(skip_identity(graph, write.input[2]))
    if out_sel is None:
        return NoMatch("the step output is not selected by the mask")
    mask_item, time = out_sel.get_op("mask_item"), out_sel.get_op("time")
    h_new = out_sel.get_op("new").output[0]

    # h and c: SelectV2(mask, new, previous) whose result is carried to the next step
    carried = {}
    for m in selects.values():
        old = m.get_op("old")
        index = _input_index(graph, old.output[0]) if old.is_graph_input() else None
        if m.get_op("mask_item") is not mask_item or index is None:
            continue
        if _loop_output_producer(graph, index) is m.get_op("select"):
            carried[index] = m
    h_index = next((i for i, m in carried.items() if m.get_op("new").output[0] == h_new
                    and m is not out_sel), None)
    c_candidates = [i for i, m in carried.items() if m.get_op("new").output[0] != h_new]
    if h_index is None or len(c_candidates) != 1:
        return NoMatch("could not find the hidden and cell states among the loop variables")
    c_index = c_candidates[0]
    c_new = carried[c_index].get_op("new").output[0]

    output_vars = [i for i in range(len(graph.outputs)) if _loop_output_producer(graph, i) is out_sel.get_op("select")]
    out_old = out_sel.get_op("old")
    masked_output_index = _input_index(graph, out_old.output[0]) if out_old.is_graph_input() else None
    if len(output_vars) != 1 or masked_output_index is None:
        return NoMatch("the step output is not a loop variable selected from a loop input")
    output_index = output_vars[0]
    if masked_output_index != output_index and not _passes_through(graph, masked_output_index):
        return NoMatch("the output at masked steps is computed in an unrecognised way")

    x_items = [n for n in graph.get_nodes() if n.type == "TensorListGetItem"
               and n.get_attr_value("element_dtype") == TensorProto.FLOAT and n.input[1] == time.output[0]]
    if len(x_items) != 1:
        return NoMatch("the step input is not a single float32 list read (dtype other than float32?)")
    x_item = x_items[0]
    indices = [_input_index(graph, t) for t in
               (time.output[0], x_item.input[0], mask_item.input[0], write.input[0])]
    if None in indices:
        return NoMatch("the lists or the step counter are not loop variables")
    time_index, x_list_index, mask_list_index, output_list_index = indices
    if write.input[1] == time.output[0]:
        writes_sequence = True
    elif _is_zero_scalar(graph, write.input[1]):
        writes_sequence = False
    else:
        return NoMatch("outputs are written at an unrecognised position")
    if not _is_increment(_loop_output_producer(graph, time_index), time.output[0]):
        return NoMatch("the step counter does not advance by one")

    cell = _read_lstm_cell(graph, x_item.output[0], graph.input_names[h_index], graph.input_names[c_index],
                           c_new, h_new)
    if isinstance(cell, NoMatch):
        return cell
    gates, activations = cell
    return BodyMatch(time_index=time_index, x_list_index=x_list_index, mask_list_index=mask_list_index,
                     h_index=h_index, c_index=c_index, output_index=output_index,
                     masked_output_index=masked_output_index, output_list_index=output_list_index,
                     writes_sequence=writes_sequence, gates=gates,
                     recurrent_activation=activations[0], cell_activation=activations[1],
                     hidden_activation=activations[2])


def _is_zero_scalar(graph, tensor):
    node = producer(graph, skip_identity(graph, tensor))
    return node is not None and node.is_const() and np.all(node.get_tensor_value(as_list=False) == 0)


def _is_increment(node, tensor):
    if node is None or node.type not in ("Add", "AddV2"):
        return False
    others = [t for t in node.input if t != tensor]
    if len(others) != 1:
        return False
    one = producer(node.graph, skip_identity(node.graph, others[0]))
    return one is not None and one.is_const() and np.all(one.get_tensor_value(as_list=False) == 1)


def _mul_operands(graph, tensor):
    node = producer(graph, tensor)
    if node is None or node.type != "Mul":
        return None
    return list(node.input)


def _read_lstm_cell(graph, x_item, h_prev, c_prev, c_new, h_new):
    """Gate forms and activations from ``c_new = f*c_prev + i*g`` and ``h_new = o*act(c_new)``."""
    add = producer(graph, c_new)
    if add is None or add.type not in ("Add", "AddV2"):
        return NoMatch("the cell state update is not f * c + i * g")
    products = [_mul_operands(graph, t) for t in add.input]
    if None in products:
        return NoMatch("the cell state update is not f * c + i * g")
    forget = [p for p in products if c_prev in p]
    if len(forget) != 1:
        return NoMatch("the cell state update is not f * c + i * g")
    f_gate = next(t for t in forget[0] if t != c_prev)
    i_or_g = products[1 - products.index(forget[0])]

    h_operands = _mul_operands(graph, h_new)
    if h_operands is None:
        return NoMatch("the hidden state is not o * act(c)")
    for o_gate, squashed in (h_operands, h_operands[::-1]):
        hidden_act, act_input = read_activation(graph, squashed)
        if act_input == c_new:
            break
    else:
        return NoMatch("the hidden state is not o * act(c) with an activation ONNX LSTM supports")

    reader = LinearReader(graph, x_item, h_prev)

    def gate(tensor):
        act, pre = read_activation(graph, tensor)
        form = reader.read(pre)
        return act, form

    recurrent_act, f_form = gate(f_gate)
    o_act, o_form = gate(o_gate)
    # i and g multiply each other: i is the one with the recurrent activation
    (a_act, a_form), (b_act, b_form) = gate(i_or_g[0]), gate(i_or_g[1])
    if a_act != recurrent_act and b_act == recurrent_act:
        (a_act, a_form), (b_act, b_form) = (b_act, b_form), (a_act, a_form)
    i_act, i_form, cell_act, g_form = a_act, a_form, b_act, b_form
    forms = {"i": i_form, "f": f_form, "c": g_form, "o": o_form}
    if any(form is None or form.kernel is None or form.recurrent is None for form in forms.values()):
        return NoMatch("a gate is not x @ W + h @ R + b after an activation ONNX LSTM supports "
                       "(unsupported activation?)")
    if len({i_act, o_act, recurrent_act}) != 1:
        return NoMatch("the i, f and o gates use different activations")
    return forms, (recurrent_act, cell_act, hidden_act)


# ---------------------------------------------------------------------------------------------
# main graph

def layer_name(while_node) -> str:
    """Keras layer path from the While op's name ("model/lstm/PartitionedCall/while" -> "lstm")."""
    parts = [p for p in while_node.name.split("/")
             if p not in ("while", "PartitionedCall", "StatefulPartitionedCall")]
    return "/".join(parts[1:]) if len(parts) > 1 else (parts[0] if parts else while_node.name)


def match_loop(graph, while_node, body: BodyMatch) -> Union[MaskedLstm, NoMatch]:
    """Check how the While op is fed and consumed, resolve weights, describe the layer."""
    x, x_reversed = _list_source(graph, while_node.input[body.x_list_index])
    if x is None:
        return NoMatch("the input list is not built from a tensor")
    if graph.get_dtype(x) != TensorProto.FLOAT:
        return NoMatch("the input is not float32")
    mask_tm, mask_reversed = _list_source(graph, while_node.input[body.mask_list_index])
    mask = _batch_major_mask(graph, mask_tm)
    if isinstance(mask, NoMatch):
        return mask
    if x_reversed != mask_reversed:
        return NoMatch("only one of the input and the mask is reversed in time")
    if not _is_zero_scalar(graph, while_node.input[body.time_index]):
        return NoMatch("the loop does not start at step 0")
    if not _is_zeros(graph, while_node.input[body.masked_output_index]):
        return NoMatch("the output at masked steps does not start as zeros")

    weights = _resolve_weights(graph, while_node, body.gates)
    if isinstance(weights, NoMatch):
        return weights
    kernel, recurrent, bias = weights

    used = _consumed_outputs(graph, while_node)
    roles = {body.output_list_index, body.output_index, body.h_index, body.c_index}
    unexpected = sorted(set(used) - roles)
    if unexpected:
        return NoMatch(f"loop outputs {unexpected} are consumed outside the layer")
    list_out = while_node.output[body.output_list_index]
    stacks = graph.find_output_consumers(list_out)
    if any(n.type != "TensorListStack" for n in stacks):
        return NoMatch("the output list is read other than by TensorListStack")

    return MaskedLstm(
        layer=layer_name(while_node), while_node=while_node,
        hidden_size=recurrent["i"].shape[0], kernel=kernel, recurrent=recurrent, bias=bias,
        activations=(body.recurrent_activation, body.cell_activation, body.hidden_activation),
        direction="reverse" if x_reversed else "forward", x=x, x_source=_batch_major_source(graph, x), mask=mask,
        mask_post_padded=_is_sequence_mask_over_time(graph, mask, x),
        h_input=body.h_index, c_input=body.c_index,
        zero_initial_state=(_is_zeros(graph, while_node.input[body.h_index])
                            and _is_zeros(graph, while_node.input[body.c_index])),
        output_carried=body.output_carried,
        sequence_outputs=[n.output[0] for n in stacks], writes_sequence=body.writes_sequence,
        last_output=while_node.output[body.output_index],
        final_h=while_node.output[body.h_index], final_c=while_node.output[body.c_index])


def _list_source(graph, tensor) -> tuple:
    """(time-major tensor a TensorList is made of, whether it was first reversed in time)."""
    node = producer(graph, tensor)
    if node is None or node.type != "TensorListFromTensor":
        return None, False
    source = producer(graph, node.input[0])
    if source is not None and source.type == "ReverseV2" and _const_value(graph, source.input[1]) in (0, [0]):
        return source.input[0], True
    return node.input[0], False


def _const_value(graph, tensor):
    return graph.get_tensor_value(tensor) if graph.is_const(tensor) else None


def _batch_major_source(graph, x_tm: str) -> str:
    """The tensor Keras transposed into ``x_tm`` (each layer transposes on its own)."""
    node = producer(graph, x_tm)
    if node is not None and node.type == "Transpose" and _const_value(graph, node.input[1]) == [1, 0, 2]:
        return node.input[0]
    return x_tm


def _batch_major_mask(graph, mask_tm) -> Union[str, NoMatch]:
    """The [B, T] bool mask behind Keras's ``transpose(expand_dims(mask, -1), [1, 0, 2])``."""
    transpose = producer(graph, mask_tm) if mask_tm else None
    if transpose is None or transpose.type != "Transpose":
        return NoMatch("the mask list is not a transposed mask")
    expand = producer(graph, transpose.input[0])
    if _const_value(graph, transpose.input[1]) != [1, 0, 2] or expand is None or expand.type != "ExpandDims":
        return NoMatch("the mask is not of the form Keras builds (rank-2 mask expanded to [T, B, 1])")
    axis = _const_value(graph, expand.input[1])
    mask = expand.input[0]
    shape = graph.get_shape(mask)
    if axis not in (-1, 2, [-1], [2]) or (shape is not None and len(shape) != 2):
        return NoMatch(f"the mask has an unexpected rank (shape {shape})")
    if graph.get_dtype(mask) != TensorProto.BOOL:
        return NoMatch("the mask is not boolean")
    return mask


def _is_sequence_mask_over_time(graph, mask: str, x_tm: str) -> bool:
    """Is ``mask`` ``sequence_mask(lengths, T)`` with T provably the layer's number of steps?

    ``Less(Range(0, maxlen, 1), lengths[:, None])`` is post-padded by construction; the proof
    needs maxlen to be ``shape(t)[1]`` of a tensor t sharing the layer's time axis (its input,
    or what an Embedding looked up), or a constant equal to a known static length.
    """
    less = producer(graph, mask)
    if less is None or less.type != "Less":
        return False
    steps = producer(graph, less.input[0])
    if steps is None or steps.type != "Range" or not _is_zero_scalar(graph, steps.input[0]) or \
            _const_value(graph, steps.input[2]) != 1:
        return False
    lengths = producer(graph, skip_identity(graph, less.input[1]))
    if lengths is not None and lengths.type == "Cast":
        lengths = producer(graph, lengths.input[0])
    if lengths is None or lengths.type != "ExpandDims" or _const_value(graph, lengths.input[1]) not in (-1, 1):
        return False
    maxlen = steps.input[1]
    static = (graph.get_shape(x_tm) or [-1])[0]
    if graph.is_const(maxlen):
        return static not in (None, -1) and _const_value(graph, maxlen) == static
    return _shape_dim(graph, maxlen, 1) in _same_time_axis(graph, _batch_major_source(graph, x_tm))


def _shape_dim(graph, tensor: str, dim: int) -> Optional[str]:
    """t when ``tensor`` is ``shape(t)[dim]`` (a StridedSlice that picks one element)."""
    node = producer(graph, tensor)
    if node is None or node.type != "StridedSlice" or node.get_attr_value("shrink_axis_mask", 0) != 1:
        return None
    if [_const_value(graph, t) for t in node.input[1:4]] != [[dim], [dim + 1], [1]]:
        return None
    shape = producer(graph, node.input[0])
    return shape.input[0] if shape is not None and shape.type == "Shape" else None


def _same_time_axis(graph, tensor: str) -> set:
    """Batch-major tensors that provably have ``tensor``'s [B, T] leading dimensions: it, and
    going back through an Embedding lookup and through casts."""
    found = set()
    while tensor is not None and tensor not in found:
        found.add(tensor)
        node = producer(graph, tensor)
        tensor = None
        if node is None:
            break
        if node.type in ("Identity", "Cast"):
            tensor = node.input[0]
        elif node.type == "GatherV2" and graph.is_const(node.input[0]) and _is_zero_scalar(graph, node.input[2]):
            tensor = node.input[1]  # embedding lookup: [B, T] ids -> [B, T, E]
        elif node.type == "SelectV2" and _is_id_wraparound(graph, node):
            tensor = node.input[2]
    return found


def _is_id_wraparound(graph, select) -> bool:
    """Keras 3's Embedding: ``select(ids < 0, ids + n, ids)``, elementwise over ``ids``."""
    ids = select.input[2]
    less, add = producer(graph, select.input[0]), producer(graph, select.input[1])
    return (less is not None and less.type == "Less" and less.input[0] == ids and graph.is_const(less.input[1])
            and add is not None and add.type in ("Add", "AddV2") and add.input[0] == ids
            and graph.is_const(add.input[1]))


def _is_zeros(graph, tensor) -> bool:
    """A tensor that is zeros by construction (ZerosLike, Fill(…, 0), or a zero constant)."""
    node = producer(graph, tensor)
    if node is None:
        return False
    if node.type == "ZerosLike":
        return True
    if node.type == "Fill":
        return _is_zero_scalar(graph, node.input[1])
    return node.is_const() and not np.any(node.get_tensor_value(as_list=False))


def _consumed_outputs(graph, while_node) -> list:
    return [i for i, out in enumerate(while_node.output) if graph.find_output_consumers(out)]


def _resolve_weights(graph, while_node, gates: dict):
    def input_value(index):
        tensor = while_node.input[index]
        return graph.get_tensor_value(tensor, as_list=False) if graph.is_const(tensor) else None

    def resolve(ref: Optional[ConstRef]):
        return None if ref is None else ref.resolve(input_value)

    kernel = {g: resolve(form.kernel) for g, form in gates.items()}
    recurrent = {g: resolve(form.recurrent) for g, form in gates.items()}
    bias = {g: resolve(form.bias) for g, form in gates.items()}
    if any(v is None for v in list(kernel.values()) + list(recurrent.values())):
        return NoMatch("the weights are not constants")
    if all(v is None for v in bias.values()):
        bias = None
    elif any(v is None for v in bias.values()):
        return NoMatch("only some gates have a bias")
    hidden = recurrent["i"].shape[0] if recurrent["i"].ndim == 2 else -1
    input_size = kernel["i"].shape[0] if kernel["i"].ndim == 2 else -1
    for g in GATES:
        if kernel[g].shape != (input_size, hidden) or recurrent[g].shape != (hidden, hidden) or \
                (bias is not None and bias[g].shape != (hidden,)):
            return NoMatch("the gate weights do not have LSTM shapes")
        if any(a.dtype != np.float32 for a in (kernel[g], recurrent[g])):
            return NoMatch("the weights are not float32")
    return kernel, recurrent, bias
