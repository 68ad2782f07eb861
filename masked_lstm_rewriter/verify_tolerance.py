# SPDX-License-Identifier: Apache-2.0
"""How far ``verify`` lets an ONNX output be from the reference's: the tolerance it applies, and why.

A float32 model is held to an absolute bound (:data:`DEFAULT_TOLERANCE`). An int8-quantized model
(:mod:`.quantize`: it holds ``DynamicQuantizeLSTM``, ``MatMulInteger``...) is held to a share of
each output's scale, :data:`QUANTIZED_SHARE` of its largest |reference value| on the batch: int8's
steps are a fraction of each tensor's range, so no absolute bound fits every model. Measured
(docs/quantization.md) over verify's own batches: at most 2% of the scale for models with Keras's
initial weights, up to 11% for the corpus's small models with random N(0, 0.5) weights (a stacked
LSTM, 20 seeds); 20% leaves a margin over both, while a graph that is wrong (a mask misread) is
off by about the output's scale. A model with chaotic random weights (N(0, 0.5) at 64
units and more) is off by 18-49%: for such a model int8 is not close, and verify says so. A
tolerance the user gives is absolute, and wins.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from .quantize import quantized_ops

DEFAULT_TOLERANCE = 1e-5
QUANTIZED_SHARE = 0.2


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """The largest |ONNX - reference| accepted for one output on one batch: ``absolute``, or where
    ``share`` is set, that share of the output's largest |reference value| when it is larger."""

    absolute: float = DEFAULT_TOLERANCE
    share: float = 0.0
    why: str = ""  # why verify chose it ("" where the user gave it, or the default for a float model)

    def allowed(self, expected) -> float:
        """The bound for an output whose reference values are ``expected``."""
        if not self.share:
            return self.absolute
        values = np.abs(np.asarray(expected, dtype=np.float64))
        finite = values[np.isfinite(values)]
        return max(self.absolute, self.share * float(finite.max())) if finite.size else self.absolute

    def __str__(self) -> str:
        if not self.share:
            return f"{self.absolute:g}"
        return f"{self.share:.0%} of each output's largest |reference value| (at least {self.absolute:g})"


def as_tolerance(value) -> Tolerance:
    """``value`` (a number: an absolute tolerance) as a :class:`Tolerance`."""
    return value if isinstance(value, Tolerance) else Tolerance(float(value))


def choose(onnx_model, given: Optional[float]) -> Tolerance:
    """The tolerance for ``onnx_model``: ``given`` (absolute) if not None, else by the model's kind."""
    if given is not None:
        return as_tolerance(given)
    ops = quantized_ops(onnx_model)
    if not ops:
        return Tolerance()
    return Tolerance(DEFAULT_TOLERANCE, QUANTIZED_SHARE,
                     f"the model is int8-quantized ({', '.join(ops)}): int8's error grows with each output's "
                     f"scale; a tolerance given (--tolerance, tolerance=) is absolute")
