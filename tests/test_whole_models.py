# SPDX-License-Identifier: Apache-2.0
"""Whole models shaped like published Keras code, with the layers users put around masked
recurrent layers: a stacked Bidirectional sentiment classifier, an NER tagger
(``TimeDistributed(Dense)``), an attention classifier with mask-aware pooling, a residual
LSTM + GRU stack with max pooling, dropout and ``LayerNormalization`` between layers, a
``Masking`` time-series model and an encoder-decoder whose decoder starts from the encoder's
states. Each must come out with every masked layer native (no ``Loop``) and match Keras at every
output, in both mask modes, under the sampled signature forms and on every runtime.
"""

import pytest
import tensorflow as tf

from kerasutil import check_whole_model, keras, post_padded_tokens, randomize_weights, token_spec
from models import padded_features

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

layers = keras.layers
LENGTHS = [9, 4, 0, 6, 1]  # a full row, an empty one, lengths in between
STEPS = 9
VOCAB = 50


def _tokens():
    return keras.Input((None,), dtype="int32", name="tokens")


def _embedded(tokens):
    return layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)


def sentiment():
    tokens = _tokens()
    x = layers.Bidirectional(layers.LSTM(6, return_sequences=True))(_embedded(tokens))
    x = layers.Bidirectional(layers.LSTM(5))(x)
    return keras.Model(tokens, layers.Dense(1, activation="sigmoid")(x))


def ner_tagger():
    tokens = _tokens()
    x = layers.Dropout(0.3)(_embedded(tokens))
    x = layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x)
    return keras.Model(tokens, layers.TimeDistributed(layers.Dense(4, activation="softmax"))(x))


def attention_classifier():
    tokens = _tokens()
    h = layers.LSTM(6, return_sequences=True)(_embedded(tokens))
    pooled = layers.GlobalAveragePooling1D()(layers.Attention()([h, h]))
    return keras.Model(tokens, layers.Dense(2)(pooled))


def residual_stack():
    tokens = _tokens()
    lower = layers.LSTM(6, return_sequences=True)(_embedded(tokens))
    upper = layers.GRU(6, return_sequences=True)(lower)
    return keras.Model(tokens, layers.Dense(2)(layers.GlobalMaxPooling1D()(layers.Add()([lower, upper]))))


def normalized_stack():
    tokens = _tokens()
    h = layers.LSTM(6, dropout=0.2, recurrent_dropout=0.2, return_sequences=True)(_embedded(tokens))
    return keras.Model(tokens, layers.GRU(4, go_backwards=True)(layers.LayerNormalization()(h)))


def time_series():
    features = keras.Input((None, 3), name="features")
    x = layers.GRU(6, return_sequences=True, reset_after=False)(layers.Masking(mask_value=-1.0)(features))
    x = layers.Bidirectional(layers.GRU(5, return_sequences=True), merge_mode="mul")(x)
    return keras.Model(features, layers.GlobalAveragePooling1D()(x))


def encoder_decoder():
    source, target = (keras.Input((None,), dtype="int32", name=name) for name in ("source", "target"))
    _, h, c = layers.LSTM(6, return_state=True)(_embedded(source))
    y = layers.LSTM(6, return_sequences=True)(_embedded(target), initial_state=[h, c])
    return keras.Model([source, target], layers.Dense(5, activation="softmax")(y))


def _token_inputs():
    return (token_spec(),), [post_padded_tokens(LENGTHS, STEPS, VOCAB)]


def _features():
    return (tf.TensorSpec((None, None, 3), tf.float32, name="features"),), [padded_features(LENGTHS, STEPS, -1.0)]


def _source_and_target():
    return ((token_spec("source"), token_spec("target")),
            [post_padded_tokens(LENGTHS, STEPS, VOCAB), post_padded_tokens([3, 7, 2, 9, 5], STEPS, VOCAB, seed=2)])


MODELS = {  # name: (builder, () -> (spec, inputs), native recurrent nodes)
    "sentiment": (sentiment, _token_inputs, 4),
    "ner tagger": (ner_tagger, _token_inputs, 2),
    "attention classifier": (attention_classifier, _token_inputs, 1),
    "residual stack": (residual_stack, _token_inputs, 2),
    "normalized stack": (normalized_stack, _token_inputs, 2),
    "time series": (time_series, _features, 3),
    # Keras 3 passes the decoder no mask when it gets initial_state (tf2onnx makes that loop native
    # itself); tf_keras masks it, and the plugin rewrites both
    "encoder-decoder": (encoder_decoder, _source_and_target, 2),
}


@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("name", list(MODELS))
def test_whole_model(name, mode):
    """Under ``enable()``, as the CLI converts (Keras 3 traces ``TimeDistributed`` right only there)."""
    build, data, native = MODELS[name]
    keras.utils.set_random_seed(0)
    model = randomize_weights(build())
    spec, inputs = data()
    check_whole_model(model, spec, [inputs], mode, native)
