# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter``: see :mod:`masked_lstm_rewriter.cli`."""

import sys

from .cli import main

sys.exit(main())
