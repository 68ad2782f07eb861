# SPDX-License-Identifier: Apache-2.0
"""References to constants a loop body reads whose values are only known in the main graph (weights
are loop inputs of the body): :class:`ConstRef` names the body input, or holds the value, and the
slicing to apply once the value is known; :class:`ConstSum` adds several (a bias added on the input
side and on the recurrent side)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class ConstRef:
    """A constant known in the main graph: body input ``input_index`` (or ``value``), sliced."""

    input_index: Optional[int] = None
    value: Optional[np.ndarray] = dataclasses.field(default=None, compare=False)
    # each step: ("split", axis, parts, index), ("slice", axis, begin, end), ("squeeze", axis, 0, 0),
    # ("transpose", 0, 0, 0) (a matrix stored transposed), ("scale", 0, factor, 0) (Gemm's alpha, beta),
    # ("reshape", 0, shape, 0) or ("expand", 0, shape, 0) (ONNX's Reshape and Expand to a constant shape)
    steps: tuple = ()
    added_to_rows: bool = False  # a bias: leading unit axes (of [1, N]) are dropped once resolved, as its sum does

    def then(self, step: tuple) -> "ConstRef":
        return dataclasses.replace(self, steps=self.steps + (step,))

    def resolve(self, input_value: Callable[[int], Optional[np.ndarray]]) -> Optional[np.ndarray]:
        """The array this names, given a lookup of the constant values of body inputs."""
        array = self.value if self.input_index is None else input_value(self.input_index)
        for step in self.steps:
            array = None if array is None else _apply_step(np.asarray(array), *step)
        while self.added_to_rows and array is not None and array.ndim > 1 and array.shape[0] == 1:
            array = array[0]
        return None if array is None or (self.added_to_rows and array.ndim > 1) else array


def _apply_step(array: np.ndarray, kind: str, axis: int, a, b) -> Optional[np.ndarray]:
    """One :class:`ConstRef` step applied to ``array`` (None where it does not apply)."""
    if kind == "scale":
        return (array * a).astype(array.dtype)
    if kind in ("reshape", "expand"):
        try:
            return array.reshape(a) if kind == "reshape" else array * np.ones(a, array.dtype)  # Expand broadcasts
        except ValueError:
            return None
    if array.ndim == 0:
        return array  # a scalar term broadcasts: every column block of it is itself
    axis = axis % array.ndim
    if kind == "transpose":
        return array.T if array.ndim == 2 else None
    if kind == "squeeze":
        return np.squeeze(array, axis) if array.shape[axis] == 1 else None
    if kind == "split":
        return np.split(array, a, axis=axis)[b] if array.shape[axis] % a == 0 else None
    index = [slice(None)] * array.ndim
    index[axis] = slice(a, b)
    return array[tuple(index)]


@dataclasses.dataclass(frozen=True)
class ConstSum:
    """The sum of constants (a bias added on the input side and on the recurrent side)."""

    terms: tuple

    def then(self, step: tuple) -> "ConstSum":
        return ConstSum(tuple(term.then(step) for term in self.terms))

    def resolve(self, input_value: Callable[[int], Optional[np.ndarray]]) -> Optional[np.ndarray]:
        values = [term.resolve(input_value) for term in self.terms]
        if any(v is None for v in values):
            return None
        try:
            return functools.reduce(np.add, values)  # a scalar term (a folded constant) broadcasts
        except ValueError:
            return None
