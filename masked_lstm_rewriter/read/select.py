# SPDX-License-Identifier: Apache-2.0
"""Read how a loop's step keeps a value where the mask is off: ``Where(mask, new, old)``, however it
was spelled (the condition negated, reduced over a row, or tf2onnx's arithmetic select)."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..graph import const_value, mul_operands, producer


@dataclasses.dataclass(frozen=True)
class Select:
    """``Where(mask, new, old)``, however it was spelled."""

    mask: str
    new: str
    old: str


def read_select(body, tensor: str, mask_item: str) -> Optional[Select]:
    """``tensor`` as ``Where(mask, new, old)`` over the step's mask, or None. Also read: the condition
    negated or reduced over a row (:func:`_mask_condition`), and tf2onnx's spelling of TensorFlow's
    select, ``Cast(m) * new + Cast(Not(m)) * old`` (in any operand order)."""
    node = producer(body, tensor)
    if node is None:
        return None
    if node.type in ("Where", "SelectV2", "Select"):
        condition, when_true, when_false = node.input
        valid = _mask_condition(body, condition, mask_item)
        if valid is None:
            return None
        return Select(mask_item, when_true, when_false) if valid else Select(mask_item, when_false, when_true)
    if node.type not in ("Add", "AddV2"):
        return None
    terms = [_masked_term(body, tensor, mask_item) for tensor in node.input]
    if None in terms or terms[0][0] == terms[1][0]:
        return None
    (first_valid, first), (_, second) = terms
    return Select(mask_item, first, second) if first_valid else Select(mask_item, second, first)


def _masked_term(body, tensor: str, mask_item: str) -> Optional[tuple]:
    """(True, value) for ``Cast(m) * value``, (False, value) for ``Cast(Not(m)) * value``, m the step's mask."""
    operands = mul_operands(body, tensor)
    if operands is None:
        return None
    for position in (0, 1):
        cast = producer(body, operands[position])
        valid = None if cast is None or cast.type != "Cast" else _mask_condition(body, cast.input[0], mask_item)
        if valid is not None:
            return valid, operands[1 - position]
    return None


def _mask_condition(body, tensor: str, mask_item: str) -> Optional[bool]:
    """True when ``tensor`` is the step's mask (a row's steps are valid), False when it is its
    negation, else None; through identities, casts, ``Not`` and reductions over the last axis (the
    mask holds one value per row: :func:`_batch_major_mask` checks it)."""
    valid = True
    node = producer(body, tensor)
    while tensor != mask_item and node is not None:
        if node.type == "Not":
            valid = not valid
        elif node.type in ("ReduceMin", "ReduceMax"):
            axes = const_value(body, node.input[1]) if len(node.input) > 1 else node.get_attr_value("axes")
            rank = len(body.get_shape(node.input[0]) or []) or 2
            if node.get_attr_value("keepdims", 1) != 1 or axes not in ([-1], [rank - 1], -1, rank - 1):
                return None
        elif node.type not in ("Identity", "Cast"):
            return None
        tensor = node.input[0]
        node = producer(body, tensor)
    return valid if tensor == mask_item else None
