# SPDX-License-Identifier: Apache-2.0
"""What a source of recurrent layers declares: where its layers are, how each is read, and how what
read the source is pointed at the emitted results."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Union

from onnx import TensorProto

from ..emit.rewire import rewire
from ..failure import Refusal
from ..graph import int64_const, make_op
from ..layer import MaskedRecurrentLayer


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layer a source found: its name (for the log and the report), whether it is masked, and
    the layer read, or why it cannot be rewritten."""

    name: str
    masked: bool
    layer: Union[MaskedRecurrentLayer, Refusal]


def prepare_masks(graph, layers) -> list:
    """Each layer's mask as the planner takes it, [B, T] bool, where the source found another layout
    (``mask_layout``): one new tensor per mask and layout, shared by the layers that read that mask
    (a stack of time-major layers under one ``Masking``), so that the plan is made once for them."""
    made = {}
    for layer in layers:
        if layer.mask is not None and layer.mask_layout != "batch":
            key = (layer.mask, layer.mask_layout)
            if key not in made:
                made[key] = _batch_major(graph, layer.mask, layer.mask_layout)
            layer.mask, layer.mask_layout = made[key], "batch"
    return layers


def _batch_major(graph, mask: str, layout: str) -> str:
    """[B, T, 1] ("column"), [T, B, 1] or [T, B] ("time"; bool, or numbers: nonzero is valid) -> [B, T] bool."""
    shape = graph.get_shape(mask)
    if layout == "column" or shape is None or len(shape) == 3:
        mask = make_op(graph, "Squeeze", mask, int64_const(graph, "axes", [2]))
    if layout == "time":
        mask = make_op(graph, "Transpose", mask, perm=[1, 0])
    if graph.get_dtype(mask) != TensorProto.BOOL:
        mask = make_op(graph, "Cast", mask, to=TensorProto.BOOL)
    return mask


def _nothing(graph):  # pylint: disable=unused-argument
    return None


@dataclasses.dataclass(frozen=True)
class Source:
    """One source of recurrent layers (a TensorFlow While loop, a cuDNN op, an ONNX Loop).

    ``candidates(graph, ops)``: the nodes among ``ops`` it reads; ``read(graph, node)``: a
    :class:`Candidate`, or None when the node is no recurrent layer (none of the rewriter's
    business); ``prepare(graph, layers)``: the layers read, made ready to be emitted (nodes they
    need before any layer is emitted; by default each mask made the [B, T] one the planner takes:
    :func:`prepare_masks`); ``connect``: points what read the source at the emitted
    results and removes the source (:func:`..emit.rewire.rewire`'s arguments); ``observe(graph)``:
    sees each graph tf2onnx hands the rewriter, loop bodies first; ``left_as``: what stays when a
    layer is not rewritten, and ``remedy``, what a user can do then."""

    name: str
    candidates: Callable
    read: Callable
    prepare: Callable = prepare_masks
    connect: Callable = rewire
    observe: Callable = _nothing
    left_as: str = "a Loop"
    remedy: Optional[str] = None
