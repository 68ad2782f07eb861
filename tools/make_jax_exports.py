#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate ``testdata/onnx_in/jax/``: recurrent Keras models exported to ONNX by Keras 3 on the
JAX backend (``model.export(path, format="onnx")``, which goes through jax2onnx and writes every
recurrent layer as an ONNX ``Loop`` whose body masks with ``Where``).

This does NOT run in the project's venv (TensorFlow): it needs its own, with JAX::

    python3.11 -m venv /tmp/jaxvenv
    /tmp/jaxvenv/bin/pip install "keras==3.15.*" "jax[cpu]" "jax2onnx==0.17.*" onnx onnxruntime numpy
    /tmp/jaxvenv/bin/python tools/make_jax_exports.py [--out testdata/onnx_in/jax] [--cases a,b]

(about 50 s and 1.1 GB; on Python 3.11 pip resolves jax/jaxlib 0.10.2: JAX 0.11 and later need
Python 3.12). The script sets ``KERAS_BACKEND=jax`` itself before importing Keras; a full run
takes about 40 s on two cores and exits non-zero if a case that should export does not, or if
onnxruntime differs from Keras by more than ``--tolerance``.

For each case it builds a small Keras functional model (fixed seeds; every weight redrawn from
``uniform(-0.5, 0.5)`` so that no bias is zero), exports it and writes

* ``<case>.onnx``: the exported file, as jax2onnx wrote it;
* ``<case>.npz``: for each batch ``B`` (``post``: rows of different lengths, post-padded, with a
  full row and, where the mask source allows it, an all-padding row; ``nonpost``, masked cases
  only: a pre-padded row and a row with a hole in the middle; ``rand``/``post`` for unmasked
  cases), ``B.in.<onnx input name>`` for every graph input, ``B.out.<k>`` for the k-th graph
  output (graph-output order) holding Keras's own output on the JAX backend (the oracle), and,
  for masked cases, ``B.mask``: the boolean [batch, time] mask the recurrent layer sees
  (informative; not a graph input unless the case feeds it as one).

and ``manifest.json`` listing every case (layer and options, mask source, static/dynamic shapes,
ONNX input/output names, the npz keys, whether the export succeeded or the one-line error, and
the largest |onnxruntime - Keras| over every position of every batch). Cases that are expected to
fail (``go_backwards``, ``Bidirectional``: jax2onnx says "Reverse scan is not supported") are
attempted only to record the error. Files are byte-stable across runs on the same stack (npz with
fixed zip timestamps; the ONNX bytes come from jax2onnx, which names nodes deterministically).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import traceback
import zipfile

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "testdata", "onnx_in", "jax")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
VOCAB, EMBED, FEATURES, UNITS = 20, 4, 3, 3
SEED = 1234


# ------------------------------------------------------------------ byte-stable npz

