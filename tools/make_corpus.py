#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerate the regression corpus ``masked_lstm_rewriter/corpus/data/`` from code.

    .venv/bin/python tools/make_corpus.py                    # both flavours, every case (the default)
    .venv/bin/python tools/make_corpus.py --ops-only         # after an emitter change: re-record the ops
    .venv/bin/python tools/make_corpus.py --cases gru_reset_after,stacked_mixed   # (re)make some cases
    .venv/bin/python tools/make_corpus.py --keras tf_keras   # one flavour; the other's entries stay
    .venv/bin/python tools/make_corpus.py --out /tmp/probe --formats h5 --keras keras3   # try a format
    .venv/bin/python tools/make_corpus.py --onnx             # only the ONNX-file entries, from testdata/onnx_in
    .venv/bin/python tools/make_corpus.py --onnx --ops-only  # only their expected ops

Each case is a small masked Keras model (LSTM, GRU, SimpleRNN; 3-8 units, up to 7 steps), or one
without a mask of a layer stock tf2onnx leaves as a Loop (``unmasked_*``: source ``"none"``), built
with fixed seeds (``keras.utils.set_random_seed``; every weight then drawn from
``numpy.random.default_rng``, as ``tests/kerasutil.randomize_weights`` does, so no bias is zero).
For each Keras flavour (Keras 3, and tf_keras with ``TF_USE_LEGACY_KERAS=1``; they cannot share a
process, so ``--keras both`` runs this script once per flavour as a subprocess) it writes, under
``<corpus>/<flavour>/<case>/``:

* the model in the formats the case asks for, among those ``python -m tf2onnx.convert`` loads
  (``HOW_SAVED``): a SavedModel (Keras 3: ``model.export(format="tf_saved_model")``; tf_keras:
  ``tf.saved_model.save`` of a ``tf.Module`` holding the weights and a serving ``tf.function``
  with named inputs), ``model.keras`` (Keras 3), ``model.h5`` (tf_keras). A case with a
  ``signature`` (a fixed batch size or number of steps) builds its model with those static input
  shapes, so that every format converts with them;
* input batches (``batchN_inputs.npz``: several rows, mixed lengths with empty and full rows;
  pre-padded and holed masks for ``mask_mode="any"`` cases) and the Keras outputs for them
  (``batchN_expected.npz``, computed by the Keras model in memory);
* for ``mask_mode="post"`` cases with a mask, ``not_post_padded_inputs.npz``: a batch that the
  converted model must refuse with the guard's message ("not post-padded"). A case without a mask
  gets no guard: its batches are random features, every step valid.

Then it converts every entry the way the corpus check does (``tf2onnx.convert.main()`` with
``masked_lstm_rewriter.enable(mask_mode)``, the checkout's plugin), records the ONNX input and
output names tf2onnx gives and the native recurrent nodes the plugin made (``expected_ops``: never
written by hand, so that a change to the emitter needs only ``--ops-only``), checks the entry
(``masked_lstm_rewriter.corpus.check``) and writes ``manifest.json`` and ``README.md``
(``masked_lstm_rewriter.corpus.writer`` writes the files and entries). It exits
non-zero when a model does not convert, a layer stays a Loop or a check fails (the files are
written anyway, to look at).

A case whose ``formats`` name no format for a flavour has no entry in it (the unmasked layers that
stock tf2onnx already makes native in tf_keras). A case whose model is saved otherwise than by
``save_model`` (say, a graph traced through Keras's cuDNN kernel, with the Keras model of the
generic path giving the expected outputs) names its own ``save`` function and ``saved_with`` text.

Cases marked ``pending`` (a capability not on this branch yet, such as static-shape signatures)
are made only when ``--cases`` names them; once the capability lands, drop the mark and run this.

ONNX-file entries (``ONNX_CASES``): files of ``testdata/onnx_in/`` whose recurrent layers are Loops,
as stock tf2onnx and Keras 3's JAX-backend export wrote them, copied into ``<corpus>/onnx/`` with
batches and expected outputs (the original file's on onnxruntime, or Keras's stored with a JAX
export), one entry per mask mode; their expected ops are recorded from ``rewrite_onnx``
(``masked_lstm_rewriter.corpus.onnx_writer``). ``--onnx`` (re)makes them alone: every other file and
entry stays byte for byte. A full run (both flavours, no ``--cases``) makes them last, in a process
of their own.

Byte stability: the manifest, the README, every ``.npz`` (written with fixed zip timestamps),
every ``.h5`` and every ``.keras`` (normalised: fixed zip timestamps and ``date_saved``,
``shared_object_id`` renumbered) are byte-identical across runs on the same machine and stack.
SavedModels are not (Keras 3 orders the variables differently each run; tf_keras's LSTM embeds a
random uuid); see ``BYTE_STABILITY``. ``--ops-only`` rewrites only the manifest and the README.
The ONNX-file entries' files are byte-stable (copies and ``.npz``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Optional

# the checkout's plugin first on sys.path (tools/ is, as this runs as a script): the one whose output
# the manifest records
from toolutil import ROOT

# pylint: disable=wrong-import-order
from masked_lstm_rewriter import flavours
from masked_lstm_rewriter.corpus import check, manifest, onnx_writer, ops, writer
from masked_lstm_rewriter.corpus.onnx_writer import OnnxCase
from masked_lstm_rewriter.corpus.quiet import quiet_loggers, quiet_stderr
from masked_lstm_rewriter.corpus.writer import normalise_keras_zip, relative, write_npz

DEFAULT_OUT = manifest.DATA_DIR
FLAVOURS = flavours.FLAVOURS
OPSET = 15
TOLERANCE = 1e-5
GUARD_TEXT = "not post-padded"
VOCAB, EMBED, FEATURES = 40, 5, 3

# the formats a flavour can be saved in, all loadable by `python -m tf2onnx.convert` (tf2onnx 1.17)
FORMATS = {"keras3": ("saved_model", "keras"), "tf_keras": ("h5", "saved_model")}
# the formats of most cases: a tf_keras SavedModel is large (see NOT_INCLUDED), an .h5 is not
DEFAULT_FORMATS = {"keras3": ("saved_model", "keras"), "tf_keras": ("h5",)}
SMALL_FORMATS = {"keras3": ("saved_model",), "tf_keras": ("h5",)}
# the unmasked layers stock tf2onnx leaves as a Loop in Keras 3 only (tf_keras's own is native)
KERAS3_ONLY = {"keras3": ("saved_model",), "tf_keras": ()}
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
               "LSTM registers its forward and gradient functions in the graph), so only some LSTM cases "
               "have one; every case has an .h5"},
    {"flavour": "keras3", "format": "keras for every case",
     "reason": "the GRU and SimpleRNN cases other than gru_reset_after, bidirectional_gru and stacked_mixed "
               "are saved as SavedModels only: the .keras path is the same graph, and each entry adds "
               "conversions to every run"},
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
    source: str                      # mask source: embedding | masking | explicit | none (no mask: unmasked)
    layers: Callable                 # keras -> [layers], applied in order
    mask_mode: str = "post"
    mask_value: float = 0.0          # Masking's mask_value
    formats: dict = dataclasses.field(default_factory=lambda: DEFAULT_FORMATS)  # flavour -> formats
    signature: Optional[dict] = None  # {"batch": B, "steps": T}: fixed input dimensions (None: dynamic)
    batches: Optional[tuple] = None  # (description, mask rows) pairs; None: POST_BATCHES or ANY_BATCHES
    not_post_padded: Optional[tuple] = None  # (description, mask rows); None: NOT_POST_PADDED
    pending: str = ""                # why the case is not in the corpus yet (made only when named)
    seed: int = 0
    target: Optional[str] = None     # make_rewriter's target (None: any runtime)
    left_as_loop: tuple = ()         # a text of the reason of each masked layer the plugin must refuse
    dtype: str = "float32"           # of the features input and of Masking (the layers set their own)
    wiring: str = "chain"            # chain: each layer reads the one before; WIRINGS lists the others
    # save(model, case, flavour, fmt, path, n_outputs, tf) writes the model instead of save_model (a graph
    # traced another way: its batches' expected outputs are still the Keras model's); saved_with says how
    save: Optional[Callable] = None
    saved_with: str = ""


