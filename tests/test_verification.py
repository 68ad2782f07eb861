# SPDX-License-Identifier: Apache-2.0
"""``verify``: a converted model passes, a wrong one fails, and the batches suit the model.

Small models, converted once per module where tests share them: the whole file is meant to take
seconds per flavour."""

import argparse
import logging

import numpy as np
import onnx
import pytest
import tensorflow as tf

from kerasutil import convert, keras, op_counts, randomize_weights
from models import UNITS, embedding_model, explicit_mask_model, masking_model

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import verification, verify_batches
from masked_lstm_rewriter.corpus.ops import without_guard
from masked_lstm_rewriter.plan.masks import GUARD_MESSAGE
from masked_lstm_rewriter.verification import (ERROR, GUARD_EXPECTED, GUARD_MISSING, GUARD_UNEXPECTED, MATCHED,
                                               MISMATCH, verify)

VOCAB = 3  # a tiny vocabulary: a token id drawn past it makes Keras fail
NOT_POST_PADDED = ("pre-padded", "holes")


def lstm():
    return keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)


@pytest.fixture(scope="module")
def post_model():
    """An Embedding-masked LSTM with its sequence and both states as outputs, converted in "post"."""
    model, spec, _ = embedding_model(lstm(), vocab=VOCAB)
    return model, spec, convert(model, spec)


@pytest.fixture(scope="module")
def mask_input_model():
    """Features and an explicit boolean mask in, the sequence and both states out, converted in "any"."""
    model, spec, _ = explicit_mask_model(lstm())
    return model, spec, convert(model, spec, rewriter=mlr.make_rewriter("any"))


def statuses(result, runtime="onnxruntime"):
    """batch kind -> status of ``runtime``'s run."""
    return {check.batch.split()[0]: check.status for check in result.checks if check.runtime == runtime}


def bypass_guard(onnx_model):
    """Copy of ``onnx_model`` with the guard's Split bypassed: the model a rewriter without the guard
    would give."""
    model = without_guard(onnx_model, GUARD_MESSAGE)
    assert model is not None, "the post-mode model has no guard"
    return model


def test_a_right_post_conversion_passes_with_the_guard_firing_where_expected(post_model):
    model, _, onnx_model = post_model
    messages = []
    result = verify(model, onnx_model, progress=messages.append)
    assert result.ok, result.format()
    assert result.guarded
    assert statuses(result) == {"single": MATCHED, "post-padded": MATCHED, "pre-padded": GUARD_EXPECTED,
                                "holes": GUARD_EXPECTED}
    post = next(check for check in result.checks if check.batch.startswith("post-padded"))
    sequence, state_h, state_c = post.outputs
    assert sequence.padded is not None and state_h.padded is None and state_c.padded is None
    assert max(sequence.valid, sequence.padded, state_h.valid) <= 1e-5
    lines = result.format().splitlines()
    assert len(lines) == 2 + 2 * 3 + 2 + 1  # title, header, 3 outputs x 2 runs, 2 guard lines, verdict
    assert lines[-1].startswith("verified:") and "guard fired on the 2 runs" in lines[-1]
    assert len(messages) == 1 + 4 * 2  # loading, then each batch: the reference and onnxruntime
    assert messages[1].startswith("batch 1/4") and "reference" in messages[1]


def test_any_mode_matches_on_every_batch(post_model):
    model, spec, _ = post_model
    result = verify(model, convert(model, spec, rewriter=mlr.make_rewriter("any")))
    assert result.ok, result.format()
    assert not result.guarded
    assert set(statuses(result).values()) == {MATCHED}


def test_a_model_converted_from_other_weights_fails(post_model):
    model, spec, _ = post_model
    other, _, _ = embedding_model(lstm(), vocab=VOCAB, seed=1)
    result = verify(model, convert(other, spec))
    assert not result.ok
    assert statuses(result)["post-padded"] == MISMATCH and statuses(result)["single"] == MISMATCH
    assert result.format().splitlines()[-1].startswith("NOT verified: 2 of 4 runs failed")


def test_a_post_model_without_its_guard_fails_where_the_mask_is_not_post_padded(post_model):
    model, _, onnx_model = post_model
    result = verify(model, bypass_guard(onnx_model))
    assert not result.ok and not result.guarded
    found = statuses(result)
    assert (found["single"], found["post-padded"]) == (MATCHED, MATCHED)
    assert (found["pre-padded"], found["holes"]) == (MISMATCH, MISMATCH), result.format()


def test_a_guard_that_does_not_fire_where_every_output_matches_passes_and_says_so(post_model):
    """A model named as guarded that runs a pre-padded batch right (here the "any" model's first node
    renamed; a model whose guarded mask is not the inputs' padding, in use): no wrong value."""
    model, spec, _ = post_model
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("any"))
    onnx_model.graph.node[0].name = GUARD_MESSAGE + "_renamed"
    result = verify(model, onnx_model)
    assert result.ok
    assert [statuses(result)[kind] for kind in NOT_POST_PADDED] == [GUARD_MISSING, GUARD_MISSING]
    assert "the guard did not fire on 2 runs whose inputs are not post-padded, and every output matched" in \
        result.verdict()


