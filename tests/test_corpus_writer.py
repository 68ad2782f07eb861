# SPDX-License-Identifier: Apache-2.0
"""The corpus writer (masked_lstm_rewriter/corpus/writer.py, which tools/make_corpus.py calls):
it writes back the committed manifest and README byte for byte, and its files are byte-stable.
No conversion, no TensorFlow."""

import collections
import json
import os
import zipfile

import numpy as np

from masked_lstm_rewriter.corpus import manifest, writer


def committed() -> dict:
    with open(os.path.join(manifest.DATA_DIR, manifest.MANIFEST), encoding="utf-8") as handle:
        return json.load(handle)


def catalogue_of(document: dict) -> writer.Catalogue:
    """The generator's catalogue as the committed manifest records it."""
    entries = [e for e in document["entries"] if not manifest.is_onnx_file(e)]  # the saved Keras models
    ways = collections.defaultdict(collections.Counter)  # a case saved its own way (cuDNN) says so in its entry
    for e in entries:
        ways[(e["flavour"], e["format"])][e["saved_with"]] += 1
    how_saved = {key: counts.most_common(1)[0][0] for key, counts in ways.items()}
    return writer.Catalogue(
        case_order=tuple(dict.fromkeys(e["case"] for e in entries)),
        cases_pending=document["cases_pending"],
        formats=document["formats"],
        formats_not_included=document["formats_not_included"],
        how_saved={(f, fmt): how_saved[(f, fmt)] for f in manifest.FLAVOURS for fmt in document["formats"][f]
                   if (f, fmt) in how_saved},
        byte_stability=document["byte_stability"],
        opset=entries[0]["opset"],
        tolerance=document["tolerance"],
        guard_message=document["guard_message"])


def read_bytes(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def test_update_manifest_writes_back_the_committed_manifest_and_readme(tmp_path):
    document = committed()
    writer.update_manifest(str(tmp_path), "keras3", document, [], [], set(), None, catalogue_of(document))
    for name in (manifest.MANIFEST, "README.md"):
        assert read_bytes(tmp_path / name) == read_bytes(os.path.join(manifest.DATA_DIR, name)), name


def test_update_onnx_entries_writes_back_the_committed_manifest_and_readme(tmp_path):
    """What make_corpus.py --onnx writes: every entry but the ONNX files' as it was, byte for byte."""
    document = committed()
    files = [e for e in document["entries"] if manifest.is_onnx_file(e)]
    assert files
    writer.update_onnx_entries(str(tmp_path), document, files, None, catalogue_of(document))
    for name in (manifest.MANIFEST, "README.md"):
        assert read_bytes(tmp_path / name) == read_bytes(os.path.join(manifest.DATA_DIR, name)), name


def test_replacing_the_onnx_entries_leaves_the_keras_entries_alone(tmp_path):
    document = committed()
    keras_entries = [e for e in document["entries"] if not manifest.is_onnx_file(e)]
    files = [e for e in document["entries"] if manifest.is_onnx_file(e)]
    writer.update_onnx_entries(str(tmp_path), document, files[:1], {"onnx": "x"}, catalogue_of(document))
    written = writer.read_manifest(str(tmp_path))
    assert written["entries"] == keras_entries + files[:1]
    assert written["generated_with"]["onnx_files"] == {"onnx": "x"}
    assert {k: v for k, v in written.items() if k not in ("entries", "generated_with")} == \
        {k: v for k, v in document.items() if k not in ("entries", "generated_with")}
    # and a flavour's regeneration keeps the ONNX-file entries, after the Keras entries
    writer.update_manifest(str(tmp_path), "keras3", written, [], [], set(), None, catalogue_of(document))
    assert writer.read_manifest(str(tmp_path))["entries"] == keras_entries + files[:1]


def test_replacing_a_flavours_entries_keeps_the_generators_order(tmp_path):
    document = committed()
    mine = [e for e in document["entries"] if e["flavour"] == "tf_keras"]
    writer.update_manifest(str(tmp_path), "tf_keras", document, list(reversed(mine)), [], {e["case"] for e in mine},
                           None, catalogue_of(document))
    assert writer.read_manifest(str(tmp_path))["entries"] == document["entries"]


def test_read_manifest_of_a_directory_without_one_is_empty(tmp_path):
    assert writer.read_manifest(str(tmp_path)) == {}


def test_npz_is_byte_stable_and_loads(tmp_path):
    arrays = {"tokens": np.arange(6, dtype=np.int32).reshape(2, 3), "mask": np.array([[True, False, True]])}
    writer.write_npz(str(tmp_path / "a.npz"), arrays)
    writer.write_npz(str(tmp_path / "b.npz"), arrays)
    assert read_bytes(tmp_path / "a.npz") == read_bytes(tmp_path / "b.npz")
    loaded = manifest.load_npz(str(tmp_path), "a.npz")
    assert list(loaded) == ["tokens", "mask"] and all(np.array_equal(loaded[k], arrays[k]) for k in arrays)
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        assert {info.date_time for info in archive.infolist()} == {writer.ZIP_TIME}


def test_keras_zip_is_normalised(tmp_path):
    path = str(tmp_path / "model.keras")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"date_saved": "2026-01-02@03:04:05", "keras_version": "3"}))
        archive.writestr("config.json", json.dumps({"a": {"shared_object_id": 140234}, "b": [{"shared_object_id": 99},
                                                                                         {"shared_object_id": 140234}]}))
    writer.normalise_keras_zip(path)
    with zipfile.ZipFile(path) as archive:
        assert json.loads(archive.read("metadata.json"))["date_saved"] == writer.FIXED_DATE_SAVED
        assert json.loads(archive.read("config.json")) == {"a": {"shared_object_id": 1},
                                                         "b": [{"shared_object_id": 2}, {"shared_object_id": 1}]}
        assert {info.date_time for info in archive.infolist()} == {writer.ZIP_TIME}


def test_relative_paths_use_forward_slashes(tmp_path):
    assert writer.relative(os.path.join(str(tmp_path), "keras3", "case", "model.h5"), str(tmp_path)) == \
        "keras3/case/model.h5"
