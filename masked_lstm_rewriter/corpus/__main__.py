# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter.corpus``: see :mod:`masked_lstm_rewriter.corpus.command`."""

import sys

from .command import main

sys.exit(main())
