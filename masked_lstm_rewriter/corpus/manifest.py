# SPDX-License-Identifier: Apache-2.0
"""The corpus manifest: which saved models there are, how to convert them, what to expect.

``data/manifest.json`` (written by ``tools/make_corpus.py`` in a checkout of this project) lists
one entry per saved model and file format. Each entry names its Keras flavour (``keras3`` or
``tf_keras``), the model's path and format, the ``mask_mode`` (and ``target``, if any) to convert
it with, its inputs (with the shapes it is converted with: its signature), its outputs, the native
ops the plugin made of it when the corpus was generated (and, in ``left_as_loop``, a text of the
reason for each masked layer the plugin must refuse and leave as tf2onnx's Loop), input batches
with Keras's outputs on them and, for ``"post"`` entries, a batch that the converted model must
refuse. An entry with ``"unmasked": true`` has no mask (a layer stock tf2onnx leaves as a Loop even
so): no guard, so no such batch, and ``masked_layers`` counts the unmasked layers the plugin
rewrites. Paths are relative to the corpus directory. Nothing here imports TensorFlow.

An ONNX-file entry (``"source": "onnx"``, ``"format": "onnx"``, no ``flavour``; format version 3)
is an ``.onnx`` file whose recurrent layers are Loops, as stock tf2onnx or Keras 3's JAX-backend
export wrote it: ``rewrite_onnx`` (or ``python -m masked_lstm_rewriter rewrite``) must turn it into
the expected native ops, and its batches' ``expected`` outputs are those of the original file on
onnxruntime (``"reference": "original"``) or Keras's own (``"reference": "keras"``). It needs no Keras,
so it is checked once, by the process of :data:`ONNX_FILES_RUN_WITH` (see :func:`entries_for`).
"""

from __future__ import annotations

import json
import os

# an entry's "flavour" is one of FLAVOURS; current_flavour stays importable from here for the scripts using it
from ..flavours import FLAVOURS, current_flavour  # noqa: F401  pylint: disable=unused-import

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MANIFEST = "manifest.json"
FORMAT_VERSION = 3
READS_VERSIONS = (2, 3)  # 2: no ONNX-file entries
ONNX_SOURCE = "onnx"  # an ONNX-file entry's "source" (a Keras entry has none)
ONNX_FILES_RUN_WITH = FLAVOURS[0]  # the flavour whose process checks the ONNX-file entries
OPSETS = tuple(range(11, 19))  # the opsets the plugin supports: nodes.MIN_OPSET to tf2onnx 1.17's last
CONVERT_FLAGS = {"saved_model": "--saved-model", "keras": "--keras", "h5": "--keras"}
REGENERATE = "python tools/make_corpus.py (in a checkout of masked-lstm-rewriter)"
REGENERATE_OPS = "python tools/make_corpus.py --ops-only (in a checkout of masked-lstm-rewriter)"
REGENERATE_ONNX_OPS = "python tools/make_corpus.py --onnx --ops-only (in a checkout of masked-lstm-rewriter)"


class CorpusError(Exception):
    """The corpus cannot be used: its manifest is missing, unreadable or of another format."""


def load_manifest(corpus: str = DATA_DIR) -> dict:
    """The manifest of the corpus in ``corpus``; raises CorpusError saying what is wrong."""
    path = os.path.join(corpus, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except OSError as error:
        raise CorpusError(f"cannot read the corpus manifest {path}: {error.strerror or error}") from error
    except ValueError as error:
        raise CorpusError(f"the corpus manifest {path} is not valid JSON: {error}") from error
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version not in READS_VERSIONS:
        raise CorpusError(f"the corpus manifest {path} has format_version {version!r}; this package reads "
                          f"{' and '.join(map(str, READS_VERSIONS))}: regenerate it with {REGENERATE}")
    return manifest


def is_onnx_file(entry: dict) -> bool:
    """Is this an ONNX-file entry (rewritten with ``rewrite_onnx``) rather than a saved Keras model?"""
    return entry.get("source") == ONNX_SOURCE


def runs_with(entry: dict) -> str:
    """The flavour whose process checks the entry: its own, or for an ONNX file (which needs no Keras,
    and is checked once) :data:`ONNX_FILES_RUN_WITH`, the flavour a pytest run has by default."""
    return ONNX_FILES_RUN_WITH if is_onnx_file(entry) else entry["flavour"]


def entries_for(manifest: dict, flavour: str, keyword: str = "") -> list:
    """The entries the process of one Keras flavour checks (the ONNX-file entries with the first
    flavour's) whose name contains ``keyword``."""
    return [entry for entry in manifest["entries"] if runs_with(entry) == flavour and keyword in entry["name"]]


def at_opsets(entries: list, opsets) -> list:
    """Each Keras entry at each of ``opsets`` (``None``: the manifest's); an ONNX file once, at its own."""
    return [at_opset(entry, opset) for entry in entries
            for opset in ((None,) if is_onnx_file(entry) else (opsets or (None,)))]


def parse_opsets(text: str) -> tuple:
    """``"11-18"`` or ``"11,15,18"`` -> (11, ..., 18); raises ValueError outside the supported range."""
    opsets = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            opsets.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"opsets are numbers or ranges such as 11-18 or 11,18, not {text!r}") from None
    if not opsets or any(opset not in OPSETS for opset in opsets):
        raise ValueError(f"opsets must be within {OPSETS[0]}-{OPSETS[-1]}: {text!r}")
    return tuple(sorted(set(opsets)))