def write_npz(path, arrays):
    """np.savez, but byte-stable: fixed zip timestamps, stored, in the given order."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, buffer.getvalue())


# ------------------------------------------------------------------ batches

# Row lengths / masks. 1 = valid step, 0 = padding.
POST_LENGTHS = {  # (batch, time) -> row lengths (post-padded); a full row and an empty row
    (5, 6): [6, 3, 0, 1, 4],
    (2, 6): [6, 0],
}
NONPOST_MASKS = {
    (4, 7): [[0, 0, 1, 1, 1, 1, 1],   # pre-padded
             [1, 1, 0, 0, 1, 1, 0],   # hole in the middle (and a trailing pad)
             [1, 1, 1, 1, 1, 1, 1],   # full
             [0, 1, 1, 0, 1, 0, 0]],  # leading pad, hole, trailing pads
    (4, 6): [[0, 0, 1, 1, 1, 1],
             [1, 1, 0, 0, 1, 0],
             [1, 1, 1, 1, 1, 1],
             [0, 1, 0, 1, 1, 0]],
    (2, 6): [[0, 0, 1, 1, 1, 1],
             [1, 1, 0, 0, 1, 1]],
}


def post_mask(batch, time):
    lengths = POST_LENGTHS[(batch, time)]
    return np.array([[t < n for t in range(time)] for n in lengths], dtype=bool)


def nonpost_mask(batch, time):
    return np.array(NONPOST_MASKS[(batch, time)], dtype=bool)


def tokens_for(mask, rng):
    """int32 token ids in 1..VOCAB-1 where valid, 0 (Embedding's mask_zero padding) elsewhere."""
    ids = rng.integers(1, VOCAB, size=mask.shape).astype(np.int32)
    return np.where(mask, ids, 0).astype(np.int32)


def features_for(mask, rng, zero_pad):
    """float32 [batch, time, FEATURES] in (-1, 1) (never exactly 0); padded steps are all-zero
    (what Masking(mask_value=0.0) masks) when zero_pad, else random too (an explicit mask)."""
    x = rng.uniform(-1.0, 1.0, size=mask.shape + (FEATURES,)).astype(np.float32)
    x = np.where(np.abs(x) < 1e-3, np.float32(0.5), x)
    if zero_pad:
        x = np.where(mask[..., None], x, np.float32(0.0)).astype(np.float32)
    return x


# ------------------------------------------------------------------ cases

class Case:
    """One model to export. ``build()`` returns (model, feeds), feeds: {batch: (inputs, mask)}
    with inputs in the order of model.inputs and mask the [batch, time] mask the layer sees."""

    def __init__(self, name, layer, options, mask_source, build, *, shapes="dynamic", signature=None,
                 note="", expect_failure=False):
        self.name, self.layer, self.options = name, layer, options
        self.mask_source, self.build, self.shapes = mask_source, build, shapes
        self.signature = signature  # passed to model.export(input_signature=...) when set
        self.note, self.expect_failure = note, expect_failure


def rnn_layer(kind, **kw):
    if kind == "LSTM":
        return layers.LSTM(UNITS, **kw)
    if kind == "GRU":
        return layers.GRU(UNITS, **kw)
    if kind == "SimpleRNN":
        return layers.SimpleRNN(UNITS, **kw)
    raise ValueError(kind)


def embedding_case(kind, *, static=False, **kw):
    """Input(tokens) -> Embedding(mask_zero=True) -> kind(**kw)."""
    def build(rng):
        if static:
            tokens = keras.Input((6,), batch_size=2, dtype="int32", name="tokens")
        else:
            tokens = keras.Input((None,), dtype="int32", name="tokens")
        x = layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
        y = rnn_layer(kind, name=kind.lower(), **kw)(x)
        model = keras.Model(tokens, y)
        shapes = {"post": (2, 6), "nonpost": (2, 6)} if static else {"post": (5, 6), "nonpost": (4, 7)}
        feeds = {}
        for batch, shape in shapes.items():
            mask = post_mask(*shape) if batch == "post" else nonpost_mask(*shape)
            feeds[batch] = ([tokens_for(mask, rng)], mask)
        return model, feeds
    return build


def masking_case(kind, **kw):
    """Input(float features) -> Masking(mask_value=0.0) -> kind(**kw)."""
    def build(rng):
        x_in = keras.Input((None, FEATURES), dtype="float32", name="features")
        x = layers.Masking(mask_value=0.0, name="masking")(x_in)
        y = rnn_layer(kind, name=kind.lower(), **kw)(x)
        model = keras.Model(x_in, y)
        feeds = {}
        for batch, shape in {"post": (5, 6), "nonpost": (4, 7)}.items():
            mask = post_mask(*shape) if batch == "post" else nonpost_mask(*shape)
            feeds[batch] = ([features_for(mask, rng, zero_pad=True)], mask)
        return model, feeds
    return build


def explicit_mask_case(kind, *, initial_state=False, time=None, **kw):
    """Inputs (float features, bool mask[, h0[, c0]]) -> kind(x, mask=m[, initial_state=...]).
    With time=None both inputs have a dynamic time axis, which model.export cannot trace: Keras
    names every None axis of every input apart (dim_0_1 for x, dim_1_1 for the mask) and the
    layer's lax.scan wants equal leading axes. With time=6 the time axis is static."""
    def build(rng):
        x_in = keras.Input((time, FEATURES), dtype="float32", name="features")
        m_in = keras.Input((time,), dtype="bool", name="mask")
        inputs = [x_in, m_in]
        layer = rnn_layer(kind, name=kind.lower(), **kw)
        if initial_state:
            states = [keras.Input((UNITS,), dtype="float32", name=n)
                      for n in (["h0", "c0"] if kind == "LSTM" else ["h0"])]
            inputs += states
            y = layer(x_in, mask=m_in, initial_state=states)
        else:
            y = layer(x_in, mask=m_in)
        model = keras.Model(inputs, y)
        feeds = {}
        shapes = {"post": (5, 6), "nonpost": (4, 7 if time is None else time)}
        for batch, shape in shapes.items():
            mask = post_mask(*shape) if batch == "post" else nonpost_mask(*shape)
            arrays = [features_for(mask, rng, zero_pad=False), mask]
            if initial_state:
                arrays += [rng.uniform(-0.9, 0.9, size=(shape[0], UNITS)).astype(np.float32)
                           for _ in inputs[2:]]
            feeds[batch] = (arrays, mask)
        return model, feeds
    return build


def stacked_case():
    """Embedding(mask_zero=True) -> LSTM(return_sequences) -> GRU(return_sequences)."""
    def build(rng):
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        x = layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
        x = layers.LSTM(UNITS, return_sequences=True, name="lstm")(x)
        y = layers.GRU(UNITS + 1, return_sequences=True, name="gru")(x)
        model = keras.Model(tokens, y)
        feeds = {}
        for batch, shape in {"post": (5, 6), "nonpost": (4, 7)}.items():
            mask = post_mask(*shape) if batch == "post" else nonpost_mask(*shape)
            feeds[batch] = ([tokens_for(mask, rng)], mask)
        return model, feeds
    return build


def plain_case(kind, *, static=False, **kw):
    """Input(float features) -> kind(**kw), no mask. Batches: ``post`` (zero post-padded rows, the
    zeros being ordinary data here) and ``rand`` (random features, another batch and time)."""
    def build(rng):
        if static:
            x_in = keras.Input((6, FEATURES), batch_size=2, dtype="float32", name="features")
        else:
            x_in = keras.Input((None, FEATURES), dtype="float32", name="features")
        y = rnn_layer(kind, name=kind.lower(), **kw)(x_in)
        model = keras.Model(x_in, y)
        shapes = {"post": (2, 6), "rand": (2, 6)} if static else {"post": (5, 6), "rand": (3, 8)}
        feeds = {}
        for batch, shape in shapes.items():
            if batch == "post":
                x = features_for(post_mask(*shape), rng, zero_pad=True)
            else:
                x = features_for(np.ones(shape, dtype=bool), rng, zero_pad=False)
            feeds[batch] = ([x], None)
        return model, feeds
    return build


def bidirectional_case():
    def build(rng):
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        x = layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(tokens)
        y = layers.Bidirectional(layers.LSTM(UNITS, return_sequences=True), name="bidirectional")(x)
        model = keras.Model(tokens, y)
        mask = post_mask(5, 6)
        return model, {"post": ([tokens_for(mask, rng)], mask)}
    return build


CASES = [
    Case("emb_lstm_seq", "LSTM", {"return_sequences": True}, "Embedding(mask_zero=True)",
         embedding_case("LSTM", return_sequences=True)),
    Case("emb_gru_seq", "GRU", {"return_sequences": True, "reset_after": True},
         "Embedding(mask_zero=True)", embedding_case("GRU", return_sequences=True, reset_after=True)),
    Case("emb_gru_v1_seq", "GRU", {"return_sequences": True, "reset_after": False},
         "Embedding(mask_zero=True)", embedding_case("GRU", return_sequences=True, reset_after=False)),
    Case("emb_rnn_seq", "SimpleRNN", {"return_sequences": True}, "Embedding(mask_zero=True)",
         embedding_case("SimpleRNN", return_sequences=True)),
    Case("emb_lstm_last", "LSTM", {"return_sequences": False}, "Embedding(mask_zero=True)",
         embedding_case("LSTM", return_sequences=False)),
    Case("emb_lstm_state", "LSTM", {"return_sequences": True, "return_state": True},
         "Embedding(mask_zero=True)", embedding_case("LSTM", return_sequences=True, return_state=True),
         note="outputs: sequence, h, c"),
    Case("masking_lstm_seq", "LSTM", {"return_sequences": True}, "Masking(mask_value=0.0)",
         masking_case("LSTM", return_sequences=True)),
    Case("explicit_mask_gru_seq", "GRU", {"return_sequences": True, "reset_after": True},
         "explicit bool model input (layer(x, mask=m))",
         explicit_mask_case("GRU", return_sequences=True), expect_failure=True,
         note="dynamic time on two inputs: model.export names them dim_0_1 and dim_1_1 and "
              "lax.scan refuses unequal leading axes; see explicit_mask_gru_seq_t6"),
    Case("explicit_mask_gru_seq_t6", "GRU", {"return_sequences": True, "reset_after": True},
         "explicit bool model input (layer(x, mask=m))",
         explicit_mask_case("GRU", time=6, return_sequences=True), shapes="static time 6, dynamic batch",
         note="Input((6, 3)) and Input((6,)): the time axis is static so that the export works"),
    Case("stacked_lstm_gru", "LSTM+GRU",
         {"lstm": {"units": UNITS, "return_sequences": True},
          "gru": {"units": UNITS + 1, "return_sequences": True, "reset_after": True}},
         "Embedding(mask_zero=True)", stacked_case()),
    Case("plain_lstm_seq", "LSTM", {"return_sequences": True}, "none", plain_case("LSTM", return_sequences=True)),
    Case("plain_gru_seq", "GRU", {"return_sequences": True, "reset_after": True}, "none",
         plain_case("GRU", return_sequences=True)),
    Case("plain_gru_v1_seq", "GRU", {"return_sequences": True, "reset_after": False}, "none",
         plain_case("GRU", return_sequences=True, reset_after=False),
         note="reset_after=False takes Keras's generic rnn loop; plain_gru_seq (reset_after=True, "
              "no mask) takes keras.backend.jax.rnn.gru, which projects the inputs before the loop"),
    Case("plain_gru_nobias_seq", "GRU", {"return_sequences": True, "reset_after": True, "use_bias": False}, "none",
         plain_case("GRU", return_sequences=True, use_bias=False),
         note="without a bias, the export adds zeros made by ConstantOfShape where a bias would be"),
    Case("plain_rnn_last", "SimpleRNN", {"return_sequences": False}, "none",
         plain_case("SimpleRNN", return_sequences=False)),
    Case("init_state_lstm_seq", "LSTM", {"return_sequences": True, "initial_state": "model inputs h0, c0"},
         "explicit bool model input (layer(x, mask=m, initial_state=[h0, c0]))",
         explicit_mask_case("LSTM", initial_state=True, return_sequences=True), expect_failure=True,
         note="fails as explicit_mask_gru_seq does; see init_state_lstm_seq_t6"),
    Case("init_state_lstm_seq_t6", "LSTM", {"return_sequences": True, "initial_state": "model inputs h0, c0"},
         "explicit bool model input (layer(x, mask=m, initial_state=[h0, c0]))",
         explicit_mask_case("LSTM", initial_state=True, time=6, return_sequences=True),
         shapes="static time 6, dynamic batch",
         note="Input((6, 3)), Input((6,)), Input((3,)) x2: the time axis is static so that the export works"),
    Case("static_emb_lstm_seq", "LSTM", {"return_sequences": True}, "Embedding(mask_zero=True)",
         embedding_case("LSTM", static=True, return_sequences=True), shapes="static batch 2, time 6",
         signature=lambda: [keras.InputSpec(shape=(2, 6), dtype="int32", name="tokens")],
         note="Input((6,), batch_size=2), exported with input_signature=[InputSpec((2, 6))] "
              "(without it model.export makes the batch axis dynamic whatever the Input says)"),
    Case("static_emb_lstm_last", "LSTM", {"return_sequences": False}, "Embedding(mask_zero=True)",
         embedding_case("LSTM", static=True, return_sequences=False), shapes="static batch 2, time 6",
         signature=lambda: [keras.InputSpec(shape=(2, 6), dtype="int32", name="tokens")],
         note="as static_emb_lstm_seq, return_sequences=False"),
    Case("static_plain_gru_last", "GRU", {"return_sequences": False, "reset_after": True}, "none",
         plain_case("GRU", static=True, return_sequences=False), shapes="static batch 2, time 6",
         signature=lambda: [keras.InputSpec(shape=(2, 6, FEATURES), dtype="float32", name="features")],
         note="Input((6, 3), batch_size=2), exported with input_signature=[InputSpec((2, 6, 3))]"),
    Case("emb_lstm_backwards", "LSTM", {"return_sequences": True, "go_backwards": True},
         "Embedding(mask_zero=True)", embedding_case("LSTM", return_sequences=True, go_backwards=True),
         expect_failure=True, note="attempted only to record the error"),
    Case("emb_bidirectional_lstm", "Bidirectional(LSTM)", {"return_sequences": True, "merge_mode": "concat"},
         "Embedding(mask_zero=True)", bidirectional_case(), expect_failure=True,
         note="attempted only to record the error"),
]


# ------------------------------------------------------------------ export and check

def randomize_weights(model, seed):
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(w.dtype) for w in weights])


