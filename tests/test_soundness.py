# SPDX-License-Identifier: Apache-2.0
"""Four ways a rewrite could be silently wrong (issue 13), each a model that was rewritten into wrong
numbers: now every one is refused (stays a Loop, with its reason) or exact.

1. a loop that runs fewer steps than the input has (its condition, maximum_iterations);
2. a loop-carried state taken for a constant weight (a static batch gives it a constant start);
3. a [1, T] mask, which Keras broadcasts over the batch;
4. NaN at a valid step: a documented onnxruntime limit, pinned here.
"""

import pytest

import fuzz_adversarial as fa
from fuzz_adversarial import AdversarialCase


def check(case, verdict=None):
    """The case is refused or exact; ``verdict`` names which it must be."""
    result = fa.check_case(case)
    assert result.ok, fa.describe(case, result)
    if verdict is not None:
        assert result.verdict == verdict, fa.describe(case, result)
    return result


# --- 2. a state is no weight --------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    AdversarialCase(kind="GRU", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="GRU", mutation="extra_h_squeezed", units=3, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="SimpleRNN", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="SimpleRNN", mutation="extra_h_unpacked", units=2, use_bias=False,
                    signature="static batch 1"),
    AdversarialCase(kind="LSTM", mutation="extra_c", units=1, use_bias=False, signature="static batch 1"),
    AdversarialCase(kind="LSTM", mutation="extra_h", units=1, use_bias=False, signature="static batch 1"),
], ids=["gru + h", "gru + squeeze(h)", "simple_rnn + h", "simple_rnn + unstack(h)", "lstm + c", "lstm + h"])
def test_a_state_reaching_a_gate_is_not_a_weight(case):
    """tanh(x W + h R + b + h) and the like: with a static batch the state starts from constant
    zeros, which the weight resolution took for a bias (the GRUs were rewritten: errors up to 0.08;
    today tf2onnx fuses the others' x W + h R into a Gemm, which the reader does not read yet)."""
    check(case, "refused")


