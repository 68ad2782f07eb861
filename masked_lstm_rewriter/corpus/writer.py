# SPDX-License-Identifier: Apache-2.0
"""Write a corpus: its byte-stable files, its entries, what the plugin makes of each, and
``manifest.json`` with its ``README.md``.

The format's writing side, next to :mod:`.manifest` (its reading side). ``tools/make_corpus.py``
(in a checkout) builds the Keras models and batches and calls these; what it knows beyond the
entries (its cases' order, the formats, why some are left out) comes in a :class:`Catalogue`.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from typing import Optional

from . import check, convert, manifest, ops
from .quiet import quiet_stderr

ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_DATE_SAVED = "1980-01-01@00:00:00"
MASK_SOURCES = {"embedding": "Embedding(mask_zero=True)", "masking": "Masking(mask_value={mask_value})",
                "explicit": "explicit mask= (a bool model input)", "none": "none (no mask: every step is valid)"}
FORMAT_ORDER = ("saved_model", "keras", "h5")
ONNX_FILES = "onnx_files"  # generated_with's key for the ONNX-file entries


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """What the generator knows beyond its entries, written into the manifest and its README."""

    case_order: tuple           # case names, in the generator's order (entries are sorted by it)
    cases_pending: list         # [{"case", "description", "reason"}]: cases not in the corpus yet
    formats: dict               # flavour -> the formats it can be saved in
    formats_not_included: list  # [{"flavour", "format", "reason"}]
    how_saved: dict             # (flavour, format) -> how a model of that pair is saved
    byte_stability: str         # which files are byte-stable, and why the others are not
    opset: int
    tolerance: float
    guard_message: str


# ------------------------------------------------------------------ byte-stable files

def write_npz(path: str, arrays: dict) -> None:
    """np.savez, but byte-stable: fixed zip timestamps, stored (not compressed), in the given order."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(_stable_info(name + ".npy"), buffer.getvalue())


def _stable_info(name: str, compress_type: int = zipfile.ZIP_STORED) -> zipfile.ZipInfo:
    """A zip member's header that does not depend on the clock or the machine."""
    info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
    info.compress_type = compress_type
    info.external_attr = 0o644 << 16
    info.create_system = 3
    return info


def renumber_shared_objects(config):
    """Keras 3 writes ``shared_object_id`` = Python's id() of the shared object, which changes from run
    to run; number them 1, 2, ... in order of appearance instead (equal ids stay equal, which is all
    the loader uses them for)."""
    numbers = {}

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "shared_object_id":
                    node[key] = numbers.setdefault(value, len(numbers) + 1)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(config)
    return config


def normalise_keras_zip(path: str) -> None:
    """A .keras file is a zip: fixed member timestamps, a fixed ``date_saved`` in metadata.json, and
    ``shared_object_id`` renumbered in config.json, so that the file is byte-stable."""
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(path + ".tmp", "w") as archive:
        for info, data in members:
            if info.filename == "metadata.json":
                metadata = json.loads(data)
                if "date_saved" in metadata:
                    metadata["date_saved"] = FIXED_DATE_SAVED
                data = json.dumps(metadata).encode()
            elif info.filename == "config.json":
                data = json.dumps(renumber_shared_objects(json.loads(data))).encode()
            archive.writestr(_stable_info(info.filename, info.compress_type), data)
    os.replace(path + ".tmp", path)


