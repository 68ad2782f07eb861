# SPDX-License-Identifier: Apache-2.0
"""The batches ``verify`` feeds a model and its ONNX conversion (see :mod:`.verification`).

Each input of the reference (:class:`InputSpec`) gets a role from its dtype and rank
(:class:`InputRole`); what reads it comes from the reference's :class:`InputHints` (a Keras
model's layers, an ONNX reference's own graph) or else from the ONNX model's graph:

* token ids (integer ``[batch, time]``, or float ``[batch, time]`` that an ``Embedding`` or an ONNX
  ``Gather`` reads: tf_keras's ``Input`` is float32 unless told otherwise): drawn from
  ``[1, vocabulary)`` at valid steps, 0 (the ``mask_zero`` padding id) at padded ones. The
  vocabulary is the ``input_dim`` of the ``Embedding`` that reads the input (for integer ids, the
  smallest one in the model when none reads it directly), else the row count of the table an ONNX
  ``Gather`` takes the ids into (a SavedModel's only source), else :data:`DEFAULT_VOCABULARY`; an
  id outside ``[0, vocabulary)`` makes TensorFlow fail. Token ids always get padded batches: a mask
  may also be computed from them (``tokens > 0``). Where the ONNX model compares the ids with one
  other constant than 0 and never with 0 (``ids != 1``: a padding id of 1), padded steps hold that
  id instead, and valid steps never do.
* a mask (boolean ``[batch, time]``): the batch's valid steps themselves; so is a float
  ``[batch, time]`` input with a dynamic time axis beside other sequences (an ``attention_mask``
  of 0s and 1s): 1 at valid steps, 0 at padded ones.
* features (rank 3 or more): random normal; at padded steps the ``mask_value`` of the ``Masking``
  layer that reads them, if one does (an ONNX reference: the constant an ``Equal`` compares them
  with, else 0, Masking's default), else random too (an explicit mask ignores them).
* anything else (initial states, ...): random; integers are never negative (ids in
  ``[1, vocabulary)`` where an ``Embedding`` or a ``Gather`` reads them, else 0 or 1).

A model with token ids, a mask or masked features gets padded batches (:data:`PADDED_KINDS`):
rows post-padded to different lengths (a partial, a full, an empty and a one-step row first),
the same rows pre-padded (``pad_sequences``' default), and rows with a hole between valid steps.
Any model also gets a batch of one full row; an unmasked model a random batch of several rows.
A dimension fixed in the ONNX model (or the reference's inputs) keeps its size; dynamic ones get
``rows`` x ``steps`` (other dynamic axes :data:`OTHER_DIM`). A streaming model's state inputs
(:func:`state_inputs`) are no inputs of the reference: they are fed zeros, the state a sequence
starts from (:func:`zero_states`).

:func:`output_difference` compares one output with the reference's apart at valid and at padded
positions: those of a sequence output ([rows, steps, ...]) where the batch's mask is False.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from .verify_hints import InputHints, KerasHints, onnx_mask_value, onnx_padding_id, onnx_vocabulary

TOKENS, MASK, FEATURES, OTHER = "token ids", "mask", "features", "other"
SINGLE, RANDOM, POST, PRE, HOLES = "single", "random", "post-padded", "pre-padded", "holes"
PADDED_KINDS = (POST, PRE, HOLES)
MIN_STEPS = {PRE: 2, HOLES: 3}  # fewer steps cannot pad a row before, or between, valid steps
DEFAULT_VOCABULARY = 10         # token ids no Embedding or Gather is found for
OTHER_DIM = 3                   # a dynamic axis that is neither batch nor time
STATE_INPUTS = ("/h_in", "/c_in")  # a streaming model's state inputs (docs/streaming.md), each with its "/.._out"


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of the reference: its name, numpy dtype and shape (None where dynamic; no shape: unknown rank)."""

    name: str
    dtype: np.dtype
    shape: Optional[tuple]

    @classmethod
    def of(cls, spec) -> "InputSpec":
        """An InputSpec from itself or a ``tf.TensorSpec``."""
        if isinstance(spec, InputSpec):
            return spec
        shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else None
        return cls(spec.name, np.dtype(spec.dtype.as_numpy_dtype), shape)


