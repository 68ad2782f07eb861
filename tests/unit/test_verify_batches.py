# SPDX-License-Identifier: Apache-2.0
"""The batches ``verify`` feeds never hold an id outside ``[0, vocabulary)`` (float ids read by an
Embedding included: tf_keras's ``Input`` is float32 unless told otherwise), and a reference that
fails says why in its one line. No Keras."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from masked_lstm_rewriter import verification, verify_batches
from masked_lstm_rewriter.corpus.check import first_line
from masked_lstm_rewriter.verify_batches import FEATURES, OTHER, TOKENS, InputSpec

VOCAB = 50
# what TensorFlow 2.21 says when a SavedModel's Embedding is fed -1, and Keras 3 and tf_keras when the layer is
GRAPH_ERROR = ("Graph execution error:\n\nDetected at node model/embedding/embedding_lookup defined at (most recent "
               "call last):\n<stack traces unavailable>\nindices[0,9] = -1 is not in [0, 50)\n\t [[{{node "
               "model/embedding/embedding_lookup}}]] [Op:__inference_signature_wrapper_10387]")
TRACED_ERROR = ("Graph execution error:\n\nDetected at node Gather defined at (most recent call last):\n  File "
                "\"/tmp/x.py\", line 8, in <module>\n\n  File \"/tmp/x.py\", line 6, in f\n\nindices[0,0] = -1 is "
                "not in [0, 50)\n\t [[{{node Gather}}]] [Op:__inference_f_11]")
KERAS3_ERROR = ("Exception encountered when calling Embedding.call().\n\n\x1b[1m{{function_node __wrapped__GatherV2_"
                "device_/job:localhost/replica:0/task:0/device:CPU:0}} indices[0,0] = 60 is not in [0, 50) "
                "[Op:GatherV2]\x1b[0m\n\nArguments received by Embedding.call():\n  • inputs=tf.Tensor(shape=(1, 2), "
                "dtype=float32)")
TF_KERAS_ERROR = ("Exception encountered when calling layer 'embedding' (type Embedding).\n\n{{function_node "
                  "__wrapped__ResourceGather_device_/job:localhost/replica:0/task:0/device:CPU:0}} indices[0,0] = -1 "
                  "is not in [0, 50) [Op:ResourceGather] name: \n\nCall arguments received by layer 'embedding' "
                  "(type Embedding):\n  • inputs=tf.Tensor(shape=(2, 5), dtype=float32)")


def embedding_model(dtype=TensorProto.FLOAT, extra_inputs=(), steps="T"):
    """ids [B, steps] (float: the Cast a Keras Embedding makes of them) -> Gather on a [VOCAB, 4] table;
    ``extra_inputs``: (name, elem type, dims) passed through by Identity."""
    cast = [helper.make_node("Cast", ["ids"], ["ids_int"], to=TensorProto.INT32)] if dtype != TensorProto.INT32 else []
    nodes = cast + [helper.make_node("Gather", ["table", "ids_int" if cast else "ids"], ["emb"])]
    nodes += [helper.make_node("Identity", [name], [f"{name}_out"]) for name, _, _ in extra_inputs]
    table = numpy_helper.from_array(np.zeros((VOCAB, 4), np.float32), "table")
    inputs = [helper.make_tensor_value_info("ids", dtype, ["B", steps])]
    inputs += [helper.make_tensor_value_info(name, elem, dims) for name, elem, dims in extra_inputs]
    outputs = [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["B", "T", 4])]
    outputs += [helper.make_tensor_value_info(f"{name}_out", elem, dims) for name, elem, dims in extra_inputs]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, [table]))


def fed_ids(roles, index=0):
    return [batch.inputs[index] for batch in verify_batches.make_batches(roles, rows=5, steps=12)]


def test_float_ids_read_by_an_embedding_are_token_ids_within_its_vocabulary():
    """A SavedModel of a tf_keras model whose Input is float32: the vocabulary comes from the ONNX Gather."""
    specs = [InputSpec("ids", np.dtype(np.float32), (None, None))]
    (role,) = verify_batches.input_roles(specs, embedding_model())
    assert (role.kind, role.vocabulary) == (TOKENS, VOCAB)
    batches = verify_batches.make_batches([role], rows=5, steps=12)
    assert [batch.kind for batch in batches] == ["single", "post-padded", "pre-padded", "holes"]
    for batch in batches:
        ids = batch.inputs[0]
        assert ids.dtype == np.float32 and ids.min() >= 0 and ids.max() < VOCAB
        assert np.array_equal(ids == 0, ~batch.masks[12])  # 0 exactly where padded


def test_integer_ids_stay_within_the_vocabulary():
    specs = [InputSpec("ids", np.dtype(np.int32), (None, None))]
    (role,) = verify_batches.input_roles(specs, embedding_model(TensorProto.INT32))
    assert (role.kind, role.vocabulary) == (TOKENS, VOCAB)
    assert all(0 <= ids.min() and ids.max() < VOCAB for ids in fed_ids([role]))


def test_other_float_inputs_stay_random_and_integers_are_never_negative():
    """A float [B, H] state that no Gather reads is no token ids; integer features read by nothing
    get 0 and 1, valid ids of any vocabulary."""
    extra = (("h0", TensorProto.FLOAT, ["B", 3]), ("codes", TensorProto.INT64, ["B", "T", 2]))
    specs = [InputSpec("ids", np.dtype(np.float32), (None, None)), InputSpec("h0", np.dtype(np.float32), (None, 3)),
             InputSpec("codes", np.dtype(np.int64), (None, None, 2))]
    roles = verify_batches.input_roles(specs, embedding_model(extra_inputs=extra))
    assert [(role.kind, role.vocabulary) for role in roles] == [(TOKENS, VOCAB), (OTHER, None), (FEATURES, None)]
    assert any(h0.min() < 0 for h0 in fed_ids(roles, 1))
    assert all(set(np.unique(codes)) <= {0, 1} for codes in fed_ids(roles, 2))


@pytest.mark.parametrize("steps", ["T", 20], ids=["dynamic", "static"])
def test_a_float_time_input_beside_sequences_is_fed_as_a_mask_of_their_steps(steps):
    """An ``attention_mask`` of 0s and 1s ([B, T] float) takes the steps of the ids, 1 where they are
    valid: the batches a model that reads it as a mask runs, padded ones included."""
    extra = (("attention", TensorProto.FLOAT, ["B", steps]),)
    spec_steps = None if steps == "T" else steps
    specs = [InputSpec("ids", np.dtype(np.int32), (None, spec_steps)),
             InputSpec("attention", np.dtype(np.float32), (None, spec_steps))]
    roles = verify_batches.input_roles(specs, embedding_model(TensorProto.INT32, extra_inputs=extra, steps=steps))
    assert [role.kind for role in roles] == [TOKENS, verify_batches.MASK]
    batches = verify_batches.make_batches(roles, rows=5, steps=12)
    assert [batch.kind for batch in batches] == ["single", "post-padded", "pre-padded", "holes"]
    for batch in batches:
        ids, attention = batch.inputs
        assert attention.dtype == np.float32 and attention.shape == ids.shape
        np.testing.assert_array_equal(attention, (ids != 0).astype(np.float32))


def test_a_float_input_of_other_static_steps_stays_random():
    extra = (("side", TensorProto.FLOAT, ["B", 7]),)
    specs = [InputSpec("ids", np.dtype(np.int32), (None, 20)), InputSpec("side", np.dtype(np.float32), (None, 7))]
    roles = verify_batches.input_roles(specs, embedding_model(TensorProto.INT32, extra_inputs=extra, steps=20))
    assert [role.kind for role in roles] == [TOKENS, OTHER]


def with_comparison(model, value: int):
    """``model`` whose ids are also compared with ``value`` (a mask computed as ``ids != value``)."""
    model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int32), f"id_{value}"))
    model.graph.node.append(helper.make_node("Equal", ["ids", f"id_{value}"], [f"is_{value}"]))
    return model


def test_a_padding_id_other_than_0_pads_and_is_never_valid():
    """``mask = ids != 1`` (a padding id of 1): padded steps hold 1, valid ones never do."""
    spec = [InputSpec("ids", np.dtype(np.int32), (None, None))]
    (role,) = verify_batches.input_roles(spec, with_comparison(embedding_model(TensorProto.INT32), 1))
    assert role.mask_value == 1
    for batch in verify_batches.make_batches([role], rows=5, steps=12):
        (ids,) = batch.inputs
        valid = batch.masks[12]
        assert (ids[~valid] == 1).all() and (ids[valid] != 1).all()


def test_ids_compared_with_0_too_keep_0_as_padding():
    spec = [InputSpec("ids", np.dtype(np.int32), (None, None))]
    model = with_comparison(with_comparison(embedding_model(TensorProto.INT32), 1), 0)
    (role,) = verify_batches.input_roles(spec, model)
    assert role.mask_value is None
    assert all((ids[~batch.masks[12]] == 0).all()
               for batch in verify_batches.make_batches([role], rows=5, steps=12) for ids in batch.inputs)


def test_unknown_vocabulary_gives_small_positive_ids():
    model = embedding_model(TensorProto.INT32)
    del model.graph.node[:]  # no Gather: nothing says the vocabulary
    (role,) = verify_batches.input_roles([InputSpec("ids", np.dtype(np.int32), (None, None))], model)
    assert (role.kind, role.vocabulary) == (TOKENS, None)
    assert all(0 <= ids.min() and ids.max() < verify_batches.DEFAULT_VOCABULARY for ids in fed_ids([role]))


@pytest.mark.parametrize("text, expected", [
    (GRAPH_ERROR, "indices[0,9] = -1 is not in [0, 50)"),
    (TRACED_ERROR, "indices[0,0] = -1 is not in [0, 50)"),
    (KERAS3_ERROR, "Embedding.call(): indices[0,0] = 60 is not in [0, 50)"),
    (TF_KERAS_ERROR, "layer 'embedding' (type Embedding): indices[0,0] = -1 is not in [0, 50)"),
    ("a plain error\nwith more lines", "a plain error"),
], ids=["graph", "graph-traced", "keras3", "tf_keras", "plain"])
def test_the_line_of_an_error_is_its_cause(text, expected):
    assert first_line(RuntimeError(text)) == expected


class FailingReference:
    def run(self, inputs):
        raise RuntimeError(GRAPH_ERROR)


def test_a_failing_reference_says_why_in_one_line():
    (role,) = verify_batches.input_roles([InputSpec("ids", np.dtype(np.float32), (None, None))], embedding_model())
    batch = verify_batches.make_batches([role])[0]
    (check,) = verification._verify_batch(FailingReference(), {"onnxruntime": None}, batch, None,  # pylint: disable=protected-access
                                          lambda message: None, "batch 1/1")
    assert check.message == "the reference model failed on this batch: indices[0,9] = -1 is not in [0, 50)"
