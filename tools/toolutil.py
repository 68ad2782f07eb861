# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the scripts in tools/ (run as ``python tools/NAME.py``).

The scripts are for a checkout: its package comes first on ``sys.path``, ahead of any installed copy.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# pylint: disable=wrong-import-position,unused-import
from masked_lstm_rewriter.corpus.ops import op_counts  # noqa: E402,F401
from masked_lstm_rewriter.corpus.quiet import quiet_stderr  # noqa: E402,F401