def _lstm(keras, units, **kwargs):
    return keras.layers.LSTM(units, **kwargs)


def _gru(keras, units, **kwargs):
    return keras.layers.GRU(units, **kwargs)


def _rnn(keras, units, **kwargs):
    return keras.layers.SimpleRNN(units, **kwargs)


def _bidirectional(keras, layer, **kwargs):
    return keras.layers.Bidirectional(layer, name="bidirectional", **kwargs)


# how a case's layers connect other than one after the other ("chain"): "concatenate" (each layer reads
# the one before) and "parallel" (every layer reads the same input) both output a Concatenate of every
# layer's sequence, so a recurrent op's input is also read by another node (OpenVINO's CPU plugin once
# scrambled such a shared input with a static dimension, which its static-shape runs have)
WIRINGS = ("concatenate", "parallel")

CASES = (
    Case("embedding_forward",
         "Embedding(mask_zero=True) -> LSTM(6, return_sequences=True) -> Dense(3)", "embedding",
         lambda k: [_lstm(k, 6, return_sequences=True, name="lstm"), k.layers.Dense(3, name="dense")],
         formats=FORMATS, seed=1),
    Case("masking_go_backwards",
         "Masking(mask_value=-1.0) -> LSTM(5, go_backwards=True, return_sequences=True)", "masking",
         lambda k: [_lstm(k, 5, go_backwards=True, return_sequences=True, name="lstm")],
         mask_value=-1.0, formats=FORMATS, seed=2),
    Case("explicit_mask_return_state",
         "features, mask=bool input -> LSTM(4, return_sequences=True, return_state=True): sequence, h, c",
         "explicit",
         lambda k: [_lstm(k, 4, return_sequences=True, return_state=True, name="lstm")],
         formats=FORMATS, seed=3),
    Case("explicit_mask_last_state",
         "features, mask=bool input -> LSTM(5, return_state=True): last output, h, c", "explicit",
         lambda k: [_lstm(k, 5, return_state=True, name="lstm")], seed=4),
    Case("bidirectional_concat",
         "Embedding(mask_zero=True) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode='concat')",
         "embedding",
         lambda k: [_bidirectional(k, _lstm(k, 4, return_sequences=True, name="lstm"), merge_mode="concat")],
         seed=5),
    Case("bidirectional_sum_state",
         "Masking(mask_value=0.5) -> Bidirectional(LSTM(5, return_sequences=True, return_state=True), "
         "merge_mode='sum'): sequence, forward h, c, backward h, c", "masking",
         lambda k: [_bidirectional(k, _lstm(k, 5, return_sequences=True, return_state=True, name="lstm"),
                                   merge_mode="sum")],
         mask_value=0.5, formats=FORMATS, seed=6),
    Case("stacked",
         "Embedding(mask_zero=True) -> LSTM(8, return_sequences=True) -> LSTM(6) (last output)", "embedding",
         lambda k: [_lstm(k, 8, return_sequences=True, name="lstm_a"), _lstm(k, 6, name="lstm_b")], seed=7),
    Case("stacked_bidirectional_backward",
         "features, mask=bool input -> Bidirectional(LSTM(4, return_sequences=True)) -> "
         "LSTM(4, go_backwards=True, return_sequences=True), the mask passed to both", "explicit",
         lambda k: [_bidirectional(k, _lstm(k, 4, return_sequences=True, name="lstm")),
                    _lstm(k, 4, go_backwards=True, return_sequences=True, name="lstm_back")],
         seed=8),
    Case("hard_sigmoid",
         "Embedding(mask_zero=True) -> LSTM(4, recurrent_activation='hard_sigmoid', return_sequences=True) "
         "(each flavour's own hard_sigmoid)", "embedding",
         lambda k: [_lstm(k, 4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
         seed=9),
    Case("any_bidirectional_ave",
         "mask_mode='any': Embedding(mask_zero=True) -> Bidirectional(LSTM(4, return_sequences=True), "
         "merge_mode='ave'); pre-padded, holed and both-ends rows", "embedding",
         lambda k: [_bidirectional(k, _lstm(k, 4, return_sequences=True, name="lstm"), merge_mode="ave")],
         mask_mode="any", formats=FORMATS, seed=10),
    Case("any_explicit_go_backwards_state",
         "mask_mode='any': features, mask=bool input -> LSTM(5, go_backwards=True, return_sequences=True, "
         "return_state=True); pre-padded, holed and both-ends rows", "explicit",
         lambda k: [_lstm(k, 5, go_backwards=True, return_sequences=True, return_state=True, name="lstm")],
         mask_mode="any", seed=11),
    Case("any_masking_stacked",
         "mask_mode='any': Masking(mask_value=-1.0) -> LSTM(6, return_sequences=True) -> LSTM(4); "
         "pre-padded, holed and both-ends rows", "masking",
         lambda k: [_lstm(k, 6, return_sequences=True, name="lstm_a"), _lstm(k, 4, name="lstm_b")],
         mask_mode="any", mask_value=-1.0, seed=12),
    Case("gru_reset_after",
         "Embedding(mask_zero=True) -> GRU(5, return_sequences=True) (reset_after=True, ONNX "
         "linear_before_reset=1) -> Dense(3)", "embedding",
         lambda k: [_gru(k, 5, return_sequences=True, name="gru"), k.layers.Dense(3, name="dense")], seed=13),
    Case("gru_reset_before_go_backwards_state",
         "Masking(mask_value=0.0) -> GRU(4, reset_after=False, go_backwards=True, return_sequences=True, "
         "return_state=True): sequence, h", "masking",
         lambda k: [_gru(k, 4, reset_after=False, go_backwards=True, return_sequences=True, return_state=True,
                         name="gru")],
         formats=SMALL_FORMATS, seed=14),
    Case("simple_rnn",
         "features, mask=bool input -> SimpleRNN(5, return_sequences=True) (ONNX RNN)", "explicit",
         lambda k: [_rnn(k, 5, return_sequences=True, name="simple_rnn")], formats=SMALL_FORMATS, seed=15),
    Case("bidirectional_gru",
         "Embedding(mask_zero=True) -> Bidirectional(GRU(4, return_sequences=True), merge_mode='mul')",
         "embedding",
         lambda k: [_bidirectional(k, _gru(k, 4, return_sequences=True, name="gru"), merge_mode="mul")], seed=16),
    Case("stacked_mixed",
         "Embedding(mask_zero=True) -> LSTM(6, return_sequences=True) -> GRU(5, reset_after=False, "
         "return_sequences=True) -> SimpleRNN(4) (last output)", "embedding",
         lambda k: [_lstm(k, 6, return_sequences=True, name="lstm"),
                    _gru(k, 5, reset_after=False, return_sequences=True, name="gru"),
                    _rnn(k, 4, name="simple_rnn")],
         seed=17),
    Case("any_mixed_bidirectional",
         "mask_mode='any': Masking(mask_value=-1.0) -> Bidirectional(SimpleRNN(3, return_sequences=True), "
         "merge_mode='sum') -> GRU(4, go_backwards=True) (last output); pre-padded, holed and both-ends rows",
         "masking",
         lambda k: [_bidirectional(k, _rnn(k, 3, return_sequences=True, name="simple_rnn"), merge_mode="sum"),
                    _gru(k, 4, go_backwards=True, name="gru")],
         mask_mode="any", mask_value=-1.0, formats=SMALL_FORMATS, seed=18),
    Case("static_steps",
         "signature (None, 7, 3): a fixed number of steps, the batch dynamic: Masking(mask_value=0.0) -> "
         "GRU(4, return_sequences=True)", "masking",
         lambda k: [_gru(k, 4, return_sequences=True, name="gru")],
         formats=SMALL_FORMATS, signature={"steps": 7},
         batches=(("7 steps, lengths 7 3 0 1 6", ("1111111", "1110000", "0000000", "1000000", "1111110")),
                  ("7 steps, lengths 2 7", ("1100000", "1111111"))),
         not_post_padded=("7 steps: a post-padded row, a pre-padded row, a row with a hole",
                          ("1110000", "0011111", "1011000")),
         seed=19),
    Case("static_batch_1",
         "signature tokens (1, None), as for mobile and TensorRT: Embedding(mask_zero=True) -> "
         "LSTM(5, return_sequences=True); batches of one row", "embedding",
         lambda k: [_lstm(k, 5, return_sequences=True, name="lstm")],
         formats=SMALL_FORMATS, signature={"batch": 1},
         batches=(("one row, length 5 of 7", ("1111100",)), ("one empty row of 4 steps", ("0000",)),
                  ("one full row of 6 steps", ("111111",))),
         not_post_padded=("one pre-padded row", ("0011111",)), seed=20),
    Case("static_batch_and_steps",
         "signature (4, 7) for features and mask, as for OpenVINO: features, mask=bool input -> "
         "Bidirectional(GRU(3, return_sequences=True))", "explicit",
         lambda k: [_bidirectional(k, _gru(k, 3, return_sequences=True, name="gru"))],
         formats=SMALL_FORMATS, signature={"batch": 4, "steps": 7},
         batches=(("4 rows x 7 steps, lengths 7 3 0 5", ("1111111", "1110000", "0000000", "1111100")),),
         not_post_padded=("4 rows x 7 steps, one pre-padded, one with a hole",
                          ("1111111", "0001111", "1101100", "0000000")),
         seed=21),
    Case("static_stack",
         "signature (3, 7), fully static: Embedding(mask_zero=True) -> Bidirectional(LSTM(4, "
         "return_sequences=True), merge_mode='ave') -> GRU(3) (last output): the upper layer proves its "
         "number of steps through the lower one's merged outputs", "embedding",
         lambda k: [_bidirectional(k, _lstm(k, 4, return_sequences=True, name="lstm"), merge_mode="ave"),
                    _gru(k, 3, name="gru")],
         formats=SMALL_FORMATS, signature={"batch": 3, "steps": 7},
         batches=(("3 rows x 7 steps, lengths 7 2 0", ("1111111", "1100000", "0000000")),),
         not_post_padded=("3 rows x 7 steps, one pre-padded", ("1111111", "0011111", "1000000")),
         seed=22),
    Case("stacked_cells",
         "Embedding(mask_zero=True) -> RNN([LSTMCell(4), GRUCell(3)], return_sequences=True): several "
         "cells in one loop, one native node per cell", "embedding",
         lambda k: [k.layers.RNN([k.layers.LSTMCell(4), k.layers.GRUCell(3)], return_sequences=True, name="rnn")],
         formats=SMALL_FORMATS, seed=23),
    Case("float64_refused",
         "Masking(mask_value=0.0) over float64 features -> LSTM(4, return_sequences=True), float64 throughout: "
         "the plugin refuses the layer (onnxruntime has no float64 LSTM kernel, OpenVINO computes it in "
         "float32) and leaves tf2onnx's Loop, which matches Keras for any mask", "masking",
         lambda k: [_lstm(k, 4, return_sequences=True, dtype="float64", name="lstm")],
         mask_mode="any", dtype="float64", left_as_loop=("float64 layer",), formats=SMALL_FORMATS, seed=24),
    Case("openvino_target",
         "converted with target='openvino': Embedding(mask_zero=True) -> LSTM(4, recurrent_activation="
         "'hard_sigmoid', return_sequences=True) -> GRU(3, return_sequences=True). OpenVINO compiles no "
         "HardSigmoid inside a native op, so the LSTM stays tf2onnx's Loop (its reason names OpenVINO; "
         "OpenVINO reads that model from memory) and the GRU becomes native", "embedding",
         lambda k: [_lstm(k, 4, return_sequences=True, recurrent_activation="hard_sigmoid", name="lstm"),
                    _gru(k, 3, return_sequences=True, name="gru")],
         target="openvino", left_as_loop=("target openvino",), formats=SMALL_FORMATS, seed=25),
    Case("stacked_concatenate",
         "signature tokens (5, None): Embedding(mask_zero=True) -> LSTM(5, return_sequences=True) -> GRU(4, "
         "return_sequences=True), the output both sequences concatenated: the GRU's input is also an output "
         "(OpenVINO's CPU plugin scrambled such a shared input with a static dimension until the emitter "
         "gave the GRU its own)", "embedding",
         lambda k: [_lstm(k, 5, return_sequences=True, name="lstm"), _gru(k, 4, return_sequences=True, name="gru")],
         wiring="concatenate", formats=SMALL_FORMATS, signature={"batch": 5}, seed=26,
         batches=(("5 rows x 7 steps, lengths 7 3 0 1 6", ("1111111", "1110000", "0000000", "1000000", "1111110")),
                  ("5 rows x 4 steps, lengths 0 4 2 4 1", ("0000", "1111", "1100", "1111", "1000"))),
         not_post_padded=("5 rows x 6 steps: post-padded rows, a pre-padded row, a row with a hole",
                          ("111000", "001111", "101100", "111111", "000000"))),
    Case("any_parallel",
         "signature (None, 7, 3): Masking(mask_value=-1.0) -> LSTM(4, return_sequences=True) and SimpleRNN(3, "
         "return_sequences=True) over the same input, concatenated: two recurrent ops read one tensor", "masking",
         lambda k: [_lstm(k, 4, return_sequences=True, name="lstm"), _rnn(k, 3, return_sequences=True, name="rnn")],
         mask_mode="any", mask_value=-1.0, wiring="parallel", formats=SMALL_FORMATS, signature={"steps": 7},
         batches=(("7 steps: full, empty, pre-padded, holes, both ends, post-padded",
                   ("1111111", "0000000", "0001111", "1010110", "0111100", "1110000")),
                  ("7 steps: pre-padded to one step, post-padded to one step", ("0000001", "1000000"))),
         seed=27),
    # no mask: the layers stock tf2onnx 1.17 leaves as a Loop even so, which the plugin makes native with no
    # mask machinery (no guard, no lengths); converted with the default mode, "post"
    Case("unmasked_gru",
         "no mask: features -> GRU(5, return_sequences=True) (reset_after=True): stock tf2onnx leaves a Loop in "
         "Keras 3 (tf_keras's is native)", "none",
         lambda k: [_gru(k, 5, return_sequences=True, name="gru")], formats=KERAS3_ONLY, seed=28),
    Case("unmasked_gru_reset_before_state",
         "no mask: features -> GRU(4, reset_after=False, return_sequences=True, return_state=True): sequence, h",
         "none",
         lambda k: [_gru(k, 4, reset_after=False, return_sequences=True, return_state=True, name="gru")],
         formats=SMALL_FORMATS, seed=29),
    Case("unmasked_gru_go_backwards",
         "no mask: features -> GRU(4, go_backwards=True, return_sequences=True): the sequence in reversed time, "
         "as Keras returns it (Keras 3; tf_keras's is native)", "none",
         lambda k: [_gru(k, 4, go_backwards=True, return_sequences=True, name="gru")], formats=KERAS3_ONLY, seed=30),
    Case("unmasked_simple_rnn",
         "no mask: features -> SimpleRNN(5, return_sequences=True) (ONNX RNN)", "none",
         lambda k: [_rnn(k, 5, return_sequences=True, name="simple_rnn")], formats=SMALL_FORMATS, seed=31),
    Case("unmasked_bidirectional_gru",
         "no mask: features -> Bidirectional(GRU(4, return_sequences=True), merge_mode='concat') (Keras 3; "
         "tf_keras's is one native bidirectional GRU)", "none",
         lambda k: [_bidirectional(k, _gru(k, 4, return_sequences=True, name="gru"), merge_mode="concat")],
         formats=KERAS3_ONLY, seed=32),
    Case("unmasked_hard_sigmoid",
         "no mask: features -> LSTM(4, recurrent_activation='hard_sigmoid', return_sequences=True) (Keras 3; "
         "tf_keras's is native)", "none",
         lambda k: [_lstm(k, 4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm")],
         formats=KERAS3_ONLY, seed=33),
    # traced through Keras 3's cuDNN kernel (a SavedModel exported on a machine with a GPU): the graph holds
    # CudnnRNNV3, which tf2onnx cannot convert; the plugin reads it into the same native nodes
    Case("cudnn_stacked",
         "traced on a GPU: tokens -> Embedding(mask_zero=True) -> LSTM(4, return_sequences=True) -> "
         "Bidirectional(GRU(3, return_sequences=True)): three CudnnRNNV3 ops (a forward layer repeats its last "
         "output at padded steps, a Bidirectional's halves give zeros there, as Keras's generic path does)",
         "embedding",
         lambda k: [_lstm(k, 4, return_sequences=True, name="lstm"),
                    _bidirectional(k, _gru(k, 3, return_sequences=True, name="gru"), merge_mode="concat")],
         formats=KERAS3_ONLY, seed=34, save=lambda *args: save_traced_on_a_gpu(*args),
         saved_with="keras.Model.export(path, format='tf_saved_model') traced as on a GPU machine "
                    "(masked_lstm_rewriter.corpus.cudnn_trace)"),
    Case("cudnn_unmasked_gru",
         "traced on a GPU, no mask: features -> GRU(4, go_backwards=True, return_state=True): one CudnnRNNV3 op "
         "whose lengths are every step", "none",
         lambda k: [_gru(k, 4, go_backwards=True, return_state=True, name="gru")],
         formats=KERAS3_ONLY, seed=35, save=lambda *args: save_traced_on_a_gpu(*args),
         saved_with="keras.Model.export(path, format='tf_saved_model') traced as on a GPU machine "
                    "(masked_lstm_rewriter.corpus.cudnn_trace)"),
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
# no mask (source "none"): random features, every step valid; the rows give the shapes
UNMASKED_BATCHES = (
    ("no mask: 4 rows x 7 steps", ("1111111",) * 4),
    ("no mask: 1 row x 5 steps", ("11111",)),
    ("no mask: 3 rows x 1 step", ("1",) * 3),
)
# ONNX files whose recurrent layers are Loops, as their producers wrote them (testdata/onnx_in): the stock
# tf2onnx files' batches are made from these rows, the JAX exports' are stored with them (Keras's outputs)
TESTDATA = os.path.join(ROOT, "testdata", "onnx_in")
ONNX_CASES = (
    OnnxCase("tf2onnx", "keras3_emb_lstm_seq_op15",
             "Keras 3: Embedding(mask_zero=True) -> LSTM(4, return_sequences=True)", "embedding", seed=101),
    OnnxCase("tf2onnx", "tf_keras_emb_bilstm_sum_op15",
             "tf_keras: Embedding(mask_zero=True) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode='sum'): "
             "a Loop per half", "embedding", seed=102),
    OnnxCase("tf2onnx", "keras3_emb_gru_ra_false_seq_op15",
             "Keras 3: Embedding(mask_zero=True) -> GRU(4, reset_after=False, return_sequences=True)", "embedding",
             seed=103),
    OnnxCase("tf2onnx", "keras3_stacked_cells_op15",
             "Keras 3: Embedding(mask_zero=True) -> RNN([LSTMCell(4), GRUCell(3)], return_sequences=True): one Loop, "
             "a native node per cell", "embedding", seed=104),
    OnnxCase("tf2onnx", "keras3_unmasked_rnn_backwards_op15",
             "Keras 3, no mask: features -> SimpleRNN(4, go_backwards=True, return_sequences=True)", "none",
             modes=("post",), seed=105),
    OnnxCase("tf2onnx", "keras3_masking_lstm_stack_states_op15",
             "Keras 3: Masking(0.0) -> LSTM(4, return_sequences=True, return_state=True) -> LSTM(3): the lower layer's "
             "sequence and states are outputs too", "masking", seed=106),
    OnnxCase("tf2onnx", "tf_keras_emb_lstm_recurrent_dropout_op15",
             "tf_keras: Embedding(mask_zero=True) -> LSTM(4, dropout=0.2, recurrent_dropout=0.2, return_sequences=True)",
             "embedding", seed=107),
    OnnxCase("tf2onnx", "keras3_emb_lstm_states_only_op15",
             "Keras 3: Embedding(mask_zero=True) -> LSTM(4, return_state=True), only the final h and c as outputs",
             "embedding", seed=108),
    OnnxCase("jax", "emb_lstm_seq", "Embedding(mask_zero=True) -> LSTM(3, return_sequences=True)", "embedding"),
    OnnxCase("jax", "masking_lstm_seq", "Masking(mask_value=0.0) -> LSTM(3, return_sequences=True)", "masking"),
    OnnxCase("jax", "emb_rnn_seq", "Embedding(mask_zero=True) -> SimpleRNN(3, return_sequences=True)", "embedding"),
    OnnxCase("jax", "plain_lstm_seq", "no mask: features -> LSTM(3, return_sequences=True)", "none", modes=("post",)),
)
ONNX_MASK_ROWS = onnx_writer.MaskRows(
    post=POST_BATCHES, any=ANY_BATCHES, unmasked=UNMASKED_BATCHES,
    not_post_padded=("6 steps: pre-padded rows, lengths 3 6 1 4", ("000111", "111111", "000001", "001111")))

# what the manifest and its README say beyond the entries
CATALOGUE = writer.Catalogue(
    case_order=tuple(case.name for case in CASES),
    cases_pending=[{"case": case.name, "description": case.description, "reason": case.pending}
                   for case in CASES if case.pending],
    formats=FORMATS, formats_not_included=NOT_INCLUDED, how_saved=HOW_SAVED, byte_stability=BYTE_STABILITY,
    opset=OPSET, tolerance=TOLERANCE, guard_message=GUARD_TEXT)


# ------------------------------------------------------------------ models and batches

def select_keras(flavour: str) -> None:
    """Before TensorFlow is imported: it reads these once."""
    flavours.select(flavour)
    os.environ["MLR_KERAS"] = flavour  # as tools/run_tests.py sets it for the suite
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")


def input_specs(case: Case):
    """(name, dtype, shape) of the model's inputs, with the case's signature applied."""
    batch = (case.signature or {}).get("batch")
    steps = (case.signature or {}).get("steps")
    if case.source == "embedding":
        return [("tokens", "int32", (batch, steps))]
    if case.source in ("masking", "none"):
        return [("features", case.dtype, (batch, steps, FEATURES))]
    return [("features", case.dtype, (batch, steps, FEATURES)), ("mask", "bool", (batch, steps))]


def build_model(case: Case, keras, np):
    if hasattr(keras.utils, "clear_session"):  # fresh layer names and uids for every case
        keras.utils.clear_session()
    else:
        keras.backend.clear_session()
    keras.utils.set_random_seed(case.seed)
    inputs = [keras.Input(shape[1:], batch_size=shape[0], dtype=dtype, name=name)
              for name, dtype, shape in input_specs(case)]
    mask = None
    if case.source == "embedding":
        x = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True, name="embedding")(inputs[0])
    elif case.source == "masking":
        x = keras.layers.Masking(mask_value=case.mask_value, dtype=case.dtype, name="masking")(inputs[0])
    elif case.source == "none":
        x = inputs[0]
    else:
        x, mask = inputs
    first, sequences = x, []
    for layer in case.layers(keras):
        recurrent = isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional))
        source = first if case.wiring == "parallel" else x
        x = layer(source, mask=mask) if recurrent and mask is not None else layer(source)
        sequences.append(x)
    if case.wiring in WIRINGS:
        x = keras.layers.Concatenate(name="concatenate")(sequences)
    elif case.wiring != "chain":
        raise ValueError(f"case {case.name}: unknown wiring {case.wiring!r}")
    model = keras.Model(inputs if len(inputs) > 1 else inputs[0], x, name=case.name)
    rng = np.random.default_rng(case.seed)  # as tests/kerasutil.randomize_weights: no zero bias
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in weights])
    return model


