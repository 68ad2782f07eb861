# SPDX-License-Identifier: Apache-2.0
"""Stage 1, match: find a masked Keras LSTM, GRU or SimpleRNN loop and describe it, or say why not.

tf2onnx hands custom rewriters each While body first (as its own graph, still in TensorFlow
ops), then the main graph, where the While op still stands. So matching has two halves:

* :func:`match_body` reads the cell out of a body graph into a :class:`BodyMatch` (which loop
  variable is what, the gate algebra, the activations). It is kept on the body graph.
* :func:`match_loop` looks at a While op of the main graph whose body matched, checks how the
  loop is fed and consumed, resolves the weights, and returns one :class:`MaskedRecurrentLayer`.

The three cell kinds share everything but the step's algebra: each has a small reader
(:func:`_read_lstm_cell`, :func:`_read_gru_cell`, :func:`_read_simple_rnn_cell`) that returns a
:class:`CellAlgebra` (gate forms in the kind's Keras gate order, activations in ONNX order).

Either returns a :class:`NoMatch` with a human-readable reason instead.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np
from onnx import TensorProto
from tf2onnx.graph_matcher import GraphMatcher, OpTypePattern
from tf2onnx.tf_loader import find_function

from .cell import (READ_OPS, REFUSED_ACTIVATION_REASONS, Activation, LinearForm, LinearReader, Product,
                   passes_through, producer, read_activation, scalar_value, skip_identity)
from .batch import rank_of
from .trip import TimeAxis, is_step_count, trip_count_reason

BODY_MATCH_ATTR = "_masked_lstm_rewriter_body"
# Keras's order of the gate blocks in its kernels, by ONNX op (the cell kind)
# the dtypes a layer may compute in besides float32, and why such a layer stays a Loop (measured with
# onnxruntime 1.31 and OpenVINO 2026.4 on bare ONNX LSTM, GRU and RNN nodes: tests/test_float64.py)
DTYPE_REASONS = {
    TensorProto.DOUBLE: "float64 layer: onnxruntime (1.31) has no float64 kernel for the native LSTM, GRU or RNN "
                        "(LSTM and GRU fail at run time, 'does not support double yet'; RNN fails to load), and "
                        "OpenVINO (2026.4) runs them in float32; the Loop computes in float64, as Keras does",
    TensorProto.FLOAT16: "float16 layer: onnxruntime (1.31) runs the native LSTM, GRU and RNN in float32 (casting "
                         "around them), so they do not round each step to float16 as Keras does; the Loop "
                         "computes in float16",
}
GATES = {"LSTM": ("i", "f", "c", "o"), "GRU": ("z", "r", "h"), "RNN": ("h",)}
KERAS_NAMES = {"LSTM": "LSTM", "GRU": "GRU", "RNN": "SimpleRNN"}


@dataclasses.dataclass(frozen=True)
class NoMatch:
    """Why a loop is left as tf2onnx made it."""

    reason: str

    def __bool__(self):
        return False


@dataclasses.dataclass(frozen=True)
class CellAlgebra:
    """One step of a cell: its kind (ONNX op), gate forms (Keras gate names), ONNX activations."""

    kind: str                # "LSTM", "GRU" or "RNN"
    gates: dict              # gate name -> LinearForm
    activations: tuple       # in the ONNX op's order: LSTM (f, g, h), GRU (f, g), RNN (f,)
    linear_before_reset: int = 0  # GRU: the reset gate multiplies h @ R + Rb (Keras reset_after=True)


@dataclasses.dataclass(frozen=True)
class CellMatch:
    """One cell of a While body: the loop variables of its states, and its algebra."""

    h_index: int
    c_index: Optional[int]   # LSTM's cell state; None for GRU and SimpleRNN
    cell: CellAlgebra

    @property
    def kind(self) -> str:
        return self.cell.kind


@dataclasses.dataclass(frozen=True)
class BodyMatch:
    """What one While body computes, by loop-variable index (body inputs == While inputs)."""

    time_index: int          # the step counter the lists are read and written with
    x_list_index: int        # TensorList of the time-major input
    mask_list_index: int     # TensorList of the time-major mask ([T, B, 1] bool)
    cells: tuple             # CellMatch, bottom to top: each reads the one below's h (the first, x);
                             # one for a layer, several for keras.layers.RNN([cell, cell, ...])
    output_index: int        # the step's output (the last one, after the loop)
    masked_output_index: int  # what a masked step outputs: output_index (carried) or a loop input
    output_list_index: int   # TensorList the outputs are written to
    writes_sequence: bool    # one list element per step (else a single slot, return_sequences=False)
    counters: frozenset = frozenset()    # loop variables the body advances by one (step counters)
    invariants: frozenset = frozenset()  # loop variables the body passes through unchanged
    refused: Optional[str] = None        # why the layer stays a Loop although its step was read

    @property
    def top(self) -> CellMatch:
        """The cell whose h is the step's output (the only one of a single layer)."""
        return self.cells[-1]

    @property
    def h_index(self) -> int:
        return self.top.h_index

    @property
    def c_index(self) -> Optional[int]:
        return self.top.c_index

    @property
    def cell(self) -> CellAlgebra:
        return self.top.cell

    @property
    def kind(self) -> str:
        return self.top.kind

    @property
    def gates(self) -> dict:
        return self.top.cell.gates

    @property
    def recurrent_activation(self) -> Activation:
        return self.top.cell.activations[0]

    @property
    def output_carried(self) -> bool:
        """Keras repeats the previous output at a masked step (else: zero_output_for_mask)."""
        return self.masked_output_index == self.output_index

    @property
    def state_indices(self) -> list:
        """Every cell's state loop variables, in Keras's order of the returned states."""
        return [i for c in self.cells for i in (c.h_index, c.c_index) if i is not None]


