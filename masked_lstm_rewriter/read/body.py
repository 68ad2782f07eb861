# SPDX-License-Identifier: Apache-2.0
"""Read a masked Keras recurrent step out of a While body graph (still in TensorFlow ops).

tf2onnx hands custom rewriters each While body first, as a graph of its own. :func:`read_body`
reads it into a :class:`BodyMatch` (which loop variable is what, and each cell's algebra, read by
its kind's module in :mod:`..cells`), kept on the body graph until the main graph's While op is
read (:mod:`.loop`), or returns the :class:`~..failure.Refusal` that says why not.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from onnx import TensorProto
from tf2onnx.graph_matcher import GraphMatcher, OpTypePattern

from .. import targets
from ..cells import CellAlgebra, read_cell
from ..failure import Refusal
from ..graph import is_increment, is_zero_scalar, next_value, passes_through, producer, skip_identity


BODY_MATCH_ATTR = "_masked_lstm_rewriter_body"
BODY_MASKED_ATTR = "_masked_lstm_rewriter_body_masked"  # read before tf2onnx turns the body into ONNX ops


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
class _Step:
    """What a step computes, masked or not, by tensor and loop variable."""

    time: str                # the step counter the lists are read with (a body input)
    h_new: str               # the top cell's new h: what the step writes
    carried: dict            # state loop variable -> its new value (at a valid step)
    output_index: int        # the loop variable carrying the step's output
    masked_output_index: Optional[int]   # what a masked step outputs; None: unmasked
    mask_list: Optional[str]             # the mask's TensorList; None: unmasked


@dataclasses.dataclass(frozen=True)
class BodyMatch:
    """What one While body computes, by loop-variable index (body inputs == While inputs)."""

    time_index: int          # the step counter the lists are read and written with
    x_list_index: int        # TensorList of the time-major input
    mask_list_index: Optional[int]  # TensorList of the time-major mask ([T, B, 1] bool); None: unmasked
    cells: tuple             # CellMatch, bottom to top: each reads the one below's h (the first, x);
                             # one for a layer, several for keras.layers.RNN([cell, cell, ...])
    output_index: int        # the step's output (the last one, after the loop)
    masked_output_index: Optional[int]  # what a masked step outputs: output_index (carried) or a loop
                             # input; None: unmasked
    output_list_index: int   # TensorList the outputs are written to
    writes_sequence: bool    # one list element per step (else a single slot, return_sequences=False)
    counters: frozenset = frozenset()    # loop variables the body advances by one (step counters)
    invariants: frozenset = frozenset()  # loop variables the body passes through unchanged
    refused: Optional[str] = None        # why the layer stays a Loop although its step was read

    @property
    def masked(self) -> bool:
        return self.mask_list_index is not None

    @property
    def top(self) -> CellMatch:
        """The cell whose h is the step's output (the only one of a single layer)."""
        return self.cells[-1]

    @property
    def output_carried(self) -> bool:
        """Keras repeats the previous output at a masked step (else: zero_output_for_mask)."""
        return self.masked_output_index == self.output_index

    @property
    def state_indices(self) -> list:
        """Every cell's state loop variables, in Keras's order of the returned states."""
        return [i for c in self.cells for i in (c.h_index, c.c_index) if i is not None]


def _state_select_pattern():
    """SelectV2(mask_t, new_value, previous_value): how Keras skips a masked step."""
    mask_item = OpTypePattern("TensorListGetItem", name="mask_item",
                              inputs=[OpTypePattern("Placeholder", name="mask_list"),
                                      OpTypePattern("Placeholder", name="time"), "*"])
    return OpTypePattern("SelectV2|Select", name="select",
                         inputs=[mask_item, OpTypePattern("*", name="new"), OpTypePattern("*", name="old")])


def is_masked_recurrent_body(graph) -> bool:
    """Does this graph look like the body of a masked Keras recurrent loop: it writes a list and reads a
    mask per step? (Keras's LSTM, GRU and SimpleRNN select by it; a layer that uses it otherwise, such as
    ConvLSTM, is still one, and the reader says why it stays a Loop.)"""
    return any(n.type == "TensorListSetItem" for n in graph.get_nodes()) and _reads_a_mask(graph)


