# SPDX-License-Identifier: Apache-2.0
"""Read one gate ``act(x @ W + h @ R + b)`` of a cell's step, or say which part was not understood.

The cell kinds (:mod:`..cells`) read their step's algebra with these: each gate's activation and
linear form, or a :class:`~..failure.Refusal` naming the op that is no activation the native op
supports, or the op the linear reader stopped at.
"""

from __future__ import annotations

from typing import Optional

from ..failure import Refusal
from ..graph import mul_operands, producer, scalar_value
from .activation import read_activation
from .linear import READ_OPS


def read_gate(graph, reader, tensor, onnx_op, read_pre=None):
    """(activation, form) of a gate ``tensor = act(x @ W + h @ R + b)``; raises a Refusal that says
    which part was not understood: the activation (an op that is no activation ONNX ``onnx_op``
    supports, applied to a gate's form), or the pre-activation (the op the reader stopped at, or
    a missing term). ``read_pre`` reads the pre-activation (default: ``reader.read``), raising a
    Refusal at the node it stops at."""
    read_pre = read_pre or reader.read
    act, pre = read_activation(graph, tensor)
    try:
        form = read_pre(pre)
    except Refusal as stop:
        raise _not_read(graph, tensor, pre, onnx_op, read_pre, stop.node) from None
    if form.kernel is None or form.recurrent is None:
        reason = f"a gate's pre-activation has no {'x @ W' if form.kernel is None else 'h @ R'} term"
        raise Refusal(reason, producer(graph, pre))
    return act, form


def _not_read(graph, tensor, pre, onnx_op, read_pre, unread) -> Refusal:
    """Why a gate's pre-activation ``pre`` did not read: an activation the native op lacks, when an op
    the reader does not know is applied to a complete gate form; else the op the reader stopped at."""
    top = producer(graph, pre)
    if pre == tensor and top is not None and _applied_to_a_gate(graph, top, read_pre):
        return Refusal(f"a gate's activation is not one ONNX {onnx_op} supports (it is computed by {top.type})", top)
    unread = unread or top
    op = "a loop input" if unread is None or unread.is_graph_input() else unread.type
    return Refusal(f"a gate's pre-activation is computed by {op}, which the matcher does not read", unread)


def read_gates(graph, reader, tensors, onnx_op) -> list:
    """Each gate's (activation, form); raises the first gate's Refusal."""
    return [read_gate(graph, reader, tensor, onnx_op) for tensor in tensors]

def _applied_to_a_gate(graph, node, read_pre, depth=3) -> bool:
    """Is ``node`` an op the linear reader does not know, computed from a complete gate form (an
    activation the matcher does not support, such as swish's ``x * sigmoid(x)``)?"""
    if node.type in READ_OPS:
        return False
    frontier = list(node.input)
    for _ in range(depth):
        for tensor in frontier:
            try:
                form = read_pre(tensor)
            except Refusal:
                continue
            if form.kernel is not None and form.recurrent is not None:
                return True
        frontier = [t for tensor in frontier if producer(graph, tensor) is not None
                    for t in producer(graph, tensor).input]
    return False


def sum_of_products(graph, tensor):
    """The operand pairs of ``tensor = a * b + c * d``, else None."""
    add = producer(graph, tensor)
    if add is None or add.type not in ("Add", "AddV2"):
        return None
    products = [mul_operands(graph, t) for t in add.input]
    return None if None in products else products


def one_minus(graph, tensor) -> Optional[str]:
    """z when ``tensor`` is ``1 - z``."""
    sub = producer(graph, tensor)
    if sub is None or sub.type != "Sub" or scalar_value(graph, sub.input[0]) != 1.0:
        return None
    return sub.input[1]