def masked_layer_count(model, keras) -> int:
    """The recurrent layers the plugin must rewrite (every one in a corpus model is masked, or in an
    unmasked case one stock tf2onnx leaves as a Loop); a Bidirectional is two, as last_report() counts them."""
    return sum(2 if isinstance(layer, keras.layers.Bidirectional) else 1
               for layer in model.layers if isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional)))


def make_batch(case: Case, rows, seed: int, np) -> dict:
    """Inputs whose mask is ``rows`` (strings of 0/1, one per row)."""
    valid = np.array([[c == "1" for c in row] for row in rows], dtype=bool)
    rng = np.random.default_rng(seed)
    batch, steps = valid.shape
    if case.source == "embedding":
        tokens = rng.integers(1, VOCAB, size=(batch, steps)).astype(np.int32)
        tokens[~valid] = 0
        return {"tokens": tokens}
    features = rng.normal(size=(batch, steps, FEATURES)).astype(case.dtype)
    if case.source == "masking":
        features[~valid] = case.mask_value
        return {"features": features}
    if case.source == "none":
        return {"features": features}
    return {"features": features, "mask": valid}  # padded steps keep non-zero features: only the mask counts


def keras_outputs(model, inputs: dict, case: Case, np) -> list:
    values = [inputs[name] for name, _, _ in input_specs(case)]
    out = model(values if len(values) > 1 else values[0], training=False)
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o).astype(case.dtype) for o in out]


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


