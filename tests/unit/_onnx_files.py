# SPDX-License-Identifier: Apache-2.0
"""The ONNX-file tests' files, batches made for their inputs, and :class:`OnnxFile`, the ONNX Loop
source's case for the shared verbs of ``_harness.py`` ("rewrites, and the numbers match the file",
"refuses, with this reason").

The oracle is the file itself (and, for Keras's JAX-backend exports, Keras's own outputs stored
beside it): every output at every position, padded ones too, on onnxruntime and OpenVINO, on
batches with rows of different lengths, a full row and an empty row; in ``"any"`` mode also
pre-padded rows and holes, and in ``"post"`` mode the guard must fail on those. A refused file
keeps every Loop byte for byte.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.verify_batches import graph_inputs
from _harness import NATIVE_OPS, native_nodes, op_counts, runner  # noqa: F401  (NATIVE_OPS, op_counts: for the tests)

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "testdata", "onnx_in")
TF2ONNX_FILES = sorted(glob.glob(os.path.join(DATA, "tf2onnx", "*.onnx")))
ONNXSIM_FILES = sorted(glob.glob(os.path.join(DATA, "onnxsim", "*.onnx")))  # the same, after onnx-simplifier
# earlier tf2onnx releases: 1.16.1 (TensorFlow 2.19), 1.15.1 (TensorFlow 2.13), 1.13.0 (TensorFlow 2.10, opsets 11-13)
OLDER_TF2ONNX_FILES = sorted(glob.glob(os.path.join(DATA, "tf2onnx-1.1[0-9]", "*.onnx")))
JAX_FILES = sorted(glob.glob(os.path.join(DATA, "jax", "*.onnx")))
# tf2onnx's files made from LiteRT flatbuffers (``tf2onnx --tflite``, static shapes): where onnxruntime
# cannot load tf2onnx's file (a stack of layers), Keras's outputs are stored beside it (:func:`stored_outputs`)
LITERT_FILES = sorted(glob.glob(os.path.join(DATA, "tf2onnx-litert", "*.onnx")))
ATOL = 1e-5
VOCAB = 10  # the stock files' Embedding size (tools/stock_onnx_catalogue.py)
POST_BATCHES = ([7, 3, 1, 0], [5, 5, 2, 7])  # row lengths: a full row (7 steps) and an empty one


def name_of(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def stored_path(path: str) -> str:
    """Where the outputs Keras gave on the file's batches are stored, if they are (``<stem>.npz``)."""
    return os.path.splitext(path)[0] + ".npz"


def stored_outputs(path: str) -> list:
    """[(batch name, feeds, Keras's outputs)] stored beside the file at ``path``: arrays named
    ``<batch>.in.<input>`` and ``<batch>.out.<k>``."""
    stored = np.load(stored_path(path))
    found = []
    for batch in sorted({key.split(".")[0] for key in stored.files}):
        feeds = {key.split(".in.", 1)[1]: stored[key] for key in stored.files if key.startswith(f"{batch}.in.")}
        outputs = sorted((int(key.rsplit(".", 1)[1]), stored[key]) for key in stored.files
                         if key.startswith(f"{batch}.out."))
        found.append((batch, feeds, [value for _, value in outputs]))
    return found


def _valid(lengths, steps, layout):
    """[B, T] bool: post-padded rows, pre-padded rows, or (``holes``) rows with a gap inside."""
    rows = []
    for length in lengths:
        if layout == "pre":
            rows.append([t >= steps - length for t in range(steps)])
        elif layout == "holes":
            rows.append([t < length and not (t == 1 and length > 2) for t in range(steps)])
        else:
            rows.append([t < length for t in range(steps)])
    return np.array(rows, bool)


def feeds_for(model, lengths, layout="post", seed=0) -> dict:
    """A batch for ``model``'s inputs: token ids (0 where padded), features (zeros where padded, as
    ``Masking`` reads them), a boolean mask, initial states; static dimensions are kept."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (dtype, dims) in graph_inputs(model).items():
        batch = dims[0] or len(lengths)
        steps = (dims[1] or max(lengths)) if len(dims) > 1 else None
        rows = [min(n, steps or 0) for n in (list(lengths) * batch)[:batch]]
        valid = _valid(rows, steps or 1, layout)
        if np.issubdtype(dtype, np.integer):
            feeds[name] = np.where(valid, rng.integers(1, VOCAB, valid.shape), 0).astype(dtype)
        elif dtype == bool:
            feeds[name] = valid
        elif len(dims) == 3:
            features = rng.normal(size=(batch, steps, dims[2])).astype(np.float32)
            feeds[name] = np.where(valid[..., None], features, 0).astype(np.float32)
        else:
            feeds[name] = rng.normal(size=[d or batch for d in dims]).astype(np.float32)
    return feeds


def _same_feeds(feeds: dict, others: dict) -> bool:
    return all(np.array_equal(value, others[name]) for name, value in feeds.items())


class OnnxFile:
    """A model (an ONNX file's) for ``check_rewrites`` / ``check_refuses``: rewritten by
    ``rewrite_onnx``; its reference is the file itself on onnxruntime; refused, its Loops stay byte for byte."""

    replaces = "Loop"
    atol, rtol = ATOL, 0.0

    def __init__(self, model, runtime=None, schedule=None):
        self.model, self.runtime = model, runtime  # runtime: what the file is rewritten for (None: any)
        self.schedule = schedule  # rewrite_onnx's (None: its default)
        self._run = None  # the file's onnxruntime session, made once

    def rewrite(self, mode: str) -> tuple:
        return mlr.rewrite_onnx(self.model, mask_mode=mode, runtime=self.runtime, schedule=self.schedule)

    def batches(self, layout: str) -> list:
        """Two batches of rows of different lengths, each with a full row (7 steps) and an empty one; with
        a static batch smaller than that, the batches that ``layout`` pads otherwise than "post" does."""
        self._run = self._run or runner(self.model, "onnxruntime")
        found = []
        for lengths in POST_BATCHES:
            feeds = feeds_for(self.model, lengths, layout)
            if layout != "post" and _same_feeds(feeds, feeds_for(self.model, lengths, "post")):
                continue  # its rows are full or empty: no other padding to test
            found.append((feeds, {"the file on onnxruntime": self._run(feeds)}))
        return found

    def assert_kept(self, model, report) -> None:
        loops = [n.SerializeToString() for n in self.model.graph.node if n.op_type == "Loop"]
        kept = [n.SerializeToString() for n in model.graph.node if n.op_type == "Loop"]
        assert kept == loops, str(report)


def perturbed_lstm(model):
    """Copy of ``model`` with the native LSTM's input weights moved by 0.1 (a scheduled layer's segments
    read the same weights as its single node)."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    (lstm,) = [node for node in native_nodes(wrong) if node.op_type == "LSTM"]
    (weights,) = [init for init in wrong.graph.initializer if init.name == lstm.input[1]]
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights) + np.float32(0.1), weights.name))
    return wrong
