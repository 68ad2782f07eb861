# SPDX-License-Identifier: Apache-2.0
"""The three public models of issue 29 the rewriter failed on, smaller but wired the same way.

* A residual stack of LSTMs over spectral frames (``Masking``, or an ``Embedding`` mask), with a
  long time axis: residual ``Add`` s between the layers, and a residual summary (a layer's last
  output added at every step) into the top layer. The top layer's rewrite failed ("rewrite failed:
  AttributeError: 'NoneType' object has no attribute 'is_const'") and it stayed a Loop.
* A ``TimeDistributed`` over a model holding a masked ``SimpleRNN``, under an LSTM: the same failure
  for the LSTM, whose input is the SimpleRNN's last outputs.
* A text generator: ``Embedding(mask_zero)`` -> two LSTMs, their sequences concatenated with the
  embedding and pooled by an attention-weighted average -> ``Dense(softmax)``, converted with the
  batch fixed to 1 as generation code does. In ``mask_mode="any"`` its conversion never ended
  (tf2onnx's transpose optimizer added Reshapes without end; tf_keras with a dynamic or a fixed
  prompt length, Keras 3 with a fixed one); it must end within a generous budget.

And two more found meanwhile: a masked layer over an unmasked one, its mask a model input, failed the
whole conversion; a Dense layer between a Masking and an LSTM, with a static time axis, left the LSTM
a Loop. Each test fails, rather than hangs, past the budget.

Every recurrent layer must come out native, and every output equal Keras's at every position, in
both mask modes where the batch allows it, on onnxruntime and OpenVINO (kerasutil.check_batches).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

# convert: the budget test's subprocess converts with it
from kerasutil import FLAVOUR, check_whole_model, convert, keras, post_padded_tokens, randomize_weights  # noqa: F401
from conftest import CONVERSION_BUDGET
from models import AddOverTime

pytestmark = [pytest.mark.usefixtures("plugin_off", "conversion_budget"), pytest.mark.grid]

layers = keras.layers
FEATURES = 9          # spectral bins (257 in the public model)
UNITS = 6             # LSTM(512) there
STEPS = 30            # a long time axis
LENGTHS = [30, 12, 0, 1, 25]  # a full row, an empty one, lengths in between
VOCAB = 40


class AttentionPool(layers.Layer):
    """textgenrnn's attention-weighted average: ``tanh(x W + b)`` scores, a softmax over time (masked
    steps weigh 0 when ``mask_aware``), the weighted sum of the steps."""

    def __init__(self, mask_aware=True, **kwargs):
        super().__init__(**kwargs)
        self.mask_aware = mask_aware
        self.supports_masking = True

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 1), name="w")
        self.b = self.add_weight(shape=(1,), name="b")

    def call(self, x, mask=None):
        logits = tf.squeeze(tf.tanh(tf.matmul(x, self.w) + self.b), -1)
        weights = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
        if mask is not None and self.mask_aware:
            weights = weights * tf.cast(mask, weights.dtype)
        weights = weights / (tf.reduce_sum(weights, axis=1, keepdims=True) + 1e-7)
        return tf.reduce_sum(x * tf.expand_dims(weights, -1), axis=1)

    def compute_mask(self, x, mask=None):  # pylint: disable=unused-argument
        return None


def residual_stack(mask="masking", batch=None, seed=0):
    """frames -> Masking (or ids -> Embedding) -> LSTM, LSTM + residual, top LSTM over the sum plus
    the last output of an LSTM over it, at every step -> Dense per frame."""
    keras.utils.set_random_seed(seed)
    if mask == "masking":
        inputs = keras.Input((None, FEATURES), batch_size=batch, name="frames")
        x = layers.Masking(0.0)(inputs)
        spec = tf.TensorSpec((batch, None, FEATURES), tf.float32, name="frames")
    else:
        inputs = keras.Input((None,), batch_size=batch, dtype="int32", name="tokens")
        x = layers.Embedding(VOCAB, FEATURES, mask_zero=True)(inputs)
        spec = tf.TensorSpec((batch, None), tf.int32, name="tokens")
    x = layers.LSTM(UNITS, return_sequences=True)(x)
    x = layers.Add()([x, layers.LSTM(UNITS, return_sequences=True)(x)])
    x = AddOverTime()([x, layers.LSTM(UNITS)(x)])
    x = layers.LSTM(UNITS, return_sequences=True)(x)
    model = randomize_weights(keras.Model(inputs, layers.Dense(FEATURES)(x)), seed)
    return model, (spec,)


def _frames(mask, seed=0):
    rng = np.random.default_rng(seed)
    if mask != "masking":
        return post_padded_tokens(LENGTHS, STEPS, VOCAB, seed)
    x = rng.normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)
    for row, length in enumerate(LENGTHS):
        x[row, length:] = 0.0
    return x


def _rows(batch):
    """A batch fed one row at a time (a model whose batch is fixed to 1)."""
    return [[row[None]] for row in batch]


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("mask, batch", [("masking", None), ("masking", 1), ("embedding", None)])
def test_residual_stack(mask, batch, mode):
    model, spec = residual_stack(mask, batch)
    data = _frames(mask)
    check_whole_model(model, spec, _rows(data) if batch == 1 else [[data]], mode, native=4)


# --- TimeDistributed over a model holding a masked SimpleRNN, under an LSTM -------------------------

WORD_LENGTHS = [[5, 2, 1, 5], [3], [], [4, 0, 5], [1, 1, 1, 1]]  # per row, the length of each word
WORDS, CHARS = 4, 5


def nested_time_distributed(batch=1, seed=0):
    """[batch, words, chars, features] -> TimeDistributed(Model(Masking -> SimpleRNN)) -> LSTM.

    Keras 3 gives the LSTM the TimeDistributed's mask; tf_keras gives it none, so a Masking over the
    words' vectors masks it there (an empty word's vector is zeros)."""
    keras.utils.set_random_seed(seed)
    word = keras.Input((None, FEATURES), name="word")
    inner = keras.Model(word, layers.SimpleRNN(5)(layers.Masking(0.0)(word)))
    chars = keras.Input((None, None, FEATURES), batch_size=batch, name="chars")
    x = layers.TimeDistributed(inner)(chars)
    if FLAVOUR == "tf_keras":
        x = layers.Masking(0.0)(x)
    model = randomize_weights(keras.Model(chars, layers.LSTM(4, return_sequences=True)(x)), seed)
    return model, (tf.TensorSpec((batch, None, None, FEATURES), tf.float32, name="chars"),)


def _words(seed=0):
    rng = np.random.default_rng(seed)
    x = np.zeros((len(WORD_LENGTHS), WORDS, CHARS, FEATURES), np.float32)
    for row, words in enumerate(WORD_LENGTHS):
        for index, length in enumerate(words):
            x[row, index, :length] = rng.normal(size=(length, FEATURES))
    return x


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("batch", [1, None])
def test_nested_time_distributed(batch, mode):
    model, spec = nested_time_distributed(batch)
    data = _words()
    if mode == "post":  # the words of a row come first: the outer mask is post-padded except for [4, 0, 5]
        data = data[[0, 1, 2, 4]]
    check_whole_model(model, spec, _rows(data) if batch == 1 else [[data]], mode, native=2)


# --- a masked layer over an unmasked one, the mask a model input ----------------------------------

def masked_over_unmasked(seed=0):
    """frames -> SimpleRNN (no mask: the plugin makes it native) -> LSTM(mask=mask input). The mask is
    broadcast to the LSTM's batch, which was read off the SimpleRNN's loop outputs, removed when that
    loop was rewritten: the conversion itself failed ("Cannot find node with output ...")."""
    keras.utils.set_random_seed(seed)
    frames = keras.Input((None, FEATURES), name="frames")
    mask = keras.Input((None,), dtype="bool", name="mask")
    x = layers.SimpleRNN(UNITS, return_sequences=True)(frames)
    model = randomize_weights(keras.Model([frames, mask], layers.LSTM(4, return_sequences=True)(x, mask=mask)), seed)
    return model, (tf.TensorSpec((None, None, FEATURES), tf.float32, name="frames"),
                   tf.TensorSpec((None, None), tf.bool, name="mask"))


@pytest.mark.parametrize("mode", ["post", "any"])
def test_masked_layer_over_an_unmasked_one(mode):
    model, spec = masked_over_unmasked()
    mask = np.arange(STEPS)[None, :] < np.array(LENGTHS)[:, None]
    if mode == "any":
        mask[1, :5] = False  # pre-padded
    frames = np.random.default_rng(1).normal(size=mask.shape + (FEATURES,)).astype(np.float32)
    check_whole_model(model, spec, [[frames, mask]], mode, native=2)


# --- a Dense layer between the mask and the LSTM, with a static time axis ----------------------------

def dense_over_masking(batch=None, seed=0):
    """frames of a fixed length -> Masking -> Dense -> LSTM. Keras 3 writes the loop's bound as the
    static number of steps, and the Dense layer's tensordot hides that length from tf2onnx's shapes when
    the batch is dynamic: the layer was left a Loop ("the loop may stop before its last time step")."""
    keras.utils.set_random_seed(seed)
    frames = keras.Input((STEPS, FEATURES), batch_size=batch, name="frames")
    x = layers.Dense(5)(layers.Masking(0.0)(frames))
    model = randomize_weights(keras.Model(frames, layers.LSTM(UNITS, return_sequences=True)(x)), seed)
    return model, (tf.TensorSpec((batch, STEPS, FEATURES), tf.float32, name="frames"),)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("batch", [None, 1])
def test_dense_between_the_mask_and_the_layer_with_a_static_time_axis(batch, mode):
    model, spec = dense_over_masking(batch)
    data = _frames("masking")
    if mode == "any":
        data[1, :4] = 0.0  # pre-padded
    check_whole_model(model, spec, _rows(data) if batch == 1 else [[data]], mode, native=1)


# --- the text generator, converted with a batch of 1 -------------------------------------------------

def text_generator(mask_aware=True, seed=0):
    """ids -> Embedding(mask_zero) -> LSTM -> LSTM; [embedding, lstm 1, lstm 2] -> attention pooling
    -> Dense(softmax), the batch fixed to 1."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((None,), batch_size=1, dtype="int32", name="ids")
    embedded = layers.Embedding(VOCAB, 8, mask_zero=True)(ids)
    first = layers.LSTM(UNITS, return_sequences=True)(embedded)
    second = layers.LSTM(UNITS, return_sequences=True)(first)
    pooled = AttentionPool(mask_aware)(layers.Concatenate()([embedded, first, second]))
    model = randomize_weights(keras.Model(ids, layers.Dense(VOCAB, activation="softmax")(pooled)), seed)
    return model, (tf.TensorSpec((1, None), tf.int32, name="ids"),)