@dataclasses.dataclass
class RecurrentCell:
    """One cell of a masked recurrent loop, its weights resolved: what one native node needs."""

    kind: str                # the ONNX op: "LSTM", "GRU" or "RNN"
    hidden_size: int
    kernel: dict             # gate -> [input_size, hidden] array, Keras layout
    recurrent: dict          # gate -> [hidden, hidden]
    bias: Optional[dict]     # gate -> [hidden], or None (the input side's bias, ONNX Wb)
    recurrent_bias: dict     # gate -> [hidden] for gates with a separate recurrent bias (ONNX Rb)
    activations: tuple       # Activations in the ONNX op's order (LSTM f, g, h; GRU f, g; RNN f)
    linear_before_reset: int  # GRU only
    while_node: object
    h_input: int             # While input holding the initial h [B, H] (read through the node:
    c_input: Optional[int]   # rewriting an encoder renames what a decoder starts from); c: LSTM only
    zero_initial_state: bool  # initial states are zeros by construction (no initial_state given)
    final_h: str             # While outputs: this cell's final h (and c)
    final_c: Optional[str]

    @property
    def input_size(self) -> int:
        return next(iter(self.kernel.values())).shape[0]

    @property
    def keras_name(self) -> str:
        return KERAS_NAMES[self.kind]

    @property
    def initial_h(self) -> str:
        return self.while_node.input[self.h_input]

    @property
    def initial_c(self) -> Optional[str]:
        return None if self.c_input is None else self.while_node.input[self.c_input]


@dataclasses.dataclass
class MaskedRecurrentLayer:
    """One masked Keras recurrent loop (an LSTM, GRU or SimpleRNN layer, or an RNN layer over stacked
    cells), read off tf2onnx's graph: all the emitter needs."""

    layer: str
    while_node: object
    cells: tuple             # RecurrentCell, bottom to top: one native node each, each reading the
                             # sequence of the one below; the top cell's h is the layer's output
    direction: str           # "forward", or "reverse": the loop runs over the time-reversed
                             # input and mask (go_backwards, a Bidirectional's backward half)
    x_reader: object         # the node reading x (TensorListFromTensor, or go_backwards's ReverseV2)
    x_source: str            # the batch-major tensor x is transposed from (to pair directions)
    mask: str                # batch-major mask [B, T], bool, in the model's time order
    mask_post_padded: bool   # the mask is post-padded by construction (sequence_mask of lengths)
    output_carried: bool
    sequence_outputs: list   # tensors holding the stacked outputs, time-major [T or 1, B, H]
    writes_sequence: bool
    last_output: str         # While output: last output

    @property
    def top(self) -> RecurrentCell:
        """The cell whose h is the layer's output."""
        return self.cells[-1]

    @property
    def input_size(self) -> int:
        return self.cells[0].input_size

    @property
    def kinds(self) -> str:
        """The ONNX ops, bottom to top: "LSTM", or "LSTM+GRU" for stacked cells."""
        return "+".join(cell.kind for cell in self.cells)

    @property
    def x(self) -> str:
        """The time-major input [T, B, I] in the model's time order, read through the node
        that reads it: with static shapes TensorFlow can drop the transposes between two stacked
        layers (T = B = 1), and rewriting the lower one then renames what the upper one reads."""
        return self.x_reader.input[0]

    def describe(self) -> str:
        """For the log: "LSTM layer 'enc' (16 units)", "RNN layer 'rnn' (stacked cells LSTM(4), GRU(3))"."""
        if len(self.cells) == 1:
            return f"{self.top.keras_name} layer '{self.layer}' ({self.top.hidden_size} units)"
        cells = ", ".join(f"{cell.keras_name}({cell.hidden_size})" for cell in self.cells)
        return f"RNN layer '{self.layer}' (stacked cells {cells})"


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


def _input_index(graph, tensor: str) -> Optional[int]:
    names = graph.input_names
    return names.index(tensor) if tensor in names else None


