#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate the regression corpus ``testdata/corpus/`` from code.

    .venv/bin/python tools/make_corpus.py                    # both flavours (the default)
    .venv/bin/python tools/make_corpus.py --keras tf_keras   # one flavour; the other's entries stay
    .venv/bin/python tools/make_corpus.py --out /tmp/probe --formats h5 --keras keras3   # try a format

Each case is a small masked Keras model (4-8 units, up to 7 steps) built with fixed seeds
(``keras.utils.set_random_seed``; every weight then drawn from ``numpy.random.default_rng``, as
``tests/kerasutil.randomize_weights`` does, so no bias is zero). For each Keras flavour
(Keras 3, and tf_keras with ``TF_USE_LEGACY_KERAS=1``; they cannot share a process, so
``--keras both`` runs this script once per flavour as a subprocess) it writes, under
``testdata/corpus/<flavour>/<case>/``:

* the model in the flavour's formats that ``python -m tf2onnx.convert`` loads (see
  ``FORMATS``): a SavedModel (Keras 3: ``model.export(format="tf_saved_model")``; tf_keras:
  ``tf.saved_model.save`` of a ``tf.Module`` holding the weights and a serving ``tf.function``
  with named inputs, for the cases marked so, to keep the corpus small), ``model.keras``
  (Keras 3), ``model.h5`` (tf_keras);
* input batches (``batchN_inputs.npz``: several rows, mixed lengths with empty and full rows;
  pre-padded and holed masks for ``mask_mode="any"`` cases) and the Keras outputs for them
  (``batchN_expected.npz``, computed by the Keras model in memory);
* for ``mask_mode="post"`` cases, ``not_post_padded_inputs.npz``: a batch that the converted
  model must refuse with the guard's message ("not post-padded").

Then it converts every entry the way ``tests/test_corpus.py`` does (``tf2onnx.convert.main()``
with ``masked_lstm_rewriter.enable(mask_mode)``), records the ONNX input and output names
tf2onnx gives, checks the entry (op counts, outputs, guard; ``tools/check_corpus.py``) and
writes ``testdata/corpus/manifest.json`` and ``testdata/corpus/README.md``. It exits non-zero
when a model does not convert or a check fails (the files are written anyway, to look at).

Byte stability: the manifest, the README, every ``.npz`` (written with fixed zip timestamps),
every ``.h5`` and every ``.keras`` (normalised: fixed zip timestamps and ``date_saved``,
``shared_object_id`` renumbered) are byte-identical across runs on the same machine and stack.
SavedModels are not (Keras 3 orders the variables differently each run; tf_keras's LSTM embeds a
random uuid); see ``BYTE_STABILITY``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(ROOT, "testdata", "corpus")
FLAVOURS = ("keras3", "tf_keras")
OPSET = 15
TOLERANCE = 1e-5
GUARD_TEXT = "not post-padded"
VOCAB, EMBED, FEATURES = 40, 5, 3
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_DATE_SAVED = "1980-01-01@00:00:00"

# the formats written per flavour, all loadable by `python -m tf2onnx.convert` (tf2onnx 1.17)
FORMATS = {"keras3": ("saved_model", "keras"), "tf_keras": ("h5", "saved_model")}
HOW_SAVED = {
    ("keras3", "saved_model"): "keras.Model.export(path, format='tf_saved_model')",
    ("keras3", "keras"): "keras.Model.save('model.keras'), then normalised for byte stability: fixed zip "
                         "timestamps, a fixed date_saved, shared_object_id renumbered 1, 2, ...",
    ("keras3", "h5"): "keras.Model.save('model.h5') (Keras 3's legacy HDF5)",
    ("tf_keras", "h5"): "tf_keras.Model.save('model.h5')",
    ("tf_keras", "keras"): "tf_keras.Model.save('model.keras')",
    ("tf_keras", "saved_model"): "tf.saved_model.save(tf.Module holding the weights and a serving "
                                 "tf.function with named inputs, outputs output_0..)",
}
MODEL_FILES = {"saved_model": "saved_model", "keras": "model.keras", "h5": "model.h5"}
CONVERT_FLAGS = {"saved_model": "--saved-model", "keras": "--keras", "h5": "--keras"}

