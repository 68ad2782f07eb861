# SPDX-License-Identifier: Apache-2.0
"""The corpus converts at every supported opset, not only the manifest's (15).

Every model of this flavour (one file format each: the formats share the graph) is converted at
opsets 13 and 18, the ends of the supported range, and checked as ``tests/test_corpus.py`` checks
it: expected ops, ``onnx.checker`` with ``full_check``, strict shape inference, Keras's numbers at
every position (onnxruntime) and, for ``"post"``, the guard. The full sweep, every entry at 13
to 18, is ``python tools/check_corpus.py --path library --opsets 13-18``.
"""

import pytest

import kerasutil
from test_corpus import CORPUS, ENTRIES, check_corpus, convert_library

SWEEP_OPSETS = (13, 18)
MODELS = list({entry["name"].split("/")[1]: entry for entry in reversed(ENTRIES)}.values())  # first format


@pytest.mark.parametrize("opset", SWEEP_OPSETS)
@pytest.mark.parametrize("entry", MODELS, ids=[entry["name"].split("/", 1)[1] for entry in MODELS])
def test_corpus_at_opset(entry, opset, tmp_path, monkeypatch):
    entry = check_corpus.at_opset(entry, opset)
    output = str(tmp_path / "model.onnx")
    convert_library(entry, output, monkeypatch)
    kerasutil.MAX_ERRORS.append(check_corpus.check_onnx(entry, CORPUS, output))
