# SPDX-License-Identifier: Apache-2.0
"""tools/benchmark_alternatives.py's pure parts, and how tools/benchmark.py marks an alternative
that failed or is not exact: no TensorFlow, no converter, no timing.

The --alternatives parser, the one-line error text, the exact / not exact decision, the static
shapes LiteRT gets a model for, ``prepare`` with stand-in builders and runners (a build that
raises, a result off by more than the tolerance, an exact one), and the CSV rows and table cells
the benchmark writes for each status.
"""

from __future__ import annotations

import numpy as np
import pytest

import benchmark  # noqa: E402  (beside this file: pytest puts tools/ on sys.path)
import benchmark_alternatives as alt  # noqa: E402

TOLERANCE = 1e-5
SHAPES = [(1, 100, 1.0), (1, 100, 0.5), (32, 100, 1.0), (32, 16, 0.5)]


# ---------------------------------------------------------------- the command line and small helpers

def test_parse_names_keeps_the_table_order_and_knows_all_and_none():
    assert alt.parse_names("all") == alt.ALTERNATIVES == ("tf", "ov-tf", "litert")
    assert alt.parse_names("none") == alt.parse_names("") == ()
    assert alt.parse_names(" litert, TF,litert ") == ("tf", "litert")


def test_parse_names_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="unknown alternative.*onnx"):
        alt.parse_names("tf,onnx")
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--alternatives", "tflite"])


def test_benchmark_takes_the_alternatives_option():
    assert benchmark.parse_args(["--quick"]).alternatives == alt.ALTERNATIVES
    args = benchmark.parse_args(["--quick", "--alternatives", "ov-tf", "--alternatives-headline-only"])
    assert args.alternatives == ("ov-tf",) and args.alternatives_headline_only


def test_first_line_is_the_first_non_empty_line_or_the_type():
    message = "\n  loc(fused): error: op not legal  \nmore\n"
    assert alt.first_line(RuntimeError(message)) == "loc(fused): error: op not legal"
    assert alt.first_line(KeyError()) == "KeyError"
    assert len(alt.first_line(ValueError("x" * 500), limit=50)) == 50


def test_status_is_exact_within_the_tolerance_only():
    assert alt.status_of(0.0, TOLERANCE) == alt.status_of(TOLERANCE, TOLERANCE) == alt.EXACT
    for diff in (2e-5, float("inf"), float("nan")):
        assert alt.status_of(diff, TOLERANCE) == alt.NOT_EXACT


def test_a_nan_is_the_largest_difference():
    assert alt.largest([0.0, 3e-8, 1e-9]) == 3e-8
    assert np.isnan(alt.largest([0.0, float("nan"), 1.0])) and np.isnan(alt.largest([float("nan"), 1.0]))
    outcome = alt.Outcome("gru", "litert", alt.NOT_EXACT, worst=float("nan"),
                          diffs={(1, 100, 1.0): 1.0, (32, 16, 0.5): float("nan"), (1, 100, 0.5): 0.0})
    assert "the largest at batch 32, T=16, fill 0.5" in alt.summary_line(outcome, TOLERANCE, "GRU")


def test_litert_gets_one_model_per_batch_and_length():
    assert alt.static_shapes(SHAPES) == [(1, 100), (32, 100), (32, 16)]
    assert alt.shape_key(32, 16) == "32x16"


def test_a_wrong_shape_is_infinitely_far():
    want = np.zeros((2, 3, 4), np.float32)
    assert alt.max_difference(np, np.zeros((2, 3, 4)), want) == 0.0
    assert alt.max_difference(np, np.zeros((2, 4)), want) == float("inf")


# ---------------------------------------------------------------- prepare, with stand-ins

class FakeKeras:
    """Stands for a Keras model: ones of shape [batch, T, 2]."""

    def __call__(self, tokens, training=False):
        return np.ones(tokens.shape + (2,), np.float32)


class FakeRunner:
    def __init__(self, offset: float):
        self.offset = offset

    def run(self, feed):
        return np.ones(feed[alt.INPUT].shape + (2,), np.float32) + self.offset


def batches_for(batch, steps, fill):
    return [np.ones((batch, steps), np.int32), np.zeros((batch, steps), np.int32)]


def prepared(monkeypatch, builder, offset: float = 0.0) -> alt.Outcome:
    monkeypatch.setitem(alt.BUILDERS, "tf", builder)
    monkeypatch.setattr(alt, "open_runner", lambda spec, threads: FakeRunner(offset))
    return alt.prepare(np, None, "tf", "lstm", FakeKeras(), SHAPES, "/nowhere", batches_for, TOLERANCE)


def test_a_build_that_raises_is_failed_with_its_first_line(monkeypatch):
    def builder(*_):
        raise RuntimeError("error: 'tf.TensorListReserve' op requires element_shape to be static\n  at ...")
    outcome = prepared(monkeypatch, builder)
    assert outcome.status == alt.FAILED and outcome.spec is None and not outcome.diffs
    assert outcome.detail == ("cannot convert it: RuntimeError: error: 'tf.TensorListReserve' op requires "
                              "element_shape to be static")
    assert alt.summary_line(outcome, TOLERANCE, "LSTM").startswith("  LSTM          tf      FAILED, not timed: cannot")


