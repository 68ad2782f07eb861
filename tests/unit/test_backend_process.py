# SPDX-License-Identifier: Apache-2.0
"""Which models go to a TensorFlow process (backend_process.py): Keras 3 models on another backend,
their user subclasses included; never a tf_keras model or anything else. What goes to it: a
signature, nested as given. What comes back from it: its log records and its report."""

import json
import logging

import pytest

import masked_lstm_rewriter as mlr
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


def test_the_child_log_is_logged_again_at_its_levels(tmp_path, caplog):
    """What the child logs (a layer left as a Loop is a WARNING) reaches the parent's logger, level kept."""
    log = tmp_path / backend_process.LOG
    writer = backend_process._RecordWriter(str(log))  # pylint: disable=protected-access
    writer.emit(logging.makeLogRecord({"levelno": logging.WARNING, "msg": "layer %r left as a Loop", "args": ("gru",)}))
    writer.emit(logging.makeLogRecord({"levelno": logging.DEBUG, "msg": "detail"}))
    with caplog.at_level(logging.INFO, logger="masked_lstm_rewriter"):
        backend_process._log_again(str(log))  # pylint: disable=protected-access
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, "layer 'gru' left as a Loop")]


def test_the_child_report_is_the_last_report_known_wrong_included(tmp_path):
    path = tmp_path / backend_process.REPORT
    layer = {"layer": "lstm", "rewritten": False, "detail": "why", "mask_mode": "post", "not_for": [],
             "masked": True, "left_as": "a Loop"}
    path.write_text(json.dumps({"layers": [layer], "known_wrong": ["TextVectorization"],
                                "streams": ["gru: gru/h_in -> gru/h_out"]}))
    report = backend_process._read_report(str(path))  # pylint: disable=protected-access
    assert report is mlr.last_report()
    assert [entry.layer for entry in report.left_as_loop] == ["lstm"] and report.known_wrong == ("TextVectorization",)
    assert report.streams == ("gru: gru/h_in -> gru/h_out",)


def test_a_nested_signature_reaches_the_child_nested():
    """A ``call(tokens, [h, c])``'s signature: the child gets the same specs, nested alike."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    signature = [tf.TensorSpec([None, None], tf.int32, name="tokens"),
                 [tf.TensorSpec([None, 4], tf.float32, name="h"), tf.TensorSpec([None, 4], tf.float32)]]
    written = json.loads(json.dumps(backend_process._signature_as_json(signature)))  # pylint: disable=protected-access
    assert backend_process._signature_from_json(written) == signature  # pylint: disable=protected-access
    assert backend_process._signature_from_json(None) is None  # pylint: disable=protected-access


@pytest.mark.parametrize("module, name, expected", [
    ("masked_lstm_rewriter.failure", "KnownWrong", mlr.KnownWrong), ("builtins", "ValueError", ValueError),
    ("masked_lstm_rewriter.user_modules", "ModuleError", ValueError),
    ("tensorflow.python.framework.errors_impl", "InvalidArgumentError", backend_process.BackendError),
])
def test_the_child_error_is_raised_again_as_its_own_class_where_it_is_ours_or_pythons(tmp_path, module, name,
                                                                                      expected):
    """What the same call raises in a TensorFlow process (``except mlr.KnownWrong`` catches it on JAX
    too); another library's error stays the child's one line."""
    path = tmp_path / backend_process.ERROR
    path.write_text(json.dumps([module, name, "what went wrong"]))
    fallback = backend_process.BackendError(f"{name}: what went wrong")
    error = backend_process._raised_again(str(path), fallback)  # pylint: disable=protected-access
    assert isinstance(error, expected) and "what went wrong" in str(error)
    assert (error is fallback) == (expected is backend_process.BackendError)