def match_body(graph) -> Union[BodyMatch, NoMatch]:
    """Read a masked LSTM, GRU or SimpleRNN step out of a While body graph.

    A body with an activation the native ops compute wrongly (``REFUSED_ACTIVATION_REASONS``)
    is still read, and marked ``refused``: :func:`match_loop` leaves it a Loop for that reason,
    while a layer stacked above can still read its number of steps off its output list."""
    refused = next((REFUSED_ACTIVATION_REASONS[n.type] for n in graph.get_nodes()
                    if n.type in REFUSED_ACTIVATION_REASONS), None)
    if refused is None:
        return _match_step(graph)
    try:  # the step is read only for what a layer above needs: the refusal is the reason, whatever happens
        body = _match_step(graph)
    except Exception:  # pylint: disable=broad-except
        return NoMatch(refused)
    return NoMatch(refused) if isinstance(body, NoMatch) else dataclasses.replace(body, refused=refused)


def _match_step(graph) -> Union[BodyMatch, NoMatch]:
    """:func:`match_body` without the activation refusal."""
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

    # the states: SelectV2(mask, new, previous) whose result is carried to the next step
    carried = {}
    for m in selects.values():
        old = m.get_op("old")
        index = _input_index(graph, old.output[0]) if old.is_graph_input() else None
        if m.get_op("mask_item") is not mask_item or index is None or m is out_sel:
            continue
        if _loop_output_producer(graph, index) is m.get_op("select"):
            carried[index] = m.get_op("new").output[0]
    output_vars = [i for i in range(len(graph.outputs)) if _loop_output_producer(graph, i) is out_sel.get_op("select")]
    out_old = out_sel.get_op("old")
    masked_output_index = _input_index(graph, out_old.output[0]) if out_old.is_graph_input() else None
    if len(output_vars) != 1 or masked_output_index is None:
        return NoMatch("the step output is not a loop variable selected from a loop input")
    output_index = output_vars[0]
    if masked_output_index != output_index and not passes_through(graph, masked_output_index):
        return NoMatch("the output at masked steps is computed in an unrecognised way")

    x_items = [n for n in graph.get_nodes() if n.type == "TensorListGetItem" and n.input[1] == time.output[0]
               and n.get_attr_value("element_dtype") != TensorProto.BOOL]
    dtype = x_items[0].get_attr_value("element_dtype") if len(x_items) == 1 else None
    if dtype in DTYPE_REASONS:
        return NoMatch(DTYPE_REASONS[dtype])
    if dtype != TensorProto.FLOAT:
        return NoMatch("the step input is not a single float32 list read (dtype other than float32?)")
    x_item = x_items[0]
    stack = _state_stack(graph, carried, h_new, x_item.output[0])
    if isinstance(stack, NoMatch):
        return stack
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
    if _loop_output_producer(graph, output_list_index) is not write:
        return NoMatch("the output list carried to the next step is not the one the step wrote")

    cells = _read_cells(graph, x_item.output[0], stack, carried)
    if isinstance(cells, NoMatch):
        return cells
    variables = range(len(graph.input_names))
    return BodyMatch(time_index=time_index, x_list_index=x_list_index, mask_list_index=mask_list_index,
                     cells=cells, output_index=output_index,
                     masked_output_index=masked_output_index, output_list_index=output_list_index,
                     writes_sequence=writes_sequence,
                     counters=frozenset(i for i in variables if _is_increment(_loop_output_producer(graph, i),
                                                                               graph.input_names[i])),
                     invariants=frozenset(i for i in variables if passes_through(graph, i)))


STACK_REASON = ("the loop's states do not form a stack of cells (keras.layers.RNN([cell, ...])), "
                "each reading the output of the one below")


def _state_stack(graph, carried: dict, h_top: str, x_item: str) -> Union[list, NoMatch]:
    """The cells' states, bottom to top, as ``[(h_index, c_index or None), ...]``.

    ``carried``: masked loop variable -> the value a valid step gives it; ``h_top``: the step's
    output, the top cell's new h. A layer has one cell (h, and an LSTM's c); an RNN layer over
    stacked cells (``keras.layers.RNN([cell, ...])``, Keras's ``StackedRNNCells``) has several,
    each reading the new h of the one below as its step input. The cells are peeled off from the
    top: the state a cell's new h is computed from last is its own c when the h still depends on
    the step's input without it (an LSTM's output gate), else the h of the cell below, through
    which alone the cell sees the input. The readers then check each cell's algebra over exactly
    that input, so a wrong guess here can only refuse, never misread."""
    h_index = next((i for i, new in carried.items() if new == h_top), None)
    if h_index is None:
        return NoMatch("could not find the recurrent states among the loop variables")
    ancestors = {i: _ancestors(graph, new) for i, new in carried.items()}
    stack, left = [], {i for i, new in carried.items() if new != h_top}
    while h_index is not None:
        c_index = _nearest_state(carried, ancestors, left, h_index)
        if c_index is not None and x_item not in _ancestors(graph, carried[h_index], stop={carried[c_index]}):
            c_index = None  # the nearest state is the h of the cell below
        left.discard(c_index)
        stack.append((h_index, c_index))
        h_index = _nearest_state(carried, ancestors, left, h_index)
        left.discard(h_index)
    if left and len(stack) == 1:
        return NoMatch("could not find the recurrent states among the loop variables")
    if left:
        return NoMatch(STACK_REASON)
    return stack[::-1]


