# SPDX-License-Identifier: Apache-2.0
"""Small masked Keras models (one per mask source) and matching batches, for both flavours."""

import numpy as np
import tensorflow as tf

from kerasutil import FLAVOUR, LENGTHS, STEPS, keras, mask_from_lengths, post_padded_tokens, randomize_weights

UNITS = 4
FEATURES = 3


def embedding_model(*layers, vocab=50, seed=0):
    """tokens -> Embedding(mask_zero=True) -> layers; returns (model, spec, inputs)."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, FEATURES + 2, mask_zero=True)(tokens)
    outputs = _apply(layers, x)
    model = randomize_weights(keras.Model(tokens, outputs), seed)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    return model, spec, [post_padded_tokens(LENGTHS, STEPS, vocab, seed)]


def masking_model(*layers, mask_value=0.0, seed=0):
    """float features -> Masking(mask_value) -> layers; padded steps hold mask_value."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((None, FEATURES), name="features")
    outputs = _apply(layers, keras.layers.Masking(mask_value=mask_value)(x_in))
    model = randomize_weights(keras.Model(x_in, outputs), seed)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),)
    return model, spec, [padded_features(LENGTHS, STEPS, mask_value, seed)]


def explicit_mask_model(layer, seed=0):
    """A boolean mask model input passed as ``mask=``."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((None, FEATURES), name="features")
    m_in = keras.Input((None,), dtype="bool", name="mask")
    model = randomize_weights(keras.Model([x_in, m_in], layer(x_in, mask=m_in)), seed)
    spec = (tf.TensorSpec((None, None, FEATURES), tf.float32, name="features"),
            tf.TensorSpec((None, None), tf.bool, name="mask"))
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(len(LENGTHS), STEPS, FEATURES)).astype(np.float32)
    return model, spec, [features, mask_from_lengths(LENGTHS, STEPS)]


def token_mask(tokens):
    """``tokens > 0`` computed in the model's graph."""
    return keras.ops.greater(tokens, 0) if FLAVOUR == "keras3" else tf.greater(tokens, 0)


def computed_mask_model(layer, seed=0):
    """A mask computed in the graph from the token ids (``tokens > 0``), passed as ``mask=``."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(50, FEATURES)(tokens)
    model = randomize_weights(keras.Model(tokens, layer(x, mask=token_mask(tokens))), seed)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),)
    return model, spec, [post_padded_tokens(LENGTHS, STEPS, 50, seed)]


def initial_state_model(layer, seed=0, states=("h0", "c0")):
    """Embedding-masked input plus initial states given as model inputs (LSTM: h and c; GRU
    and SimpleRNN: ``states=("h0",)``; a Bidirectional layer: both halves' states).

    Keras 3 drops the Embedding's mask when ``initial_state`` is passed (measured with 3.15), so
    the mask is passed explicitly too."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    state_inputs = [keras.Input((UNITS,), name=name) for name in states]
    x = keras.layers.Embedding(50, FEATURES, mask_zero=True)(tokens)
    initial = state_inputs if len(state_inputs) > 1 else state_inputs[0]
    outputs = layer(x, initial_state=initial, mask=token_mask(tokens))
    model = randomize_weights(keras.Model([tokens] + state_inputs, outputs), seed)
    spec = (tf.TensorSpec((None, None), tf.int32, name="tokens"),) + tuple(
        tf.TensorSpec((None, UNITS), tf.float32, name=name) for name in states)
    rng = np.random.default_rng(seed)
    values = [rng.normal(size=(len(LENGTHS), UNITS)).astype(np.float32) for _ in states]
    return model, spec, [post_padded_tokens(LENGTHS, STEPS, 50, seed)] + values


def padded_features(lengths, steps, mask_value=0.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), steps, FEATURES)).astype(np.float32)
    for row, length in enumerate(lengths):
        x[row, length:] = mask_value
    return x


def _apply(layers, x):
    for layer in layers:
        x = layer(x)
    return x


class AddOverTime(keras.layers.Layer):
    """``sequence + vector`` at every step (a residual summary: a layer's last output added to each
    step of the sequence the layer above reads), passing the sequence's mask on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):  # pylint: disable=unused-argument
        return inputs[0] + tf.expand_dims(inputs[1], 1)

    def compute_mask(self, inputs, mask=None):  # pylint: disable=unused-argument
        return mask[0] if isinstance(mask, (list, tuple)) else mask


class MeanOverTime(keras.layers.Layer):
    """The mean over every step, padded ones included (a pooling that ignores the mask, as a plain
    softmax attention does): the outputs at padded steps count, and no mask goes on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):  # pylint: disable=unused-argument
        return tf.reduce_mean(inputs, axis=1)

    def compute_mask(self, inputs, mask=None):  # pylint: disable=unused-argument
        return None
