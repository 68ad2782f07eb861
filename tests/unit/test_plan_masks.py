# SPDX-License-Identifier: Apache-2.0
"""Plan stage: what each mask needs, decided once per mask before emitting.

* A mask built as ``tf.sequence_mask(lengths, tf.shape(x)[1])`` is post-padded by construction:
  neither the guard (``"post"``) nor the reordering (``"any"``) is emitted, and the lengths are
  still counted from the mask.
* A mask computed from the layer's own input (``Masking``) provably has its batch: no broadcast.
  A mask given as its own input may have one row: it is broadcast to the input's batch (an
  ``Expand`` named ``masked_lstm_rewriter_mask_broadcast``), and a [1, T] mask then applies to
  every row, as in Keras.
"""

import numpy as np
import pytest

import masked_lstm_rewriter as mlr

import _graphs as G

BROADCAST = "masked_lstm_rewriter_mask_broadcast"


def broadcasts(converted):
    return [n for n in converted.model.graph.node if n.name.startswith(BROADCAST)]


@pytest.mark.parametrize("mode", ["post", "any"])
def test_sequence_mask_needs_neither_guard_nor_reordering(mode):
    spec = G.Loop("LSTM", mask="lengths")
    converted, weights = G.convert_loop(spec, mode)
    ops = converted.ops()
    assert ops.count("LSTM") == 1 and "Loop" not in ops
    assert not [n for n in converted.model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert "ScatterElements" not in ops  # the reordering
    G.assert_matches_reference(spec, converted, weights, G.POST_PADDED)


@pytest.mark.parametrize("mode, guarded, reordered", [("post", True, False), ("any", False, True)])
def test_a_mask_given_as_input_gets_its_mode_checks(mode, guarded, reordered):
    """The f_ref of the test above: the same loop over a mask input gets the guard or the reordering."""
    converted, _ = G.convert_loop(G.Loop("LSTM"), mode)
    assert bool([n for n in converted.model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]) == guarded
    assert ("ScatterElements" in converted.ops()) == reordered


@pytest.mark.parametrize("mode", ["post", "any"])
def test_masking_mask_has_the_batch_of_its_input(mode):
    spec = G.Loop("GRU", mask="masking")
    converted, weights = G.convert_loop(spec, mode)
    assert not broadcasts(converted)
    G.assert_matches_reference(spec, converted, weights, G.POST_PADDED if mode == "post" else G.NOT_POST_PADDED)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_a_one_row_mask_applies_to_every_row(mode):
    spec = G.Loop("RNN")
    converted, weights = G.convert_loop(spec, mode)
    assert [n.op_type for n in broadcasts(converted)] == ["Expand"]
    row = np.array([[1, 1, 1, 0, 0]], bool) if mode == "post" else np.array([[0, 1, 0, 1, 1]], bool)
    feeds, _ = G.batch(spec, np.broadcast_to(row, (4, row.shape[1])))
    feeds["mask"] = row
    expected = G.reference(spec, weights, feeds["x"], np.broadcast_to(row, (4, row.shape[1])))
    got = converted.run(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-5, err_msg=name)