def export_signature(case: Case, tf):
    """Keras 3 model.export's input_signature for a case with a signature (None: the model's own)."""
    if not case.signature:
        return None
    specs = [tf.TensorSpec(shape, dtype, name=name) for name, dtype, shape in input_specs(case)]
    return [specs if len(specs) > 1 else specs[0]]  # a functional model takes one positional argument


def save_model(model, case: Case, flavour: str, fmt: str, path: str, n_outputs: int, tf) -> None:
    if fmt == "saved_model":
        if flavour == "keras3":  # export makes the batch dimension dynamic unless told otherwise
            model.export(path, format="tf_saved_model", verbose=False, input_signature=export_signature(case, tf))
        else:
            save_tf_module(model, case, path, n_outputs, tf)
    elif fmt == "keras":
        model.save(path)
        normalise_keras_zip(path)
    elif fmt == "h5":
        model.save(path)
    else:
        raise ValueError(f"unknown format {fmt!r}")


def save_traced_on_a_gpu(model, case: Case, flavour: str, fmt: str, path: str, n_outputs: int, tf) -> None:
    """Keras 3's SavedModel as a machine with a GPU exports it: its layers traced as cuDNN ops."""
    from masked_lstm_rewriter.corpus.cudnn_trace import traced_as_on_a_gpu  # pylint: disable=import-outside-toplevel
    with traced_as_on_a_gpu():
        save_model(model, case, flavour, fmt, path, n_outputs, tf)


