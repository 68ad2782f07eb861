# SPDX-License-Identifier: Apache-2.0
"""The regression corpus, this run's flavour: the pytest form that ships with the package.

The tests are ``masked_lstm_rewriter/corpus/test_corpus.py`` (what a converter's pytest run
collects with ``--pyargs masked_lstm_rewriter.corpus``), collected here as part of the suite:
every manifest entry of this flavour converted in-process and with the command line, checked
on onnxruntime and OpenVINO. ``python -m masked_lstm_rewriter.corpus`` runs the same checks
without pytest.
"""

from masked_lstm_rewriter.corpus.test_corpus import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import
