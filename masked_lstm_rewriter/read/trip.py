# SPDX-License-Identifier: Apache-2.0
"""How many steps a While loop runs: read its stop condition, prove it is the number of time steps.

The native ``LSTM``/``GRU``/``RNN`` runs over every time step of its input, so a loop may only be
rewritten when it provably does the same. TensorFlow's ``While`` runs while its condition function
returns true (``maximum_iterations`` is compiled into that function as ``counter < limit``: the
op has no such attribute). Keras writes the condition as ``time < T`` (tf_keras) or
``counter < maximum_iterations and time < T`` (Keras 3); a hand-written loop may stop anywhere.

tf2onnx hands custom rewriters each condition graph on its own, before the main graph (and turns
it into ONNX ops right after), so :func:`read_condition` reads it then: a conjunction of
``a < b`` tests of loop variables, by index. In the main graph, :func:`check_trip_count` checks
that each ``a`` is a step counter (starts at 0, the body adds one) and each ``b`` a loop-invariant
tensor that is provably the number of time steps: then the loop runs exactly T steps. Where T
can be read off is a :class:`~.time_axis.TimeAxis`.
"""

from __future__ import annotations

import dataclasses
from typing import Union

from onnx import TensorProto

from ..failure import Refusal
from ..graph import producer, scalar_value, shape_dim_of, skip_identity
from .time_axis import TimeAxis


COND_MATCH_ATTR = "_masked_lstm_rewriter_cond"


COND_SHAPE_REASON = "the loop's stop condition is not a conjunction of counter < bound tests"


COND_MISSING_REASON = "the loop's stop condition was not seen by the rewriter"


COUNTER_REASON = ("the loop's stop condition tests something other than a step counter that starts at 0 "
                  "and advances by one")


TRIP_COUNT_REASON = ("the loop may stop before its last time step (a bound in its stop condition, such as "
                     "maximum_iterations, is not provably the number of steps)")


@dataclasses.dataclass(frozen=True)
class LoopCondition:
    """The loop runs while ``variable[a] < b`` for every ``(a, b)`` in ``tests``: ``b`` is a loop
    variable's index (an int), or a constant of the condition graph (a one-element array)."""

    tests: tuple


def is_loop_condition(graph) -> bool:
    """A function graph with a single boolean output: what a While's condition looks like."""
    outputs = graph.outputs
    return len(outputs) == 1 and graph.get_dtype(outputs[0]) == TensorProto.BOOL


def read_condition(graph) -> Union[LoopCondition, Refusal]:
    """The ``counter < bound`` tests (by loop-variable index) the condition is a conjunction of,
    or the reason it is something else (a graph shape not foreseen included)."""
    try:
        return _read_tests(graph)
    except Refusal as refusal:
        return refusal
    except Exception as error:  # pylint: disable=broad-except
        return Refusal(f"unexpected loop condition ({type(error).__name__}: {error})")


def _read_tests(graph) -> LoopCondition:
    names = graph.input_names
    tests, pending = [], [graph.outputs[0]]
    while pending:
        node = producer(graph, skip_identity(graph, pending.pop()))
        if node is not None and node.type == "LogicalAnd":
            pending.extend(node.input)
            continue
        if node is None or node.type != "Less":
            raise Refusal(COND_SHAPE_REASON, node)
        counter, bound = (skip_identity(graph, t) for t in node.input)
        bound_node = producer(graph, bound)
        if counter not in names or (bound not in names and (bound_node is None or not bound_node.is_const())):
            raise Refusal(COND_SHAPE_REASON, node)
        tests.append((names.index(counter), names.index(bound) if bound in names
                      else bound_node.get_tensor_value(as_list=False)))
    return LoopCondition(tuple(tests))


def check_trip_count(graph, while_node, condition, counters, invariants, time_axis: TimeAxis) -> None:
    """Raise a Refusal unless the While runs exactly T steps, T the length of the layer's time axis.

    ``condition``: what :func:`read_condition` found (a Refusal, or None if never seen);
    ``counters``: loop variables the body advances by one; ``invariants``: those it passes through.
    """
    if condition is None:
        raise Refusal(COND_MISSING_REASON, while_node)
    if isinstance(condition, Refusal):
        raise condition
    if not condition.tests:
        raise Refusal(TRIP_COUNT_REASON, while_node)
    for counter, bound in condition.tests:
        if counter not in counters or scalar_value(graph, while_node.input[counter]) != 0.0:
            raise Refusal(COUNTER_REASON, while_node)
        if isinstance(bound, int):
            if bound not in invariants or not is_step_count(graph, while_node.input[bound], time_axis):
                raise Refusal(TRIP_COUNT_REASON, while_node)
        elif bound.size != 1 or time_axis.steps is None or time_axis.steps != int(bound.reshape(-1)[0]):
            raise Refusal(TRIP_COUNT_REASON, while_node)


def is_step_count(graph, tensor: str, time_axis: TimeAxis) -> bool:
    """Is ``tensor`` (a scalar of the main graph) provably the number of time steps?

    It is when it is ``shape(t)[k]`` of a ``(t, k)`` of the time axis, a constant equal to its
    static length, a reduction (Keras 3's ``reduce_max(T)``) or cast of one of those, or the
    smaller of one and a value at least as large (``dynamic_rnn``'s ``minimum(T, maximum(1, T))``).
    """
    tensor = skip_identity(graph, tensor)
    node = producer(graph, tensor)
    if node is None:
        return False
    if node.type == "Cast" or (node.type in ("Max", "Min") and graph.get_shape(node.input[0]) == []):
        return is_step_count(graph, node.input[0], time_axis)
    if node.type == "Minimum":
        a, b = node.input
        return any(is_step_count(graph, one, time_axis) and _at_least_step_count(graph, other, time_axis)
                   for one, other in ((a, b), (b, a)))
    if node.is_const():
        value = node.get_tensor_value(as_list=False)
        return time_axis.steps is not None and value.size == 1 and int(value.reshape(-1)[0]) == time_axis.steps
    return shape_dim_of(graph, tensor) in time_axis.dims


def _at_least_step_count(graph, tensor: str, time_axis: TimeAxis) -> bool:
    """Is ``tensor`` the number of time steps, or the larger of it and another value?"""
    node = producer(graph, skip_identity(graph, tensor))
    if node is not None and node.type == "Maximum":
        return any(is_step_count(graph, t, time_axis) for t in node.input)
    return is_step_count(graph, tensor, time_axis)
