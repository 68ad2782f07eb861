# SPDX-License-Identifier: Apache-2.0
"""What a source of recurrent layers declares: where its layers are, how each is read, and how what
read the source is pointed at the emitted results."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Union

from ..emit.rewire import rewire
from ..failure import Refusal
from ..layer import MaskedRecurrentLayer


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layer a source found: its name (for the log and the report), whether it is masked, and
    the layer read, or why it cannot be rewritten."""

    name: str
    masked: bool
    layer: Union[MaskedRecurrentLayer, Refusal]


def _as_read(graph, layers):  # pylint: disable=unused-argument
    return layers


def _nothing(graph):  # pylint: disable=unused-argument
    return None


@dataclasses.dataclass(frozen=True)
class Source:
    """One source of recurrent layers (a TensorFlow While loop, a cuDNN op, an ONNX Loop).

    ``candidates(graph, ops)``: the nodes among ``ops`` it reads; ``read(graph, node)``: a
    :class:`Candidate`, or None when the node is no recurrent layer (none of the rewriter's
    business); ``prepare(graph, layers)``: the layers read, made ready to be emitted (nodes they
    need before any layer is emitted); ``connect``: points what read the source at the emitted
    results and removes the source (:func:`..emit.rewire.rewire`'s arguments); ``observe(graph)``:
    sees each graph tf2onnx hands the rewriter, loop bodies first; ``left_as``: what stays when a
    layer is not rewritten, and ``remedy``, what a user can do then."""

    name: str
    candidates: Callable
    read: Callable
    prepare: Callable = _as_read
    connect: Callable = rewire
    observe: Callable = _nothing
    left_as: str = "a Loop"
    remedy: Optional[str] = None