# measured with TensorFlow 2.21, Keras 3.15.1, tf_keras 2.21, tf2onnx 1.17.0
NOT_INCLUDED = [
    {"flavour": "keras3", "format": "h5",
     "reason": "Keras 3's legacy HDF5 (model.save('model.h5')): Keras 3 cannot load a masked model back from "
               "it: keras.models.load_model, which tf2onnx --keras calls, fails with \"Unknown layer: "
               "'NotEqual'\" for every corpus model with Embedding(mask_zero=True) or Masking; the explicit-mask "
               "models with several outputs load but lose all but one output (see entries_not_included); only "
               "stacked_bidirectional_backward converted. Try it: tools/make_corpus.py --keras keras3 "
               "--formats h5 --out /tmp/probe"},
    {"flavour": "keras3", "format": "saved_model via model.save(dir)",
     "reason": "Keras 3's model.save only takes .keras and .h5 paths; its SavedModel is "
               "model.export, which is included"},
    {"flavour": "tf_keras", "format": "keras",
     "reason": "tf_keras's .keras zip converts with --keras (checked on the embedding and explicit-mask "
               "models) but is not the format tf_keras users save; left out to keep the corpus small"},
    {"flavour": "tf_keras", "format": "saved_model via model.save(dir, save_format='tf')",
     "reason": "converts with --saved-model (outputs named after the last layer), but each model is "
               "about 1.9 MB (tf_keras saves every layer's traced call functions); the tf.Module "
               "SavedModel included instead is about 0.4 MB"},
    {"flavour": "tf_keras", "format": "saved_model for every case",
     "reason": "a tf_keras SavedModel is 0.35-0.75 MB even without the Keras metadata (tf_keras's "
               "LSTM registers its forward and gradient functions in the graph), so only the cases "
               "marked tf_keras_saved_model have one; every case has an .h5"},
]
BYTE_STABILITY = (
    "manifest.json, README.md, every .npz (inputs and Keras outputs; fixed zip timestamps), every tf_keras "
    ".h5 and every Keras 3 .keras (normalised: fixed zip timestamps and date_saved, shared_object_id "
    "renumbered) are byte-identical when regenerated on the same machine and stack (fixed seeds, one "
    "TensorFlow thread, op determinism). SavedModels are not: Keras 3's model.export writes the variables "
    "in a different order from run to run (saved_model.pb, variables/*), and tf_keras's LSTM puts a random "
    "uuid4 in its api_implements attribute (saved_model.pb); fingerprint.pb follows. Their weights and "
    "outputs are the same. The Keras outputs may differ in the last bits on another CPU or TensorFlow "
    "build; the tolerance absorbs that.")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    description: str
    source: str                      # mask source: embedding | masking | explicit
    layers: Callable                 # keras -> [layers], applied in order
    lstm_directions: tuple           # the ONNX LSTM nodes the plugin must produce
    masked_layers: int               # recurrent Keras layers rewritten (a Bidirectional counts 2)
    mask_mode: str = "post"
    mask_value: float = 0.0          # Masking's mask_value
    tf_keras_saved_model: bool = False
    seed: int = 0


def _lstm(keras, units, **kwargs):
    return keras.layers.LSTM(units, **kwargs)


