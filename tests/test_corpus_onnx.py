# SPDX-License-Identifier: Apache-2.0
"""The corpus's ONNX-file entries catch a regression of the ONNX-file source.

Each test runs the corpus's own checks (:func:`masked_lstm_rewriter.corpus.runner.check_entries`, what
``python -m masked_lstm_rewriter.corpus`` and the pytest form run) on a corpus of one entry: as
committed it passes; a file whose Loop the rewrite must leave (a doctored trip count) fails by both
paths, saying a layer stayed a Loop; a rewrite that gives other numbers (its native node's bias
doctored) fails, naming the output, the difference and the original file it is compared with.
"""

import json
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.corpus import manifest, runner
from masked_lstm_rewriter.corpus.ops import walk_nodes

pytestmark = pytest.mark.usefixtures("plugin_off")
ENTRIES = {e["name"]: e for e in manifest.load_manifest()["entries"] if manifest.is_onnx_file(e)}
STOCK = ENTRIES["onnx/tf2onnx/keras3_emb_lstm_seq_op15/post"]
JAX = ENTRIES["onnx/jax/emb_lstm_seq/any"]


def corpus_of(tmp_path, entry: dict, doctor=None) -> str:
    """A corpus holding only ``entry`` (its file doctored by ``doctor(model)``, if given), in its manifest."""
    corpus = tmp_path / "corpus"
    files = [entry["path"]] + [batch[key] for batch in entry["batches"] for key in ("inputs", "expected")]
    files += [entry["must_fail"]["inputs"]] if entry["must_fail"] else []
    for relative in files:
        (corpus / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(manifest.DATA_DIR, relative), corpus / relative)
    if doctor is not None:
        model = onnx.load(str(corpus / entry["path"]))
        doctor(model)
        onnx.save(model, str(corpus / entry["path"]))
    (corpus / manifest.MANIFEST).write_text(json.dumps({"format_version": manifest.FORMAT_VERSION,
                                                        "entries": [entry]}))
    return str(corpus)


def results(corpus: str, paths=("library",)) -> list:
    return list(runner.check_entries(manifest.load_manifest(corpus)["entries"],
                                     runner.Options(corpus=corpus, paths=paths)))


def short_trip(model) -> None:
    """The Loop runs at most 2 steps (a constant trip count): the reader must leave it as it is."""
    loop = next(node for node in model.graph.node if node.op_type == "Loop")
    model.graph.initializer.append(numpy_helper.from_array(np.array(2, np.int64), "short_trip"))
    loop.input[0] = "short_trip"


@pytest.mark.parametrize("entry", [STOCK, JAX], ids=lambda entry: entry["name"])
def test_the_committed_entry_passes(entry, tmp_path):
    (result,) = results(corpus_of(tmp_path, entry))
    assert result.status == runner.PASSED, result
    assert result.detail.startswith(f"max |onnx - {manifest.reference(entry)}| = ")


def test_a_rewrite_that_leaves_a_loop_fails_by_both_paths(tmp_path):
    found = {result.label: result for result in results(corpus_of(tmp_path, STOCK, short_trip), ("library", "cli"))}
    assert set(found) == {"library", "cli"} and all(r.status == runner.FAILED for r in found.values()), found
    assert "layers left as a Loop" in found["library"].detail
    assert "the loop may stop before its last time step" in found["library"].detail
    assert "1 Loop node(s) where the manifest expects 0" in found["cli"].detail


def _with_other_bias(rewrite):
    """``rewrite_onnx`` whose native node's bias is off by 0.25: a rewrite giving other numbers."""
    def doctored(model, output_path=None, **options):
        rewritten, report = rewrite(model, **options)
        node = next(n for n in walk_nodes(rewritten.graph) if n.op_type in ("LSTM", "GRU", "RNN"))
        bias = next(t for t in rewritten.graph.initializer if t.name == node.input[3])
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(0.25), bias.name))
        onnx.save(rewritten, output_path)
        return rewritten, report
    return doctored


@pytest.mark.parametrize("entry", [STOCK, JAX], ids=lambda entry: entry["name"])
def test_a_rewrite_that_gives_other_numbers_fails(entry, tmp_path, monkeypatch):
    monkeypatch.setattr(mlr, "rewrite_onnx", _with_other_bias(mlr.rewrite_onnx))
    (result,) = results(corpus_of(tmp_path, entry))
    assert result.status == runner.FAILED, result
    assert f"output output_0: max |onnx - {manifest.reference(entry)}| = " in result.detail, result.detail
    assert "> 1e-05" in result.detail and "Loop" not in result.detail