def _ancestors(graph, tensor: str, stop=frozenset()) -> set:
    """The tensors ``tensor`` is computed from within one step (loop inputs end the walk, and so do
    the tensors in ``stop``, which are not followed or included)."""
    seen, todo = set(), [tensor]
    while todo:
        node = producer(graph, todo.pop())
        if node is None:
            continue
        for t in node.input:
            if t not in seen and t not in stop:
                seen.add(t)
                todo.append(t)
    return seen


def _nearest_state(carried: dict, ancestors: dict, candidates: set, index: int) -> Optional[int]:
    """Among ``candidates``, the state whose new value ``carried[index]`` is computed from last:
    the one no other such state's new value is computed from (None if there is none, or no single one)."""
    used = [i for i in candidates if carried[i] in ancestors[index]]
    nearest = [i for i in used if not any(carried[i] in ancestors[j] for j in used if j != i)]
    return nearest[0] if len(nearest) == 1 else None


def _read_cells(graph, x_item: str, stack: list, carried: dict) -> Union[tuple, NoMatch]:
    """Each cell's algebra, bottom to top: the first reads ``x_item``, the others the new h of
    the cell below. A stacked cell that does not read says which one it is."""
    cells, step_input = [], x_item
    for k, (h_index, c_index) in enumerate(stack):
        cell = _read_cell(graph, step_input, graph.input_names[h_index], carried[h_index],
                          None if c_index is None else (graph.input_names[c_index], carried[c_index]))
        if isinstance(cell, NoMatch):
            return cell if len(stack) == 1 else NoMatch(
                f"in a stack of {len(stack)} cells (keras.layers.RNN([cell, ...])), cell {k + 1}: {cell.reason}")
        cells.append(CellMatch(h_index, c_index, cell))
        step_input = carried[h_index]
    return tuple(cells)


def _read_cell(graph, x_item, h_prev, h_new, cell_state):
    """The step's algebra: an LSTM when there is a cell state (``(c_prev, c_new)``), else a GRU
    when ``h_new`` has the GRU's shape, else a SimpleRNN."""
    if cell_state is not None:
        return _read_lstm_cell(graph, x_item, h_prev, *cell_state, h_new)
    gru = _read_gru_cell(graph, x_item, h_prev, h_new)
    return gru if gru is not None else _read_simple_rnn_cell(graph, x_item, h_prev, h_new)


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
    gates = _read_gates(graph, reader, (f_gate, o_gate) + tuple(i_or_g), "LSTM")
    if isinstance(gates, NoMatch):
        return gates
    (recurrent_act, f_form), (o_act, o_form), (a_act, a_form), (b_act, b_form) = gates
    # i and g multiply each other: i is the one with the recurrent activation
    if a_act != recurrent_act and b_act == recurrent_act:
        (a_act, a_form), (b_act, b_form) = (b_act, b_form), (a_act, a_form)
    i_act, i_form, cell_act, g_form = a_act, a_form, b_act, b_form
    forms = {"i": i_form, "f": f_form, "c": g_form, "o": o_form}
    if len({i_act, o_act, recurrent_act}) != 1:
        return NoMatch("the i, f and o gates use different activations")
    return CellAlgebra("LSTM", forms, (recurrent_act, cell_act, hidden_act))


def _read_gate(graph, reader, tensor, onnx_op, read_pre=None):
    """(activation, form) of a gate ``tensor = act(x @ W + h @ R + b)``, or a NoMatch that says
    which part was not understood: the activation (an op that is no activation ONNX ``onnx_op``
    supports, applied to a gate's form), or the pre-activation (the op the reader stopped at, or
    a missing term). ``read_pre`` reads the pre-activation (default: ``reader.read``)."""
    read_pre = read_pre or reader.read
    act, pre = read_activation(graph, tensor)
    reader.unread = None
    form = read_pre(pre)
    if form is not None and form.kernel is not None and form.recurrent is not None:
        return act, form
    if form is not None:
        reason = f"a gate's pre-activation has no {'x @ W' if form.kernel is None else 'h @ R'} term"
        return NoMatch(reason)
    unread, top = reader.unread, producer(graph, pre)
    if pre == tensor and top is not None and _applied_to_a_gate(graph, top, read_pre):
        reason = f"a gate's activation is not one ONNX {onnx_op} supports (it is computed by {top.type})"
    else:
        unread = unread or top
        op = "a loop input" if unread is None or unread.is_graph_input() else unread.type
        reason = f"a gate's pre-activation is computed by {op}, which the matcher does not read"
    return NoMatch(reason)


