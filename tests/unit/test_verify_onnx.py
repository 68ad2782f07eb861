# SPDX-License-Identifier: Apache-2.0
"""``verify`` with an ONNX reference: a file rewritten by ``rewrite_onnx`` checked against the file it
was rewritten from (run on onnxruntime), the batches made from the original's graph inputs; a right
rewrite passes, a wrong one fails, bad input is one line and exit status 2. No Keras."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import cli, verify_batches
from masked_lstm_rewriter.corpus.ops import without_guard
from masked_lstm_rewriter.keras_source import SourceError
from masked_lstm_rewriter.plan.masks import GUARD_MESSAGE
from masked_lstm_rewriter.verification import ERROR, GUARD_EXPECTED, MATCHED, MISMATCH, verify
from masked_lstm_rewriter.verify_reference import OnnxReference, load_reference
from _onnx_files import DATA, perturbed_lstm

STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")        # ids -> Embedding(10) -> LSTM
INITIAL_STATE = os.path.join(DATA, "tf2onnx", "keras3_initial_state_mask_op15.onnx")  # x, m, h0, c0
MASKING = os.path.join(DATA, "tf2onnx", "keras3_masking_gru_op15.onnx")      # x -> Masking -> GRU
JAX_TOKENS = os.path.join(DATA, "jax", "emb_gru_seq.onnx")                     # Embedding(20)
JAX_MASK = os.path.join(DATA, "jax", "explicit_mask_gru_seq_t6.onnx")          # features [B, 6, 3], mask [B, 6]
KINDS = ("single", "post-padded", "pre-padded", "holes")


@pytest.fixture(scope="module")
def post():
    """STOCK rewritten in "post" mode: native LSTM behind the post-padding guard."""
    return mlr.rewrite_onnx(STOCK, mask_mode="post").onnx_model


def statuses(result, runtime="onnxruntime") -> dict:
    return {check.batch.split()[0]: check.status for check in result.checks if check.runtime == runtime}


def roles_of(path: str, candidate) -> list:
    reference = load_reference(path, [output.name for output in candidate.graph.output])
    return verify_batches.input_roles(reference.specs, candidate, reference)


def test_a_post_rewrite_verifies_against_its_original(post):
    result = verify(STOCK, post)
    assert result.ok, result.format()
    assert result.guarded and result.model == STOCK
    assert statuses(result) == dict(zip(KINDS, (MATCHED, MATCHED, GUARD_EXPECTED, GUARD_EXPECTED)))
    assert result.format().splitlines()[-1].startswith(f"verified: the ONNX model matches {STOCK}")


@pytest.mark.parametrize("path, mode, expected", [
    (JAX_MASK, "any", (MATCHED,) * 4),
    (JAX_TOKENS, "any", (MATCHED,) * 4),
    (MASKING, "post", (MATCHED, MATCHED, GUARD_EXPECTED, GUARD_EXPECTED)),
    (INITIAL_STATE, "post", (MATCHED, MATCHED, GUARD_EXPECTED, GUARD_EXPECTED)),
], ids=["jax explicit mask, any", "jax tokens, any", "tf2onnx Masking, post", "tf2onnx initial state, post"])
def test_rewrites_of_other_files_verify(path, mode, expected):
    rewritten = mlr.rewrite_onnx(path, mask_mode=mode).onnx_model
    result = verify(path, rewritten, rows=4, steps=6)
    assert result.ok, result.format()
    assert statuses(result) == dict(zip(KINDS, expected))


def test_the_batches_come_from_the_original_graph(post):
    (tokens,) = roles_of(STOCK, post)
    assert (tokens.name, tokens.kind, tokens.dtype, tokens.vocabulary) == ("ids", verify_batches.TOKENS, np.int32, 10)
    (tokens,) = roles_of(JAX_TOKENS, onnx.load(JAX_TOKENS))
    assert tokens.vocabulary == 20  # the jax file's Embedding table: 20 rows
    roles = roles_of(INITIAL_STATE, onnx.load(INITIAL_STATE))
    assert [role.kind for role in roles] == [verify_batches.FEATURES, verify_batches.MASK] + [verify_batches.OTHER] * 2
    features, mask = roles_of(JAX_MASK, onnx.load(JAX_MASK))
    assert features.shape == (None, 6, 3) and features.mask_value == 0.0 and mask.kind == verify_batches.MASK
    batches = verify_batches.make_batches([features, mask], rows=5, steps=12)
    assert [batch.label for batch in batches] == ["single 1x6", "post-padded 5x6", "pre-padded 5x6", "holes 5x6"]
    for batch in batches:
        valid = batch.masks[6]
        np.testing.assert_array_equal(batch.inputs[1], valid)
        assert np.all(batch.inputs[0][~valid] == 0) and np.all(np.any(batch.inputs[0][valid] != 0, axis=-1))


def test_a_model_proto_is_a_reference_too(post):
    result = verify(onnx.load(STOCK), post)
    assert result.ok and result.model == "the reference ONNX model", result.format()


def test_perturbed_weights_fail(post):
    result = verify(STOCK, perturbed_lstm(post))
    assert not result.ok
    assert statuses(result) == dict(zip(KINDS, (MISMATCH, MISMATCH, GUARD_EXPECTED, GUARD_EXPECTED)))
    assert result.format().splitlines()[-1].startswith("NOT verified: 2 of 4 runs failed")


def test_a_post_rewrite_without_its_guard_fails_on_the_masks_it_cannot_take(post):
    result = verify(STOCK, without_guard(post, GUARD_MESSAGE))
    assert not result.ok and not result.guarded
    assert statuses(result) == dict(zip(KINDS, (MATCHED, MATCHED, MISMATCH, MISMATCH))), result.format()


def test_the_original_runs_every_batch_so_a_guarded_reference_is_refused(post):
    with pytest.raises(SourceError, match="post-padding guard"):
        verify(post, STOCK)
    assert OnnxReference(onnx.load(STOCK), "stock", ["lstm"]).run([np.array([[3, 0]], np.int32)])[0].shape == (1, 2, 4)


def test_a_reference_with_other_inputs_fails_without_running(post):
    result = verify(JAX_MASK, post)
    assert not result.ok and [check.status for check in result.checks] == [ERROR]
    assert "2 input(s) (features, mask), the ONNX model 1 (ids)" in result.format()


def test_the_command_line(post, tmp_path, capsys):
    right, wrong = tmp_path / "right.onnx", tmp_path / "wrong.onnx"
    onnx.save(post, right)
    onnx.save(perturbed_lstm(post), wrong)
    assert cli.main(["verify", STOCK, str(right), "--rows", "3", "--steps", "4"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith(f"verified: {right} matches {STOCK}") and "batch 1/4" in err
    assert cli.main(["verify", STOCK, str(wrong)]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("NOT verified")


@pytest.mark.parametrize("reference, candidate, message", [
    ("{tmp}/missing.onnx", "{right}", "missing.onnx: no such file"),
    (STOCK, "{tmp}/missing.onnx", "missing.onnx: no such file"),
    ("{tmp}/text.onnx", "{right}", "text.onnx: not an ONNX model"),
    (STOCK, "{tmp}/text.onnx", "text.onnx: not an ONNX model"),
    ("{tmp}/model.txt", "{right}", "model.txt: not a reference model"),
    ("{right}", STOCK, "right.onnx: the reference carries the post-padding guard"),
], ids=["missing reference", "missing model", "unreadable reference", "unreadable model", "unknown file",
        "swapped files"])
def test_bad_input_is_one_line_and_exit_2(post, tmp_path, capsys, reference, candidate, message):
    onnx.save(post, tmp_path / "right.onnx")
    (tmp_path / "text.onnx").write_text("not a model")
    (tmp_path / "model.txt").write_text("not a model")
    values = {"tmp": tmp_path, "right": tmp_path / "right.onnx"}
    assert cli.main(["verify", reference.format(**values), candidate.format(**values)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("masked_lstm_rewriter: error: ") \
        and message in lines[0], err
