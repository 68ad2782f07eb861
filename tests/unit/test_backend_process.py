# SPDX-License-Identifier: Apache-2.0
"""Which models go to a TensorFlow process (backend_process.py): Keras 3 models on another backend,
their user subclasses included; never a tf_keras model or anything else."""

import pytest

from masked_lstm_rewriter import backend_process

KERAS3_MODULE = "keras.src.models.functional"   # where Keras 3's model classes live (a name, nothing imported)
TF_KERAS_MODULE = "tf_keras.src.engine.functional"


def _class(module: str, base=object):
    return type("M", (base,), {"__module__": module})


@pytest.fixture
def keras_on(monkeypatch):
    """This process's Keras 3 backend, as backend_process reads it."""
    def on(backend):
        monkeypatch.setattr(backend_process, "process_backend", lambda: backend)
    return on


def test_a_keras_model_and_a_user_subclass_of_it_on_jax_go_to_tensorflow(keras_on):
    keras_on("jax")
    model_class = _class(KERAS3_MODULE)
    assert backend_process.needs_tensorflow_process(model_class())
    assert backend_process.needs_tensorflow_process(_class("my_models", model_class)())


def test_on_tensorflow_or_for_other_objects_nothing_moves(keras_on):
    keras_on("tensorflow")
    assert not backend_process.needs_tensorflow_process(_class(KERAS3_MODULE)())
    keras_on("jax")
    assert not backend_process.needs_tensorflow_process(_class(TF_KERAS_MODULE)())
    assert not backend_process.needs_tensorflow_process(object())