def _read_gates(graph, reader, tensors, onnx_op):
    """Each gate's (activation, form), or the first gate's NoMatch."""
    reads = [_read_gate(graph, reader, tensor, onnx_op) for tensor in tensors]
    return next((read for read in reads if isinstance(read, NoMatch)), reads)


def _applied_to_a_gate(graph, node, read_pre, depth=3) -> bool:
    """Is ``node`` an op the linear reader does not know, computed from a complete gate form (an
    activation the matcher does not support, such as swish's ``x * sigmoid(x)``)?"""
    if node.type in READ_OPS:
        return False
    frontier = list(node.input)
    for _ in range(depth):
        for tensor in frontier:
            form = read_pre(tensor)
            if form is not None and form.kernel is not None and form.recurrent is not None:
                return True
        frontier = [t for tensor in frontier if producer(graph, tensor) is not None
                    for t in producer(graph, tensor).input]
    return False


def _products(graph, tensor):
    """The operand pairs of ``tensor = a * b + c * d``, else None."""
    add = producer(graph, tensor)
    if add is None or add.type not in ("Add", "AddV2"):
        return None
    products = [_mul_operands(graph, t) for t in add.input]
    return None if None in products else products


def _one_minus(graph, tensor) -> Optional[str]:
    """z when ``tensor`` is ``1 - z``."""
    sub = producer(graph, tensor)
    if sub is None or sub.type != "Sub" or scalar_value(graph, sub.input[0]) != 1.0:
        return None
    return sub.input[1]


def _read_gru_cell(graph, x_item, h_prev, h_new):
    """Gate forms and activations from ``h_new = z * h_prev + (1 - z) * hh``, or None when the
    step does not have that shape (then it is no GRU; a NoMatch says why a GRU is not supported).

    ``hh = act(x W_h + b + r * (h R_h + Rb))`` (``reset_after=True``, ONNX ``linear_before_reset=1``)
    or ``act(x W_h + b + (r * h) R_h)`` (``reset_after=False``)."""
    products = _products(graph, h_new)
    keep = [p for p in products or () if h_prev in p]
    if len(keep) != 1:
        return None
    z_gate = next(t for t in keep[0] if t != h_prev)
    update = products[1 - products.index(keep[0])]
    found = [(a, b) for a, b in (update, update[::-1]) if _one_minus(graph, a) == z_gate]
    if not found:
        return None
    hh = found[0][1]

    reader = LinearReader(graph, x_item, h_prev)
    candidate = {}

    def read_candidate(tensor):
        found = _read_gru_candidate(graph, reader, x_item, h_prev, tensor)
        if found is None:
            return None
        candidate["r"], form, candidate["linear_before_reset"] = found
        return form
    read = _read_gate(graph, reader, hh, "GRU", read_candidate)
    if isinstance(read, NoMatch):
        return read
    act, h_form = read
    reads = _read_gates(graph, reader, (z_gate, candidate["r"]), "GRU")
    if isinstance(reads, NoMatch):
        return reads
    (recurrent_act, z_form), (r_act, r_form) = reads
    if r_act != recurrent_act:
        return NoMatch("the z and r gates of the GRU use different activations")
    return CellAlgebra("GRU", {"z": z_form, "r": r_form, "h": h_form}, (recurrent_act, act),
                       candidate["linear_before_reset"])


def _read_gru_candidate(graph, reader, x_item, h_prev, hh_pre):
    """(r, the candidate's form, linear_before_reset) from ``x W_h + b + r * (h R_h + Rb)`` or
    ``x W_h + b + (r * h) R_h``; None when it is neither. The sum's terms may come in any
    grouping (TensorFlow moves hard_sigmoid's ``+ 3`` next to the reset term, tf2onnx fuses a
    product and the term added to it into a Gemm)."""
    x_form, rest = None, []
    for term in reader.sum_terms(hh_pre):
        form = reader.read_term(term)
        if form is not None and form.recurrent is None:
            x_form = form if x_form is None else x_form.add(form)
            if x_form is None:
                return None
        else:
            rest.append(term)
    if x_form is None or x_form.kernel is None or len(rest) != 1:
        return None
    factor, r_part = rest[0]
    if not isinstance(r_part, Product):  # r * (h R_h + Rb)
        operands = _mul_operands(graph, r_part) or []
        for r_gate, rh in (operands, operands[::-1]) if operands else ():
            rh_form = reader.read(rh)
            if rh_form is not None and rh_form.kernel is None and rh_form.recurrent is not None:
                rh_form = rh_form.scaled(factor)
                return r_gate, LinearForm(x_form.kernel, rh_form.recurrent, x_form.bias, rh_form.bias), 1
        return None
    reset_h = _mul_operands(graph, skip_identity(graph, r_part.a))  # (r * h) R_h
    sources = [reader.step_source(t) for t in reset_h or ()]
    if sources.count("h") == 1:
        r_gate = reset_h[1 - sources.index("h")]
        rh_form = LinearReader(graph, x_item, skip_identity(graph, r_part.a)).read_term((factor, r_part))
        if rh_form is not None and rh_form.kernel is None and rh_form.recurrent is not None:
            # with linear_before_reset=0, ONNX adds Rb outside the product, as a bias here would be
            return r_gate, LinearForm(x_form.kernel, rh_form.recurrent, x_form.bias, rh_form.bias), 0
    return None