@dataclasses.dataclass(frozen=True)
class InputRole:
    """How one model input is fed: its names on both sides, dtypes, shape and role."""

    name: str                 # the reference's (Keras or SavedModel) input name
    onnx_name: str
    dtype: np.dtype           # what the reference takes
    onnx_dtype: np.dtype      # what the ONNX model takes
    shape: tuple              # None where dynamic
    kind: str                 # TOKENS, MASK, FEATURES or OTHER
    vocabulary: Optional[int] = None    # token ids are drawn from [1, vocabulary)
    mask_value: Optional[float] = None  # features at padded steps (a Masking layer reads them)

    @property
    def padded(self) -> bool:
        """Does this input carry a mask the batch kinds should pad?"""
        return self.kind in (TOKENS, MASK) or self.mask_value is not None

    @property
    def sequence(self) -> bool:
        return self.kind != OTHER

    def describe(self) -> str:
        """``tokens (ONNX tokens) int32[None, None]: token ids below 20``, for the log."""
        how = f" below {self.vocabulary}" if self.vocabulary else ""
        how += f", {self.mask_value:g} at padded steps" if self.mask_value is not None else ""
        return f"{self.name} (ONNX {self.onnx_name}) {self.dtype}{list(self.shape)}: {self.kind}{how}"


@dataclasses.dataclass(frozen=True)
class Batch:
    """One set of inputs, in the reference's input order, and where each sequence is valid."""

    kind: str
    rows: int
    steps: int
    inputs: tuple
    masks: dict  # steps -> [rows, steps] bool: the valid positions of sequences with that many steps

    @property
    def label(self) -> str:
        return f"{self.kind} {self.rows}x{self.steps}"

    @property
    def post_padded(self) -> bool:
        """Are all rows' valid steps first (what a model converted in mask_mode="post" accepts)?"""
        return all(is_post_padded(mask) for mask in self.masks.values())

    def mask_for(self, shape) -> Optional[np.ndarray]:
        """The valid positions of an output of ``shape`` if it is a sequence ([rows, steps, ...])."""
        if len(shape) < 2 or shape[0] != self.rows:
            return None
        return self.masks.get(shape[1])


def input_kind(dtype: np.dtype, rank: int) -> str:
    """The role an input of ``dtype`` and ``rank`` plays (see the module docstring)."""
    if rank == 2 and dtype == np.bool_:
        return MASK
    if rank == 2 and np.issubdtype(dtype, np.integer):
        return TOKENS
    return FEATURES if rank >= 3 else OTHER


def is_post_padded(mask: np.ndarray) -> bool:
    """True when no row has a valid step after a padded one."""
    return not np.any(mask[:, 1:] & ~mask[:, :-1])