def format_problem(model, flavour: str, fmt: str, n_outputs: int):
    """Why tf2onnx cannot convert this model from this format (measured with tf2onnx 1.17), or None."""
    if flavour == "keras3" and fmt in ("keras", "h5") and n_outputs > 1 and len(set(model.output_names)) < n_outputs:
        return (f"tf2onnx 1.17's --keras loader keeps one output per distinct model.output_names entry, and "
                f"Keras 3 names all {n_outputs} outputs of this model after the one layer that returns them "
                f"({model.output_names}): the ONNX model would have 1 output instead of {n_outputs} "
                f"(tf_loader.from_keras -> saving_utils.trace_model_call builds a dict keyed by output name). "
                f"The SavedModel entry covers the case")
    return None


# ------------------------------------------------------------------ one case

@dataclasses.dataclass
class Stack:
    """The modules of one flavour, imported once."""

    tf: object
    keras: object
    np: object


def import_stack(flavour: str, verbose: bool) -> Stack:
    select_keras(flavour)
    with quiet_stderr(not verbose):
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
    if not verbose:
        quiet_loggers()
        tf.get_logger().setLevel("ERROR")
    return Stack(tf, keras, np)


def write_batches(case: Case, model, case_dir: str, out: str, np) -> tuple:
    """Every batch's inputs and Keras outputs, and the guard's batch; returns (batches, must_fail, n_outputs)."""
    batches = []
    n_outputs = 0
    patterns = case.batches or (UNMASKED_BATCHES if case.source == "none" else
                                ANY_BATCHES if case.mask_mode == "any" else POST_BATCHES)
    for number, (description, rows) in enumerate(patterns):
        inputs = make_batch(case, rows, seed=1000 * case.seed + number, np=np)
        outputs = keras_outputs(model, inputs, case, np)
        n_outputs = len(outputs)
        inputs_path = os.path.join(case_dir, f"batch{number}_inputs.npz")
        expected_path = os.path.join(case_dir, f"batch{number}_expected.npz")
        write_npz(inputs_path, inputs)
        write_npz(expected_path, {f"output_{i}": o for i, o in enumerate(outputs)})
        batches.append({"description": description, "mask_rows": list(rows),
                        "inputs": relative(inputs_path, out), "expected": relative(expected_path, out)})
    must_fail = None
    if case.mask_mode == "post" and case.source != "none":  # no mask, no guard
        description, rows = case.not_post_padded or NOT_POST_PADDED
        path = os.path.join(case_dir, "not_post_padded_inputs.npz")
        write_npz(path, make_batch(case, rows, seed=1000 * case.seed + 99, np=np))
        must_fail = {"description": description, "mask_rows": list(rows), "inputs": relative(path, out),
                     "message": GUARD_TEXT}
    return batches, must_fail, n_outputs


