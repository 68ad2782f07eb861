# SPDX-License-Identifier: Apache-2.0
"""How many steps an ONNX ``Loop`` runs: prove it is the number of time steps of its input.

A Loop runs while its trip count is not reached and its condition holds. tf2onnx bounds Keras's
loops by ``T`` and ``t + 1 < T`` (Keras 3 both, tf_keras the condition alone; from a LiteRT file,
the condition and the largest int64 as the trip count), jax2onnx by the trip count alone; either
way each test must hold for every step before the last.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..failure import Refusal
from ..graph import const_value, producer, skip_casts, skip_identity
from .time_axis import TimeAxis
from .trip import is_step_count

TRIP_COUNT_REASON = ("the loop may stop before its last time step (its trip count or stop condition is not "
                     "provably the number of steps of its input)")


def check_loop_trip_count(graph, loop, body, counters: set, invariants: set, time_axis: TimeAxis) -> None:
    """Raise a Refusal unless the Loop runs exactly T steps, T the length of its input's time axis: its
    trip count is T, it starts unless T is 0, and every test of its stop condition holds for each
    step before the last (``t < T`` or ``t + 1 < T``, t the step's number); without a trip count, a
    test ``t + 1 < T`` must stop it after the last step (the condition a step returns decides
    whether the next one runs)."""
    trip = loop.input[0]
    counted = bool(trip) and is_step_count(graph, trip, time_axis)
    if trip and not counted and not _never_reached(graph, trip, time_axis):
        raise Refusal(TRIP_COUNT_REASON, loop)
    start = loop.input[1] if len(loop.input) > 1 else ""
    if start and not _holds_for_steps(graph, start, lambda t: _is_const_offset(graph, t) == 0,
                                      lambda b: is_step_count(graph, b, time_axis)):
        raise Refusal(TRIP_COUNT_REASON, loop)
    condition = body.outputs[0]

    def step_number(tensor):
        return _step_offset(graph, loop, body, tensor, counters)

    def bound(tensor):
        tensor = skip_casts(body, tensor)
        if tensor in body.input_names:
            index = body.input_names.index(tensor)
            return index in invariants and is_step_count(graph, loop.input[index], time_axis)
        if producer(body, tensor) is not None:
            return time_axis.steps is not None and _is_const_offset(body, tensor) == time_axis.steps
        return is_step_count(graph, tensor, time_axis)

    offsets = []  # of the tests read: ``t + d < T``, d in (0, 1), holds for every step before the last

    def holds_before_the_last(tensor):
        offsets.append(step_number(tensor))
        return offsets[-1] in (0, 1)

    if not _holds_for_steps(body, condition, holds_before_the_last, bound, passing=body.input_names[1]):
        raise Refusal(TRIP_COUNT_REASON, loop)
    if not counted and 1 not in offsets:  # nothing stops it after step T - 1 (``t < T`` runs step T too)
        raise Refusal(TRIP_COUNT_REASON, loop)


def _never_reached(graph, trip: str, time_axis: TimeAxis) -> bool:
    """Is the trip count a constant the loop cannot reach before its last step: the largest int64 (how
    tf2onnx writes "no trip count" in files made from LiteRT), or at least the static number of steps?
    The stop condition then decides alone."""
    value = _is_const_offset(graph, trip)
    return value is not None and (value == np.iinfo(np.int64).max or
                                  (time_axis.steps is not None and value >= time_axis.steps))


def _holds_for_steps(graph, tensor: str, is_step, is_bound, passing: Optional[str] = None) -> bool:
    """Is ``tensor`` a conjunction of ``a < b`` tests (``is_step(a)``, ``is_bound(b)``), true constants
    and ``passing`` (the condition the step was given)?"""
    pending = [tensor]
    while pending:
        current = skip_identity(graph, pending.pop())
        node = producer(graph, current)
        if current == passing:
            continue
        if node is not None and node.type in ("And", "LogicalAnd"):
            pending.extend(node.input)
            continue
        if node is not None and node.is_const():
            if not node.get_tensor_value(as_list=False).all():
                return False
            continue
        if node is None or node.type not in ("Less", "Greater"):
            return False
        a, b = node.input if node.type == "Less" else node.input[::-1]
        if not (is_step(a) and is_bound(b)):
            return False
    return True


def _is_const_offset(graph, tensor: str) -> Optional[int]:
    value = const_value(graph, skip_casts(graph, tensor))
    value = value[0] if isinstance(value, list) and len(value) == 1 else value
    return int(value) if isinstance(value, (int, float)) else None


def _step_offset(graph, loop, body, tensor: str, counters: set) -> Optional[int]:
    """d when ``tensor`` is the step's number t plus d (the iteration number or a counter before the
    step advances it: 0; after it: 1), else None."""
    tensor = skip_casts(body, tensor)
    names = body.input_names
    if tensor == names[0] or (tensor in names and names.index(tensor) in counters):
        return 0
    node = producer(body, tensor)
    if node is None or node.type not in ("Add", "AddV2"):
        return None
    for position in (0, 1):
        inner = skip_casts(body, node.input[position])
        increment = const_value(body, node.input[1 - position])
        increment = increment[0] if isinstance(increment, list) and len(increment) == 1 else increment
        if increment == 1 and (inner == names[0] or (inner in names and names.index(inner) in counters)):
            return 1
    return None
