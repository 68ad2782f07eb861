# SPDX-License-Identifier: Apache-2.0
"""Native ONNX LSTM, GRU and RNN ops for masked Keras recurrent layers converted with tf2onnx.

Three stages: :mod:`.match` (find and describe a masked loop, with :mod:`.cell`),
:mod:`.masks` and :mod:`.emit` (plan per mask, build the ONNX nodes), :mod:`.plugin` (switch it
on); :mod:`.report` says what the last conversion did.
"""

from .emit import TARGETS
from .masks import GUARD_MESSAGE, MASK_MODES
from .plugin import disable, enable, enabled_mode, make_rewriter, rewrite_masked_lstm
from .report import ConversionReport, LayerReport, last_report

__all__ = ["make_rewriter", "rewrite_masked_lstm", "enable", "disable", "enabled_mode", "last_report",
           "ConversionReport", "LayerReport", "GUARD_MESSAGE", "MASK_MODES",
           "TARGETS"]
__version__ = "0.1.0"