def write_case(case: Case, flavour: str, args, stack: Stack) -> tuple:
    """The case's model in each of its formats, its batches and Keras outputs; returns (entries,
    not_included) with the names tf2onnx gives and the expected ops still to be recorded."""
    case_dir = os.path.join(args.out, flavour, case.name)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    with quiet_stderr(not args.verbose):
        model = build_model(case, stack.keras, stack.np)
        batches, must_fail, n_outputs = write_batches(case, model, case_dir, args.out, stack.np)
    entries, not_included = [], []
    for fmt in args.formats or case.formats[flavour]:
        name = f"{flavour}/{case.name}/{fmt}"
        path = os.path.join(case_dir, MODEL_FILES[fmt])
        why_not = None if args.formats else format_problem(model, flavour, fmt, n_outputs)
        if why_not:
            not_included.append({"flavour": flavour, "format": fmt, "case": case.name, "reason": why_not})
            print(f"  not included: {name}: {why_not}", flush=True)
            continue
        try:
            with quiet_stderr(not args.verbose):
                (case.save or save_model)(model, case, flavour, fmt, path, n_outputs, stack.tf)
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            print(f"  FAILED {name}: cannot save: {type(error).__name__}: {check.first_line(error)}", flush=True)
            entries.append({"name": name, "case": case.name, "flavour": flavour, "save_failed": str(error)})
            continue
        entries.append(writer.new_entry(case, flavour, fmt, relative(path, args.out), input_specs(case), n_outputs,
                                        masked_layer_count(model, stack.keras), batches, must_fail, CATALOGUE))
        if case.saved_with:
            entries[-1]["saved_with"] = case.saved_with
    return entries, not_included