def at_opset(entry: dict, opset) -> dict:
    """The entry converted at ``opset`` instead of the manifest's (``None``: the manifest's). An
    ONNX file has the opset it was written with."""
    return entry if opset is None or is_onnx_file(entry) else dict(entry, opset=opset)


def reference(entry: dict) -> str:
    """What the stored outputs are: ``"keras"`` (Keras's) or, for an ONNX file, ``"original"`` (the file's own)."""
    return entry.get("reference", "keras")


def regenerate_ops(entry: dict) -> str:
    """The command that records an entry's expected ops again."""
    return REGENERATE_ONNX_OPS if is_onnx_file(entry) else REGENERATE_OPS


def model_path(entry: dict, corpus: str = DATA_DIR) -> str:
    return os.path.join(corpus, entry["path"])


def convert_args(entry: dict, corpus: str, output: str) -> list:
    """The tf2onnx.convert arguments of an entry (``--saved-model DIR`` or ``--keras FILE``)."""
    return [CONVERT_FLAGS[entry["format"]], model_path(entry, corpus), "--output", output,
            "--opset", str(entry["opset"])]


def load_npz(corpus: str, relative: str) -> dict:
    """The arrays of one of the corpus's ``.npz`` files, by name."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(os.path.join(corpus, relative), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def feeds_for(entry: dict, arrays: dict) -> dict:
    """The ONNX model's feeds: the entry's inputs by their ONNX names."""
    return {spec["onnx_name"]: arrays[spec["name"]] for spec in entry["inputs"]}


def entry_problems(entry: dict, corpus: str = DATA_DIR) -> list:
    """What is wrong with an entry before anything is converted: missing files, batches that do not
    fit the signature it is converted with, a missing or wrong guard batch. Empty when it is sound."""
    problems = [f"the generator's check failed: {entry[key]}" for key in ("generation_check_failed", "save_failed")
                if key in entry]
    if problems:
        return problems
    if not os.path.exists(model_path(entry, corpus)):
        problems.append(f"the model {entry['path']} is missing")
    problems.extend(expected_ops_problems(entry))
    if (entry["must_fail"] is not None) != (entry["mask_mode"] == "post" and not entry.get("unmasked")):
        problems.append(f"mask_mode {entry['mask_mode']!r} with must_fail {entry['must_fail']!r}"
                        f"{' (no mask)' if entry.get('unmasked') else ''}: exactly the 'post' entries with a mask "
                        "have a batch the guard must refuse")
    batches = [(f"batch {number}", batch["inputs"]) for number, batch in enumerate(entry["batches"])]
    batches += [("the must_fail batch", entry["must_fail"]["inputs"])] if entry["must_fail"] else []
    for label, relative in batches:
        problems.extend(_batch_problems(entry, corpus, label, relative))
    for number, batch in enumerate(entry["batches"]):
        if not os.path.isfile(os.path.join(corpus, batch["expected"])):
            problems.append(f"batch {number}: {batch['expected']} is missing")
    return problems


def expected_ops_problems(entry: dict) -> list:
    """An entry becomes native ops, with a Loop only for each layer the plugin must refuse."""
    refused = len(entry.get("left_as_loop", []))
    if entry["expected_ops"]["Loop"] != refused or not (entry["expected_ops"]["native"] or refused):
        return [f"expected_ops {entry['expected_ops']}: an entry must become native ops, with a Loop only for "
                f"each layer the plugin must refuse ({refused} here)"]
    return []


def _batch_problems(entry: dict, corpus: str, label: str, relative: str) -> list:
    """A batch file is there, has every input, and each fits the shape the entry is converted with."""
    if not os.path.isfile(os.path.join(corpus, relative)):
        return [f"{label}: {relative} is missing"]
    arrays = load_npz(corpus, relative)
    problems = []
    for spec in entry["inputs"]:
        if spec["name"] not in arrays:
            problems.append(f"{label}: no input {spec['name']!r} in {relative}")
        elif not fits(arrays[spec["name"]].shape, spec["shape"]):
            problems.append(f"{label}: input {spec['name']!r} has shape {list(arrays[spec['name']].shape)}, "
                            f"which does not fit the signature {spec['shape']}")
    return problems


def fits(shape, signature) -> bool:
    """Does an array of ``shape`` fit a signature shape (``None`` for a dynamic dimension)?"""
    return len(shape) == len(signature) and all(want is None or want == got for got, want in zip(shape, signature))

