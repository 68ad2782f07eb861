# SPDX-License-Identifier: Apache-2.0
"""One keyword for the runtime a model is for: ``runtime=`` in ``convert``, ``rewrite_onnx``,
``enable``, ``make_rewriter`` and ``verify``; the old names (``target=``, ``runtimes=``) still work
with a DeprecationWarning, giving both is a TypeError, and errors name the keyword given. No Keras."""

from __future__ import annotations

import os
import warnings

import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import keywords, verification
from _onnx_files import DATA

STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")
NOT_A_RUNTIME = "runtime must be one of onnxruntime, openvino, not 'tensorrt'"


def test_runtime_is_the_keyword_of_every_function():
    assert mlr.make_rewriter(runtime="openvino").runtime == "openvino"
    assert mlr.make_rewriter(runtime="openvino").mask_mode == "any"
    with mlr.enable(runtime="onnxruntime", schedule=True):
        assert mlr.enabled_mode() == "post"
    report = mlr.rewrite_onnx(STOCK, runtime="onnxruntime").report
    assert [layer.rewritten for layer in report.layers] == [True]


@pytest.mark.parametrize("call", [
    lambda: mlr.make_rewriter(runtime="tensorrt"),
    lambda: mlr.enable(runtime="tensorrt"),
    lambda: mlr.convert(object(), runtime="tensorrt"),
    lambda: mlr.rewrite_onnx(STOCK, runtime="tensorrt"),
], ids=["make_rewriter", "enable", "convert", "rewrite_onnx"])
def test_an_unknown_runtime_is_named_by_its_keyword(call):
    with pytest.raises(ValueError, match=f"^{NOT_A_RUNTIME}"):
        call()
    assert mlr.enabled_mode() is None


def test_verify_takes_a_name_a_list_or_all(monkeypatch):
    assert verification.runtime_names("openvino") == (("openvino",), [])
    assert verification.runtime_names(["onnxruntime", "openvino"]) == (("onnxruntime", "openvino"), [])
    monkeypatch.setattr(verification, "runtime_available",
                        lambda name: (name == "onnxruntime", "" if name == "onnxruntime" else "not here"))
    assert verification.runtime_names("all") == (("onnxruntime",), ["skipping openvino: not here"])
    for wrong in ("tensorrt", ["onnxruntime", "tensorrt"], [], None):
        with pytest.raises(ValueError, match="^runtime must be one of onnxruntime, openvino, a list of them, or 'all'"):
            mlr.verify(STOCK, STOCK, runtime=wrong)


def test_convert_points_a_runtime_given_as_tf2onnxs_target_at_runtime():
    """``target=`` of ``convert`` is tf2onnx's option (rs4 ... tensorrt), passed through."""
    with pytest.raises(ValueError, match="target= is tf2onnx's option .*use runtime='openvino'"):
        mlr.convert(object(), target="openvino")


def test_target_still_works_deprecated():
    """The deprecation path of ``target=`` (make_rewriter and enable): a warning naming runtime=,
    pointing at the caller; the same rewriter; errors name target; both given is a TypeError."""
    with pytest.warns(DeprecationWarning, match="make_rewriter\\(\\): target= is deprecated, use runtime=") as caught:
        rewriter = mlr.make_rewriter("post", target="openvino")
    assert caught[0].filename == __file__
    assert (rewriter.runtime, rewriter.target, rewriter.mask_mode) == ("openvino", "openvino", "post")
    with pytest.warns(DeprecationWarning, match="enable\\(\\): target= is deprecated, use runtime="):
        with mlr.enable(target="openvino"):
            assert mlr.enabled_mode() == "any"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^target must be one of onnxruntime"):
        mlr.make_rewriter(target="tensorrt")
    for call in (mlr.make_rewriter, mlr.enable):
        with pytest.raises(TypeError, match="got both runtime= and target="):
            call(runtime="openvino", target="openvino")
    assert mlr.enabled_mode() is None


def test_runtimes_still_works_deprecated(tmp_path):
    """The deprecation path of verify's ``runtimes=``: a warning naming runtime=, errors name runtimes."""
    missing = str(tmp_path / "missing.onnx")
    with pytest.warns(DeprecationWarning, match="verify\\(\\): runtimes= is deprecated, use runtime=") as caught:
        with pytest.raises(ValueError, match="no such file"):
            mlr.verify(STOCK, missing, runtimes=("onnxruntime",))
    assert caught[0].filename == __file__
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^runtimes must be one of"):
        mlr.verify(STOCK, missing, runtimes=("tensorrt",))
    with pytest.raises(TypeError, match="got both runtime= and runtimes="):
        mlr.verify(STOCK, missing, runtime="openvino", runtimes=("onnxruntime",))


def test_the_new_keyword_warns_nothing(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        mlr.make_rewriter(runtime="onnxruntime")
        with pytest.raises(ValueError, match="no such file"):
            mlr.verify(STOCK, str(tmp_path / "missing.onnx"), runtime="onnxruntime")


def test_renamed_tells_a_value_given_from_none():
    assert keywords.renamed("f", "new", None, "old", keywords.NOT_GIVEN) == (None, "new")
    with pytest.warns(DeprecationWarning):
        assert keywords.renamed("f", "new", None, "old", None) == (None, "old")
