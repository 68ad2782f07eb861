# SPDX-License-Identifier: Apache-2.0
"""Write the corpus's ONNX-file entries (``tools/make_corpus.py --onnx`` calls these).

Each :class:`OnnxCase` is an ``.onnx`` file of a checkout's ``testdata/onnx_in/`` whose recurrent
layers are Loops, as its producer wrote it: stock tf2onnx (``tf2onnx/``), or Keras 3's
``export(format="onnx")`` on the JAX backend (``jax/``). The file is copied as it is to
``<corpus>/onnx/<producer>/<file>/model.onnx``, with batches beside it:

* for a stock tf2onnx file, batches made here from the given mask rows (post-padded rows with a full
  and an empty row; for the ``"any"`` entry also pre-padded, holed and both-ends rows; for the guard a
  pre-padded batch; without a mask, random features), and the original file's own outputs on
  onnxruntime as the expected ones;
* for a JAX export, the batches stored beside it with Keras's own outputs (``<file>.npz``: keys
  ``<batch>.in.<input>``, ``<batch>.out.<k>``, ``<batch>.mask``): ``post`` (post-padded, with a full and
  an empty row) for every entry; ``nonpost`` for the ``"any"`` entry, and as the ``"post"`` entry's
  batch the guard must refuse; an unmasked file's batches (``post``, ``rand``) for its one entry.

A file becomes one entry per mask mode (a file without a mask, one ``"post"`` entry). The expected
ops are recorded as for a Keras entry (:func:`.writer.record_entry`, which rewrites it with
``rewrite_onnx``). Nothing here imports TensorFlow; ``rewrite_onnx`` does, through tf2onnx.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

from . import manifest
from .writer import MASK_SOURCES, Catalogue, relative, write_npz

ONNX_DIR = "onnx"  # the ONNX-file entries' folder in the corpus
PRODUCERS = {
    "tf2onnx": "stock tf2onnx {version} (tf2onnx.convert.from_keras; tools/stock_onnx_catalogue.py)",
    "jax": "Keras {keras} model.export(format='onnx') on the JAX backend (jax {jax}, jax2onnx {version}; "
           "tools/make_jax_exports.py)",
}


@dataclasses.dataclass(frozen=True)
class OnnxCase:
    """One ONNX file of ``testdata/onnx_in``, and what it holds."""

    producer: str              # "tf2onnx" or "jax": its folder in testdata/onnx_in
    stem: str                  # the file's name there, without .onnx
    description: str
    source: str                # the mask: embedding | masking | explicit | none (no mask)
    modes: tuple = ("post", "any")
    mask_value: float = 0.0    # a stock file's features at padded steps (a Masking layer)
    vocabulary: int = 10       # token ids are drawn below it (the stock files' Embedding size)
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.producer}/{self.stem}"

    @property
    def unmasked(self) -> bool:
        return self.source == "none"


@dataclasses.dataclass(frozen=True)
class MaskRows:
    """The batches made for a stock tf2onnx file: (description, mask rows) pairs, a row a string of 0/1."""

    post: tuple             # every masked entry's batches
    any: tuple              # the "any" entry's, besides
    unmasked: tuple         # a file without a mask: the rows give only the shapes
    not_post_padded: tuple  # (description, rows): the batch the "post" entry's guard must refuse


def write_case(case: OnnxCase, testdata: str, out: str, rows: MaskRows, catalogue: Catalogue) -> list:
    """Copy the case's file into the corpus ``out`` with its batches and expected outputs; returns its
    entries (one per mask mode), their expected ops still to be recorded."""
    import onnx  # pylint: disable=import-outside-toplevel
    source = os.path.join(testdata, case.producer, case.stem + ".onnx")
    case_dir = os.path.join(out, ONNX_DIR, case.producer, case.stem)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    target = os.path.join(case_dir, "model.onnx")
    shutil.copyfile(source, target)
    model = onnx.load(target)
    specs = input_specs(model)
    if case.producer == "jax":
        made = stored_batches(case, os.path.splitext(source)[0] + ".npz", model, (case_dir, out),
                              catalogue.guard_message)
        stack = jax_versions(testdata)
        producer = PRODUCERS["jax"].format(version=model.producer_version.split()[0], **stack)
        expected_from = f"Keras {stack['keras']} on the JAX backend, stored with the file"
    else:
        made = generated_batches(case, model, specs, rows, (case_dir, out), catalogue.guard_message)
        producer = PRODUCERS["tf2onnx"].format(version=model.producer_version.split()[0])
        expected_from = f"the original file on onnxruntime {_onnxruntime_version()}"
    base = new_entry(case, model, specs, relative(target, out), catalogue)
    base.update(producer=producer, expected_from=expected_from,
                copied_from=f"testdata/onnx_in/{case.producer}/{case.stem}.onnx")
    return [dict(base, name=f"onnx/{case.name}/{mode}", mask_mode=mode,
                 batches=made["post"] + (made["any"] if mode == "any" else []),
                 must_fail=made["must_fail"] if mode == "post" and not case.unmasked else None)
            for mode in case.modes]


def new_entry(case: OnnxCase, model, specs: list, path: str, catalogue: Catalogue) -> dict:
    """The entry's fields common to its mask modes (in the manifest's order)."""
    return {
        "name": None, "case": case.name, "source": manifest.ONNX_SOURCE, "flavour": None, "format": "onnx",
        "producer": None, "path": path, "copied_from": None, "description": case.description,
        "mask_source": MASK_SOURCES[case.source].format(mask_value=case.mask_value), "mask_mode": None,
        "unmasked": case.unmasked, "target": None, "left_as_loop": [],
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "inputs": specs,
        "outputs": [{"name": f"output_{k}", "onnx_name": o.name} for k, o in enumerate(model.graph.output)],
        "masked_layers": sum(1 for node in model.graph.node if node.op_type == "Loop"),  # a layer's Loop each
        "expected_ops": None,
        "reference": "keras" if case.producer == "jax" else "original", "expected_from": None,
        "tolerance": catalogue.tolerance, "batches": None, "must_fail": None,
    }


def input_specs(model) -> list:
    """The file's inputs (not initializers): name (also its npz key), dtype and shape (None: dynamic)."""
    import onnx  # pylint: disable=import-outside-toplevel
    initializers = {t.name for t in model.graph.initializer}
    return [{"name": i.name, "onnx_name": i.name,
             "dtype": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name,
             "shape": [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]}
            for i in model.graph.input if i.name not in initializers]