def is_unmasked_recurrent_body(graph) -> bool:
    """Does this graph look like the body of an unmasked Keras recurrent loop: one output list write
    per step, a float list read at a loop input (the step counter), and no mask?"""
    nodes = graph.get_nodes()
    reads = [n for n in nodes if n.type == "TensorListGetItem" and n.input[1] in graph.input_names
             and n.get_attr_value("element_dtype") != TensorProto.BOOL]
    return sum(n.type == "TensorListSetItem" for n in nodes) == 1 and len(reads) == 1 and not _reads_a_mask(graph)


PRODUCTS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Gemm")
_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def multiplies_a_state(graph) -> bool:
    """Does the step multiply a carried float value (a loop variable the body changes, as a cell's state)
    by something, as every recurrent cell does? A map, or a scan that multiplies only each step's input,
    does not: it is no recurrent layer."""
    states = {name for index, name in enumerate(graph.input_names)
              if graph.get_dtype(name) in _FLOATS and not passes_through(graph, index)}
    return any(states & ({tensor} | _ancestors(graph, tensor))
               for node in graph.get_nodes() if node.type in PRODUCTS for tensor in node.input)


def _reads_a_mask(graph) -> bool:
    """Does the step read a bool list (a mask, one element per step)?"""
    return any(n.type == "TensorListGetItem" and n.get_attr_value("element_dtype") == TensorProto.BOOL
               for n in graph.get_nodes())


def _mask_selects(graph):
    matcher = GraphMatcher(_state_select_pattern(), allow_reorder=False)
    return [m for m in matcher.match_ops(graph.get_nodes())
            if m.get_op("mask_item").get_attr_value("element_dtype") == TensorProto.BOOL]


def _loop_output_producer(graph, index: int):
    """The node computing loop variable ``index``'s next value (None when there is no such output)."""
    new = next_value(graph, index)
    return None if new is None else producer(graph, skip_identity(graph, new))


def _input_index(graph, tensor: str) -> Optional[int]:
    names = graph.input_names
    return names.index(tensor) if tensor in names else None


MASK_USE_REASON = "the step reads a mask but does not select its output and states by it as Keras's layers do"
CONVOLUTIONS = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv")  # TensorFlow's (Conv1D is a Conv2D), ONNX's
CONVOLUTION_REASON = ("the step convolves its input and state (a convolutional recurrent layer such as "
                      "ConvLSTM1D/2D/3D): ONNX has no native op for it")


def read_body(graph) -> Union[BodyMatch, Refusal]:
    """Read a masked LSTM, GRU or SimpleRNN step out of a While body graph, or say why not.

    A body with an activation the native ops compute wrongly (``targets.REFUSED_ACTIVATION_REASONS``)
    is still read, and marked ``refused``: :func:`.loop.read_loop` leaves it a Loop for that reason,
    while a layer stacked above can still read its number of steps off its output list. A graph
    shape the reader did not foresee is a reason too, never a crash."""
    if any(n.type in CONVOLUTIONS for n in graph.get_nodes()):
        return Refusal(CONVOLUTION_REASON)
    refused = next((targets.REFUSED_ACTIVATION_REASONS[n.type] for n in graph.get_nodes()
                    if n.type in targets.REFUSED_ACTIVATION_REASONS), None)
    try:
        body = _read_step(graph)
    except Refusal as refusal:
        return Refusal(refused) if refused else refusal
    except Exception as error:  # pylint: disable=broad-except
        return Refusal(refused) if refused else Refusal(f"unexpected loop body ({type(error).__name__}: {error})")
    return dataclasses.replace(body, refused=refused) if refused else body


