# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the cell readers' small value types."""

import numpy as np

from masked_lstm_rewriter.cell import ConstRef, LinearForm


def test_const_ref_resolves_splits_and_column_slices():
    kernel = np.arange(24, dtype=np.float32).reshape(2, 12)
    ref = ConstRef(input_index=3)
    lookup = {3: kernel}.get
    np.testing.assert_array_equal(ref.then(("split", 1, 4, 2)).resolve(lookup), kernel[:, 6:9])
    np.testing.assert_array_equal(ref.then(("slice", 1, 9, None)).resolve(lookup), kernel[:, 9:])
    np.testing.assert_array_equal(ref.then(("split", -1, 4, 0)).then(("slice", 1, 1, 3)).resolve(lookup),
                                  kernel[:, 1:3])


def test_const_ref_unknown_or_unsplittable_is_none():
    assert ConstRef(input_index=1).resolve({}.get) is None
    assert ConstRef(value=np.zeros((2, 5))).then(("split", 1, 4, 0)).resolve({}.get) is None


def test_linear_form_rejects_a_term_twice():
    w = ConstRef(input_index=0)
    assert LinearForm(kernel=w).add(LinearForm(kernel=w)) is None
    both = LinearForm(kernel=w).add(LinearForm(recurrent=w))
    assert both == LinearForm(kernel=w, recurrent=w)


def test_split_columns_slices_every_term():
    form = LinearForm(kernel=ConstRef(input_index=0), bias=ConstRef(input_index=1)).split_columns(4, 3)
    assert form.kernel.steps == (("split", -1, 4, 3),) and form.bias.steps == (("split", -1, 4, 3),)
    assert form.recurrent is None


def test_biases_on_both_sides_sum_up():
    """A GRU gate adds the input side's and the recurrent side's bias; a folded scalar broadcasts."""
    values = {0: np.arange(4, dtype=np.float32), 1: np.full(4, 10, np.float32), 2: np.float32(3)}
    x_side = LinearForm(kernel=ConstRef(input_index=5), bias=ConstRef(input_index=0))
    h_side = LinearForm(recurrent=ConstRef(input_index=6), bias=ConstRef(input_index=1))
    both = x_side.add(h_side).add(LinearForm(bias=ConstRef(input_index=2)))
    assert both.kernel == x_side.kernel and both.recurrent == h_side.recurrent
    np.testing.assert_array_equal(both.bias.resolve(values.get), values[0] + values[1] + 3)


def test_squeeze_and_slice_steps_apply_to_sums_too():
    """Keras 3's GRU bias [2, 3H]: split on axis 0, squeezed, then a gate's columns."""
    bias = np.arange(12, dtype=np.float32).reshape(2, 6)
    rows = [ConstRef(input_index=0).then(("split", 0, 2, i)).then(("squeeze", 0, 0, 0)) for i in (0, 1)]
    form = LinearForm(bias=rows[0]).add(LinearForm(bias=rows[1])).then(("slice", -1, 2, 4))
    np.testing.assert_array_equal(form.bias.resolve({0: bias}.get), bias[0, 2:4] + bias[1, 2:4])