def generated_batches(case: OnnxCase, model, specs: list, rows: MaskRows, where: tuple, guard: str) -> dict:
    """Batches made from mask rows, with the original file's outputs on onnxruntime (``where``: the
    case's folder and the corpus's); returns {"post": [...], "any": [...], "must_fail": ... or None}."""
    from ..sessions import onnxruntime_session  # pylint: disable=import-outside-toplevel
    session = onnxruntime_session(model)
    made = {"post": [], "any": [], "must_fail": None}
    kinds = (("post", rows.unmasked),) if case.unmasked else (("post", rows.post), ("any", rows.any))
    number = 0
    for kind, pairs in kinds:
        for description, mask in pairs:
            inputs = make_inputs(case, specs, mask, seed=1000 * case.seed + number)
            outputs = session.run(None, {spec["onnx_name"]: inputs[spec["name"]] for spec in specs})
            made[kind].append(write_batch(where, number, description, mask, inputs, outputs))
            number += 1
    if not case.unmasked:
        description, mask = rows.not_post_padded
        path = os.path.join(where[0], "not_post_padded_inputs.npz")
        write_npz(path, make_inputs(case, specs, mask, seed=1000 * case.seed + 99))
        made["must_fail"] = {"description": description, "mask_rows": list(mask), "inputs": relative(path, where[1]),
                             "message": guard}
    return made


