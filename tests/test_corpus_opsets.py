# SPDX-License-Identifier: Apache-2.0
"""The corpus converts at every supported opset, not only the manifest's (15).

Every model of this flavour (one file format each: the formats share the graph) is converted at
opsets 11 and 18, the ends of the supported range, and checked as the corpus check does:
the recorded native ops, ``onnx.checker`` with ``full_check``, strict shape inference, Keras's
numbers at every position (onnxruntime) and, for ``"post"``, the guard. The full sweep, every
entry at 11 to 18, is ``python -m masked_lstm_rewriter.corpus --path library --opsets 11-18``.
"""

import pytest

from masked_lstm_rewriter.corpus import check, manifest
from masked_lstm_rewriter.corpus.test_corpus import CORPUS, ENTRIES, MAX_ERRORS, convert_in_process

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

SWEEP_OPSETS = (11, 18)
MODELS = list({entry["case"]: entry for entry in reversed(ENTRIES)}.values())  # each case's first format


@pytest.mark.parametrize("opset", SWEEP_OPSETS)
@pytest.mark.parametrize("entry", MODELS, ids=[entry["name"].split("/", 1)[1] for entry in MODELS])
def test_corpus_at_opset(entry, opset, tmp_path):
    entry = manifest.at_opset(entry, opset)
    output = str(tmp_path / "model.onnx")
    convert_in_process(entry, output)
    MAX_ERRORS.append(check.check_onnx(entry, CORPUS, output))
