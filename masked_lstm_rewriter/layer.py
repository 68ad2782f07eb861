# SPDX-License-Identifier: Apache-2.0
"""The typed description of one masked recurrent layer: what a reader produces and the planner and
emitter consume, whatever source the layer was read from."""

from __future__ import annotations

import dataclasses
from typing import Optional

from .cells import kind_of
from .layer_names import keras_path


@dataclasses.dataclass
class RecurrentCell:
    """One cell of a masked recurrent loop, its weights resolved: what one native node needs."""

    kind: str                # the cell kind's name (cells.kind_of): "LSTM", "GRU" or "RNN"
    hidden_size: int
    kernel: dict             # gate -> [input_size, hidden] array, Keras layout
    recurrent: dict          # gate -> [hidden, hidden]
    bias: Optional[dict]     # gate -> [hidden], or None (the input side's bias, ONNX Wb)
    recurrent_bias: dict     # gate -> [hidden] for gates with a separate recurrent bias (ONNX Rb)
    activations: tuple       # Activations in the ONNX op's order (LSTM f, g, h; GRU f, g; RNN f)
    attributes: tuple        # the kind's own ONNX attributes, (name, value) pairs (a GRU's linear_before_reset)
    graph: object            # tf2onnx's graph the cell was read from
    h_at: Optional[tuple]    # (node, input index) holding the initial h [B, H], read through the node
    c_at: Optional[tuple]    # (rewriting an encoder renames what a decoder starts from); c: LSTM only;
                             # None for zeros no tensor holds (TensorFlow folded them into the source)
    zero_initial_state: bool  # initial states are zeros by construction (no initial_state given)
    final_h: str             # While outputs: this cell's final h (and c)
    final_c: Optional[str]
    constants: dict = dataclasses.field(default_factory=dict)  # the kind's other weights, by name (resolved)
    # streaming (pipeline.streaming): the (input, output) graph names of each state, h then c, that the
    # cell starts from and returns; () otherwise
    streamed_states: tuple = ()

    @property
    def input_size(self) -> int:
        return next(iter(self.kernel.values())).shape[0]

    @property
    def op(self) -> str:
        """The native ONNX op."""
        return kind_of(self.kind).op

    @property
    def keras_name(self) -> str:
        return kind_of(self.kind).keras_name

    @property
    def carries_cell_state(self) -> bool:
        """Is the final cell state used, so that it must not depend on the runtime's padding? (A streamed
        LSTM returns it as a graph output.)"""
        if len(self.streamed_states) == 2:
            return True
        return self.final_c is not None and (bool(self.graph.find_output_consumers(self.final_c))
                                             or self.final_c in self.graph.outputs)

    @property
    def initial_h(self) -> Optional[str]:
        if self.h_at is None:
            return None
        node, index = self.h_at
        return node.input[index]

    @property
    def initial_c(self) -> Optional[str]:
        if self.c_at is None:
            return None
        node, index = self.c_at
        return node.input[index]

    @property
    def initial_states(self) -> tuple:
        """The initial states the cell is given, h first (an LSTM's c after it), as its node takes them."""
        return tuple(state for state in (self.initial_h, self.initial_c) if state is not None)


@dataclasses.dataclass
class MaskedRecurrentLayer:
    """One Keras recurrent layer (an LSTM, GRU or SimpleRNN layer, or an RNN layer over stacked cells),
    read off tf2onnx's graph from a While loop or a cuDNN op: all the planner and emitter need."""

    layer: str
    while_node: object       # the node the layer was read from: a While op, or a CudnnRNNV3 op
    cells: tuple             # RecurrentCell, bottom to top: one native node each, each reading the
                             # sequence of the one below; the top cell's h is the layer's output
    direction: str           # "forward", or "reverse": the loop runs over the time-reversed
                             # input and mask (go_backwards, a Bidirectional's backward half)
    x_reader: object         # the node reading x (TensorListFromTensor, or go_backwards's ReverseV2)
    x_source: str            # the batch-major tensor x is transposed from (to pair directions)
    mask: Optional[str]      # batch-major mask [B, T], bool, in the model's time order (once prepared:
                             # see mask_layout); None: unmasked
    mask_post_padded: bool   # the mask is post-padded by construction (sequence_mask of lengths)
    output_carried: bool
    sequence_outputs: list   # tensors holding the stacked outputs, time-major [T or 1, B, H]
    writes_sequence: bool
    last_output: Optional[str]  # While output: last output
    x_time_major: Optional[str] = None  # x, where the source reads it batch-major (a cuDNN op)
    # with output_carried: a masked step before a row's first valid step outputs the top cell's
    # initial h (Keras on JAX carries the state as the output), not zeros (Keras on TensorFlow)
    output_starts_from_state: bool = False
    # how the source found ``mask``: [B, T] ("batch"); [T, B] or [T, B, 1] ("time": a time-major layer's
    # own mask, tf_keras's time_major=True); [B, T, 1] ("column"). sources.source.prepare_masks makes the
    # [B, T] bool mask of the others before planning.
    mask_layout: str = "batch"

    left_as = "a Loop"  # what tf2onnx keeps when the layer is not rewritten
    remedy = None       # what a user can do instead then, besides what the reason says
    note = None         # what the report says of the layer rewritten, besides how (a difference from its source)

    @property
    def top(self) -> RecurrentCell:
        """The cell whose h is the layer's output."""
        return self.cells[-1]

    @property
    def input_size(self) -> int:
        return self.cells[0].input_size

    @property
    def kinds(self) -> str:
        """The cell kinds, bottom to top: "LSTM", or "LSTM+GRU" for stacked cells."""
        return "+".join(cell.kind for cell in self.cells)

    @property
    def x(self) -> str:
        """The time-major input [T, B, I] in the model's time order, read through the node
        that reads it: with static shapes TensorFlow can drop the transposes between two stacked
        layers (T = B = 1), and rewriting the lower one then renames what the upper one reads."""
        return self.x_time_major or self.x_reader.input[0]

    def batch_axes(self) -> dict:
        """Tensor -> its batch axis, for every tensor the source computes for the layer (they have its
        input's batch, and rewriting the layer removes them)."""
        axes = {tensor: 1 for tensor in self.sequence_outputs}
        axes.update({tensor: 0 for tensor in [self.last_output] +
                     [state for cell in self.cells for state in (cell.final_h, cell.final_c)] if tensor})
        return axes

    def describe(self) -> str:
        """For the log: "LSTM layer 'enc' (16 units)", "RNN layer 'rnn' (stacked cells LSTM(4), GRU(3))"."""
        if len(self.cells) == 1:
            return f"{self.top.keras_name} layer '{keras_path(self.layer)}' ({self.top.hidden_size} units)"
        cells = ", ".join(f"{cell.keras_name}({cell.hidden_size})" for cell in self.cells)
        return f"RNN layer '{keras_path(self.layer)}' (stacked cells {cells})"