def make_inputs(case: OnnxCase, specs: list, mask, seed: int) -> dict:
    """Inputs whose valid steps are ``mask`` (strings of 0/1, one per row): token ids (0 where padded),
    features (the case's mask value where padded, for a Masking layer; random otherwise) and a mask."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    valid = np.array([[c == "1" for c in row] for row in mask], dtype=bool)
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in specs:
        dtype, shape = np.dtype(spec["dtype"]), spec["shape"]
        if dtype == np.bool_ and len(shape) == 2:
            arrays[spec["name"]] = valid
        elif np.issubdtype(dtype, np.integer) and len(shape) == 2:
            arrays[spec["name"]] = np.where(valid, rng.integers(1, case.vocabulary, valid.shape), 0).astype(dtype)
        elif len(shape) == 3 and shape[2]:
            features = rng.normal(size=valid.shape + (shape[2],)).astype(dtype)
            if case.source == "masking":
                features[~valid] = case.mask_value
            arrays[spec["name"]] = features
        else:
            raise ValueError(f"{case.name}: no batch is made for input {spec['name']} {dtype}{shape}")
    return arrays


def stored_batches(case: OnnxCase, npz_path: str, model, where: tuple, guard: str) -> dict:
    """The batches stored with a JAX export, and Keras's outputs on them (see the module docstring;
    ``where``: the case's folder and the corpus's)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(npz_path, allow_pickle=False) as data:
        stored = {key: data[key] for key in data.files}
    names = [spec["name"] for spec in input_specs(model)]

    def batch(label: str, number: int) -> dict:
        inputs = {name: stored[f"{label}.in.{name}"] for name in names}
        valid = stored.get(f"{label}.mask", np.ones(inputs[names[0]].shape[:2], bool))
        mask = ["".join("1" if v else "0" for v in row) for row in valid]
        outputs = [stored[f"{label}.out.{k}"] for k in range(len(model.graph.output))]
        return write_batch(where, number, f"Keras's '{label}' batch: {describe_rows(mask, case.unmasked)}",
                           mask, inputs, outputs)

    if case.unmasked:
        return {"post": [batch("post", 0), batch("rand", 1)], "any": [], "must_fail": None}
    post, nonpost = batch("post", 0), batch("nonpost", 1)
    must_fail = {"description": nonpost["description"], "mask_rows": nonpost["mask_rows"],
                 "inputs": nonpost["inputs"], "message": guard}
    return {"post": [post], "any": [nonpost], "must_fail": must_fail}


def describe_rows(mask: list, unmasked: bool) -> str:
    """``post-padded, 6 steps, lengths 6 3 0 1 4 (a full and an empty row)``, or what the rows are."""
    steps = len(mask[0])
    if unmasked:
        return f"no mask: {len(mask)} rows x {steps} steps"
    lengths = [row.count("1") for row in mask]
    if all(row == "1" * n + "0" * (steps - n) for row, n in zip(mask, lengths)):
        ends = " (a full and an empty row)" if steps in lengths and 0 in lengths else ""
        return f"post-padded, {steps} steps, lengths {' '.join(map(str, lengths))}{ends}"
    return f"{steps} steps, not post-padded (pre-padded rows, holes): {' '.join(mask)}"


def write_batch(where: tuple, number: int, description: str, mask, inputs: dict, outputs: list) -> dict:
    """``batchN_inputs.npz`` and ``batchN_expected.npz`` in the case's folder; returns the batch's manifest item."""
    case_dir, out = where
    inputs_path = os.path.join(case_dir, f"batch{number}_inputs.npz")
    expected_path = os.path.join(case_dir, f"batch{number}_expected.npz")
    write_npz(inputs_path, inputs)
    write_npz(expected_path, {f"output_{k}": value for k, value in enumerate(outputs)})
    return {"description": description, "mask_rows": list(mask), "inputs": relative(inputs_path, out),
            "expected": relative(expected_path, out)}


def jax_versions(testdata: str) -> dict:
    """keras and jax versions of the JAX exports (their manifest.json)."""
    with open(os.path.join(testdata, "jax", "manifest.json"), encoding="utf-8") as handle:
        versions = json.load(handle)["versions"]
    return {"keras": versions["keras"], "jax": versions["jax"]}


def versions() -> dict:
    """What made the ONNX-file entries' expected outputs, as ``generated_with`` records it."""
    import onnx  # pylint: disable=import-outside-toplevel
    return {"onnx": onnx.__version__, "onnxruntime": _onnxruntime_version(), "from": "testdata/onnx_in"}


def _onnxruntime_version() -> str:
    import onnxruntime  # pylint: disable=import-outside-toplevel
    return onnxruntime.__version__
