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