def make_batches(roles: list, rows: int = 5, steps: int = 12, seed: int = 0) -> list:
    """The batches for inputs ``roles`` (see the module docstring), drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    fixed_rows = next((role.shape[0] for role in roles if role.shape and role.shape[0] is not None), None)
    many = fixed_rows or rows
    longest = max((_steps(role, steps) for role in roles if role.sequence), default=steps)
    kinds = [(SINGLE, 1)] if fixed_rows in (None, 1) else []
    if any(role.padded for role in roles):
        kinds += [(kind, many) for kind in PADDED_KINDS if longest >= MIN_STEPS.get(kind, 1)]
    else:
        kinds.append((RANDOM, many))
    return [_batch(roles, kind, count, steps, rng) for kind, count in kinds]


def _batch(roles: list, kind: str, rows: int, steps: int, rng) -> Batch:
    """One batch of ``kind``: a mask per sequence length, then each input drawn to match it."""
    masked = any(role.padded for role in roles)
    masks = {}
    for role in roles:
        if role.sequence and masked:
            length = _steps(role, steps)
            if length not in masks:
                masks[length] = valid_steps(kind, rows, length, rng)
    inputs = tuple(input_array(role, rows, steps, masks.get(_steps(role, steps)), rng) for role in roles)
    longest = max((_steps(role, steps) for role in roles if role.sequence), default=steps)
    return Batch(kind, rows, longest, inputs, masks)


def _steps(role: InputRole, steps: int) -> int:
    return role.shape[1] if role.sequence and role.shape[1] is not None else steps


def valid_steps(kind: str, rows: int, steps: int, rng) -> np.ndarray:
    """[rows, steps] bool: which steps of each row are valid in a batch of ``kind``."""
    if kind in (SINGLE, RANDOM):
        return np.ones((rows, steps), bool)
    lengths = row_lengths(rows, steps, rng)
    if kind == HOLES:
        return np.stack([_row_with_hole(length, steps) for length in lengths])
    post = np.arange(steps)[None, :] < lengths[:, None]
    return post[:, ::-1].copy() if kind == PRE else post


def row_lengths(rows: int, steps: int, rng) -> np.ndarray:
    """Valid steps per row: a partial row first (so that a batch of one still pads), then a full
    row, an empty row, a one-step row, random lengths after."""
    partial = max(1, min(steps - 1, steps // 2))
    pattern = [partial, steps, 0, 1] + [int(n) for n in rng.integers(1, steps + 1, size=max(0, rows - 4))]
    return np.array(pattern[:rows])


def _row_with_hole(length: int, steps: int) -> np.ndarray:
    """``length`` valid steps with one padded step in their middle (where the row has room for it)."""
    row = np.zeros(steps, bool)
    if 2 <= length < steps:
        cut = length // 2
        row[:cut] = True
        row[cut + 1:length + 1] = True
    else:
        row[:length] = True
    return row


def input_array(role: InputRole, rows: int, steps: int, mask: Optional[np.ndarray], rng) -> np.ndarray:
    """Values for one input (in the reference's dtype), padded where ``mask`` is False."""
    shape = concrete_shape(role, rows, steps)
    if role.kind == MASK:
        values = mask if mask is not None else np.ones(shape, bool)
    elif role.kind == TOKENS or (np.issubdtype(role.dtype, np.integer) and role.vocabulary):
        values = rng.integers(1, max(role.vocabulary or DEFAULT_VOCABULARY, 2), size=shape)
        if role.kind == TOKENS and role.mask_value is not None:  # a padding id other than 0: never a valid step's
            values[values == role.mask_value] = 1 if role.mask_value != 1 else 2
        if mask is not None and role.kind in (TOKENS, FEATURES):
            values[~mask] = 0 if role.mask_value is None else role.mask_value
    elif np.issubdtype(role.dtype, np.integer):
        values = rng.integers(0, 2, size=shape)  # 0 and 1: valid ids of any vocabulary
    elif role.dtype == np.bool_:
        values = rng.random(shape) < 0.5
    else:
        values = rng.standard_normal(shape)
        if role.mask_value is not None and mask is not None:
            values[~mask] = role.mask_value
    return np.asarray(values).astype(role.dtype)


def concrete_shape(role: InputRole, rows: int, steps: int) -> tuple:
    """``role``'s shape with the batch ``rows``, a sequence's time ``steps``, :data:`OTHER_DIM` elsewhere."""
    shape = list(role.shape)
    for axis, size in enumerate(shape):
        if axis == 0:
            shape[axis] = rows
        elif size is None:
            shape[axis] = _steps(role, steps) if axis == 1 and role.sequence else OTHER_DIM
    return tuple(shape)


# ---------------------------------------------------------------- comparing outputs at valid and padded positions


@dataclasses.dataclass(frozen=True)
class OutputDifference:
    """One output on one batch: the largest |ONNX - reference| at valid and at padded positions."""

    name: str
    valid: Optional[float]    # None: no position of that kind
    padded: Optional[float]
    problem: str = ""         # a difference no number says (a shape)

    def within(self, tolerance: float) -> bool:
        return not self.problem and all(d is None or d <= tolerance for d in (self.valid, self.padded))


def output_difference(name: str, expected, got, batch) -> OutputDifference:
    """|got - expected| of one output, its largest at valid and at padded positions."""
    expected, got = np.asarray(expected), np.asarray(got)
    if got.shape != expected.shape:
        return OutputDifference(name, None, None, f"shape {got.shape}, the reference's {expected.shape}")
    difference = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    difference[np.isnan(difference) & ~(np.isnan(got) & np.isnan(expected))] = np.inf  # NaN on one side only
    difference[np.isnan(difference)] = 0.0
    mask = batch.mask_for(difference.shape)
    if mask is None:
        return OutputDifference(name, _largest(difference), None)
    return OutputDifference(name, _largest(difference[mask]), _largest(difference[~mask]))


def _largest(values: np.ndarray) -> Optional[float]:
    return float(values.max()) if values.size else None


# ---------------------------------------------------------------- roles: what reads each input


class InterfaceError(ValueError):
    """The ONNX model's inputs cannot be paired with the reference model's."""


def input_roles(specs: list, onnx_model, hints=None) -> list:
    """An :class:`InputRole` per input of the reference (``specs``: :class:`InputSpec`\\ s or
    ``tf.TensorSpec``\\ s, in its order), paired with the ONNX model's inputs by name, else by
    position when the counts agree. ``hints``: the reference's :class:`InputHints`, or a Keras model
    (its layers), or None (nothing known: the ONNX model's graph alone)."""
    if not isinstance(hints, InputHints):
        hints = InputHints() if hints is None else KerasHints(hints)
    specs = [InputSpec.of(spec) for spec in specs]
    onnx_inputs = model_inputs(onnx_model)
    onnx_names = match_inputs([spec.name for spec in specs], list(onnx_inputs))
    features = sum(1 for spec in specs if spec.shape is not None and len(spec.shape) >= 3)
    roles = []
    for index, (spec, onnx_name) in enumerate(zip(specs, onnx_names)):
        onnx_dtype, onnx_dims = onnx_inputs[onnx_name]
        shape = merged_shape(spec.name, onnx_dims, spec.shape)
        kind = input_kind(spec.dtype, len(shape))
        vocabulary = mask_value = None
        if kind == TOKENS or np.issubdtype(spec.dtype, np.integer) or (kind == OTHER and len(shape) == 2):
            # integer ids, or float [batch, time] ids (tf_keras's default Input dtype) if an Embedding reads them
            vocabulary = hints.vocabulary(index, kind != TOKENS) or onnx_vocabulary(onnx_model, onnx_name)
            kind = TOKENS if kind == OTHER and len(shape) == 2 and vocabulary else kind
        if kind == TOKENS:
            mask_value = onnx_padding_id(onnx_model, onnx_name)
        if kind == FEATURES:
            mask_value = hints.mask_value(index, features == 1)
            mask_value = onnx_mask_value(onnx_model, onnx_name) if mask_value is None else mask_value
        roles.append(InputRole(spec.name, onnx_name, spec.dtype, onnx_dtype, shape, kind, vocabulary, mask_value))
    return _float_masks(roles)


def _float_masks(roles: list) -> list:
    """``roles`` with a float [batch, time] input fed as a mask where another input is a sequence of as
    many steps (dynamic, or the same static number): a model that reads it as a mask gets padded batches."""
    steps = {role.shape[1] for role in roles if role.kind in (TOKENS, MASK, FEATURES)}
    if not steps:
        return roles
    return [dataclasses.replace(role, kind=MASK) if role.kind == OTHER and len(role.shape) == 2 and
            (role.shape[1] is None or role.shape[1] in steps) and np.issubdtype(role.dtype, np.floating)
            else role for role in roles]


def merged_shape(name: str, onnx_dims: Optional[list], spec_dims: Optional[tuple]) -> tuple:
    """Input ``name``'s shape: a size fixed in the ONNX model, else in the reference's, else None."""
    if onnx_dims is None or spec_dims is None or len(onnx_dims) != len(spec_dims):
        known = spec_dims if spec_dims is not None else onnx_dims  # the reference's rank, when they differ
        if known is None:
            raise InterfaceError(f"input {name}: neither model gives its rank")
        return tuple(known)
    return tuple(o if o is not None else s for o, s in zip(onnx_dims, spec_dims))


def graph_inputs(onnx_model) -> dict:
    """ONNX input name -> (numpy dtype, dims with None where dynamic, or None without a shape),
    initializers left out."""
    from onnx import helper  # pylint: disable=import-outside-toplevel
    initializers = {init.name for init in onnx_model.graph.initializer}
    inputs = {}
    for value in onnx_model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim] \
            if tensor.HasField("shape") else None
        inputs[value.name] = (np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)), dims)
    return inputs


