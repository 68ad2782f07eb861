# SPDX-License-Identifier: Apache-2.0
"""tools/compare_revisions.py's block timing: each side runs in blocks of consecutive runs, the sides
alternating block by block (no model timed right after the other one's run, except at a block's
start, which two untimed runs absorb)."""

import itertools

import compare_revisions


def test_each_side_runs_in_blocks_that_alternate():
    calls = []
    runs = {side: (lambda feed, side=side: calls.append(side)) for side in ("base", "current")}
    medians, blocks = compare_revisions.time_blocks(runs, {}, budget=0.0)
    assert blocks == compare_revisions.BLOCK_CYCLES
    assert {side: len(values) for side, values in medians.items()} == {"base": blocks, "current": blocks}
    runs_of = [(side, len(list(group))) for side, group in itertools.groupby(calls[4:])]  # after the warm-up
    assert len(runs_of) == 2 * blocks - (blocks - 1)  # the order reverses each cycle: a side's blocks meet
    assert all(count >= 2 + 5 for _, count in runs_of)  # two untimed runs, then at least five timed
    assert [side for side, _ in runs_of][:2] == ["base", "current"]
