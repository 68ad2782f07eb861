# SPDX-License-Identifier: Apache-2.0
"""What a cell kind declares: how its step reads, its ONNX op, weight layout and states."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

# added to the driven gates' pre-activations at padded steps when the cell state is carried over
# them: far past where sigmoid and hard_sigmoid saturate, and finite in float16 too
PADDING_DRIVE = 1e4


STATE_NAMES = ("h", "c")  # a recurrent op's states, in its order (initial_h, initial_c; Y_h, Y_c)

@dataclasses.dataclass(frozen=True)
class CellAlgebra:
    """One step of a cell as read: its kind (ONNX op), gate forms (Keras gate names), ONNX activations,
    and the kind's own ONNX attributes (a GRU's ``linear_before_reset``)."""

    kind: str                # the cell kind's name (CellKind.name): "LSTM", "GRU" or "RNN"
    gates: dict              # gate name -> LinearForm
    activations: tuple       # in the ONNX op's order: LSTM (f, g, h), GRU (f, g), RNN (f,)
    attributes: tuple = ()   # (name, value) pairs the native node gets besides the common ones
    constants: tuple = ()    # (name, ConstRef) of weights the kind reads besides its gate forms (a peephole)

    @property
    def linear_before_reset(self) -> int:
        """GRU: the reset gate multiplies ``h @ R + Rb`` (Keras ``reset_after=True``); 0 for the others."""
        return dict(self.attributes).get("linear_before_reset", 0)


@dataclasses.dataclass(frozen=True)
class CellKind:
    """One kind of recurrent cell, as the reader, the planner and the emitter need it.

    ``read(graph, x_item, h_prev, h_new, cell_state)`` reads a step into a :class:`CellAlgebra`;
    ``cell_state`` is ``(c_prev, c_new)`` for a kind with two states, else None. It returns None
    when the step does not have the kind's shape (then the next kind is tried), and raises a
    :class:`~..failure.Refusal` when it has, but a part is not understood."""

    name: str                # the kind's name in the registry and in reports ("LSTM", "GRU", "RNN")
    op: str                  # the native ONNX op (two kinds may share one: an LSTM with peepholes)
    keras_name: str          # the Keras layer ("SimpleRNN" for "RNN")
    keras_gates: tuple       # Keras's order of the gate blocks in its kernels
    onnx_gates: tuple        # the ONNX op's order of the gate blocks in W, R and B
    states: int              # 2: h and c (LSTM); 1: h
    read: Callable
    # the gates an extra input column drives at padded steps to carry the cell state over them,
    # by sign (-1: to 0, +1: to 1); None for a kind without a cell state
    padding_drive: Optional[dict] = None
    # cuDNN's name for the kind (CudnnRNNV3's rnn_mode) and its order of the gate blocks in the op's
    # params; None for a kind Keras never runs on cuDNN
    cudnn_mode: Optional[str] = None
    cudnn_gates: tuple = ()
    # the op's activations per direction when its node has no activations attribute (ONNX's defaults)
    default_activations: tuple = ()

    @property
    def outputs(self) -> int:
        """The native node's outputs: Y and each final state."""
        return 1 + self.states

    @property
    def state_names(self) -> tuple:
        """Each state's name, in the op's order of initial states and outputs: ("h",) or ("h", "c")."""
        return STATE_NAMES[:self.states]

    def onnx_weights(self, cell, padding_column: bool = False) -> tuple:
        """W [1, G*H, I], R [1, G*H, H] and B [1, 2*G*H] of ``cell`` (a :class:`~..layer.RecurrentCell`)
        in the ONNX op's gate order.

        Keras's bias is ONNX's Wb; Rb is zeros except where the layer has a separate recurrent bias
        (a GRU with ``reset_after=True``, whose reset gate multiplies ``h @ R + Rb``). With
        ``padding_column``, W gets one more input column: PADDING_DRIVE into each gate the kind
        drives, with its sign (an LSTM's input gate to 0, its forget gate to 1)."""
        order = self.onnx_gates
        zeros = np.zeros(cell.hidden_size, np.float32)
        kernels = [cell.kernel[g].T for g in order]
        if padding_column:
            drive = {gate: sign * PADDING_DRIVE for gate, sign in self.padding_drive.items()}
            kernels = [np.concatenate([k, np.full((cell.hidden_size, 1), drive.get(g, 0.0), np.float32)], axis=1)
                       for g, k in zip(order, kernels)]
        w = _stack_gates(kernels)
        r = _stack_gates([cell.recurrent[g].T for g in order])
        wb = _stack_gates([zeros if cell.bias is None else cell.bias[g] for g in order])
        rb = _stack_gates([cell.recurrent_bias.get(g, zeros) for g in order])
        return w, r, np.concatenate([wb, rb], axis=1)

    def extra_inputs(self, cell) -> tuple:  # pylint: disable=unused-argument
        """``(name, array)`` of each input the native node takes after the initial states, made from
        the cell's ``constants`` (an LSTM with peepholes: P); none for the kinds here. A kind that
        needs some overrides this."""
        return ()


def _stack_gates(blocks: list) -> np.ndarray:
    """Gate blocks one after the other along the first axis, with a leading direction axis."""
    return np.concatenate(blocks, axis=0)[np.newaxis].astype(np.float32)
