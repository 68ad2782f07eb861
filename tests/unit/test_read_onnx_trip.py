# SPDX-License-Identifier: Apache-2.0
"""The trip-count check of ONNX Loops (read/onnx_trip.py) on small Loops built by hand: what proves a
Loop runs exactly T steps, T the length of its input's time axis, and what is refused with
TRIP_COUNT_REASON. Every Loop the check accepts is also run on onnxruntime, and must run T steps."""

import numpy as np
import pytest

from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.graph import passes_through
from masked_lstm_rewriter.read.onnx_loop import _is_counter
from masked_lstm_rewriter.read.onnx_trip import TRIP_COUNT_REASON, check_loop_trip_count
from masked_lstm_rewriter.read.time_axis import time_axis_of
from _onnx_graphs import FLOAT, INT64, Var, const, info, load, loop_model, node, run

STEPS, BATCH = 5, 2

OUTER = [
    node("Shape", ["x"], ["x_shape"]),
    node("Gather", ["x_shape", "zero"], ["T"], axis=0),                        # shape(x)[0], a scalar
    node("Gather", ["x_shape", "one"], ["batch"], axis=0),                     # shape(x)[1]
    node("Slice", ["x_shape", "zero_1", "one_1", "zero_1"], ["T_1"]),          # shape(x)[0:1]
    node("Squeeze", ["T_1", "zero_1"], ["T_sliced"]),
    node("Cast", ["T"], ["T_float"], to=FLOAT), node("Cast", ["T_float"], ["T_cast"], to=INT64),
    node("Less", ["zero", "T"], ["T_positive"]),                               # Less(0, T)
    node("Greater", ["T", "zero"], ["T_greater"]),
    node("Less", ["one", "T"], ["T_above_one"]),
]
OUTER_CONSTS = [const("zero", 0), const("one", 1), const("four", 4), const("five", 5), const("six", 6),
                const("int64_max", np.iinfo(np.int64).max), const("zero_1", [0]),
                const("one_1", [1]), const("true", True), const("false", False)]
BODY_CONSTS = [const("one_b", 1), const("two_b", 2), const("five_b", 5), const("six_b", 6), const("true_b", True)]

# body conditions: the nodes computing "c" (the iteration number iter, the counter t and its next
# value t_next, the invariant T_in, and T itself, read from the graph around the loop)
NEXT = [node("Add", ["iter", "one_b"], ["iter_next"])]
CONDITIONS = {
    "passed through": [],
    "iter + 1 < T": NEXT + [node("Less", ["iter_next", "T"], ["c"])],
    "1 + iter < T": [node("Add", ["one_b", "iter"], ["iter_next"]), node("Less", ["iter_next", "T"], ["c"])],
    "T > iter + 1": NEXT + [node("Greater", ["T", "iter_next"], ["c"])],
    "iter < T": [node("Less", ["iter", "T"], ["c"])],
    "t_next < T": [node("Less", ["t_next", "T"], ["c"])],
    "t < T": [node("Less", ["t", "T"], ["c"])],
    "iter + 1 < T_in": NEXT + [node("Less", ["iter_next", "T_in"], ["c"])],
    "float(iter + 1) < float(T)": NEXT + [node("Cast", ["iter_next"], ["i_f"], to=FLOAT),
                                          node("Cast", ["T"], ["T_f"], to=FLOAT), node("Less", ["i_f", "T_f"], ["c"])],
    "iter + 1 < 5": NEXT + [node("Less", ["iter_next", "five_b"], ["c"])],
    "iter + 1 < T and cond": NEXT + [node("Less", ["iter_next", "T"], ["lt"]), node("And", ["lt", "cond"], ["c"])],
    "iter + 1 < T and t_next < T": NEXT + [node("Less", ["iter_next", "T"], ["lt"]),
                                           node("Less", ["t_next", "T"], ["lt2"]), node("And", ["lt", "lt2"], ["c"])],
    # refused
    "iter + 2 < T": [node("Add", ["iter", "two_b"], ["iter_2"]), node("Less", ["iter_2", "T"], ["c"])],
    "T < iter + 1": NEXT + [node("Less", ["T", "iter_next"], ["c"])],
    "iter + 1 <= T": NEXT + [node("LessOrEqual", ["iter_next", "T"], ["c"])],
    "iter + 1 < 6": NEXT + [node("Less", ["iter_next", "six_b"], ["c"])],
    "iter + 1 < batch": NEXT + [node("Less", ["iter_next", "batch"], ["c"])],
    "iter + 1 < T and iter + 1 < batch": NEXT + [node("Less", ["iter_next", "T"], ["lt"]),
                                                 node("Less", ["iter_next", "batch"], ["lt2"]),
                                                 node("And", ["lt", "lt2"], ["c"])],
    "iter + 1 < T or cond": NEXT + [node("Less", ["iter_next", "T"], ["lt"]), node("Or", ["lt", "cond"], ["c"])],
    "h < T": [node("Cast", ["h"], ["h_i"], to=INT64), node("Less", ["h_i", "T"], ["c"])],
    "true": [node("Identity", ["true_b"], ["c"])],
}