def write_text(path: str, text: str) -> None:
    """A text file with ``\\n`` line ends on every system."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def relative(path: str, out: str) -> str:
    """``path`` relative to the corpus directory ``out``, with ``/`` separators as the manifest has them."""
    return os.path.relpath(path, out).replace(os.sep, "/")


# ------------------------------------------------------------------ entries

def new_entry(case, flavour: str, fmt: str, path: str, inputs: list, n_outputs: int, masked_layers: int,
              batches: list, must_fail, catalogue: Catalogue) -> dict:
    """A manifest entry for ``case`` (``name``, ``description``, ``source``, ``mask_value``,
    ``mask_mode``, ``target``, ``left_as_loop``) saved as ``fmt``; ``inputs``: (name, dtype, shape)
    of each input. ``unmasked``: the model has no mask (source ``"none"``), so no guard either. The
    ONNX names and the expected ops are filled in by :func:`record_entry`."""
    return {
        "name": f"{flavour}/{case.name}/{fmt}",
        "case": case.name,
        "flavour": flavour,
        "format": fmt,
        "saved_with": catalogue.how_saved[(flavour, fmt)],
        "path": path,
        "convert_flag": manifest.CONVERT_FLAGS[fmt],
        "description": case.description,
        "mask_source": MASK_SOURCES[case.source].format(mask_value=case.mask_value),
        "mask_mode": case.mask_mode,
        "unmasked": case.source == "none",
        "target": case.target,
        "left_as_loop": list(case.left_as_loop),
        "opset": catalogue.opset,
        "inputs": [{"name": name, "onnx_name": None, "dtype": dtype, "shape": list(shape)}
                   for name, dtype, shape in inputs],
        "outputs": [{"name": f"output_{i}", "onnx_name": None} for i in range(n_outputs)],
        "masked_layers": masked_layers,
        "expected_ops": None,
        "tolerance": catalogue.tolerance,
        "batches": batches,
        "must_fail": must_fail,
    }


def record_entry(entry: dict, out: str, tmp: str, verbose: bool) -> tuple:
    """Convert the entry as the corpus check does (into ``tmp``), record tf2onnx's names and the
    native ops the plugin made, then check it all. Returns (what failed or "", the largest
    |ONNX - Keras|); what failed is also kept in the entry."""
    entry.pop("generation_check_failed", None)
    output = os.path.join(tmp, entry["name"].replace("/", "__") + ".onnx")
    try:
        with quiet_stderr(not verbose):
            report = convert.convert_library(entry, out, output)
        convert.check_report(entry, report)
        fill_names(entry, output)
        record_ops(entry, output)
        worst = check.check_onnx(entry, out, output)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        entry["generation_check_failed"] = f"{type(error).__name__}: {error}"
        return entry["generation_check_failed"], None
    return "", worst


def record_ops(entry: dict, onnx_path: str) -> None:
    """The native recurrent nodes of the converted model, as the manifest's expectation."""
    import onnx  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel

    import masked_lstm_rewriter  # pylint: disable=import-outside-toplevel
    model_proto = onnx.load(onnx_path)
    entry["expected_ops"] = {
        "native": ops.native_ops(model_proto),
        "Loop": ops.op_counts(model_proto)["Loop"],
        "recorded_with": f"masked_lstm_rewriter {masked_lstm_rewriter.__version__}, tf2onnx {tf2onnx.__version__}",
    }
    for problem in manifest.expected_ops_problems(entry):
        raise RuntimeError(f"the plugin made {ops.describe_native(entry['expected_ops']['native'])} native "
                           f"nodes: {problem}: not a corpus entry")


def fill_names(entry: dict, onnx_path: str) -> None:
    """tf2onnx's names for the inputs (``name`` or ``name:0``) and outputs (by name, else by position)."""
    import onnx  # pylint: disable=import-outside-toplevel
    graph = onnx.load(onnx_path).graph
    graph_inputs = [i.name for i in graph.input]
    graph_outputs = [o.name for o in graph.output]
    for spec in entry["inputs"]:
        matches = [n for n in graph_inputs if n in (spec["name"], spec["name"] + ":0")]
        if len(matches) != 1:
            raise RuntimeError(f"cannot find input {spec['name']!r} among the ONNX inputs {graph_inputs}")
        spec["onnx_name"] = matches[0]
    if len(graph_outputs) != len(entry["outputs"]):
        raise RuntimeError(f"ONNX outputs {graph_outputs}, Keras gives {len(entry['outputs'])}")
    by_name = all(spec["name"] in graph_outputs for spec in entry["outputs"])
    for position, spec in enumerate(entry["outputs"]):
        spec["onnx_name"] = spec["name"] if by_name else graph_outputs[position]
    entry["outputs"].sort(key=lambda spec: graph_outputs.index(spec["onnx_name"]))