def _read_simple_rnn_cell(graph, x_item, h_prev, h_new):
    """Gate form and activation from ``h_new = act(x W + h R + b)``."""
    read = _read_gate(graph, LinearReader(graph, x_item, h_prev), h_new, "RNN")
    if isinstance(read, NoMatch):
        return read
    act, form = read
    return CellAlgebra("RNN", {"h": form}, (act,))


# ---------------------------------------------------------------------------------------------
# main graph

def layer_name(while_node) -> str:
    """Keras layer path from the While op's name ("model/lstm/PartitionedCall/while" -> "lstm")."""
    parts = [p for p in while_node.name.split("/")
             if p not in ("while", "PartitionedCall", "StatefulPartitionedCall")]
    return "/".join(parts[1:]) if len(parts) > 1 else (parts[0] if parts else while_node.name)


def match_loop(graph, while_node, body: BodyMatch, condition=None) -> Union[MaskedRecurrentLayer, NoMatch]:
    """Check how the While op is fed and consumed, resolve weights, describe the layer.

    ``condition``: what :func:`.trip.read_condition` read off the loop's condition graph."""
    refused = body.refused  # an activation the native ops compute wrongly (one of REFUSED_ACTIVATION_REASONS)
    if refused:
        return NoMatch(refused)
    x_list = while_node.input[body.x_list_index]
    x, x_reversed = _list_source(graph, x_list)
    if x is None:
        return NoMatch("the input list is not built from a tensor")
    if graph.get_dtype(x) != TensorProto.FLOAT:
        return NoMatch("the input is not float32")
    mask_tm, mask_reversed = _list_source(graph, while_node.input[body.mask_list_index])
    mask = _batch_major_mask(graph, mask_tm)
    if isinstance(mask, NoMatch):
        return mask
    if x_reversed != mask_reversed and (graph.get_shape(x) or [-1])[0] != 1:
        return NoMatch("only one of the input and the mask is reversed in time")
    # over one step (static), reversing is the identity, and TensorFlow drops one ReverseV2 or both
    if not _is_zero_scalar(graph, while_node.input[body.time_index]):
        return NoMatch("the loop does not start at step 0")
    list_tensor = producer(graph, while_node.input[body.x_list_index]).input[0]  # x, or x reversed in time
    time_axis = _time_axis(graph, [x, list_tensor])
    steps = trip_count_reason(graph, while_node, condition, body.counters, body.invariants, time_axis)
    if steps is not None:
        return NoMatch(steps)
    if not _reserves_one_element_per_output(graph, while_node.input[body.output_list_index], body, time_axis):
        return NoMatch(OUTPUT_LIST_REASON)
    if not _is_zeros(graph, while_node.input[body.masked_output_index]):
        return NoMatch("the output at masked steps does not start as zeros")

    cells = _resolve_cells(graph, while_node, body)
    if isinstance(cells, NoMatch):
        return cells

    used = _consumed_outputs(graph, while_node)
    roles = {body.output_list_index, body.output_index, *body.state_indices}
    unexpected = sorted(set(used) - roles)
    if unexpected:
        return NoMatch(f"loop outputs {unexpected} are consumed outside the layer")
    list_out = while_node.output[body.output_list_index]
    stacks = graph.find_output_consumers(list_out)
    if any(n.type != "TensorListStack" for n in stacks):
        return NoMatch("the output list is read other than by TensorListStack")

    return MaskedRecurrentLayer(
        layer=layer_name(while_node), while_node=while_node, cells=cells,
        direction="reverse" if x_reversed or mask_reversed else "forward",
        x_reader=_list_reader(graph, x_list, x_reversed),
        x_source=_batch_major_source(graph, x), mask=mask,
        mask_post_padded=_is_sequence_mask_over_time(graph, mask, time_axis),
        output_carried=body.output_carried,
        sequence_outputs=[n.output[0] for n in stacks], writes_sequence=body.writes_sequence,
        last_output=while_node.output[body.output_index])


