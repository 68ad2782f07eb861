# SPDX-License-Identifier: Apache-2.0
"""Derandomized samples of the slow parametrized grids.

A test module marked ``pytestmark = pytest.mark.grid`` runs, for each of its parametrized test
functions, a sample of the combinations instead of all of them:

* **every value of every parameter** is in the sample at least once (a cell kind, an opset, a
  merge mode is never left out), and
* a further share of the combinations (``MLR_GRID_SHARE``, a quarter by default), picked by a stable hash
  of the test's id and the Keras flavour: the same sample on every run and machine, so a failure in
  CI reproduces, and a different one per flavour, so the two runs together cover more.

``MLR_GRID=all`` runs every combination (as a release check does); the deselected ones are reported
by pytest as "deselected". A test function with a single combination is always run.
"""

from __future__ import annotations

import hashlib
import os
from typing import Iterable, List, Sequence, Tuple

MARKER = "grid"
SHARE = float(os.environ.get("MLR_GRID_SHARE", "0.25"))


def sampling() -> bool:
    """False when ``MLR_GRID=all`` asks for every combination."""
    return os.environ.get("MLR_GRID", "sample").strip() != "all"


def stable_fraction(test_id: str) -> float:
    """A number in [0, 1) fixed by ``test_id`` alone."""
    return int(hashlib.sha256(test_id.encode()).hexdigest()[:12], 16) / 16 ** 12


def sample(cases: Sequence[Tuple[str, dict]], share: float = SHARE, salt: str = "") -> List[str]:
    """The ids of ``cases`` (``(test id, {parameter: value})``) to run: each case in stable-hash order
    is kept when it brings a parameter value no kept case has yet, or when its hash falls in ``share``."""
    covered = set()
    kept = []
    for test_id, params in sorted(cases, key=lambda case: stable_fraction(salt + case[0])):
        values = {(name, repr(value)) for name, value in params.items()}
        if not values <= covered or stable_fraction(salt + test_id) < share:
            kept.append(test_id)
            covered |= values
    return kept


def select(items: Iterable, share: float = SHARE, salt: str = "") -> Tuple[list, list]:
    """(kept, deselected) pytest items: the grid-marked parametrized functions sampled, the rest kept."""
    items = list(items)
    groups = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and item.get_closest_marker(MARKER) is not None:
            groups.setdefault((item.module.__name__, item.originalname), []).append(item)
    dropped = set()
    for group in groups.values():
        if len(group) > 1:
            kept = set(sample([(item.nodeid, item.callspec.params) for item in group], share, salt))
            dropped |= {item.nodeid for item in group if item.nodeid not in kept}
    return [item for item in items if item.nodeid not in dropped], [item for item in items if item.nodeid in dropped]


def select_by(items: Iterable, function: str, key, share: float, salt: str = "") -> Tuple[list, list]:
    """(kept, deselected): of the items of test function ``function`` whose ``key(item)`` is not None,
    those whose key no kept one has yet, and a ``share`` of the others by stable hash; every other
    item kept."""
    items = list(items)
    chosen = [item for item in items if getattr(item, "originalname", None) == function and key(item) is not None]
    kept = set(sample([(item.nodeid, {"kind": key(item)}) for item in chosen], share, salt))
    dropped = {item.nodeid for item in chosen} - kept
    return [item for item in items if item.nodeid not in dropped], [item for item in items if item.nodeid in dropped]