def test_a_guard_that_fires_on_a_post_padded_batch_fails(post_model):
    model, _, onnx_model = post_model
    roles = verify_batches.input_roles([tf.TensorSpec((None, None), tf.int32, name="tokens")], onnx_model, model)
    batch = next(b for b in verify_batches.make_batches(roles) if b.kind == "post-padded")
    plan = verification._Plan(roles, ["y"], True, 1e-5)  # pylint: disable=protected-access

    def guard_fails(feeds):
        raise RuntimeError(f"Split node. Name:'{GUARD_MESSAGE}__12' Status Message: Invalid value")
    check = verification.check_batch("onnxruntime", guard_fails, batch, [np.zeros(1)], plan)
    assert check.status == GUARD_UNEXPECTED and not check.ok


def test_token_ids_stay_below_the_embedding_vocabulary(post_model):
    model, spec, onnx_model = post_model
    for keras_model in (model, None):  # from the Embedding layer, and from the ONNX Gather (a SavedModel)
        roles = verify_batches.input_roles(list(spec), onnx_model, keras_model)
        assert roles[0].kind == verify_batches.TOKENS and roles[0].vocabulary == VOCAB
    batches = verify_batches.make_batches(roles, rows=5, steps=6)
    assert [b.kind for b in batches] == ["single", "post-padded", "pre-padded", "holes"]
    for batch in batches:
        tokens, mask = batch.inputs[0], batch.masks[6]
        assert tokens.max() < VOCAB and np.all(tokens[mask] > 0) and np.all(tokens[~mask] == 0)
    lengths = batches[1].masks[6].sum(axis=1)
    assert 0 in lengths and 6 in lengths and len(set(lengths)) >= 3  # an empty, a full, and other rows
    assert not batches[2].post_padded and not batches[3].post_padded and batches[1].post_padded


def test_a_masking_model_gets_its_mask_value_at_padded_steps():
    model, spec, _ = masking_model(keras.layers.GRU(UNITS, return_sequences=True), mask_value=-1.0)
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter("any"))
    result = verify(model, onnx_model)
    assert result.ok, result.format()
    assert set(statuses(result)) == {"single", "post-padded", "pre-padded", "holes"}
    roles = verify_batches.input_roles(list(spec), onnx_model, model)
    assert roles[0].mask_value == -1.0
    for batch in verify_batches.make_batches(roles):
        features, mask = batch.inputs[0], batch.masks[batch.steps]
        assert np.all(features[~mask] == -1.0) and not np.any(np.all(features[mask] == -1.0, axis=-1))


def test_a_stock_tf2onnx_model_with_a_loop_verifies(post_model):
    model, spec, _ = post_model
    stock = convert(model, spec, rewriter=None)
    assert op_counts(stock)["Loop"] >= 1
    result = verify(model, stock)
    assert result.ok, result.format()
    assert set(statuses(result).values()) == {MATCHED}


def test_an_explicit_mask_input_is_fed_the_batch_mask(mask_input_model):
    model, spec, onnx_model = mask_input_model
    result = verify(model, onnx_model, rows=3, steps=5)
    assert result.ok, result.format()
    assert all(len(check.outputs) == 3 for check in result.checks)
    roles = verify_batches.input_roles(list(spec), onnx_model, model)
    assert [role.kind for role in roles] == [verify_batches.FEATURES, verify_batches.MASK]
    for batch in verify_batches.make_batches(roles, rows=3, steps=5):
        np.testing.assert_array_equal(batch.inputs[1], batch.masks[5])


def test_an_unmasked_model_gets_random_batches_and_fixed_sizes_are_kept():
    keras.utils.set_random_seed(0)
    features = keras.Input((None, 3), name="features")
    model = randomize_weights(keras.Model(features, keras.layers.GRU(UNITS)(features)))
    onnx_model = convert(model, (tf.TensorSpec((None, None, 3), tf.float32, name="features"),))
    result = verify(model, onnx_model)
    assert result.ok, result.format()
    assert [check.batch for check in result.checks] == ["single 1x12", "random 5x12"]
    fixed = onnx.ModelProto()
    fixed.CopyFrom(onnx_model)
    for dim, size in zip(fixed.graph.input[0].type.tensor_type.shape.dim, (2, 7)):
        dim.dim_value = size
    result = verify(model, fixed)
    assert result.ok, result.format()
    assert [check.batch for check in result.checks] == ["random 2x7"]


@pytest.mark.parametrize("kind", ["SavedModel", "Keras file"])
def test_a_model_on_disk_verifies(post_model, tmp_path, kind):
    """A SavedModel (TensorFlow runs its serving signature; its vocabulary comes from the ONNX
    Gather) and a .keras file (loaded with keras_source.load)."""
    model, spec, onnx_model = post_model
    if kind == "SavedModel":
        path = tmp_path / "saved"
        function = tf.function(lambda tokens: model(tokens, training=False), input_signature=spec)
        module = tf.Module()
        module.weights = list(model.weights)  # the variables alone: saving the Keras model traces every layer
        tf.saved_model.save(module, str(path), signatures={"serving_default": function})
        onnx_model = mlr.convert(str(path)).onnx_model
    else:
        path = tmp_path / "model.keras"
        model.save(path)
    result = verify(str(path), onnx_model)
    assert result.ok, result.format()
    assert statuses(result)["pre-padded"] == GUARD_EXPECTED


