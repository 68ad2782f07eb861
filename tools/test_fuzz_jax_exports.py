# SPDX-License-Identifier: Apache-2.0
"""tools/fuzz_jax_exports.py without JAX: its cases are a pure function of their seed and span the space it
says; its check passes a stored JAX export that rewrites exactly, and fails, naming the case, where the
rewrite's outputs differ from Keras's; an export that failed is counted."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
from onnx import numpy_helper

import fuzz_jax_exports as fje  # noqa: E402  (beside this file: pytest puts tools/ on sys.path)

JAX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata", "onnx_in", "jax")


def test_cases_are_a_function_of_their_seed_and_span_the_space():
    cases = [fje.draw_case(seed) for seed in range(300)]
    assert cases[:50] == [fje.draw_case(seed) for seed in range(50)]
    layers = [layer for case in cases for layer in case["layers"]]
    assert {case["source"] for case in cases} == set(fje.MASK_SOURCES)
    assert {layer["kind"] for layer in layers} == {"LSTM", "GRU", "SimpleRNN"}
    assert {layer["activation"] for layer in layers} == {layer["recurrent_activation"] for layer in layers} \
        == set(fje.ACTIVATIONS)
    assert {len(case["layers"]) for case in cases} == {1, 2, 3}
    assert {case["initial_state"] for case in cases} == {True, False}
    assert {layer["use_bias"] for layer in layers} == {layer["reset_after"] for layer in layers} == {True, False}


def _stored_case(folder) -> None:
    """The stored export of an unmasked GRU as case 0, its two batches as "post" and "nonpost"."""
    os.makedirs(folder, exist_ok=True)
    shutil.copy(os.path.join(JAX, "plain_gru_nobias_seq.onnx"), os.path.join(folder, "case0.onnx"))
    stored = np.load(os.path.join(JAX, "plain_gru_nobias_seq.npz"))
    arrays = {f"{batch}.{part}": stored[f"{name}.{key}"]
              for batch, name in (("post", "post"), ("nonpost", "rand"))
              for part, key in (("in.0", "in.features"), ("out.0", "out.0"))}
    np.savez(os.path.join(folder, "case0.npz"), **arrays)
    with open(os.path.join(folder, "case0.json"), "w", encoding="utf-8") as out:
        json.dump(dict(fje.draw_case(0), source="none"), out)
    with open(os.path.join(folder, "case1.json"), "w", encoding="utf-8") as out:
        json.dump(dict(fje.draw_case(1), error="ValueError: Reverse scan is not supported"), out)


def test_check_passes_an_exact_rewrite_and_counts_a_failed_export(tmp_path, capsys):
    _stored_case(str(tmp_path))
    assert fje.main(["check", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    counts = json.loads(printed.splitlines()[0])
    assert counts["cases"] == 1 and counts["export failed"] == 1 and counts["comparisons"] >= 4
    assert "FAILING" not in printed and "left as a Loop (1): export: ValueError: Reverse scan" in printed


def test_check_fails_a_rewrite_whose_outputs_differ_from_keras(tmp_path, capsys, monkeypatch):
    """The file matches Keras; a rewrite whose native GRU's bias is off by 0.1 must be reported."""
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    rewrite = mlr.rewrite_onnx

    def off_by_a_bias(model, **options):
        converted = rewrite(model, **options)
        gru = next(node for node in converted.onnx_model.graph.node if node.op_type == "GRU")
        bias = next(t for t in converted.onnx_model.graph.initializer if t.name == gru.input[3])
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(0.1), bias.name))
        return converted
    monkeypatch.setattr(mlr, "rewrite_onnx", off_by_a_bias)
    _stored_case(str(tmp_path))
    assert fje.main(["check", str(tmp_path)]) == 1
    assert "FAILING: case0 post post on onnxruntime: " in capsys.readouterr().out