# ------------------------------------------------------------------ one flavour

def selected_cases(args, flavour: str) -> list:
    """The cases --cases names (pending ones included), else every case that is not pending; those with
    a format in ``flavour`` (or with --formats)."""
    chosen = [case for case in CASES if case.name in args.cases] if args.cases else \
        [case for case in CASES if not case.pending]
    return [case for case in chosen if args.formats or case.formats.get(flavour)]


def generate_flavour(flavour: str, args) -> int:
    """Write (or with --ops-only, re-record) the flavour's entries and update the manifest; 1 on any failure."""
    stack = import_stack(flavour, args.verbose)
    previous = writer.read_manifest(args.out)
    names = {case.name for case in selected_cases(args, flavour)}
    if args.ops_only:
        entries = [e for e in previous.get("entries", []) if e.get("flavour") == flavour
                   and (not args.cases or e.get("case") in names)]
        names = {e.get("case") for e in entries}
        not_included = [e for e in previous.get("entries_not_included", [])
                        if e.get("flavour") == flavour and e.get("case") in names]
        print(f"{flavour}: recording the ops of {len(entries)} entries in {args.out}", flush=True)
    else:
        if not args.cases:  # a full run: cases removed from CASES go too
            shutil.rmtree(os.path.join(args.out, flavour), ignore_errors=True)
        print(f"{flavour}: writing {len(names)} cases to {os.path.join(args.out, flavour)}", flush=True)
        entries, not_included = [], []
        for case in selected_cases(args, flavour):  # every model and batch first: conversions do not interleave
            made, skipped = write_case(case, flavour, args, stack)
            entries += made
            not_included += skipped
    failures = record_all(entries, args)
    writer.update_manifest(args.out, flavour, previous, entries, not_included,
                           names if args.cases or args.ops_only else None,
                           None if args.ops_only else writer.versions(stack.tf, stack.keras, flavour, OPSET), CATALOGUE)
    print(f"{flavour}: {len(entries)} entries, {failures} failed", flush=True)
    return 1 if failures else 0