CASES = (
    Case("embedding_forward",
         "Embedding(mask_zero=True) -> LSTM(6, return_sequences=True) -> Dense(3)", "embedding",
         lambda k: [_lstm(k, 6, return_sequences=True, name="lstm"), k.layers.Dense(3, name="dense")],
         ("forward",), 1, tf_keras_saved_model=True, seed=1),
    Case("masking_go_backwards",
         "Masking(mask_value=-1.0) -> LSTM(5, go_backwards=True, return_sequences=True)", "masking",
         lambda k: [_lstm(k, 5, go_backwards=True, return_sequences=True, name="lstm")],
         ("reverse",), 1, mask_value=-1.0, tf_keras_saved_model=True, seed=2),
    Case("explicit_mask_return_state",
         "features, mask=bool input -> LSTM(4, return_sequences=True, return_state=True): sequence, h, c",
         "explicit",
         lambda k: [_lstm(k, 4, return_sequences=True, return_state=True, name="lstm")],
         ("forward",), 1, tf_keras_saved_model=True, seed=3),
    Case("explicit_mask_last_state",
         "features, mask=bool input -> LSTM(5, return_state=True): last output, h, c", "explicit",
         lambda k: [_lstm(k, 5, return_state=True, name="lstm")],
         ("forward",), 1, seed=4),
    Case("bidirectional_concat",
         "Embedding(mask_zero=True) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode='concat')",
         "embedding",
         lambda k: [k.layers.Bidirectional(_lstm(k, 4, return_sequences=True, name="lstm"),
                                           merge_mode="concat", name="bidirectional")],
         ("bidirectional",), 2, seed=5),
    Case("bidirectional_sum_state",
         "Masking(mask_value=0.5) -> Bidirectional(LSTM(5, return_sequences=True, return_state=True), "
         "merge_mode='sum'): sequence, forward h, c, backward h, c", "masking",
         lambda k: [k.layers.Bidirectional(_lstm(k, 5, return_sequences=True, return_state=True, name="lstm"),
                                           merge_mode="sum", name="bidirectional")],
         ("bidirectional",), 2, mask_value=0.5, tf_keras_saved_model=True, seed=6),
    Case("stacked",
         "Embedding(mask_zero=True) -> LSTM(8, return_sequences=True) -> LSTM(6) (last output)", "embedding",
         lambda k: [_lstm(k, 8, return_sequences=True, name="lstm_a"), _lstm(k, 6, name="lstm_b")],
         ("forward", "forward"), 2, seed=7),
    Case("stacked_bidirectional_backward",
         "features, mask=bool input -> Bidirectional(LSTM(4, return_sequences=True)) -> "
         "LSTM(4, go_backwards=True, return_sequences=True), the mask passed to both", "explicit",
         lambda k: [k.layers.Bidirectional(_lstm(k, 4, return_sequences=True, name="lstm"), name="bidirectional"),
                    _lstm(k, 4, go_backwards=True, return_sequences=True, name="lstm_back")],
         ("bidirectional", "reverse"), 3, seed=8),
    Case("hard_sigmoid",
         "Embedding(mask_zero=True) -> LSTM(4, recurrent_activation='hard_sigmoid', return_sequences=True) "
         "(each flavour's own hard_sigmoid)", "embedding",
         lambda k: [_lstm(k, 4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
         ("forward",), 1, seed=9),
    Case("any_bidirectional_ave",
         "mask_mode='any': Embedding(mask_zero=True) -> Bidirectional(LSTM(4, return_sequences=True), "
         "merge_mode='ave'); pre-padded, holed and both-ends rows", "embedding",
         lambda k: [k.layers.Bidirectional(_lstm(k, 4, return_sequences=True, name="lstm"),
                                           merge_mode="ave", name="bidirectional")],
         ("bidirectional",), 2, mask_mode="any", tf_keras_saved_model=True, seed=10),
    Case("any_explicit_go_backwards_state",
         "mask_mode='any': features, mask=bool input -> LSTM(5, go_backwards=True, return_sequences=True, "
         "return_state=True); pre-padded, holed and both-ends rows", "explicit",
         lambda k: [_lstm(k, 5, go_backwards=True, return_sequences=True, return_state=True, name="lstm")],
         ("reverse",), 1, mask_mode="any", seed=11),
    Case("any_masking_stacked",
         "mask_mode='any': Masking(mask_value=-1.0) -> LSTM(6, return_sequences=True) -> LSTM(4); "
         "pre-padded, holed and both-ends rows", "masking",
         lambda k: [_lstm(k, 6, return_sequences=True, name="lstm_a"), _lstm(k, 4, name="lstm_b")],
         ("forward", "forward"), 2, mask_mode="any", mask_value=-1.0, seed=12),
)

# masks as strings, one per row ("1" = valid step)
POST_BATCHES = (
    ("post-padded, 7 steps, lengths 7 3 0 1 6 (a full and an empty row)",
     ("1111111", "1110000", "0000000", "1000000", "1111110")),
    ("post-padded, 4 steps, lengths 0 4 2 4", ("0000", "1111", "1100", "1111")),
)
ANY_BATCHES = (
    ("7 steps: full, empty, pre-padded, holes, both ends, post-padded",
     ("1111111", "0000000", "0001111", "1010110", "0111100", "1110000")),
    ("5 steps: pre-padded to one step, post-padded to one step, alternating, full",
     ("00001", "10000", "01010", "11111")),
)
NOT_POST_PADDED = ("6 steps: a post-padded row, a pre-padded row, a row with a hole",
                   ("111000", "001111", "101100"))


# ------------------------------------------------------------------ files

def write_npz(path: str, arrays: dict) -> None:
    """np.savez, but byte-stable: fixed zip timestamps, stored (not compressed), in the given order."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, buffer.getvalue())


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
            fixed = zipfile.ZipInfo(info.filename, date_time=ZIP_TIME)
            fixed.compress_type = info.compress_type
            fixed.external_attr = 0o644 << 16
            fixed.create_system = 3
            archive.writestr(fixed, data)
    os.replace(path + ".tmp", path)


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def relative(path: str, out: str) -> str:
    return os.path.relpath(path, out).replace(os.sep, "/")


# ------------------------------------------------------------------ models and batches

def select_keras(flavour: str) -> None:
    """Before TensorFlow is imported: it reads these once."""
    os.environ["MLR_KERAS"] = flavour
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if flavour == "tf_keras" else "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # Keras's cuDNN LSTM path cannot be converted
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")


def input_specs(case: Case):
    """(name, dtype, shape) of the model's inputs."""
    if case.source == "embedding":
        return [("tokens", "int32", (None, None))]
    if case.source == "masking":
        return [("features", "float32", (None, None, FEATURES))]
    return [("features", "float32", (None, None, FEATURES)), ("mask", "bool", (None, None))]


def build_model(case: Case, keras, np):
    if hasattr(keras.utils, "clear_session"):  # fresh layer names and uids for every case
        keras.utils.clear_session()
    else:
        keras.backend.clear_session()
    keras.utils.set_random_seed(case.seed)
    inputs = [keras.Input(shape[1:], dtype=dtype, name=name) for name, dtype, shape in input_specs(case)]
    mask = None
    if case.source == "embedding":
        x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(inputs[0])
    elif case.source == "masking":
        x = keras.layers.Masking(mask_value=case.mask_value, name="masking")(inputs[0])
    else:
        x, mask = inputs
    for layer in case.layers(keras):
        recurrent = isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional))
        x = layer(x, mask=mask) if recurrent and mask is not None else layer(x)
    model = keras.Model(inputs if len(inputs) > 1 else inputs[0], x, name=case.name)
    rng = np.random.default_rng(case.seed)  # as tests/kerasutil.randomize_weights: no zero bias
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in weights])
    return model


