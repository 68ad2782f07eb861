# SPDX-License-Identifier: Apache-2.0
"""The harness of the ONNX-file tests: the files, batches made for their inputs, and the two checks
every source test uses, "rewrites, and the numbers match the file" and "refuses, with this reason".

The oracle is the file itself (and, for Keras's JAX-backend exports, Keras's own outputs stored
beside it): every output at every position, padded ones too, on onnxruntime and OpenVINO, on
batches with rows of different lengths, a full row and an empty row; in ``"any"`` mode also
pre-padded rows and holes, and in ``"post"`` mode the guard must fail on those.
"""

from __future__ import annotations

import collections
import glob
import os

import numpy as np
import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.sessions import onnxruntime_session, openvino_compiled
from masked_lstm_rewriter.verify_batches import graph_inputs

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "testdata", "onnx_in")
TF2ONNX_FILES = sorted(glob.glob(os.path.join(DATA, "tf2onnx", "*.onnx")))
ONNXSIM_FILES = sorted(glob.glob(os.path.join(DATA, "onnxsim", "*.onnx")))  # the same, after onnx-simplifier
TF2ONNX_116_FILES = sorted(glob.glob(os.path.join(DATA, "tf2onnx-1.16", "*.onnx")))  # tf2onnx 1.16.1, TensorFlow 2.19
JAX_FILES = sorted(glob.glob(os.path.join(DATA, "jax", "*.onnx")))
NATIVE_OPS = ("LSTM", "GRU", "RNN")
ATOL = 1e-5
VOCAB = 10  # the stock files' Embedding size (tools/stock_onnx_catalogue.py)
POST_BATCHES = ([7, 3, 1, 0], [5, 5, 2, 7])  # row lengths: a full row (7 steps) and an empty one


def name_of(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def op_counts(model) -> collections.Counter:
    return collections.Counter(node.op_type for node in model.graph.node)


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


def run(model, feeds: dict, runtime: str) -> list:
    if runtime == "onnxruntime":
        return onnxruntime_session(model).run(None, feeds)
    compiled = openvino_compiled(model, None)
    results = compiled(feeds)
    return [np.asarray(results[compiled.output(o.name)]) for o in model.graph.output]


def runtimes() -> tuple:
    try:
        import openvino  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return ("onnxruntime",)
    return ("onnxruntime",) if os.environ.get("MLR_OPENVINO", "1") == "0" else ("onnxruntime", "openvino")


def assert_same_outputs(expected: list, got: list, what: str) -> None:
    assert len(expected) == len(got), what
    for k, (e, g) in enumerate(zip(expected, got)):
        assert e.shape == g.shape, f"{what}: output {k} has shape {g.shape}, the file's {e.shape}"
        error = float(np.max(np.abs(e - g))) if e.size else 0.0
        assert error <= ATOL, f"{what}: output {k} differs by {error}"


def masked(report) -> bool:
    return any(layer.masked for layer in report.layers)


def check_rewrites(original, mode: str, natives: int = None):
    """"Rewrites, and the numbers match": no Loop left (``natives`` native nodes when given), and every
    output of the rewritten model equals the file's, on every runtime, for every mask ``mode`` takes;
    in ``"post"`` the guard fails on a pre-padded batch. Returns (rewritten model, report)."""
    rewritten, report = mlr.rewrite_onnx(original, mask_mode=mode)
    counts = op_counts(rewritten)
    assert counts["Loop"] == 0, str(report)
    assert not report.left_as_loop and report.rewritten, str(report)
    if natives is not None:
        assert sum(counts[op] for op in NATIVE_OPS) == natives, counts
    layouts = ["post"] + (["pre", "holes"] if mode == "any" and masked(report) else [])
    refused_by = {runtime for layer in report.layers for runtime in layer.not_for}  # its activations, say
    for runtime in [r for r in runtimes() if r not in refused_by]:
        for layout in layouts:
            for lengths in POST_BATCHES:
                feeds = feeds_for(original, lengths, layout)
                assert_same_outputs(run(original, feeds, "onnxruntime"), run(rewritten, feeds, runtime),
                                    f"{runtime}, {layout}-padded rows {lengths}")
    if mode == "post" and masked(report):
        with pytest.raises(Exception, match="not post-padded"):
            run(rewritten, feeds_for(original, POST_BATCHES[0], "pre"), "onnxruntime")
    return rewritten, report


def check_refuses(original, reason: str, mode: str = "post"):
    """"Refuses, with this reason": every Loop stays, byte for byte, and the report says why."""
    rewritten, report = mlr.rewrite_onnx(original, mask_mode=mode)
    loops = [n for n in original.graph.node if n.op_type == "Loop"]
    kept = [n for n in rewritten.graph.node if n.op_type == "Loop"]
    assert [n.SerializeToString() for n in kept] == [n.SerializeToString() for n in loops]
    assert report.left_as_loop and not report.rewritten, str(report)
    assert all(reason in layer.detail for layer in report.left_as_loop), str(report)
    return rewritten, report