def _read_step(graph) -> BodyMatch:
    """:func:`read_body` without the activation refusal; raises a Refusal."""
    writes = [n for n in graph.get_nodes() if n.type == "TensorListSetItem"]
    if len(writes) != 1:
        raise Refusal(f"expected one output list write per step, found {len(writes)}")
    write = writes[0]
    masked = bool(_mask_selects(graph))
    if not masked and _reads_a_mask(graph):
        raise Refusal(MASK_USE_REASON)
    step = _masked_step(graph, write) if masked else _unmasked_step(graph, write)
    time, h_new, carried = step.time, step.h_new, step.carried

    x_items = [n for n in graph.get_nodes() if n.type == "TensorListGetItem" and n.input[1] == time
               and n.get_attr_value("element_dtype") != TensorProto.BOOL]
    dtype = x_items[0].get_attr_value("element_dtype") if len(x_items) == 1 else None
    if dtype in targets.DTYPE_REASONS:
        raise Refusal(targets.DTYPE_REASONS[dtype], x_items[0])
    if dtype != TensorProto.FLOAT:
        raise Refusal("the step input is not a single float32 list read (dtype other than float32?)")
    x_item = x_items[0]
    stack = state_stack(graph, carried, h_new, x_item.output[0])
    indices = [_input_index(graph, t) for t in (time, x_item.input[0], write.input[0])]
    mask_list_index = None if step.mask_list is None else _input_index(graph, step.mask_list)
    if None in indices or (step.mask_list is not None and mask_list_index is None):
        raise Refusal("the lists or the step counter are not loop variables")
    time_index, x_list_index, output_list_index = indices
    if write.input[1] == time:
        writes_sequence = True
    elif is_zero_scalar(graph, write.input[1]):
        writes_sequence = False
    else:
        raise Refusal("outputs are written at an unrecognised position")
    if not is_increment(_loop_output_producer(graph, time_index), time):
        raise Refusal("the step counter does not advance by one")
    if _loop_output_producer(graph, output_list_index) is not write:
        raise Refusal("the output list carried to the next step is not the one the step wrote")

    cells = read_cells(graph, x_item.output[0], stack, carried)
    variables = range(len(graph.input_names))
    return BodyMatch(time_index=time_index, x_list_index=x_list_index, mask_list_index=mask_list_index,
                     cells=cells, output_index=step.output_index,
                     masked_output_index=step.masked_output_index, output_list_index=output_list_index,
                     writes_sequence=writes_sequence,
                     counters=frozenset(i for i in variables if is_increment(_loop_output_producer(graph, i),
                                                                               graph.input_names[i])),
                     invariants=frozenset(i for i in variables if passes_through(graph, i)))


def _masked_step(graph, write) -> _Step:
    """The step of a masked loop: each state is ``SelectV2(mask, new, previous)``, and so is the output."""
    selects = {m.get_op("select").output[0]: m for m in _mask_selects(graph)}
    out_sel = selects.get(skip_identity(graph, write.input[2]))
    if out_sel is None:
        raise Refusal("the step output is not selected by the mask", write)
    output_index, masked_output_index = _output_variables(graph, out_sel)
    return _Step(time=out_sel.get_op("time").output[0], h_new=out_sel.get_op("new").output[0],
                 carried=_carried_states(graph, selects, out_sel), output_index=output_index,
                 masked_output_index=masked_output_index, mask_list=out_sel.get_op("mask_item").input[0])


def _unmasked_step(graph, write) -> _Step:
    """The step of an unmasked loop: the step counter is the index the input list is read at; each
    state is a loop variable whose next value is computed in the step from the step's input or
    from other states (not a counter, a list or a weight); the output is what the step writes."""
    reads = [n for n in graph.get_nodes() if n.type == "TensorListGetItem" and n.input[1] in graph.input_names
             and n.get_attr_value("element_dtype") != TensorProto.BOOL]
    if len(reads) != 1:
        raise Refusal("the step input is not a single float32 list read (dtype other than float32?)")
    time, h_new = reads[0].input[1], skip_identity(graph, write.input[2])
    lists = {reads[0].input[0], write.input[0]}
    carried = {}
    for index, name in enumerate(graph.input_names):
        new = _loop_output_producer(graph, index)
        if new is None or name == time or name in lists or passes_through(graph, index) or \
                is_increment(new, name):
            continue
        carried[index] = skip_identity(graph, next_value(graph, index))
    outputs = [i for i, new in carried.items() if new == h_new]
    if len(outputs) != 1 and _selects_by_step_counter(graph, h_new, time):
        raise Refusal(LENGTHS_SELECT_REASON, producer(graph, h_new))
    if len(outputs) != 1:
        raise Refusal("the step output is not a loop variable selected from a loop input", write)
    return _Step(time=time, h_new=h_new, carried=carried, output_index=outputs[0], masked_output_index=None,
                 mask_list=None)


