# SPDX-License-Identifier: Apache-2.0
"""Plugin stage: the rewriter leaves graphs without a masked loop alone; enable()/disable().

A graph with no loop, and a graph with a loop over time steps that is no recurrent cell (a
running sum), convert with the rewriter exactly as they do without it (the same nodes, in the same
order, the same outputs), and the report says no recurrent layer was found (unmasked recurrent
loops are rewritten: ``test_unmasked.py``). ``enable()`` applies the rewrite to conversions that do not pass it, until
``disable()`` or the end of its ``with`` block.
"""

import numpy as np
import pytest
import tensorflow as tf

import masked_lstm_rewriter as mlr

import _graphs as G

pytestmark = pytest.mark.usefixtures("plugin_off")  # tests/conftest.py: disabled before and after each test

RNG = np.random.default_rng(5)
KERNEL = (0.5 * RNG.normal(size=(3, 2))).astype(np.float32)
SIGNATURE = [tf.TensorSpec([None, None, 3], tf.float32, name="x")]


def no_loop(x):
    return tf.tanh(tf.matmul(x, tf.constant(KERNEL)) * 2.0 + 1.0)


def running_sum_loop(x):
    """A loop over time steps that is no recurrent cell: a running sum (no weights, no gate)."""
    x_tm = tf.transpose(x, [1, 0, 2])
    steps = tf.shape(x_tm)[0]
    x_ta = tf.TensorArray(tf.float32, size=steps).unstack(x_tm)
    out_ta = tf.TensorArray(tf.float32, size=steps)

    def body(time, out_ta, h):
        h = h + x_ta.read(time)
        return time + 1, out_ta.write(time, h), h

    _, out_ta, h = tf.while_loop(lambda time, *_: time < steps, body,
                                 (tf.constant(0), out_ta, tf.zeros(tf.stack([tf.shape(x)[0], 3]))))
    return tf.transpose(out_ta.stack(), [1, 0, 2]), h


@pytest.mark.parametrize("fn, outputs", [pytest.param(no_loop, ("y",), id="no-loop"),
                                         pytest.param(running_sum_loop, ("seq", "h"), id="running-sum-loop")])
@pytest.mark.parametrize("mode", ["post", "any"])
def test_graph_without_a_masked_loop_is_left_alone(fn, outputs, mode):
    function = tf.function(fn, input_signature=SIGNATURE, autograph=False)
    stock = G.convert(function, SIGNATURE, None, returned=outputs)
    rewritten = G.convert(function, SIGNATURE, mode, returned=outputs)
    assert rewritten.ops() == stock.ops() and not rewritten.native_nodes()
    assert rewritten.report.layers == () and str(rewritten.report) == \
        "masked_lstm_rewriter: no LSTM, GRU or SimpleRNN layer to rewrite (none masked, none left as a Loop " \
        "without a mask)"
    x = RNG.normal(size=(2, 4, 3)).astype(np.float32)
    got, expected = rewritten.run({"x": x}), stock.run({"x": x})
    for name in outputs:
        np.testing.assert_array_equal(got[name], expected[name])


def test_enable_applies_the_rewrite_until_disabled():
    spec = G.Loop("RNN")
    fn, signature, _ = G.masked_loop(spec)
    with mlr.enable("any"):
        assert mlr.enabled_mode() == "any"
        enabled = G.convert(fn, signature, None, returned=spec.returned)
        report = mlr.last_report()
    assert mlr.enabled_mode() is None
    after = G.convert(fn, signature, None, returned=spec.returned)
    assert [n.op_type for n in enabled.native_nodes()] == ["RNN"] and "Loop" not in enabled.ops()
    assert [(layer.rewritten, layer.mask_mode) for layer in report.layers] == [(True, "any")]
    assert "Loop" in after.ops() and not after.native_nodes()


def test_the_rewriter_is_never_applied_twice():
    """enable() and custom_rewriter= together: one rewrite, one report entry."""
    spec = G.Loop("GRU")
    fn, signature, _ = G.masked_loop(spec)
    with mlr.enable("post"):
        converted = G.convert(fn, signature, "post", returned=spec.returned)
    assert [n.op_type for n in converted.native_nodes()] == ["GRU"]
    assert len(converted.report.layers) == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"mask_mode": "pre"}, "mask_mode must be one of"),
    ({"runtime": "tensorrt"}, "runtime must be one of"),
])
def test_make_rewriter_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mlr.make_rewriter(**kwargs)


def test_post_for_openvino_warns_once_when_enabled_again_alike(caplog):
    """convert() enables the plugin again inside its own enable(): the warning is said once."""
    warning = "mask_mode='post' for OpenVINO"
    with caplog.at_level("WARNING", logger="masked_lstm_rewriter"):
        with mlr.enable("post", runtime="openvino"), mlr.enable("post", runtime="openvino", streaming=True):
            pass
        assert caplog.text.count(warning) == 1
        with mlr.enable("any", runtime="openvino"), mlr.enable("post", runtime="openvino"):
            pass
    assert caplog.text.count(warning) == 2, "said again where the settings change"
