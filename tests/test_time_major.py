# SPDX-License-Identifier: Apache-2.0
"""tf_keras recurrent layers with ``time_major=True``: native ONNX ops, equal to Keras everywhere.

Such a layer reads its input as [T, B, F] and returns its sequence as [T, B, H]; the mask Keras
hands it is [T, B] (a ``Masking`` or an ``Embedding(mask_zero=True)`` over the [T, B, ...] input
computes it that way round, and an explicit ``mask=`` must be so too). Its loop unstacks the input
and ``expand_dims(mask, -1)`` as they are, without the transposes of a batch-major layer. A
``Bidirectional`` of such layers reverses its backward half's sequence back over axis 0.

Every check compares every output (the sequence, the last output, the final states) at every
position, padded ones included, on batches with rows of different lengths, a full row and an
empty row (in ``"any"`` also rows padded before and between valid steps), with a dynamic batch and
number of steps, on every runtime of ``runtimes.py``. Keras 3 has no ``time_major``: the module
is skipped there.
"""

import numpy as np
import onnx
import pytest
import tensorflow as tf

import masked_lstm_rewriter as mlr
import runtimes
from kerasutil import (FLAVOUR, assert_matches_keras, convert, keras, layer_directions, native_layers, onnx_outputs,
                       op_counts, randomize_weights)

pytestmark = [
    pytest.mark.skipif(FLAVOUR != "tf_keras", reason="time_major is a tf_keras (Keras 2) argument: "
                       "Keras 3's recurrent layers have none"),
    pytest.mark.grid,  # a sample of each parametrized grid (tests/grid.py)
]

UNITS = 4
FEATURES = 3
VOCAB = 20
OPS = {"LSTM": "LSTM", "GRU": "GRU", "SimpleRNN": "RNN"}

# batch-major [B, T] masks (transposed to [T, B] when fed): rows of different lengths, a full row, an
# empty row; in "any" also a pre-padded row and one with holes
POST_PADDED = np.array([[1, 1, 1, 1, 1, 1],
                        [1, 1, 0, 0, 0, 0],
                        [0, 0, 0, 0, 0, 0],
                        [1, 1, 1, 1, 0, 0]], bool)
NOT_POST_PADDED = np.array([[0, 0, 1, 1, 1, 1],
                            [1, 0, 1, 0, 0, 1],
                            [0, 0, 0, 0, 0, 0],
                            [1, 1, 1, 1, 1, 1]], bool)


def recurrent(kind, **options):
    return getattr(keras.layers, kind)(UNITS, time_major=True, **options)


# --- models: one per mask source, each over a [T, B, ...] input --------------------------------

def masking_model(layer, seed=0):
    """float features [T, B, F] -> Masking -> layer (the mask: steps whose features are all 0)."""
    keras.utils.set_random_seed(seed)
    features = keras.Input(batch_shape=(None, None, FEATURES), name="features")
    model = keras.Model(features, layer(keras.layers.Masking()(features)))
    return randomize_weights(model, seed), (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)


