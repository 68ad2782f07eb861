# SPDX-License-Identifier: Apache-2.0
"""The sampler of the slow grids (tests/grid.py): every value of every parameter stays in the sample."""

import itertools

import grid


def cases(**axes):
    """Every combination of ``axes`` as (test id, params), ids as pytest writes them."""
    names = list(axes)
    return [(f"test_x[{'-'.join(map(str, values))}]", dict(zip(names, values)))
            for values in itertools.product(*axes.values())]


def test_every_value_of_every_parameter_is_kept():
    grid_cases = cases(cell=["lstm", "gru", "rnn"], opset=[13, 14, 15, 16, 17, 18], mode=["post", "any"])
    for share in (0.0, 0.3, 0.5):
        kept = [params for test_id, params in grid_cases if test_id in set(grid.sample(grid_cases, share))]
        for name in ("cell", "opset", "mode"):
            assert {params[name] for params in kept} == {params[name] for _, params in grid_cases}


def test_the_sample_is_smaller_stable_and_differs_by_salt():
    grid_cases = cases(cell=["lstm", "gru", "rnn"], opset=[13, 14, 15, 16, 17, 18], mode=["post", "any"])
    kept = grid.sample(grid_cases, 0.3)
    assert len(kept) < len(grid_cases)
    assert kept == grid.sample(list(reversed(grid_cases)), 0.3)
    assert set(kept) != set(grid.sample(grid_cases, 0.3, salt="tf_keras"))


def test_a_list_of_distinct_cases_is_kept_whole():
    """One parameter (or parameters that change together): each case brings a value of its own."""
    distinct = [(f"test_y[{i}]", {"args": ("--x", str(i)), "status": i}) for i in range(9)]
    assert sorted(grid.sample(distinct, 0.0)) == sorted(test_id for test_id, _ in distinct)


def test_share_one_keeps_everything():
    grid_cases = cases(a=[1, 2, 3], b=[4, 5])
    assert len(grid.sample(grid_cases, 1.0)) == len(grid_cases)


class _Item:
    """As much of a pytest item as the sampler reads."""

    def __init__(self, name: str, index: int, kind: str):
        self.originalname, self.nodeid, self.kind = name, f"test_x.py::{name}[{index}]", kind


def test_select_by_keeps_one_of_each_kind_and_other_functions_whole():
    items = [_Item("test_command_line", i, kind) for i, kind in enumerate(["a"] * 20 + ["b"] * 3 + ["c"])]
    others = [_Item("test_library", i, "a") for i in range(10)] + [_Item("test_command_line", 99, None)]
    kept, dropped = grid.select_by(items + others, "test_command_line", lambda item: item.kind, 0.0)
    assert {item.kind for item in kept if item.originalname == "test_command_line"} == {"a", "b", "c", None}
    assert len(kept) == 3 + 11 and len(dropped) == 21
    kept, _ = grid.select_by(items + others, "test_command_line", lambda item: item.kind, 0.5)
    assert 3 + 11 < len(kept) < 24 + 11