def trip_loop(condition, trip="T", start="", static=True, counter_from="zero", bound_from="T"):
    """A Loop over x [T, B, 3]: loop variables a counter t (from ``counter_from``, +1 per step), an
    invariant T_in (from ``bound_from``) and a state h; the body returns ``iter`` as a scan output."""
    nodes = [node("Add", ["t", "one_b"], ["t_next"]), node("Neg", ["h"], ["h_next"])] + CONDITIONS[condition]
    return loop_model(
        nodes, [Var("t", INT64, (), counter_from, "t_next"), Var("T_in", INT64, (), bound_from, "T_in"),
                Var("h", FLOAT, (BATCH,), "h0", "h_next")],
        trip=trip, start=start, condition="c" if CONDITIONS[condition] else "cond",
        probes=[("iter", INT64, 0)], body_initializers=BODY_CONSTS, outer_nodes=OUTER,
        inputs=[info("x", FLOAT, [STEPS if static else "time", BATCH, 3]), info("h0", FLOAT, [BATCH])],
        initializers=OUTER_CONSTS)


def check(model):
    """None when the check proves the Loop runs T steps, else the Refusal (with the Loop as its node)."""
    graph, loop, body = load(model)
    variables = range(2, len(body.input_names))
    counters = {i for i in variables if _is_counter(graph, loop, body, i)}
    invariants = {i for i in variables if passes_through(body, i)}
    try:
        check_loop_trip_count(graph, loop, body, counters, invariants, time_axis_of(graph, ["x"]))
    except Refusal as refusal:
        assert refusal.node is loop
        return refusal
    return None


def steps_run(model) -> int:
    feeds = {"x": np.zeros((STEPS, BATCH, 3), np.float32), "h0": np.ones(BATCH, np.float32)}
    return len(run(model, feeds)["iter__scanned"])


def assert_runs_t_steps(model):
    assert check(model) is None
    assert steps_run(model) == STEPS


def assert_refused(model):
    refusal = check(model)
    assert refusal is not None and refusal.reason == TRIP_COUNT_REASON


# --- the trip count: T read off the input's shape, a constant equal to the static T, or absent -------

@pytest.mark.parametrize("trip", ["T", "T_sliced", "T_cast"])
@pytest.mark.parametrize("static", [True, False], ids=["static T", "dynamic T"])
def test_trip_count_read_off_the_input_shape(trip, static):
    assert_runs_t_steps(trip_loop("passed through", trip=trip, static=static))


def test_trip_count_constant_equal_to_the_static_t():
    assert_runs_t_steps(trip_loop("passed through", trip="five"))


def test_trip_count_constant_without_a_static_t_is_refused():
    assert_refused(trip_loop("passed through", trip="five", static=False))


def test_trip_count_shorter_than_t_is_refused():
    model = trip_loop("passed through", trip="four")
    assert_refused(model)
    assert steps_run(model) == STEPS - 1  # what the refusal protects


def test_trip_count_of_another_axis_is_refused():
    assert_refused(trip_loop("passed through", trip="batch"))


def test_no_trip_count_and_a_condition_passed_through_is_refused():
    """Nothing bounds the loop at all."""
    assert_refused(trip_loop("passed through", trip=""))