def versions(tf, keras, flavour: str, opset: int) -> dict:
    """The versions that made a flavour's models, as ``generated_with`` records them."""
    import onnx  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel
    keras_name = "tf_keras" if flavour == "tf_keras" else "keras"
    return {"tensorflow": tf.__version__, keras_name: keras.__version__, "tf2onnx": tf2onnx.__version__,
            "onnx": onnx.__version__, "opset": opset}


# ------------------------------------------------------------------ manifest and README

def read_manifest(out: str) -> dict:
    """The manifest in ``out`` as it is (any format version), or {} when there is none."""
    try:
        with open(os.path.join(out, manifest.MANIFEST), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def update_manifest(out: str, flavour: str, previous: dict, entries: list, not_included: list,
                    cases: Optional[set], stack: Optional[dict], catalogue: Catalogue) -> None:
    """Replace the flavour's entries (only those of ``cases`` when given) in manifest.json, and
    rewrite README.md. ``stack``: the versions that made the models (None: keep the recorded ones)."""
    def replaced(item):
        return item.get("flavour") == flavour and (cases is None or item.get("case") in cases)

    kept = [e for e in previous.get("entries", []) if not replaced(e)]
    skipped = [e for e in previous.get("entries_not_included", []) if not replaced(e)] + not_included
    generated_with = dict(previous.get("generated_with", {}))
    if stack is not None:
        generated_with[flavour] = stack
    write_manifest(out, manifest_document(catalogue, kept + entries, skipped, generated_with), catalogue)


def update_onnx_entries(out: str, previous: dict, entries: list, stack: Optional[dict], catalogue: Catalogue) -> None:
    """Replace the ONNX-file entries in manifest.json (every other entry stays as it is), and rewrite
    README.md. ``stack``: the versions that made their expected outputs (None: keep the recorded ones)."""
    kept = [e for e in previous.get("entries", []) if not manifest.is_onnx_file(e)]
    generated_with = dict(previous.get("generated_with", {}))
    if stack is not None:
        generated_with[ONNX_FILES] = stack
    document = manifest_document(catalogue, kept + entries, previous.get("entries_not_included", []), generated_with)
    write_manifest(out, document, catalogue)


def write_manifest(out: str, document: dict, catalogue: Catalogue) -> None:
    """manifest.json and README.md of ``document``."""
    write_text(os.path.join(out, manifest.MANIFEST), json.dumps(document, indent=1) + "\n")
    write_text(os.path.join(out, "README.md"), readme(document, catalogue))


def manifest_document(catalogue: Catalogue, entries: list, skipped: list, generated_with: dict) -> dict:
    """The manifest's content: every entry and left-out pair in the generator's order, and what it knows."""
    flavours = manifest.FLAVOURS
    case_order = {name: i for i, name in enumerate(catalogue.case_order)}
    last = len(catalogue.case_order)
    format_order = {fmt: i for i, fmt in enumerate(FORMAT_ORDER)}

    def order(item):
        return (flavours.index(item["flavour"]), case_order.get(item.get("case"), last),
                format_order.get(item.get("format"), 9), item.get("name", ""))

    keras_entries = sorted((e for e in entries if not manifest.is_onnx_file(e)), key=order)
    onnx_files = [e for e in entries if manifest.is_onnx_file(e)]  # after them, in the generator's order

    return {
        "format_version": manifest.FORMAT_VERSION,
        "about": "Masked Keras recurrent models (LSTM, GRU, SimpleRNN) for masked_lstm_rewriter (a tf2onnx "
                 "plugin): each entry is one saved model in one format; converting it with the plugin (mask_mode "
                 "and target as given) must give the expected native ONNX ops (expected_ops.native: op type -> the "
                 "direction of each node, recorded from a conversion; no Loop but one for each layer the plugin "
                 "must refuse, whose reason contains a text of left_as_loop) and reproduce the stored Keras outputs of "
                 "every batch at every position within the tolerance; a 'post' entry's must_fail batch must fail "
                 "at inference with the guard's message. Paths are relative to this file's directory. npz keys "
                 "are the inputs' and outputs' 'name'; 'onnx_name' is what tf2onnx calls them; 'outputs' lists "
                 "the ONNX outputs in order; an input's 'shape' is the signature the model converts with. An entry "
                 "with source 'onnx' (format_version 3) is an ONNX file whose recurrent layers are Loops, as stock "
                 "tf2onnx or Keras 3's JAX-backend export wrote it: rewrite_onnx (mask_mode as given) must make it "
                 "the expected native ops, with no Loop, and reproduce the expected outputs, the original file's "
                 "on onnxruntime (reference 'original') or Keras's (reference 'keras'); it has no Keras flavour "
                 "and is checked once, in the keras3 process.",
        "regenerate": "python tools/make_corpus.py (after an emitter change: python tools/make_corpus.py --ops-only; "
                      "the ONNX-file entries alone: python tools/make_corpus.py --onnx)",
        "check": "python -m masked_lstm_rewriter.corpus (or python -m pytest --pyargs masked_lstm_rewriter.corpus)",
        "tolerance": catalogue.tolerance,
        "guard_message": catalogue.guard_message,
        "formats": {f: list(catalogue.formats[f]) for f in flavours},
        "formats_not_included": catalogue.formats_not_included,
        "entries_not_included": sorted(skipped, key=lambda e: (flavours.index(e["flavour"]),
                                                               case_order.get(e["case"], last), e["format"])),
        "cases_pending": catalogue.cases_pending,
        "byte_stability": catalogue.byte_stability,
        "generated_with": {k: generated_with[k] for k in flavours + (ONNX_FILES,) if k in generated_with},
        "entries": keras_entries + onnx_files,
    }


README_HEAD = [
    "# Regression corpus (generated)",
    "",
    "Generated by `tools/make_corpus.py`; do not edit by hand. Small masked Keras recurrent models (LSTM, GRU,",
    "SimpleRNN), saved in the formats `python -m tf2onnx.convert` loads, with input batches and the Keras",
    "outputs for them. `manifest.json` describes every entry: the model's path and format, its `mask_mode`",
    "(and `target`), the input and output names (npz keys and ONNX names; `outputs` in ONNX order) and the",
    "signature it converts with (each input's `shape`), the expected ops (the native `LSTM`, `GRU` and `RNN`",
    "nodes and their directions, recorded from a conversion with the plugin; a `Loop` only for each layer the",
    "plugin must refuse, with a text of its reason in `left_as_loop`), the tolerance, and for `\"post\"`",
    "entries a batch that must fail with the guard's message (\"not post-padded\"). The entries marked",
    "\"(no mask)\" (`\"unmasked\": true`) are layers without a mask that stock tf2onnx leaves as a Loop: they",
    "must become native with no mask machinery (no guard node, no lengths on a native node).",
    "",
    "```bash",
    "python -m masked_lstm_rewriter.corpus     # every entry, both Keras flavours, library and command line",
    "python -m pytest --pyargs masked_lstm_rewriter.corpus   # the same as tests, this process's flavour",
    "python tools/make_corpus.py               # regenerate (both flavours), from a checkout",
    "python tools/make_corpus.py --ops-only    # after an emitter change: re-record the expected ops",
    "```",
    "",
    "| case | model | mask_mode | native nodes (left as a Loop) | keras3 | tf_keras |",
    "| --- | --- | --- | --- | --- | --- |",
]
ONNX_FILES_TEXT = [
    "ONNX files (`\"source\": \"onnx\"`, `\"format\": \"onnx\"`): files whose recurrent layers are Loops, as",
    "their producers wrote them (copied from `testdata/onnx_in/` of a checkout), with input batches and the",
    "expected outputs: the original file's own on onnxruntime (`\"reference\": \"original\"`, stock tf2onnx",
    "files) or Keras's, stored with the file (`\"reference\": \"keras\"`, Keras 3's JAX-backend export).",
    "`rewrite_onnx` (and `python -m masked_lstm_rewriter rewrite`) must make each the native nodes listed, with",
    "no Loop, and reproduce those outputs at every position. A file has an entry per mask mode; the `\"post\"`",
    "entry of a file with a mask has a batch the guard must refuse. They need no Keras: they are checked once,",
    "in the keras3 process. `python tools/make_corpus.py --onnx` regenerates them alone (`--onnx --ops-only`:",
    "their ops).",
    "",
    "| file | producer | model | mask_mode | native nodes | expected outputs |",
    "| --- | --- | --- | --- | --- | --- |",
]
GENERATED_WITH_LABELS = {ONNX_FILES: "ONNX files"}


def readme(result: dict, catalogue: Catalogue) -> str:
    """The corpus's README.md: what it holds, how to check and regenerate it, a row per case."""
    recorded = [e for e in result["entries"] if "native" in (e.get("expected_ops") or {})]
    entries = [e for e in recorded if not manifest.is_onnx_file(e)]
    lines = list(README_HEAD)
    lines += [_case_row(case, [e for e in entries if e["case"] == case])
              for case in dict.fromkeys(e["case"] for e in entries)]
    onnx_files = [e for e in recorded if manifest.is_onnx_file(e)]
    if onnx_files:
        lines += [""] + ONNX_FILES_TEXT + [_onnx_file_row([e for e in onnx_files if e["case"] == case])
                                           for case in dict.fromkeys(e["case"] for e in onnx_files)]
    if result["cases_pending"]:
        lines += ["", "Cases not in the corpus yet (`tools/make_corpus.py --cases NAME` makes one anyway):", ""]
        lines += [f"- `{item['case']}` ({item['description']}): {item['reason']}" for item in result["cases_pending"]]
    lines += ["", "How each format is saved:", ""]
    lines += [f"- {flavour} `{fmt}`: {how}" for (flavour, fmt), how in catalogue.how_saved.items()
              if fmt in result["formats"].get(flavour, ())]
    lines += ["", "Formats not included, and why:", ""]
    lines += [f"- {item['flavour']} `{item['format']}`: {item['reason']}" for item in result["formats_not_included"]]
    if result["entries_not_included"]:
        lines += ["", "Case and format pairs left out, and why:", ""]
        lines += [f"- {item['flavour']} `{item['case']}` `{item['format']}`: {item['reason']}"
                  for item in result["entries_not_included"]]
    lines += ["", "Byte stability: " + result["byte_stability"], "", "Models generated with:", ""]
    lines += [f"- {GENERATED_WITH_LABELS.get(flavour, flavour)}: " + ", ".join(f"{k} {v}" for k, v in stack.items())
              for flavour, stack in result["generated_with"].items()]
    lines += ["", "Expected ops recorded with: " + "; ".join(sorted({e["expected_ops"]["recorded_with"]
                                                                      for e in recorded})) + "."]
    failed = [e["name"] for e in result["entries"] if "generation_check_failed" in e or "save_failed" in e]
    if failed:
        lines += ["", "**Entries that failed their check when generated:** " + ", ".join(failed)]
    return "\n".join(lines) + "\n"


def _onnx_file_row(rows: list) -> str:
    """The README's table row of one ONNX file: producer, model, mask modes, native nodes, reference."""
    first = rows[0]
    modes = ", ".join(f"`{e['mask_mode']}`" for e in rows) + (" (no mask)" if first.get("unmasked") else "")
    reference = "the original file's (onnxruntime)" if manifest.reference(first) == "original" else "Keras's (stored)"
    return (f"| `{first['case']}` | {first['producer'].replace('|', '/')} | {first['description'].replace('|', '/')} | "
            f"{modes} | {ops.describe_native(first['expected_ops']['native'])} | {reference} |")


def _case_row(case: str, rows: list) -> str:
    """The README's table row of one case: its model, mask mode, native nodes and formats per flavour."""
    formats = {f: ", ".join(e["format"] for e in rows if e["flavour"] == f) or "-" for f in manifest.FLAVOURS}
    mode = f"`{rows[0]['mask_mode']}`" + (" (no mask)" if rows[0].get("unmasked") else "")
    return (f"| `{case}` | {rows[0]['description'].replace('|', '/')} | {mode} | "
            f"{ops.describe_native(rows[0]['expected_ops']['native'])}"
            + "".join(f" (Loop: {text})" for text in rows[0].get("left_as_loop", []))
            + f" | {formats['keras3']} | {formats['tf_keras']} |")
