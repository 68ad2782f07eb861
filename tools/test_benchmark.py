# SPDX-License-Identifier: Apache-2.0
"""tools/benchmark.py's batches and timing: a distribution's cell runs several batches drawn from it in
turn, each run after one of other lengths, in interleaved rounds or in blocks of consecutive runs."""

import itertools

import numpy as np

import benchmark


def test_a_distribution_is_several_batches_of_one_shape_and_other_lengths():
    batches = benchmark.shape_batches(32, 100, "lognormal")
    assert len(batches) == benchmark.DRAWS
    assert {tokens.shape for tokens in batches} == {(32, 100)}
    lengths = {tuple((tokens != 0).sum(axis=1)) for tokens in batches}
    assert len(lengths) == benchmark.DRAWS
    assert all(max(row) == 100 for row in lengths)  # each keeps its row of T
    again = benchmark.shape_batches(32, 100, "lognormal")
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # fixed seeds


def test_an_evenly_spread_fill_is_one_batch():
    (tokens,) = benchmark.shape_batches(8, 64, 0.5)
    assert tokens.shape == (8, 64)


def test_each_batch_walks_every_draw_of_every_shape():
    shapes = [(1, 100, 1.0), (8, 100, "one-long")]
    assert [(b, t, f) for b, t, f, _ in benchmark.each_batch(shapes)] == (
        [(1, 100, 1.0)] + [(8, 100, "one-long")] * benchmark.DRAWS)


def test_rounds_cycle_the_feeds_and_a_settling_run_takes_the_previous_one():
    calls = []
    runs = {name: (lambda feed, name=name: calls.append((name, feed))) for name in ("a", "b")}
    times, rounds, warm = benchmark.time_cell(runs, ["f0", "f1", "f2"], budget=0.0, min_rounds=6, max_rounds=6,
                                              warmup=0.0)
    assert rounds == 6 and {name: len(values) for name, values in times.items()} == {"a": 6, "b": 6}
    timed = calls[2 * warm:]
    for index in range(rounds):  # both run fast: each is settled (untimed) on the previous round's feed
        pairs = timed[4 * index: 4 * index + 4]
        feed, previous = f"f{index % 3}", f"f{(index - 1) % 3}"
        assert sorted(pairs) == sorted([("a", previous), ("a", feed), ("b", previous), ("b", feed)])
        assert [f for _, f in pairs] == [previous, feed, previous, feed]


def test_blocks_alternate_and_reverse_and_take_the_feeds_in_turn():
    calls = []
    runs = {name: (lambda feed, name=name: calls.append((name, feed))) for name in ("a", "b")}
    feeds = ["f0", "f1", "f2"]
    medians, runs_each, warm = benchmark.time_blocks(runs, feeds, budget=0.0, min_runs=40, max_runs=40, warmup=0.0)
    cycles = benchmark.BLOCK_CYCLES
    assert {name: len(values) for name, values in medians.items()} == {"a": cycles, "b": cycles}
    size = runs_each // cycles
    blocks = [(name, [f for _, f in group]) for name, group in itertools.groupby(calls[2 * warm:], key=lambda c: c[0])]
    assert len(blocks) == 2 * cycles - (cycles - 1)  # the order reverses each cycle: a variant's blocks meet
    assert [name for name, _ in blocks[:3]] == ["a", "b", "a"]
    first = blocks[0][1]
    assert first[:2] == ["f1", "f2"]  # untimed, then the timed runs take the feeds in turn
    assert first[2:] == [feeds[i % 3] for i in range(size)] and size >= 5