def embedding_model(layer, seed=0):
    """token ids [T, B] -> Embedding(mask_zero=True) -> layer."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input(batch_shape=(None, None), dtype="int32", name="tokens")
    model = keras.Model(tokens, layer(keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(tokens)))
    return randomize_weights(model, seed), (tf.TensorSpec((None, None), tf.int32, name="tokens"),)


def explicit_mask_model(layer, seed=0):
    """float features [T, B, F] and a bool mask [T, B] model input, passed as ``mask=``."""
    keras.utils.set_random_seed(seed)
    features = keras.Input(batch_shape=(None, None, FEATURES), name="features")
    mask = keras.Input(batch_shape=(None, None), dtype="bool", name="mask")
    model = keras.Model([features, mask], layer(features, mask=mask))
    return randomize_weights(model, seed), (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
                                            tf.TensorSpec((None, None), tf.bool, name="mask"))


def unmasked_model(layer, seed=0):
    keras.utils.set_random_seed(seed)
    features = keras.Input(batch_shape=(None, None, FEATURES), name="features")
    return randomize_weights(keras.Model(features, layer(features)), seed), \
        (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)


MODELS = {"masking": masking_model, "embedding": embedding_model, "explicit": explicit_mask_model}


def time_major_batch(source: str, mask_bt: np.ndarray, seed: int = 1) -> list:
    """The model's inputs for the batch-major ``mask_bt`` [B, T], fed time-major. Padded steps hold
    garbage where the mask is a model input of its own, zeros (features) or id 0 otherwise."""
    rng = np.random.default_rng(seed)
    mask = mask_bt.T  # [T, B]
    if source == "embedding":
        return [np.where(mask, rng.integers(1, VOCAB, size=mask.shape), 0).astype(np.int32)]
    features = rng.normal(size=mask.shape + (FEATURES,)).astype(np.float32)
    if source == "explicit":
        return [features, mask]
    features[~mask] = 0.0
    return [features]


def batches_for(source: str, mode: str) -> list:
    """Two post-padded batches; in "any" also two that are not."""
    masks = [POST_PADDED] + ([NOT_POST_PADDED] if mode == "any" else [])
    return [time_major_batch(source, mask, seed) for mask in masks for seed in (1, 2)]


def check(model, spec, batches, mode: str, op: str, natives: int = 1, by_plugin: bool = True):
    """Converted with ``mask_mode=mode``: every layer native (``natives`` ``op`` layers, a bidirectional
    node counting as its two halves, no Loop; made so by the plugin unless not ``by_plugin``), and equal
    to Keras at every position on every runtime and batch. Returns the ONNX model."""
    onnx_model = convert(model, spec, rewriter=mlr.make_rewriter(mode))
    report = mlr.last_report()
    assert (bool(report.rewritten) or not by_plugin) and not report.left_as_loop, str(report)
    counts = op_counts(onnx_model)
    assert counts["Loop"] == 0 and native_layers(onnx_model)[op] == natives, counts
    for runtime in runtimes.runtimes():
        for batch in batches:
            assert_matches_keras(model, onnx_model, spec, batch, runtime)
    return onnx_model


def assert_guard_fails(onnx_model, spec, source: str) -> None:
    """In "post", a batch that is not post-padded (in time, whatever the layout) is an error."""
    with pytest.raises(Exception, match="not post-padded"):
        onnx_outputs(onnx_model, spec, time_major_batch(source, NOT_POST_PADDED))


# --- the grid ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("source", sorted(MODELS))
@pytest.mark.parametrize("kind", sorted(OPS))
def test_mask_sources(kind, source, mode):
    """Each mask source, its [T, B] mask read as Keras reads it."""
    model, spec = MODELS[source](recurrent(kind, return_sequences=True, return_state=True))
    onnx_model = check(model, spec, batches_for(source, mode), mode, OPS[kind])
    if mode == "post":
        assert_guard_fails(onnx_model, spec, source)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("return_state", [True, False])
@pytest.mark.parametrize("return_sequences", [True, False])
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", sorted(OPS))
def test_directions_and_outputs(kind, go_backwards, return_sequences, return_state, mode):
    """go_backwards returns its sequence in reversed time order, [T, B, H], as Keras does."""
    layer = recurrent(kind, go_backwards=go_backwards, return_sequences=return_sequences, return_state=return_state)
    source = "embedding" if go_backwards else "masking"
    model, spec = MODELS[source](layer)
    onnx_model = check(model, spec, batches_for(source, mode), mode, OPS[kind])
    assert layer_directions(onnx_model, OPS[kind]) == ["reverse" if go_backwards else "forward"]


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", sorted(OPS))
def test_unmasked(kind, go_backwards):
    """Without a mask the layer is native too (every row runs every step): stock tf2onnx's rewriters
    make such a layer native before the plugin sees the graph, or the plugin does."""
    model, spec = unmasked_model(recurrent(kind, go_backwards=go_backwards, return_sequences=True,
                                           return_state=True))
    full = np.ones_like(POST_PADDED)
    check(model, spec, [time_major_batch("explicit", full, seed)[:1] for seed in (1, 2)], "post", OPS[kind],
          by_plugin=False)


# --- shapes, stacks, the guard -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["post", "any"])
def test_dynamic_batch_and_time(mode):
    """One conversion, fed batches of many sizes (one row, one step, more steps than rows...)."""
    model, spec = masking_model(recurrent("LSTM", go_backwards=True, return_sequences=True, return_state=True))
    onnx_model = check(model, spec, batches_for("masking", mode), mode, "LSTM")
    rng = np.random.default_rng(3)
    for steps, rows in [(1, 1), (6, 1), (1, 3), (2, 5), (11, 16), (25, 7)]:
        lengths = rng.integers(0, steps + 1, size=rows)
        lengths[0] = steps
        mask = np.arange(steps)[None, :] < lengths[:, None]
        if mode == "any":
            mask = rng.permuted(mask, axis=1)
        for runtime in runtimes.runtimes():
            assert_matches_keras(model, onnx_model, spec, time_major_batch("masking", mask, seed=steps), runtime)


def test_static_signature():
    """A fully static [T, B, F] signature: tf2onnx fuses the step's MatMul and Add into a Gemm."""
    model, _ = masking_model(recurrent("GRU", return_sequences=True, return_state=True))
    batch = time_major_batch("masking", POST_PADDED)
    spec = (tf.TensorSpec(batch[0].shape, tf.float32, name="features"),)
    check(model, spec, [batch, time_major_batch("masking", POST_PADDED, seed=2)], "post", "GRU")