@pytest.mark.parametrize("trip", ["int64_max", "six"])
def test_a_trip_count_never_reached_leaves_the_stop_condition_to_decide(trip):
    """The largest int64 (tf2onnx's files made from LiteRT), or a constant above the static T: as if there
    were no trip count, the condition must stop the loop after its last step."""
    assert_runs_t_steps(trip_loop("iter + 1 < T", trip=trip))
    assert_refused(trip_loop("passed through", trip=trip))   # nothing stops it (not run: it would not end)
    assert_refused(trip_loop("iter < T", trip=trip))          # one step too many


def test_a_constant_trip_count_above_t_needs_the_static_t():
    assert_refused(trip_loop("iter + 1 < T", trip="six", static=False))
    assert_runs_t_steps(trip_loop("iter + 1 < T", trip="int64_max", static=False))


# --- the initial condition: Less(0, T), true, or absent ---------------------------------------------

@pytest.mark.parametrize("start", ["", "T_positive", "T_greater", "true"])
def test_initial_condition_that_holds_unless_t_is_zero(start):
    assert_runs_t_steps(trip_loop("passed through", start=start))


@pytest.mark.parametrize("start", ["false", "T_above_one"])
def test_initial_condition_that_may_not_hold_is_refused(start):
    model = trip_loop("passed through", start=start)
    assert_refused(model)
    if start == "false":
        assert steps_run(model) == 0


# --- the body's condition ------------------------------------------------------------------------

@pytest.mark.parametrize("condition", ["iter + 1 < T", "1 + iter < T", "T > iter + 1", "t_next < T",
                                       "iter + 1 < T_in", "float(iter + 1) < float(T)", "iter + 1 < 5",
                                       "iter + 1 < T and cond", "iter + 1 < T and t_next < T"])
@pytest.mark.parametrize("trip", ["T", ""], ids=["trip count T", "no trip count"])
def test_stop_condition_true_before_the_last_step(condition, trip):
    assert_runs_t_steps(trip_loop(condition, trip=trip))


@pytest.mark.parametrize("condition", ["iter < T", "t < T"])
def test_condition_on_the_step_before_it_advances_with_the_trip_count(condition):
    assert_runs_t_steps(trip_loop(condition, trip="T"))


@pytest.mark.parametrize("condition", ["iter + 2 < T", "T < iter + 1", "iter + 1 <= T", "iter + 1 < 6",
                                       "iter + 1 < batch", "iter + 1 < T and iter + 1 < batch",
                                       "iter + 1 < T or cond", "h < T"])
def test_stop_condition_that_is_not_proven_is_refused(condition):
    assert_refused(trip_loop(condition, trip="T"))


def test_t_plus_two_stops_a_step_early():
    model = trip_loop("iter + 2 < T", trip="T")
    assert_refused(model)
    assert steps_run(model) == STEPS - 1


def test_a_constant_bound_needs_the_static_t():
    assert_refused(trip_loop("iter + 1 < 5", trip="", static=False))


def test_a_counter_that_does_not_start_at_zero_is_no_step_number():
    assert_runs_t_steps(trip_loop("t_next < T", trip="", counter_from="zero"))
    model = trip_loop("t_next < T", trip="", counter_from="one")
    assert_refused(model)
    assert steps_run(model) == STEPS - 1


def test_an_invariant_bound_must_start_as_t():
    assert_refused(trip_loop("iter + 1 < T_in", trip="T", bound_from="batch"))
    assert_refused(trip_loop("iter + 1 < T_in", trip="T", bound_from="five", static=False))
    assert_runs_t_steps(trip_loop("iter + 1 < T_in", trip="T", bound_from="five"))


# --- without a trip count, a test must stop the loop after its last step -----------------------------

def test_condition_on_the_step_before_it_advances_without_a_trip_count():
    model = trip_loop("iter < T", trip="")
    assert steps_run(model) == STEPS + 1
    assert_refused(model)


def test_an_always_true_condition_without_a_trip_count():
    assert_refused(trip_loop("true", trip=""))  # (not run: it would not stop)