def _resolve_cells(graph, while_node, body: BodyMatch) -> Union[tuple, NoMatch]:
    """Each cell's :class:`RecurrentCell`, bottom to top, or why not: its weights are resolved, and
    a stacked cell must read as many inputs as the cell below has units."""
    cells = []
    for cell in body.cells:
        weights = _resolve_weights(graph, while_node, cell.kind, cell.cell.gates)
        if isinstance(weights, NoMatch):
            return weights
        kernel, recurrent, bias, recurrent_bias = weights
        states = [i for i in (cell.h_index, cell.c_index) if i is not None]
        cells.append(RecurrentCell(
            kind=cell.kind, hidden_size=recurrent[GATES[cell.kind][0]].shape[0], kernel=kernel,
            recurrent=recurrent, bias=bias, recurrent_bias=recurrent_bias, activations=cell.cell.activations,
            linear_before_reset=cell.cell.linear_before_reset, while_node=while_node,
            h_input=cell.h_index, c_input=cell.c_index,
            zero_initial_state=all(_is_zeros(graph, while_node.input[i]) for i in states),
            final_h=while_node.output[cell.h_index],
            final_c=None if cell.c_index is None else while_node.output[cell.c_index]))
        if len(cells) > 1 and cells[-1].input_size != cells[-2].hidden_size:
            return NoMatch("a stacked cell's kernel does not take the units of the cell below as its input")
    return tuple(cells)


def _list_source(graph, tensor) -> tuple:
    """(time-major tensor a TensorList is made of, whether it was first reversed in time)."""
    node = producer(graph, tensor)
    if node is None or node.type != "TensorListFromTensor":
        return None, False
    source = producer(graph, node.input[0])
    if source is not None and source.type == "ReverseV2" and _const_value(graph, source.input[1]) in (0, [0]):
        return source.input[0], True
    return node.input[0], False


def _list_reader(graph, tensor, reversed_in_time):
    """The node that reads the tensor a TensorList ``tensor`` is made of (see :func:`_list_source`)."""
    node = producer(graph, tensor)
    return producer(graph, node.input[0]) if reversed_in_time else node


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


def _is_sequence_mask_over_time(graph, mask: str, time_axis: TimeAxis) -> bool:
    """Is ``mask`` ``sequence_mask(lengths, T)`` with T provably the layer's number of steps?

    ``Less(Range(0, maxlen, 1), lengths[:, None])`` is post-padded by construction; the proof
    needs maxlen to be the length of a tensor's time axis (the layer's input, what an Embedding
    looked up...), or a constant equal to a known static length.
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
    return is_step_count(graph, steps.input[1], time_axis)


OUTPUT_LIST_REASON = "the output list does not hold exactly one element per time step (or one, for the last output)"


def _reserves_one_element_per_output(graph, output_list: str, body: BodyMatch, time_axis: TimeAxis) -> bool:
    """Is the list the loop writes its outputs to reserved with T elements (one per step; Keras's
    ``return_sequences=True``) or with one (the last output only)? Else the stacked list is longer
    than what the native op returns."""
    reserve = producer(graph, output_list)
    if reserve is None or reserve.type != "TensorListReserve":
        return False
    size = reserve.input[1]
    if body.writes_sequence:
        return is_step_count(graph, size, time_axis)
    return _const_value(graph, size) in (1, [1])


def _time_axis(graph, time_major: list) -> TimeAxis:
    """Every ``(tensor, axis)`` provably as long as the time axis of the ``time_major`` tensors (all
    the same length, on axis 0), found going back through the ops that keep that axis: casts,
    transposes, reversals, concatenations along another axis, an Embedding lookup; and the static
    number of steps, from those tensors' shapes or the length of a recurrent layer's stacked outputs."""
    dims, pending = set(), [(t, 0) for t in time_major]
    while pending:
        tensor, axis = pending.pop()
        if (tensor, axis) in dims:
            continue
        dims.add((tensor, axis))
        node = producer(graph, tensor)
        pending.extend(_same_axis_inputs(graph, node, axis) if node is not None else ())
    static = {_static_length(graph, tensor, axis) for tensor, axis in dims} - {None}
    return TimeAxis(frozenset(dims), static.pop() if len(static) == 1 else None)


def _same_axis_inputs(graph, node, axis: int) -> list:
    """The ``(input, axis)`` pairs whose axis is as long as axis ``axis`` of ``node``'s output."""
    if node.type in ("Identity", "Cast", "ReverseV2"):
        return [(node.input[0], axis)]
    if node.type == "Transpose":
        perm = _const_value(graph, node.input[1])
        return [(node.input[0], perm[axis])] if isinstance(perm, list) and axis < len(perm) else []
    if node.type == "ConcatV2":
        along, rank = _const_value(graph, node.input[-1]), rank_of(graph, node.output[0])
        if not isinstance(along, int) or not rank or along % rank == axis:
            return []
        return [(t, axis) for t in node.input[:-1]]
    if node.type == "GatherV2" and graph.is_const(node.input[0]) and _is_zero_scalar(graph, node.input[2]):
        return [(node.input[1], axis)] if axis < (rank_of(graph, node.input[1]) or 0) else []  # embedding lookup: [B, T] -> [B, T, E]
    if node.type == "SelectV2" and _is_id_wraparound(graph, node):
        return [(node.input[2], axis)]
    return []