LENGTHS_SELECT_REASON = ("the step selects its output by comparing the step counter with lengths per row "
                         "(TensorFlow's dynamic_rnn(sequence_length=) with a cell tf2onnx does not convert), "
                         "which the reader does not read; a Keras layer with a mask is read. tf2onnx's Loop "
                         "returns outputs for max(sequence_length) steps only, where TensorFlow returns T "
                         "(zeros after): a batch whose rows are all shorter than T gets fewer steps")


def _selects_by_step_counter(graph, output: str, time: str) -> bool:
    """Is the step's ``output`` a ``Select`` on a comparison of the step counter ``time`` (with lengths)?"""
    select = producer(graph, output)
    condition = None if select is None or select.type not in ("Select", "SelectV2") else \
        producer(graph, skip_identity(graph, select.input[0]))
    return condition is not None and condition.type in ("GreaterEqual", "Greater", "Less", "LessEqual") and \
        time in [skip_identity(graph, t) for t in condition.input]


def _carried_states(graph, selects: dict, out_sel) -> dict:
    """Loop variable -> its new value at a valid step, for each state: ``SelectV2(mask, new, previous)``
    (on the step output's mask) whose result is carried to the next step."""
    carried = {}
    for m in selects.values():
        old = m.get_op("old")
        index = _input_index(graph, old.output[0]) if old.is_graph_input() else None
        if m.get_op("mask_item") is not out_sel.get_op("mask_item") or index is None or m is out_sel:
            continue
        if _loop_output_producer(graph, index) is m.get_op("select"):
            carried[index] = m.get_op("new").output[0]
    return carried


def _output_variables(graph, out_sel) -> tuple:
    """(the loop variable carrying the step's output, the one a masked step outputs)."""
    select = out_sel.get_op("select")
    output_vars = [i for i in range(len(graph.outputs)) if _loop_output_producer(graph, i) is select]
    out_old = out_sel.get_op("old")
    masked_output_index = _input_index(graph, out_old.output[0]) if out_old.is_graph_input() else None
    if len(output_vars) != 1 or masked_output_index is None:
        raise Refusal("the step output is not a loop variable selected from a loop input", select)
    output_index = output_vars[0]
    if masked_output_index != output_index and not passes_through(graph, masked_output_index):
        raise Refusal("the output at masked steps is computed in an unrecognised way", select)
    return output_index, masked_output_index


STACK_REASON = ("the loop's states do not form a stack of cells (keras.layers.RNN([cell, ...]), MultiRNNCell), "
                "each reading the output of the one below")


def state_stack(graph, carried: dict, h_top: str, x_item: str) -> list:
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
        raise Refusal("could not find the recurrent states among the loop variables")
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
        raise Refusal("could not find the recurrent states among the loop variables")
    if left:
        raise Refusal(STACK_REASON)
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


def read_cells(graph, x_item: str, stack: list, carried: dict) -> tuple:
    """Each cell's algebra, bottom to top: the first reads ``x_item``, the others the new h of
    the cell below. A stacked cell that does not read says which one it is."""
    cells, step_input = [], x_item
    for k, (h_index, c_index) in enumerate(stack):
        try:
            cell = read_cell(graph, step_input, graph.input_names[h_index], carried[h_index],
                             None if c_index is None else (graph.input_names[c_index], carried[c_index]))
        except Refusal as refusal:
            if len(stack) == 1:
                raise
            raise Refusal(f"in a stack of {len(stack)} cells (keras.layers.RNN([cell, ...]), MultiRNNCell), "
                          f"cell {k + 1}: {refusal.reason}", refusal.node) from None
        cells.append(CellMatch(h_index, c_index, cell))
        step_input = carried[h_index]
    return tuple(cells)
