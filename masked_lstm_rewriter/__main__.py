# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter``: see :mod:`masked_lstm_rewriter.cli`."""

import sys

from .cli import program

sys.exit(program())