ELEMENTWISE = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum")  # what Bidirectional's merges use


def _static_length(graph, tensor: str, axis: int) -> Optional[int]:
    """The static length of ``tensor``'s ``axis``: from its shape, or for a recurrent layer's stacked
    outputs (whose shape TensorFlow leaves unknown), from the size its output list was reserved with,
    going back through the ops that keep the axis and through elementwise merges (a Bidirectional
    layer's sum, average or product of its halves)."""
    shape = graph.get_shape(tensor)
    if shape is not None and len(shape) > axis and shape[axis] is not None and shape[axis] >= 0:
        return shape[axis]
    node = producer(graph, tensor)
    if node is None:
        return None
    if node.type == "TensorListStack":
        size = _stacked_list_size(graph, node.input[0]) if axis == 0 else None
        value = _const_value(graph, size) if size is not None else None
        return value if isinstance(value, int) else None
    if node.type in ELEMENTWISE:
        return _broadcast_length(graph, node, axis)
    lengths = {_static_length(graph, t, a) for t, a in _same_axis_inputs(graph, node, axis)} - {None}
    return lengths.pop() if len(lengths) == 1 else None


def _broadcast_length(graph, node, axis: int) -> Optional[int]:
    """The static length of axis ``axis`` of a broadcasting elementwise op's output: an operand's
    length above 1 is the output's (any other operand has it or 1); 1 only when every operand has 1.
    Operands of another rank (a bias, a scalar) are left aside only when it is known."""
    rank = rank_of(graph, node.output[0])
    lengths = set()
    for operand in node.input:
        operand_rank = rank_of(graph, operand)
        if operand_rank is None or rank is None:
            return None
        if operand_rank == rank:
            lengths.add(_static_length(graph, operand, axis))
        elif operand_rank >= rank - axis:  # a lower-rank operand aligned to the last axes reaches it
            return None
    above_one = {n for n in lengths if n is not None and n > 1}
    if len(above_one) == 1:
        return above_one.pop()
    return 1 if lengths == {1} else None


def _stacked_list_size(graph, output_list: str) -> Optional[str]:
    """The number of elements of a masked recurrent loop's output list after the loop: the size it
    was reserved with, since the body (a :class:`BodyMatch`) only writes into it in place."""
    loop = producer(graph, output_list)
    if loop is None or loop.type not in ("While", "StatelessWhile"):
        return None
    body_graph = find_function(loop.get_attr_str("body"))
    body = getattr(body_graph, BODY_MATCH_ATTR, None) if body_graph is not None else None
    index = list(loop.output).index(output_list)
    if not isinstance(body, BodyMatch) or body.output_list_index != index:
        return None
    reserve = producer(graph, loop.input[index])
    return reserve.input[1] if reserve is not None and reserve.type == "TensorListReserve" else None


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


def _resolve_weights(graph, while_node, kind: str, gates: dict):
    """(kernel, recurrent, bias or None, recurrent_bias) arrays by gate, or NoMatch."""
    def input_value(index):
        tensor = while_node.input[index]
        return graph.get_tensor_value(tensor, as_list=False) if graph.is_const(tensor) else None

    def resolve_all(field):
        refs = {g: getattr(form, field) for g, form in gates.items() if getattr(form, field) is not None}
        return {g: ref.resolve(input_value) for g, ref in refs.items()}

    kernel, recurrent, bias, recurrent_bias = (resolve_all(field) for field in
                                               ("kernel", "recurrent", "bias", "recurrent_bias"))
    if any(v is None for part in (kernel, recurrent, bias, recurrent_bias) for v in part.values()):
        return NoMatch("the weights are not constants")
    first = GATES[kind][0]
    hidden = recurrent[first].shape[0] if recurrent[first].ndim == 2 else -1
    input_size = kernel[first].shape[0] if kernel[first].ndim == 2 else -1
    for part in (bias, recurrent_bias):
        for g, value in part.items():
            if value.size == 1:  # a folded scalar constant alone (use_bias=False, hard_sigmoid's + 3)
                part[g] = np.full(hidden, value.reshape(-1)[0], value.dtype)
    if bias:  # a gate with no bias term adds zero: Keras 3 folds hard_sigmoid's + 3 into the z and r
        # sums of a GRU with use_bias=False, but not into its candidate's (found by the fuzzer)
        bias = {g: bias[g] if g in bias else np.zeros(hidden, np.float32) for g in GATES[kind]}
    for g in GATES[kind]:
        if kernel[g].shape != (input_size, hidden) or recurrent[g].shape != (hidden, hidden) or \
                any(g in part and part[g].shape != (hidden,) for part in (bias, recurrent_bias)):
            return NoMatch(f"the gate weights do not have {KERAS_NAMES[kind]} shapes")
        if any(a.dtype != np.float32 for a in (kernel[g], recurrent[g])):
            return NoMatch("the weights are not float32")
    return kernel, recurrent, bias or None, recurrent_bias
