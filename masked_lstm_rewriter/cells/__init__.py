# SPDX-License-Identifier: Apache-2.0
"""The cell kinds: one module each (its step's algebra as the reader expects it, its ONNX op, gate
layout and states), listed once in :data:`KINDS`.

Adding a kind is a new module defining a :class:`~.kind.CellKind` and one line here. The body
reader tries the kinds in this order: a step with a cell state is read by the kinds with two
states, any other by the rest, the first whose shape it has.
"""

from __future__ import annotations

from . import gru, lstm, simple_rnn
from .kind import CellAlgebra, CellKind

KINDS = (lstm.KIND, gru.KIND, simple_rnn.KIND)
NATIVE_OPS = tuple(dict.fromkeys(kind.op for kind in KINDS))  # the native recurrent ops: LSTM, GRU, RNN
_BY_NAME = {kind.name: kind for kind in KINDS}
__all__ = ["KINDS", "NATIVE_OPS", "CellAlgebra", "CellKind", "kind_of", "read_cell"]


def kind_of(name: str) -> CellKind:
    """The cell kind of this name (a :class:`CellAlgebra`'s or a cell's ``kind``)."""
    return _BY_NAME[name]


def read_cell(graph, x_item: str, h_prev: str, h_new: str, cell_state=None) -> CellAlgebra:
    """The step's algebra, read by the first kind whose shape it has (an LSTM when there is a cell
    state ``(c_prev, c_new)``; else a GRU when ``h_new`` has the GRU's shape, else a SimpleRNN)."""
    states = 1 if cell_state is None else 2
    for kind in KINDS:
        if kind.states == states:
            algebra = kind.read(graph, x_item, h_prev, h_new, cell_state)
            if algebra is not None:
                return algebra
    raise AssertionError("the last kind of each state count reads every step")  # simple_rnn, lstm