def make_batch(case: Case, rows, seed: int, np) -> dict:
    """Inputs whose mask is ``rows`` (strings of 0/1, one per row)."""
    valid = np.array([[c == "1" for c in row] for row in rows], dtype=bool)
    rng = np.random.default_rng(seed)
    batch, steps = valid.shape
    if case.source == "embedding":
        tokens = rng.integers(1, VOCAB, size=(batch, steps)).astype(np.int32)
        tokens[~valid] = 0
        return {"tokens": tokens}
    features = rng.normal(size=(batch, steps, FEATURES)).astype(np.float32)
    if case.source == "masking":
        features[~valid] = case.mask_value
        return {"features": features}
    return {"features": features, "mask": valid}  # padded steps keep non-zero features: only the mask counts


def keras_outputs(model, inputs: dict, case: Case, np) -> list:
    values = [inputs[name] for name, _, _ in input_specs(case)]
    out = model(values if len(values) > 1 else values[0], training=False)
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o).astype(np.float32) for o in out]


def save_tf_module(model, case: Case, path: str, n_outputs: int, tf) -> None:
    """tf_keras SavedModel: the weights and one serving function with named inputs."""
    spec = [tf.TensorSpec(shape, dtype, name=name) for name, dtype, shape in input_specs(case)]
    names = [f"output_{i}" for i in range(n_outputs)]

    def serve(*args):
        out = model(list(args) if len(args) > 1 else args[0], training=False)
        out = out if isinstance(out, (list, tuple)) else [out]
        return dict(zip(names, out))

    function = tf.function(serve, input_signature=spec)
    module = tf.Module()
    module.weights_ = list(model.weights)  # the variables only: no Keras metadata
    module.serve = function
    tf.saved_model.save(module, path, signatures={"serving_default": function})