@pytest.mark.parametrize("mode", ["post", "any"])
def test_stacked_layers_share_one_mask_plan(mode):
    """Two time-major layers under one Masking read one mask: one guard (or reordering) for both."""
    keras.utils.set_random_seed(0)
    features = keras.Input(batch_shape=(None, None, FEATURES), name="features")
    x = keras.layers.Masking()(features)
    x = recurrent("LSTM", return_sequences=True)(x)
    x = recurrent("GRU", go_backwards=True, return_sequences=True)(x)
    model = randomize_weights(keras.Model(features, x))
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    onnx_model = check(model, spec, batches_for("masking", mode), mode, "LSTM")
    assert op_counts(onnx_model)["GRU"] == 1
    guards = [n for n in onnx_model.graph.node if n.name.startswith(mlr.GUARD_MESSAGE)]
    assert len(guards) == (1 if mode == "post" else 0)
    assert op_counts(onnx_model)["ScatterElements"] == (1 if mode == "any" else 0)


def time_reversals(onnx_model) -> int:
    """Reversals of a whole sequence (Slices with a negative step): Keras's go_backwards order."""
    negative = {i.name for i in onnx_model.graph.initializer if onnx.numpy_helper.to_array(i).tolist() == [-1]}
    return sum(n.op_type == "Slice" and len(n.input) > 4 and n.input[4] in negative for n in onnx_model.graph.node)


@pytest.mark.parametrize("mode", ["post", "any"])
def test_bidirectional(mode):
    """Keras reverses the backward half's [T, B, H] sequence back over axis 0: that pair of reversals
    is skipped, as for a batch-major Bidirectional."""
    model, spec = masking_model(keras.layers.Bidirectional(recurrent("LSTM", return_sequences=True,
                                                                     return_state=True)))
    onnx_model = check(model, spec, batches_for("masking", mode), mode, "LSTM", natives=2)
    assert layer_directions(onnx_model) == ["forward", "reverse"]
    assert time_reversals(onnx_model) == 0


def test_one_row_mask_broadcast():
    """An explicit [T, 1] mask stands for every row, as Keras's where broadcasts it."""
    model, spec = explicit_mask_model(recurrent("LSTM", return_sequences=True, return_state=True))
    features = np.random.default_rng(4).normal(size=(6, 3, FEATURES)).astype(np.float32)
    mask = POST_PADDED[3][:, None]  # [T, 1]
    check(model, spec, [[features, mask]], "post", "LSTM")
