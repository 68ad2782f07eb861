# SPDX-License-Identifier: Apache-2.0
"""Read the activation applied to a tensor of a While body, in ONNX RNN terms.

:func:`read_activation` recognises ``Sigmoid``, ``Tanh``, ``Relu``, ``Softsign``, ``Elu``,
``Softplus`` and both flavours' ``hard_sigmoid`` (Keras 3: ``relu6(x + 3) / 6``; tf_keras:
``clip(alpha * x + beta, 0, 1)``, its lower bound a ``Relu`` through LiteRT) and returns them as
ONNX spells them (``HardSigmoid`` with its alpha and beta). Which of them a runtime computes
correctly is :mod:`..targets`' business.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..graph import producer, scalar_value


_TOL = 1e-6


@dataclasses.dataclass(frozen=True)
class Activation:
    """An activation as ONNX RNN ops spell it (``activations`` / ``activation_alpha`` / ``_beta``)."""

    name: str
    alpha: Optional[float] = None
    beta: Optional[float] = None


def _scalar_operand(graph, node, value_test) -> Optional[tuple[float, str]]:
    """For a binary op with one scalar-constant operand: (constant, other input)."""
    for const_pos in (1, 0):
        value = scalar_value(graph, node.input[const_pos])
        if value is not None and value_test(value):
            return value, node.input[1 - const_pos]
    return None


_SINGLE_OP_ACTIVATIONS = {
    "Sigmoid": Activation("Sigmoid"),
    "Tanh": Activation("Tanh"),
    "Relu": Activation("Relu"),
    "Softsign": Activation("Softsign"),
    "Elu": Activation("Elu", alpha=1.0),
    "Softplus": Activation("Softplus"),  # read, so that its step is matched, but refused (below)
}


def read_activation(graph, tensor: str) -> tuple[Activation, str]:
    """(activation, its input) for the op producing ``tensor``.

    Anything else is taken as the identity (Keras ``linear``), expressed as ``Affine(1, 0)``;
    the caller then checks that the input really is a gate's linear form.
    """
    node = producer(graph, tensor)
    if node is None:
        return Activation("Affine", 1.0, 0.0), tensor
    if node.type == "HardSigmoid":  # ONNX's own op, as a file may hold it
        return Activation("HardSigmoid", alpha=float(node.get_attr_value("alpha", 0.2)),
                          beta=float(node.get_attr_value("beta", 0.5))), node.input[0]
    hard = _read_hard_sigmoid_keras3(graph, node) or _read_hard_sigmoid_tf_keras(graph, node)
    if hard is not None:
        return hard
    if node.type in _SINGLE_OP_ACTIVATIONS:
        return _SINGLE_OP_ACTIVATIONS[node.type], node.input[0]
    return Activation("Affine", 1.0, 0.0), tensor


def _read_hard_sigmoid_keras3(graph, node):
    """Keras 3: ``relu6(x + 3) / 6`` (the division folded into a Mul by 1/6)."""
    if node.type != "Mul":
        return None
    found = _scalar_operand(graph, node, lambda s: abs(6 * s - 1) < _TOL)
    if found is None:
        return None
    scale, inner = found
    relu6 = producer(graph, inner)
    if relu6 is None or not (relu6.type == "Relu6" or _is_clip(graph, relu6, 0.0, 6.0)):
        return None
    add = producer(graph, relu6.input[0])
    found = _scalar_operand(graph, add, lambda _: True) if add is not None and add.type in ("Add", "AddV2") \
        else None
    # TensorFlow may move the + 3 into the sum it is added to (seen in Keras 3's GRU): the linear
    # reader then finds it as a bias term, and the activation has no shift of its own
    shift, x = found if found is not None else (0.0, relu6.input[0])
    return Activation("HardSigmoid", alpha=scale, beta=shift * scale), x


def _is_clip(graph, node, low: float, high: float) -> bool:
    """Is ``node`` ONNX's ``Clip(x, low, high)`` (bounds as inputs, opset 11+, or attributes)?"""
    if node.type != "Clip":
        return False
    bounds = [scalar_value(graph, t) if t else None for t in list(node.input[1:3]) + [""] * (3 - len(node.input))]
    bounds = [b if b is not None else node.get_attr_value(name, None) for b, name in zip(bounds, ("min", "max"))]
    return bounds == [low, high]


def _read_hard_sigmoid_tf_keras(graph, node):
    """tf_keras: ``clip_by_value(alpha * x + beta, 0, 1)`` = Maximum(Minimum(., 1), 0) (ONNX: Max, Min,
    or one Clip; through LiteRT, the Maximum a Relu)."""
    if _is_clip(graph, node, 0.0, 1.0):
        add = producer(graph, node.input[0])
    else:
        if node.type not in ("Maximum", "Max", "Relu"):
            return None
        found = (0.0, node.input[0]) if node.type == "Relu" else _scalar_operand(graph, node, lambda v: v == 0.0)
        minimum = producer(graph, found[1]) if found else None
        if minimum is None or minimum.type not in ("Minimum", "Min"):
            return None
        found = _scalar_operand(graph, minimum, lambda v: v == 1.0)
        add = producer(graph, found[1]) if found else None
    if add is None or add.type not in ("Add", "AddV2"):
        return None
    found = _scalar_operand(graph, add, lambda _: True)
    mul = producer(graph, found[1]) if found else None
    if mul is None or mul.type != "Mul":
        return None
    beta = found[0]
    found = _scalar_operand(graph, mul, lambda _: True)
    if found is None:
        return None
    alpha, x = found
    return Activation("HardSigmoid", alpha=alpha, beta=beta), x
