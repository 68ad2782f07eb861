# SPDX-License-Identifier: Apache-2.0
"""Resolve a cell's gate forms (read in the body) into weight arrays (known in the main graph)."""

from __future__ import annotations

import numpy as np

from ..cells import kind_of
from ..failure import Refusal


def _input_values(graph, while_node):
    """A lookup of the constant value the While op feeds each body input (None where it is not one)."""
    def input_value(index):
        tensor = while_node.input[index]
        return graph.get_tensor_value(tensor, as_list=False) if graph.is_const(tensor) else None
    return input_value


def resolve_constants(graph, while_node, constants: tuple) -> dict:
    """A cell kind's other weights (``(name, ConstRef)``), resolved by name; raises a Refusal unless
    each is a constant."""
    input_value = _input_values(graph, while_node)
    resolved = {name: ref.resolve(input_value) for name, ref in constants}
    if any(value is None for value in resolved.values()):
        raise Refusal("the weights are not constants", while_node)
    return resolved


def resolve_weights(graph, while_node, kind: str, gates: dict) -> tuple:
    """(kernel, recurrent, bias or None, recurrent_bias) arrays by gate, in Keras's layout; raises a
    Refusal when they are not float32 constants of the kind's shapes."""
    keras_gates, keras_name = kind_of(kind).keras_gates, kind_of(kind).keras_name
    input_value = _input_values(graph, while_node)

    def resolve_all(field):
        refs = {g: getattr(form, field) for g, form in gates.items() if getattr(form, field) is not None}
        return {g: ref.resolve(input_value) for g, ref in refs.items()}

    kernel, recurrent, bias, recurrent_bias = (resolve_all(field) for field in
                                               ("kernel", "recurrent", "bias", "recurrent_bias"))
    if any(v is None for part in (kernel, recurrent, bias, recurrent_bias) for v in part.values()):
        raise Refusal("the weights are not constants", while_node)
    first = keras_gates[0]
    hidden = recurrent[first].shape[0] if recurrent[first].ndim == 2 else -1
    input_size = kernel[first].shape[0] if kernel[first].ndim == 2 else -1
    for part in (bias, recurrent_bias):
        for g, value in part.items():
            if value.size == 1:  # a folded scalar constant alone (use_bias=False, hard_sigmoid's + 3)
                part[g] = np.full(hidden, value.reshape(-1)[0], value.dtype)
    if bias:  # a gate with no bias term adds zero: Keras 3 folds hard_sigmoid's + 3 into the z and r
        # sums of a GRU with use_bias=False, but not into its candidate's (found by the fuzzer)
        bias = {g: bias[g] if g in bias else np.zeros(hidden, np.float32) for g in keras_gates}
    for g in keras_gates:
        if kernel[g].shape != (input_size, hidden) or recurrent[g].shape != (hidden, hidden) or \
                any(g in part and part[g].shape != (hidden,) for part in (bias, recurrent_bias)):
            raise Refusal(f"the gate weights do not have {keras_name} shapes")
        if any(a.dtype != np.float32 for a in (kernel[g], recurrent[g])):
            raise Refusal("the weights are not float32")
    return kernel, recurrent, bias or None, recurrent_bias
