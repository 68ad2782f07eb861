# SPDX-License-Identifier: Apache-2.0
"""The Keras backend the model being converted came from, where it computes a layer otherwise.

A model on JAX or torch is converted from its TensorFlow trace (:mod:`..backend_process`). Keras's
backends agree on every output but one: at a masked step before a row's first valid one (every
step of an empty row), Keras on JAX outputs the state, so a layer given ``initial_state=`` shows
that state there, where TensorFlow and torch show zeros. While a model from JAX is converted, such a
forward layer is emitted with JAX's outputs; a backward one is refused (the conversion of a model
from JAX then fails, rather than give TensorFlow's numbers).
"""

from __future__ import annotations

import contextlib

from ..failure import Refusal

OUTPUT_FROM_STATE = ("jax",)   # backends whose masked steps output the state, not the last output from zeros
BACKWARD_FROM_STATE_REASON = ("a backward layer with initial_state= from Keras on JAX (which outputs the initial "
                       "state at masked steps before a row's first valid one)")
_origin = ["tensorflow"]


@contextlib.contextmanager
def model_from(backend: str):
    """Convert, until the block ends, as for a model that lives on ``backend``."""
    _origin.append(backend)
    try:
        yield
    finally:
        _origin.pop()


def as_computed_there(layer):
    """``layer`` as the model's own backend computes it (a Refusal where the emitter cannot)."""
    if _origin[-1] not in OUTPUT_FROM_STATE or isinstance(layer, Refusal) or layer.mask is None \
            or not layer.output_carried or layer.top.zero_initial_state:
        return layer
    if layer.direction != "forward":
        return Refusal(BACKWARD_FROM_STATE_REASON, layer.while_node)
    layer.output_starts_from_state = True
    return layer
