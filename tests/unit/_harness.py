# SPDX-License-Identifier: Apache-2.0
"""The two verbs every source's tests use, as onnxscript's rewriter tests have them (one helper
for "the rule applies, and the numbers match", one for "the rule does not apply, for this reason"):

* :func:`check_rewrites` -- "rewrites, and the numbers match": nothing of what the source reads is
  left (no ``Loop``, no cuDNN op), the native nodes are the expected ones, and every output of the
  rewritten model equals every reference's at every position, padded ones too, on every runtime
  (but those the report says cannot run a layer exactly), on batches of each mask layout the mode
  takes; in ``"post"`` the guard fails on every batch that is not post-padded;
* :func:`check_refuses` -- "refuses, with this reason": nothing is rewritten, what the source read
  stays as it was, and the report gives the reason (its stable text, as a prefix) for every layer.

They know no source. A *case* (one small class per source, beside that source's helpers) knows the
rest:

================================ ==================================================================
``replaces``                     the op the source reads, gone after a rewrite ("Loop", "CudnnRNNV3")
``rewrite(mode)``                (rewritten ONNX model, report)
``batches(layout)``              [(feeds by input name, {reference: its outputs, in the model's
                                 order})] for ``"post"`` (rows of different lengths, a full row and
                                 an empty row), ``"pre"`` and ``"holes"`` (rows padded before or
                                 between valid steps; none when the mask cannot be so, as one
                                 made from lengths)
``assert_kept(model, report)``   what "stays as it was" means for the source
``atol``, ``rtol``               the tolerance of its references
================================ ==================================================================

The cases: ``_graphs.WhileLoop`` (a TensorFlow While loop: numpy's masked recurrence and the Loop
stock tf2onnx makes), ``test_read_cudnn.CudnnOp`` (Keras 3's cuDNN op: numpy's masked recurrence)
and ``_onnx_files.OnnxFile`` (a Loop in an ONNX file: the file itself on onnxruntime).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re

import numpy as np
import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import targets
from masked_lstm_rewriter.corpus.ops import walk_nodes
from masked_lstm_rewriter.sessions import onnxruntime_session, openvino_compiled

NATIVE_OPS = ("LSTM", "GRU", "RNN")
NOT_POST_LAYOUTS = ("pre", "holes")  # the mask layouts of "any" besides "post"


# onnxruntime as an entry that runs a masked bidirectional LSTM or GRU node no slower than two forward
# nodes (the real one does not): what keeps the emitter's code for such a node checked
FAST = dataclasses.replace(targets.ONNXRUNTIME, bidirectional_slow=())


@contextlib.contextmanager
def fast_bidirectional(fast: bool = True):
    """Within: conversions for onnxruntime see :data:`FAST` (``fast``)."""
    with pytest.MonkeyPatch.context() as patch:
        if fast:
            by_name = targets._BY_NAME  # pylint: disable=protected-access
            patch.setattr(targets, "_BY_NAME", {**by_name, "onnxruntime": FAST})
        yield


def op_counts(model) -> collections.Counter:
    return collections.Counter(node.op_type for node in model.graph.node)


def native_nodes(model) -> list:
    """The native recurrent nodes, a scheduled layer's counted once: its single node."""
    return [node for node in walk_nodes(model.graph) if node.op_type in NATIVE_OPS]


def available_runtimes() -> tuple:
    """The runtimes installed, without OpenVINO when ``MLR_OPENVINO=0``."""
    try:
        import openvino  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return ("onnxruntime",)
    return ("onnxruntime",) if os.environ.get("MLR_OPENVINO", "1") == "0" else ("onnxruntime", "openvino")


