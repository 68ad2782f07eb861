# SPDX-License-Identifier: Apache-2.0
"""Native ONNX LSTM ops for masked Keras recurrent layers converted with tf2onnx.

Three stages, one module each: :mod:`.match` (find and describe a masked loop),
:mod:`.emit` (build the ONNX nodes), :mod:`.plugin` (switch it on).
"""

from .masks import GUARD_MESSAGE, MASK_MODES
from .plugin import disable, enable, enabled_mode, make_rewriter, rewrite_masked_lstm

__all__ = ["make_rewriter", "rewrite_masked_lstm", "enable", "disable", "enabled_mode", "GUARD_MESSAGE", "MASK_MODES"]
__version__ = "0.1.0"