def keras_outputs(model, inputs):
    out = model(inputs if len(inputs) > 1 else inputs[0], training=False)
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o) for o in out]


def one_line(exc):
    """The error on one line: Keras wraps a layer's error as 'Exception encountered when calling
    X.call().' + the cause + the arguments; keep the first two, drop colour codes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("Arguments received"):
            break
        if line.strip():
            lines.append(line.strip())
    return f"{type(exc).__name__}: " + " ".join(lines)


def run_case(case, index, out_dir):
    import onnx
    import onnxruntime as ort

    keras.utils.set_random_seed(SEED + index)
    rng = np.random.default_rng(SEED + index)
    model, feeds = case.build(rng)
    randomize_weights(model, SEED + 100 + index)
    first = next(iter(feeds.values()))[0]
    keras_outputs(model, first)  # a functional model must have been called before export

    entry = {
        "name": case.name,
        "layer": case.layer,
        "options": case.options,
        "units": UNITS,
        "mask_source": case.mask_source,
        "shapes": case.shapes,
        "keras_inputs": [{"name": t.name, "shape": list(t.shape), "dtype": str(t.dtype)}
                         for t in model.inputs],
    }
    if case.note:
        entry["note"] = case.note
    onnx_path = os.path.join(out_dir, case.name + ".onnx")
    try:
        kwargs = {"input_signature": case.signature()} if case.signature else {}
        model.export(onnx_path, format="onnx", verbose=False, **kwargs)
    except Exception as exc:  # record and move on
        entry.update(export_ok=False, error=one_line(exc), expected_failure=case.expect_failure)
        if os.path.exists(onnx_path):
            os.remove(onnx_path)
        return entry
    entry["export_ok"] = True
    entry["onnx"] = case.name + ".onnx"
    entry["npz"] = case.name + ".npz"
    proto = onnx.load(onnx_path)
    initializers = {i.name for i in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    if len(graph_inputs) != len(model.inputs):
        raise RuntimeError(f"{case.name}: {len(graph_inputs)} graph inputs for {len(model.inputs)} Keras inputs")

    def dims(value_info):
        return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]

    entry["onnx_inputs"] = [{"name": i.name, "shape": dims(i),
                             "dtype": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name}
                            for i in graph_inputs]
    entry["onnx_outputs"] = [{"name": o.name, "shape": dims(o),
                              "dtype": onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type).name}
                             for o in proto.graph.output]
    entry["opset"] = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    entry["loops"] = sum(1 for n in proto.graph.node if n.op_type == "Loop")

    options = ort.SessionOptions()
    options.log_severity_level = 3  # jax2onnx leaves unused initializers in the Loop bodies
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    arrays, batches, max_diff = {}, {}, 0.0
    for batch, (inputs, mask) in feeds.items():
        expected = keras_outputs(model, inputs)
        if len(expected) != len(proto.graph.output):
            raise RuntimeError(f"{case.name}: {len(proto.graph.output)} graph outputs for {len(expected)} Keras outputs")
        feed = {}
        for gi, array in zip(graph_inputs, inputs):
            arrays[f"{batch}.in.{gi.name}"] = array
            feed[gi.name] = array
        for k, array in enumerate(expected):
            arrays[f"{batch}.out.{k}"] = array
        if mask is not None:
            arrays[f"{batch}.mask"] = mask
        got = session.run(None, feed)
        diffs = [float(np.max(np.abs(g - e))) if e.size else 0.0 for g, e in zip(got, expected)]
        if any(g.shape != e.shape for g, e in zip(got, expected)):
            raise RuntimeError(f"{case.name}/{batch}: shapes {[g.shape for g in got]} vs {[e.shape for e in expected]}")
        max_diff = max([max_diff] + diffs)
        batches[batch] = {
            "inputs": [f"{batch}.in.{gi.name}" for gi in graph_inputs],
            "outputs": [f"{batch}.out.{k}" for k in range(len(expected))],
            "mask": f"{batch}.mask" if mask is not None else None,
            "output_shapes": [list(e.shape) for e in expected],
            "max_abs_diff_onnxruntime": diffs,
        }
    write_npz(os.path.join(out_dir, case.name + ".npz"), arrays)
    entry["batches"] = batches
    entry["max_abs_diff_onnxruntime"] = max_diff
    return entry


def compact_json(value, indent=0):
    """json.dumps(indent=1), but a value whose JSON fits in 100 characters stays on one line."""
    text = json.dumps(value)
    if not isinstance(value, (list, dict)) or len(text) <= 100:
        return text
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {compact_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + compact_json(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="exit non-zero when onnxruntime differs from Keras by more")
    args = parser.parse_args(argv)

    import jax
    import jax2onnx  # noqa: F401  (only to record its version)
    import onnx
    import onnxruntime as ort
    from importlib.metadata import version

    wanted = [c for c in args.cases.split(",") if c]
    unknown = set(wanted) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown cases: {sorted(unknown)}")
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    old = {}
    if wanted and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            old = {e["name"]: e for e in json.load(f)["cases"]}

    entries, failed = [], False
    for index, case in enumerate(CASES):
        if wanted and case.name not in wanted:
            if case.name in old:
                entries.append(old[case.name])
            continue
        print(f"[{case.name}] ...", flush=True)
        try:
            entry = run_case(case, index, args.out)
        except Exception:  # a bug here, not an export failure
            traceback.print_exc()
            failed = True
            continue
        if entry["export_ok"]:
            print(f"[{case.name}] exported; max |ort - keras| = {entry['max_abs_diff_onnxruntime']:.3g}")
            if entry["max_abs_diff_onnxruntime"] > args.tolerance:
                failed = True
        else:
            print(f"[{case.name}] export failed: {entry['error']}")
            failed |= not case.expect_failure
        entries.append(entry)

    manifest = {
        "about": "Recurrent Keras models exported by Keras 3 on the JAX backend "
                 "(model.export(path, format='onnx') -> jax2onnx); regenerate with "
                 "tools/make_jax_exports.py (see its docstring). Keys of <name>.npz: "
                 "'<batch>.in.<onnx input name>', '<batch>.out.<k>' (k-th graph output, Keras's "
                 "output on the JAX backend), '<batch>.mask' (the [batch, time] mask the layer "
                 "sees; masked cases only). See STRUCTURE.md for the Loop layout.",
        "versions": {
            "python": ".".join(map(str, sys.version_info[:3])),
            "keras": keras.__version__, "jax": jax.__version__, "jaxlib": version("jaxlib"),
            "jax2onnx": version("jax2onnx"), "onnx": onnx.__version__,
            "onnxruntime": ort.__version__, "numpy": np.__version__,
        },
        "seed": SEED,
        "weights": "uniform(-0.5, 0.5), numpy default_rng(seed + 100 + case index)",
        "cases": entries,
    }
    with open(manifest_path, "w") as f:
        f.write(compact_json(manifest) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