def runner(model, runtime: str):
    """``run(feeds) -> [outputs in the model's order]`` on ``runtime``, the model loaded once. Feeds are
    looked up by input name, or by its name before ':' (TensorFlow's "x:0" is fed as "x")."""
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]

    def by_name(feeds):
        return {name: feeds[name] if name in feeds else feeds[name.split(":")[0]] for name in names}
    if runtime == "onnxruntime":
        session = onnxruntime_session(model)
        return lambda feeds: session.run(None, by_name(feeds))
    compiled = openvino_compiled(model, None)
    ports = [compiled.output(o.name) for o in model.graph.output]

    def run_openvino(feeds):
        results = compiled(by_name(feeds))
        return [np.asarray(results[port]) for port in ports]
    return run_openvino


def run(model, feeds: dict, runtime: str = "onnxruntime") -> list:
    return runner(model, runtime)(feeds)


def assert_same_outputs(expected: list, got: list, what: str, atol: float = 1e-5, rtol: float = 0.0) -> None:
    """As many outputs, each of the same shape and within ``atol + rtol * |expected|`` at every position."""
    assert len(expected) == len(got), f"{what}: {len(got)} outputs, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        e, g = np.asarray(e), np.asarray(g)
        assert e.shape == g.shape, f"{what}: output {k} has shape {g.shape}, the reference's {e.shape}"
        np.testing.assert_allclose(g, e, atol=atol, rtol=rtol, err_msg=f"{what}: output {k}")


def masked(report) -> bool:
    return any(layer.masked for layer in report.layers)


def _assert_natives(model, natives) -> None:
    """``natives``: how many native nodes (an int), or which (their op types, in the graph's order)."""
    found = [node.op_type for node in native_nodes(model)]
    if isinstance(natives, int):
        assert len(found) == natives, found
    elif natives is not None:
        assert found == list(natives), found


def check_rewrites(case, mode: str, natives=None, runtimes=None):
    """"Rewrites, and the numbers match" (see the module's docstring). ``runtimes``: the runtimes to
    compare on (default: every one installed). Returns (rewritten model, report)."""
    model, report = case.rewrite(mode)
    counts = op_counts(model)
    assert counts["Loop"] == 0 and counts[case.replaces] == 0, str(report)
    assert report.rewritten and not report.left_as_loop, str(report)
    _assert_natives(model, natives)
    layouts = ("post",) + (NOT_POST_LAYOUTS if mode == "any" and masked(report) else ())
    batches = [(layout, feeds, expected) for layout in layouts for feeds, expected in case.batches(layout)]
    assert batches and layouts[0] == batches[0][0], "a case gives post-padded batches"
    refused_by = {runtime for layer in report.layers for runtime in layer.not_for}  # its activations, say
    compare_on = [r for r in (available_runtimes() if runtimes is None else runtimes) if r not in refused_by]
    assert compare_on, f"no runtime to compare on: {report}"
    for runtime in compare_on:
        run_on = runner(model, runtime)
        for layout, feeds, expected in batches:
            got = run_on(feeds)
            for reference, outputs in expected.items():
                assert_same_outputs(outputs, got, f"{runtime}, {layout}-padded batch, against {reference}",
                                    case.atol, case.rtol)
    if mode == "post" and masked(report):
        assert_guard_fails(case, model)
    return model, report


def assert_guard_fails(case, model) -> None:
    """In "post", onnxruntime fails with the guard's message on each batch that is not post-padded."""
    run_on = runner(model, "onnxruntime")
    for layout in NOT_POST_LAYOUTS:
        for feeds, _ in case.batches(layout):
            with pytest.raises(Exception, match=re.escape(mlr.GUARD_MESSAGE)):
                run_on(feeds)


def check_refuses(case, reason: str, mode: str = "post"):
    """"Refuses, with this reason": no layer rewritten, what the source read stays as it was
    (``case.assert_kept``), and every layer's reason starts with ``reason``. Returns (model, report)."""
    model, report = case.rewrite(mode)
    assert report.layers and not report.rewritten, str(report)
    assert all(layer.detail.startswith(reason) for layer in report.left_as_loop), str(report)
    case.assert_kept(model, report)
    return model, report
