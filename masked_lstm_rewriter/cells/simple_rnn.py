# SPDX-License-Identifier: Apache-2.0
"""The SimpleRNN cell kind: ``h = act(x W + h R + b)``; ONNX ``RNN``, state h."""

from __future__ import annotations

from ..read.gates import read_gate
from ..read.linear import LinearReader
from .kind import CellAlgebra, CellKind


def read_simple_rnn_cell(graph, x_item, h_prev, h_new, cell_state=None):  # pylint: disable=unused-argument
    """Gate form and activation from ``h_new = act(x W + h R + b)``: any step with one state that is
    no GRU's, so this kind comes last."""
    act, form = read_gate(graph, LinearReader(graph, x_item, h_prev), h_new, "RNN")
    return CellAlgebra("RNN", {"h": form}, (act,))


KIND = CellKind(name="RNN", op="RNN", keras_name="SimpleRNN", keras_gates=("h",), onnx_gates=("h",), states=1,
                read=read_simple_rnn_cell, default_activations=("Tanh",))