def test_a_result_beyond_the_tolerance_is_not_exact_but_kept_for_timing(monkeypatch):
    outcome = prepared(monkeypatch, lambda *_: dict(kind="tf", path="x"), offset=0.25)
    assert outcome.status == alt.NOT_EXACT and outcome.spec == dict(kind="tf", path="x")
    assert outcome.worst == pytest.approx(0.25) and set(outcome.diffs) == set(SHAPES)
    assert "NOT EXACT (timed, marked): max |diff| 0.25 over 4 shapes (> 1e-05)" in alt.summary_line(
        outcome, TOLERANCE, "LSTM")


def test_an_exact_result_is_exact(monkeypatch):
    outcome = prepared(monkeypatch, lambda *_: dict(kind="tf", path="x"))
    assert outcome.status == alt.EXACT and outcome.worst == 0.0
    line = alt.summary_line(outcome, TOLERANCE, "LSTM")
    assert "exact: max |diff| 0 over 4 shapes; SavedModel, dynamic shapes" in line


def test_a_runner_that_raises_is_failed(monkeypatch):
    monkeypatch.setitem(alt.BUILDERS, "tf", lambda *_: dict(kind="tf", path="x"))

    def broken(spec, threads):
        raise OSError("cannot open the file")
    monkeypatch.setattr(alt, "open_runner", broken)
    outcome = alt.prepare(np, None, "tf", "lstm", FakeKeras(), SHAPES, "/nowhere", batches_for, TOLERANCE)
    assert outcome.status == alt.FAILED and outcome.detail == "cannot open it: OSError: cannot open the file"


def test_open_runner_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown alternative kind"):
        alt.open_runner(dict(kind="onnx"), threads=1)


# ---------------------------------------------------------------- how the benchmark marks them

def headline_cell(times: dict) -> dict:
    return dict(set="headline", model="lstm", batch=1, time=100, fill=1.0, threads=1, rounds=3, other_load=0.0,
                variants=list(benchmark.HEADLINE_VARIANTS + alt.ALTERNATIVES), times=times)


def test_failed_and_inexact_alternatives_are_marked_in_the_csv_rows_and_the_table():
    outcomes = {("lstm", "tf"): alt.Outcome("lstm", "tf", alt.EXACT, spec={}),
                ("lstm", "ov-tf"): alt.Outcome("lstm", "ov-tf", alt.NOT_EXACT, spec={}),
                ("lstm", "litert"): alt.Outcome("lstm", "litert", alt.FAILED, detail="cannot convert it: boom")}
    times = {"post": [0.001, 0.001, 0.001], "tf": [0.01] * 3, "ov-tf": [0.02] * 3}
    ratio_rows, latency_rows = benchmark.summarise([headline_cell(times)], {}, outcomes)
    row = ratio_rows[0]
    assert (row["tf_status"], row["ovtf_status"], row["litert_status"]) == ("exact", "not exact", "failed")
    assert row["tf_over_post"] == pytest.approx(10.0) and row["litert_ms"] == row["litert_over_post"] == ""
    by_variant = {r["variant"]: r for r in latency_rows}
    assert by_variant["post"]["status"] == "exact" and by_variant["ov-tf"]["status"] == "not exact"
    assert by_variant["litert"]["status"] == "failed: cannot convert it: boom"
    assert by_variant["litert"]["median_ms"] == "" and by_variant["litert"]["rounds"] == 0
    assert [list(r) for r in latency_rows] == [list(latency_rows[0])] * len(latency_rows), "one CSV header fits all"
    assert benchmark.alternative_cell(row, "litert").split() == ["failed", "failed"]
    assert benchmark.alternative_cell(row, "ov-tf").split()[0] == "20.000*"
    assert benchmark.alternative_cell(row, "tf").split()[:2] == ["10.000", "10.0x"]


def test_the_alternatives_are_timed_on_one_thread_only():
    args = benchmark.parse_args(["--quick"])
    assert benchmark.grid_alternatives(args, 1) == list(alt.ALTERNATIVES)
    assert benchmark.grid_alternatives(args, 2) == []
    assert benchmark.grid_alternatives(benchmark.parse_args(["--alternatives-headline-only"]), 1) == []


def test_every_batch_of_a_shape_is_checked(monkeypatch):
    class WrongOnZeros(FakeRunner):
        def run(self, feed):
            return super().run(feed) + (0.5 if not feed[alt.INPUT].any() else 0.0)

    monkeypatch.setitem(alt.BUILDERS, "tf", lambda *_: dict(kind="tf", path="x"))
    monkeypatch.setattr(alt, "open_runner", lambda spec, threads: WrongOnZeros(0.0))
    outcome = alt.prepare(np, None, "tf", "lstm", FakeKeras(), SHAPES, "/nowhere", batches_for, TOLERANCE)
    assert outcome.status == alt.NOT_EXACT and outcome.worst == 0.5