def model_inputs(onnx_model) -> dict:
    """:func:`graph_inputs` but a streaming model's state inputs (:func:`state_inputs`): those the
    model it came from takes too."""
    states = state_inputs(onnx_model)
    return {name: value for name, value in graph_inputs(onnx_model).items() if name not in states}


def input_specs(onnx_model) -> list:
    """:func:`model_inputs` as :class:`InputSpec` (the inputs a reference is fed)."""
    return [InputSpec(name, dtype, None if dims is None else tuple(dims))
            for name, (dtype, dims) in model_inputs(onnx_model).items()]


def state_inputs(onnx_model) -> dict:
    """A streaming model's state inputs: input name -> (numpy dtype, units) for each ``<layer>/h_in``
    or ``<layer>/c_in`` of shape [batch, units] whose ``<layer>/h_out`` (``c_out``) is an output."""
    outputs = {output.name for output in onnx_model.graph.output}
    return {name: (dtype, dims[1]) for name, (dtype, dims) in graph_inputs(onnx_model).items()
            if name.endswith(STATE_INPUTS) and state_output(name) in outputs
            and dims is not None and len(dims) == 2 and dims[1] is not None}


def state_output(state_input: str) -> str:
    """``lstm/h_in`` -> ``lstm/h_out``: the output a streaming model returns a state input's state in."""
    return state_input[:-len("in")] + "out"


def zero_states(states: dict, rows: int) -> dict:
    """Zeros for each of ``states`` (:func:`state_inputs`): every row starts from the zero state."""
    return {name: np.zeros((rows, units), dtype) for name, (dtype, units) in states.items()}


def match_inputs(names: list, onnx_names: list) -> list:
    """The ONNX input fed with each of ``names``: the one of the same name (``:0`` aside), else
    the one at the same position."""
    if len(names) != len(onnx_names):
        raise InterfaceError(f"the model has {len(names)} input(s) ({', '.join(names)}), the ONNX model "
                             f"{len(onnx_names)} ({', '.join(onnx_names)})")
    plain = {name.split(":")[0]: name for name in onnx_names}
    if all(name.split(":")[0] in plain for name in names):
        return [plain[name.split(":")[0]] for name in names]
    return list(onnx_names)