def save_model(model, case: Case, flavour: str, fmt: str, path: str, n_outputs: int, tf) -> None:
    if fmt == "saved_model":
        if flavour == "keras3":
            model.export(path, format="tf_saved_model", verbose=False)
        else:
            save_tf_module(model, case, path, n_outputs, tf)
    elif fmt == "keras":
        model.save(path)
        normalise_keras_zip(path)
    elif fmt == "h5":
        model.save(path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


# ------------------------------------------------------------------ one flavour

def versions(flavour: str) -> dict:
    import onnx  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel
    if flavour == "tf_keras":
        import tf_keras as keras  # pylint: disable=import-outside-toplevel
    else:
        import keras  # pylint: disable=import-outside-toplevel
    keras_name = "tf_keras" if flavour == "tf_keras" else "keras"
    return {"tensorflow": tf.__version__, keras_name: keras.__version__, "tf2onnx": tf2onnx.__version__,
            "onnx": onnx.__version__, "opset": OPSET}


def format_problem(model, flavour: str, fmt: str, n_outputs: int):
    """Why tf2onnx cannot convert this model from this format (measured with tf2onnx 1.17), or None."""
    if flavour == "keras3" and fmt in ("keras", "h5") and n_outputs > 1 and len(set(model.output_names)) < n_outputs:
        return (f"tf2onnx 1.17's --keras loader keeps one output per distinct model.output_names entry, and "
                f"Keras 3 names all {n_outputs} outputs of this model after the one layer that returns them "
                f"({model.output_names}): the ONNX model would have 1 output instead of {n_outputs} "
                f"(tf_loader.from_keras -> saving_utils.trace_model_call builds a dict keyed by output name). "
                f"The SavedModel entry covers the case")
    return None


def formats_for(case: Case, flavour: str, override) -> list:
    if override:
        return list(override)
    return [f for f in FORMATS[flavour] if not (flavour == "tf_keras" and f == "saved_model"
                                                and not case.tf_keras_saved_model)]


def generate_flavour(flavour: str, args) -> int:
    select_keras(flavour)
    sys.path.insert(0, HERE)
    import check_corpus  # pylint: disable=import-outside-toplevel
    quiet = check_corpus.quiet_stderr if not args.verbose else _no_quiet
    with quiet():
        import logging  # pylint: disable=import-outside-toplevel

        import numpy as np  # pylint: disable=import-outside-toplevel
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.experimental.enable_op_determinism()
        if flavour == "tf_keras":
            import tf_keras as keras  # pylint: disable=import-outside-toplevel
        else:
            import keras  # pylint: disable=import-outside-toplevel
        import tf2onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    if not args.verbose:
        for name in ("tf2onnx", "tensorflow", "absl", "keras"):
            logging.getLogger(name).setLevel(logging.ERROR)
        tf.get_logger().setLevel(logging.ERROR)

    out = args.out
    flavour_dir = os.path.join(out, flavour)
    if os.path.isdir(flavour_dir):
        shutil.rmtree(flavour_dir)
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    entries = []
    not_included = []  # (case, format) pairs left out, with the reason
    print(f"{flavour}: writing {len(cases)} cases to {flavour_dir}", flush=True)

    # 1. every model, batch and Keras output first: conversions do not interleave with saving
    for case in cases:
        case_dir = os.path.join(flavour_dir, case.name)
        os.makedirs(case_dir)
        with quiet():
            model = build_model(case, keras, np)
        batches = []
        patterns = ANY_BATCHES if case.mask_mode == "any" else POST_BATCHES
        n_outputs = None
        for number, (description, rows) in enumerate(patterns):
            inputs = make_batch(case, rows, seed=1000 * case.seed + number, np=np)
            with quiet():
                outputs = keras_outputs(model, inputs, case, np)
            n_outputs = len(outputs)
            inputs_path = os.path.join(case_dir, f"batch{number}_inputs.npz")
            expected_path = os.path.join(case_dir, f"batch{number}_expected.npz")
            write_npz(inputs_path, inputs)
            write_npz(expected_path, {f"output_{i}": o for i, o in enumerate(outputs)})
            batches.append({"description": description, "mask_rows": list(rows),
                            "inputs": relative(inputs_path, out), "expected": relative(expected_path, out)})
        must_fail = None
        if case.mask_mode == "post":
            description, rows = NOT_POST_PADDED
            path = os.path.join(case_dir, "not_post_padded_inputs.npz")
            write_npz(path, make_batch(case, rows, seed=1000 * case.seed + 99, np=np))
            must_fail = {"description": description, "mask_rows": list(rows), "inputs": relative(path, out),
                         "message": GUARD_TEXT}
        for fmt in formats_for(case, flavour, args.formats):
            path = os.path.join(case_dir, MODEL_FILES[fmt])
            why_not = format_problem(model, flavour, fmt, n_outputs) if not args.formats else None
            if why_not:
                not_included.append({"flavour": flavour, "format": fmt, "case": case.name, "reason": why_not})
                print(f"  not included: {flavour}/{case.name}/{fmt}: {why_not}", flush=True)
                continue
            try:
                with quiet():
                    save_model(model, case, flavour, fmt, path, n_outputs, tf)
            except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
                print(f"  FAILED {flavour}/{case.name}/{fmt}: cannot save: {type(error).__name__}: "
                      f"{check_corpus.first_line(error)}", flush=True)
                entries.append({"name": f"{flavour}/{case.name}/{fmt}", "save_failed": str(error)})
                continue
            entries.append({
                "name": f"{flavour}/{case.name}/{fmt}",
                "case": case.name,
                "flavour": flavour,
                "format": fmt,
                "saved_with": HOW_SAVED[(flavour, fmt)],
                "path": relative(path, out),
                "convert_flag": CONVERT_FLAGS[fmt],
                "description": case.description,
                "mask_source": {"embedding": "Embedding(mask_zero=True)",
                                "masking": f"Masking(mask_value={case.mask_value})",
                                "explicit": "explicit mask= (a bool model input)"}[case.source],
                "mask_mode": case.mask_mode,
                "opset": OPSET,
                "inputs": [{"name": name, "onnx_name": None, "dtype": dtype, "shape": list(shape)}
                           for name, dtype, shape in input_specs(case)],
                "outputs": [{"name": f"output_{i}", "onnx_name": None} for i in range(n_outputs)],
                "masked_layers": case.masked_layers,
                "expected_ops": {"LSTM": len(case.lstm_directions), "Loop": 0,
                                 "lstm_directions": sorted(case.lstm_directions)},
                "tolerance": TOLERANCE,
                "batches": batches,
                "must_fail": must_fail,
            })

    # 2. convert each entry as the tests do, record tf2onnx's names, check it
    failures = 0
    tmp = os.path.join(out, f".tmp-{flavour}")
    os.makedirs(tmp, exist_ok=True)
    try:
        for entry in entries:
            if "save_failed" in entry:
                failures += 1
                continue
            output = os.path.join(tmp, entry["name"].replace("/", "__") + ".onnx")
            try:
                with quiet():
                    report = check_corpus.convert_library(entry, out, output)
                fill_names(entry, output)
                check_corpus.check_report(entry, report)
                worst = check_corpus.check_onnx(entry, out, output)
            except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
                failures += 1
                entry["generation_check_failed"] = f"{type(error).__name__}: {error}"
                print(f"  FAILED {entry['name']}: {type(error).__name__}: {error}", flush=True)
            else:
                print(f"  ok {entry['name']}: max |onnx - keras| = {worst:.2g}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    update_manifest(out, flavour, entries, not_included, versions(flavour))
    print(f"{flavour}: {len(entries)} entries, {failures} failed", flush=True)
    return 1 if failures else 0


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


def _no_quiet():
    return contextlib.nullcontext()


# ------------------------------------------------------------------ manifest and README

def update_manifest(out: str, flavour: str, entries: list, not_included: list, stack: dict) -> None:
    """Replace ``flavour``'s entries in manifest.json (the other flavour's stay), rewrite README.md."""
    path = os.path.join(out, "manifest.json")
    previous = {}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                previous = json.load(handle)
        except ValueError:
            previous = {}
    kept = [e for e in previous.get("entries", []) if e.get("flavour") != flavour]
    generated_with = {k: v for k, v in previous.get("generated_with", {}).items() if k != flavour}
    generated_with[flavour] = stack
    skipped = [e for e in previous.get("entries_not_included", []) if e.get("flavour") != flavour] + not_included
    case_order = {case.name: i for i, case in enumerate(CASES)}
    format_order = {fmt: i for i, fmt in enumerate(("saved_model", "keras", "h5"))}

    def order(entry):
        return (FLAVOURS.index(entry["flavour"]), case_order.get(entry.get("case"), len(CASES)),
                format_order.get(entry.get("format"), 9), entry["name"])

    manifest = {
        "format_version": 1,
        "about": "Masked Keras LSTM models for masked_lstm_rewriter (a tf2onnx plugin): each entry is one "
                 "saved model in one format; converting it with the plugin (mask_mode as given) must give "
                 "the expected ONNX ops (native LSTM, no Loop) and reproduce the stored Keras outputs of "
                 "every batch at every position within the tolerance; a 'post' entry's must_fail batch must "
                 "fail at inference with the guard's message. Paths are relative to this file's directory. "
                 "npz keys are the inputs' and outputs' 'name'; 'onnx_name' is what tf2onnx calls them; "
                 "'outputs' lists the ONNX outputs in order.",
        "regenerate": "python tools/make_corpus.py",
        "check": "python tools/check_corpus.py (or MLR_KERAS=keras3|tf_keras python -m pytest tests/test_corpus.py)",
        "tolerance": TOLERANCE,
        "guard_message": GUARD_TEXT,
        "formats": {f: list(FORMATS[f]) for f in FLAVOURS},
        "formats_not_included": NOT_INCLUDED,
        "entries_not_included": sorted(skipped, key=lambda e: (FLAVOURS.index(e["flavour"]),
                                                               case_order.get(e["case"], len(CASES)), e["format"])),
        "byte_stability": BYTE_STABILITY,
        "generated_with": {k: generated_with[k] for k in FLAVOURS if k in generated_with},
        "entries": sorted(kept + entries, key=order),
    }
    write_text(path, json.dumps(manifest, indent=1) + "\n")
    write_text(os.path.join(out, "README.md"), readme(manifest))


def readme(manifest: dict) -> str:
    entries = [e for e in manifest["entries"] if "case" in e]
    lines = [
        "# Regression corpus (generated)",
        "",
        "Generated by `tools/make_corpus.py`; do not edit by hand. Small masked Keras LSTM models, saved in",
        "the formats `python -m tf2onnx.convert` loads, with input batches and the Keras outputs for them.",
        "`manifest.json` describes every entry: the model's path and format, its `mask_mode`, the input and",
        "output names (npz keys and ONNX names; `outputs` in ONNX order), the expected ops (native `LSTM`",
        "nodes and their directions, `Loop` = 0), the tolerance, and for `\"post\"` entries a batch that",
        "must fail with the guard's message (\"not post-padded\").",
        "",
        "```bash",
        "python tools/check_corpus.py          # every entry, both Keras flavours, library and command line",
        "MLR_KERAS=tf_keras python -m pytest tests/test_corpus.py -q   # the same as tests, one flavour",
        "python tools/make_corpus.py           # regenerate (both flavours)",
        "```",
        "",
        "| case | model | mask_mode | LSTM nodes | keras3 | tf_keras |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    seen = []
    for entry in entries:
        if entry["case"] not in seen:
            seen.append(entry["case"])
    for case in seen:
        rows = [e for e in entries if e["case"] == case]
        first = rows[0]
        formats = {f: ", ".join(e["format"] for e in rows if e["flavour"] == f) or "-" for f in FLAVOURS}
        nodes = ", ".join(first["expected_ops"]["lstm_directions"])
        lines.append(f"| `{case}` | {first['description'].replace('|', '/')} | `{first['mask_mode']}` | {nodes} | "
                     f"{formats['keras3']} | {formats['tf_keras']} |")
    lines += ["", "How each format is saved:", ""]
    for (flavour, fmt), how in HOW_SAVED.items():
        if fmt in manifest["formats"].get(flavour, ()):
            lines.append(f"- {flavour} `{fmt}`: {how}")
    lines += ["", "Formats not included, and why:", ""]
    for item in manifest["formats_not_included"]:
        lines.append(f"- {item['flavour']} `{item['format']}`: {item['reason']}")
    if manifest["entries_not_included"]:
        lines += ["", "Case and format pairs left out, and why:", ""]
        for item in manifest["entries_not_included"]:
            lines.append(f"- {item['flavour']} `{item['case']}` `{item['format']}`: {item['reason']}")
    lines += ["", "Byte stability: " + manifest["byte_stability"], "", "Generated with:", ""]
    for flavour, stack in manifest["generated_with"].items():
        lines.append(f"- {flavour}: " + ", ".join(f"{k} {v}" for k, v in stack.items()))
    failed = [e["name"] for e in manifest["entries"] if "generation_check_failed" in e or "save_failed" in e]
    if failed:
        lines += ["", "**Entries that failed their check when generated:** " + ", ".join(failed)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ command line

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=FLAVOURS + ("both",), default="both",
                        help="flavour to generate (default: both, each in its own process)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"corpus directory (default: {DEFAULT_OUT})")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names (default: all); the flavour's other cases are removed "
                             "from --out and its manifest, so use it with --out elsewhere")
    parser.add_argument("--formats", default="",
                        help="comma-separated formats to write instead of the flavour's own (saved_model, keras, "
                             "h5): to try a format, with --out elsewhere")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's and tf2onnx's own messages")
    args = parser.parse_args(argv)
    args.out = os.path.abspath(args.out)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {[c.name for c in CASES]}")
    args.formats = [f for f in args.formats.split(",") if f]
    if set(args.formats) - set(MODEL_FILES):
        parser.error(f"--formats takes {sorted(MODEL_FILES)}")
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.keras != "both":
        start = time.monotonic()
        code = generate_flavour(args.keras, args)
        print(f"{args.keras}: done in {time.monotonic() - start:.0f}s", flush=True)
        return code
    rest = [a for i, a in enumerate(argv) if a != "--keras" and not a.startswith("--keras=")
            and (i == 0 or argv[i - 1] != "--keras")]
    codes = []
    for flavour in FLAVOURS:
        env = dict(os.environ)
        env["MLR_KERAS"] = flavour
        env["TF_USE_LEGACY_KERAS"] = "1" if flavour == "tf_keras" else "0"
        command = [sys.executable, os.path.abspath(__file__), "--keras", flavour] + rest
        print(f"=== {' '.join(command[1:])}", flush=True)
        codes.append(subprocess.call(command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    print(f"corpus written to {args.out}" + ("" if not any(codes) else f" WITH FAILURES (exit codes {codes})"))
    return 0 if not any(codes) else 1


if __name__ == "__main__":
    sys.exit(main())