def generate_onnx_files(args) -> int:
    """Write (or with --ops-only, re-record) the ONNX-file entries; every other entry and file stays as it
    is. In the process of the flavour the corpus checks them with. 1 on any failure."""
    select_keras(manifest.ONNX_FILES_RUN_WITH)
    with quiet_stderr(not args.verbose):
        import tf2onnx  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    if not args.verbose:
        quiet_loggers()
    previous = writer.read_manifest(args.out)
    if args.ops_only:
        entries, stack = [e for e in previous.get("entries", []) if manifest.is_onnx_file(e)], None
        print(f"ONNX files: recording the ops of {len(entries)} entries in {args.out}", flush=True)
    else:
        shutil.rmtree(os.path.join(args.out, onnx_writer.ONNX_DIR), ignore_errors=True)
        print(f"ONNX files: copying {len(ONNX_CASES)} files from {TESTDATA}", flush=True)
        entries = [entry for case in ONNX_CASES
                   for entry in onnx_writer.write_case(case, TESTDATA, args.out, ONNX_MASK_ROWS, CATALOGUE)]
        stack = onnx_writer.versions()
    failures = record_all(entries, args)
    writer.update_onnx_entries(args.out, previous, entries, stack, CATALOGUE)
    print(f"ONNX files: {len(entries)} entries, {failures} failed", flush=True)
    return 1 if failures else 0


def record_all(entries: list, args) -> int:
    """record_entry for each entry (in a scratch directory); returns how many failed."""
    failures = 0
    tmp = os.path.join(args.out, ".tmp-make-corpus")
    os.makedirs(tmp, exist_ok=True)
    try:
        for entry in entries:
            problem, worst = entry.get("save_failed"), None
            if not problem:
                problem, worst = writer.record_entry(entry, args.out, tmp, args.verbose)
            if problem:
                failures += 1
                print(f"  FAILED {entry['name']}: {problem}", flush=True)
            else:
                print(f"  ok {entry['name']}: {ops.describe_native(entry['expected_ops']['native'])}, "
                      f"max |onnx - {manifest.reference(entry)}| = {worst:.2g}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return failures


# ------------------------------------------------------------------ command line

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=FLAVOURS + ("both",), default="both",
                        help="flavour to generate (default: both, each in its own process)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"corpus directory (default: {DEFAULT_OUT})")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names (default: every case not pending): only these are "
                             "(re)made, the flavour's other entries stay")
    parser.add_argument("--ops-only", action="store_true",
                        help="keep the models, batches and Keras outputs; convert every entry (of --cases) again "
                             "and record its names and native ops (after a change to the emitter)")
    parser.add_argument("--formats", default="",
                        help="comma-separated formats to write instead of the case's own (saved_model, keras, "
                             "h5): to try a format, with --out elsewhere")
    parser.add_argument("--onnx", action="store_true",
                        help="only the ONNX-file entries (from testdata/onnx_in): every other entry and file stays")
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
    if args.ops_only and args.formats:
        parser.error("--ops-only keeps the models: it takes no --formats")
    if args.onnx and (args.cases or args.formats):
        parser.error("--onnx makes every ONNX-file entry: it takes no --cases or --formats")
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.onnx:
        start = time.monotonic()
        code = generate_onnx_files(args)
        print(f"ONNX files: done in {time.monotonic() - start:.0f}s", flush=True)
        return code
    if args.keras != "both":
        start = time.monotonic()
        code = generate_flavour(args.keras, args)
        print(f"{args.keras}: done in {time.monotonic() - start:.0f}s", flush=True)
        return code
    rest = [a for i, a in enumerate(argv) if a != "--keras" and not a.startswith("--keras=")
            and (i == 0 or argv[i - 1] != "--keras")]
    codes = []
    runs = [(flavour, ["--keras", flavour]) for flavour in FLAVOURS]
    if not (args.cases or args.formats):  # a full run: the ONNX-file entries too
        runs.append((manifest.ONNX_FILES_RUN_WITH, ["--onnx"]))
    for flavour, which in runs:
        command = [sys.executable, os.path.abspath(__file__)] + which + rest
        print(f"=== {' '.join(command[1:])}", flush=True)
        codes.append(subprocess.call(command, env=flavours.flavour_env(flavour), cwd=ROOT, stdin=subprocess.DEVNULL))
    print(f"corpus written to {args.out}" + ("" if not any(codes) else f" WITH FAILURES (exit codes {codes})"))
    return 0 if not any(codes) else 1


if __name__ == "__main__":
    sys.exit(main())