@pytest.mark.parametrize("kind", ["Keras model", "SavedModel"])
def test_float_token_ids_are_fed_within_the_vocabulary(tmp_path, kind):
    """tf_keras's ``Input`` is float32 unless told otherwise, so ids often reach an Embedding as
    floats: they are token ids too (the Embedding or, for a SavedModel, the ONNX Gather says the
    vocabulary), never a negative one, which made tf_keras fail ("indices[0,9] = -1 is not in [0, 3)")."""
    tokens = keras.Input(shape=(None,), name="tokens")  # float32
    model = keras.Model(tokens, lstm()(keras.layers.Embedding(VOCAB, 4, mask_zero=True)(tokens)))
    randomize_weights(model)
    spec = [tf.TensorSpec((None, None), tf.float32, name="tokens")]
    reference = model
    if kind == "SavedModel":
        reference = str(tmp_path / "saved")
        function = tf.function(lambda tokens: model(tokens, training=False), input_signature=spec)
        module = tf.Module()
        module.weights = list(model.weights)
        tf.saved_model.save(module, reference, signatures={"serving_default": function})
    result = verify(reference, convert(model, spec))
    assert result.ok, result.format()
    assert statuses(result) == {"single": MATCHED, "post-padded": MATCHED, "pre-padded": GUARD_EXPECTED,
                                "holes": GUARD_EXPECTED}


def test_the_openvino_runtime(post_model):
    pytest.importorskip("openvino")
    model, _, onnx_model = post_model
    result = verify(model, onnx_model, runtime="openvino")
    assert result.ok, result.format()
    assert statuses(result, "openvino") == {"single": MATCHED, "post-padded": MATCHED,
                                            "pre-padded": GUARD_EXPECTED, "holes": GUARD_EXPECTED}
    assert not verify(model, bypass_guard(onnx_model), runtime=("openvino",)).ok


def test_the_default_progress_is_an_info_log(post_model, caplog):
    model, _, onnx_model = post_model
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        verify(model, onnx_model, rows=2, steps=3)
    assert any(record.getMessage().startswith("verify: batch 1/4") for record in caplog.records)


def test_an_onnx_model_with_other_inputs_fails_without_running(post_model, mask_input_model):
    model, _, _ = post_model
    result = verify(model, mask_input_model[2])
    assert not result.ok and [check.status for check in result.checks] == [ERROR]
    assert "1 input(s) (tokens), the ONNX model 2" in result.format()


def parse(*argv):
    return verification.add_arguments(argparse.ArgumentParser()).parse_args([str(arg) for arg in argv])


def test_the_command_line_exit_status(post_model, tmp_path, capsys):
    model, spec, onnx_model = post_model
    model_path, right, wrong = tmp_path / "model.keras", tmp_path / "right.onnx", tmp_path / "wrong.onnx"
    model.save(model_path)
    onnx.save(onnx_model, right)
    onnx.save(bypass_guard(onnx_model), wrong)
    (tmp_path / "text.onnx").write_text("not a model")
    assert verification.run(parse(model_path, right, "--rows", 3, "--steps", 4)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("verified:") and "masked_lstm_rewriter: batch 1/4" in err
    assert verification.run(parse(model_path, wrong, "--runtime", "all")) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("NOT verified")
    for bad in (tmp_path / "missing.onnx", tmp_path / "text.onnx"):
        assert verification.run(parse(model_path, bad)) == 2
        err = capsys.readouterr().err
        assert err.startswith("masked_lstm_rewriter: error: ") and len(err.strip().splitlines()) == 1, err
    assert verification.run(parse(tmp_path / "missing.keras", right)) == 2
    with pytest.raises(SystemExit):
        parse(model_path, right, "--rows", 0)


def test_a_word_and_character_tagger_converts_and_verifies(tmp_path):
    """Word ids and each word's character ids (a TimeDistributed LSTM reads them) feed a Bidirectional
    LSTM: its mask combines both inputs', so verify's pre-padded words leave it post-padded; the mask
    Keras computes for the Concatenate leaves a node the rewrite makes dead, which no check counts."""
    layers = keras.layers
    words = keras.Input(shape=(None,), dtype="int32", name="words")
    chars = keras.Input(shape=(None, 6), dtype="int32", name="chars")
    embedded = layers.TimeDistributed(layers.Embedding(9, 4, mask_zero=True))(chars)
    merged = layers.Concatenate()([layers.Embedding(9, 4, mask_zero=True)(words),
                                   layers.TimeDistributed(layers.LSTM(5))(embedded)])
    tagged = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(merged)
    model = keras.Model([words, chars], layers.Dense(3)(tagged))
    randomize_weights(model)
    path = tmp_path / "tagger.onnx"
    _, report = mlr.convert(model, path)
    assert not report.known_wrong and report.rewritten, str(report)
    result = verify(model, str(path))
    assert result.ok, result.format()
