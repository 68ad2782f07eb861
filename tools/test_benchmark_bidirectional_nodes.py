# SPDX-License-Identifier: Apache-2.0
"""tools/benchmark_bidirectional_nodes.py on tiny nodes: its two forms compute the same directions
(the bidirectional node's forward half is the first forward node's output, with the same weights),
with and without lengths and the activations attribute, and a run gives a row per case."""

from __future__ import annotations

import numpy as np
import pytest

import benchmark_bidirectional_nodes as bench  # noqa: E402  (beside this file: pytest puts tools/ on sys.path)
from masked_lstm_rewriter.sessions import onnxruntime_session


@pytest.mark.parametrize("op", sorted(bench.GATES))
@pytest.mark.parametrize("lengths", [False, True])
def test_named_and_unnamed_default_activations_compute_the_same(op, lengths):
    x = np.random.default_rng(0).normal(size=(5, 3, 4)).astype(np.float32)
    feeds = dict(x=x, lengths=np.array([5, 2, 0], np.int32)) if lengths else {"x": x}
    results = [onnxruntime_session(bench.recurrent_model(op, ("bidirectional",), 4, 3, lengths, named)).run(None, feeds)
               for named in (True, False)]
    assert results[0][0].shape == (5, 2, 3, 3)
    np.testing.assert_array_equal(results[0][0], results[1][0])


def test_a_run_gives_one_row_per_case():
    args = bench.parse_args(["--steps", "3", "--features", "2", "--units", "2", "--batches", "2", "--rounds", "1",
                             "--runtimes", "onnxruntime"])
    rows = bench.measure(args)
    assert len(rows) == 3 * 2 * 2 and all(row["one"] > 0 and row["two"] > 0 for row in rows)
    assert bench.table(rows).count("\n") == len(rows) + 1