def _prompts(mode):
    """Single-row batches: a full prompt, shorter ones, an empty one; with holes in "any"."""
    tokens = post_padded_tokens([12, 5, 0, 1], 12, VOCAB)
    if mode == "any":
        tokens = np.concatenate([tokens, tokens[:2]])
        tokens[4, :4] = 0           # pre-padded
        tokens[5, 1:8:2] = 0        # holes
    return _rows(tokens)


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("mask_aware", [True, False], ids=["masked softmax", "plain softmax"])
def test_text_generator(mask_aware, mode):
    model, spec = text_generator(mask_aware)
    check_whole_model(model, spec, _prompts(mode), mode, native=2)


CONVERT_GENERATOR = """
import sys, time
import tensorflow as tf
sys.path.insert(0, {tests!r})
import test_real_shapes as shapes
import masked_lstm_rewriter as mlr
model, _ = shapes.text_generator()
for steps in (None, 12):  # generation code's signature, and a fixed prompt length (it hung in Keras 3)
    start = time.monotonic()
    with mlr.enable(mask_mode="any"):
        shapes.convert(model, (tf.TensorSpec((1, steps), tf.int32, name="ids"),), rewriter=mlr.make_rewriter("any"))
    report = mlr.last_report()
    assert report.rewritten and not report.left_as_loop, str(report)
    print("(1, %s) converted in %.1f s" % (steps, time.monotonic() - start))
"""


def test_text_generator_converts_within_a_budget():
    """A hang detector, not a benchmark: the conversions with the batch fixed to 1, in a process of
    their own (a hung one is killed), must end well within ``CONVERSION_BUDGET``; they take seconds."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MLR_KERAS=FLAVOUR)
    try:
        done = subprocess.run([sys.executable, "-c", "import conftest\n" + CONVERT_GENERATOR.format(tests=tests)],
                              cwd=tests, env=env, capture_output=True, text=True, timeout=CONVERSION_BUDGET)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the text generator's conversion (mask_mode='any', batch 1) took over {CONVERSION_BUDGET} s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("converted in") == 2, done.stdout
