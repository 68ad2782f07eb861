# SPDX-License-Identifier: Apache-2.0
"""``verify``'s Keras reference turns its outputs into arrays on every backend: Keras on torch gives
tensors that track gradients, which numpy refuses until they are detached (no torch needed here)."""

import numpy as np
import pytest

from masked_lstm_rewriter.verify_reference import as_array


class TrackedTensor:
    """What a torch tensor that requires grad does: refuses numpy, gives a plain copy when detached."""

    def __init__(self, values, tracked=True):
        self.values, self.tracked = np.asarray(values, np.float32), tracked

    def detach(self):
        return TrackedTensor(self.values, tracked=False)

    def cpu(self):
        return self

    def __array__(self, dtype=None, copy=None):
        if self.tracked:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad.")
        return self.values if dtype is None else self.values.astype(dtype)


def test_a_tensor_that_tracks_gradients_becomes_an_array():
    with pytest.raises(RuntimeError):
        np.asarray(TrackedTensor([1.0, 2.0]))
    assert np.array_equal(as_array(TrackedTensor([1.0, 2.0])), [1.0, 2.0])


def test_other_outputs_are_arrays_as_before():
    assert np.array_equal(as_array(np.ones((2, 3))), np.ones((2, 3)))
    assert as_array([1, 2]).tolist() == [1, 2]
