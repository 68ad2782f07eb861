# SPDX-License-Identifier: Apache-2.0
"""The cuDNN reader (read/cudnn.py), on graphs built as Keras 3 writes its cuDNN path
(keras/src/backend/tensorflow/rnn.py: ``_cudnn_lstm``, ``_cudnn_gru``) in plain TensorFlow: the
native node computes what Keras's generic path computes (numpy's masked recurrence), and each
op it does not read is refused with its reason and the fix. :class:`CudnnOp` is the cuDNN source's
case for the shared verbs of ``_harness.py`` (``check_rewrites``, ``check_refuses``)."""

import numpy as np
import pytest
import tensorflow as tf

from _graphs import OPSET, FunctionCase, Loop, convert, weights_of
from _harness import check_refuses, check_rewrites

CUDNN_GATES = {"LSTM": (0, 1, 2, 3), "GRU": (1, 0, 2)}  # cuDNN's gate blocks, by Keras's index (GRU: r, z, h)


def _params(spec: Loop, w: dict) -> np.ndarray:
    """Keras's flat params: each gate's kernel transposed, then the recurrent ones, then the biases
    (an LSTM's input biases are zeros; a GRU's are its bias[0], its recurrent ones bias[1])."""
    blocks, n = CUDNN_GATES[spec.kind], spec.units
    gate = lambda m, k: m[..., k * n:(k + 1) * n]  # noqa: E731
    bias = np.concatenate([np.zeros_like(w["bias"]), w["bias"]]) if spec.kind == "LSTM" else w["bias"].ravel()
    parts = [gate(w["kernel"], k).T.ravel() for k in blocks] + [gate(w["recurrent"], k).T.ravel() for k in blocks]
    biases = np.split(bias, 2 * len(blocks))
    parts += [biases[k] for k in blocks] + [biases[len(blocks) + k] for k in blocks]
    return np.concatenate(parts).astype(np.float32)


def cudnn_function(spec: Loop, time_major=False, op="CudnnRNNV3", lengths="mask", constant_params=True):
    """(tf.function, signature, weights): the op over x [B, T, F] as Keras's cuDNN path runs it."""
    weights = weights_of(spec)
    params = _params(spec, weights)
    signature = [tf.TensorSpec((None, None, spec.features), tf.float32, name="x"),
                 tf.TensorSpec((None, None), tf.bool, name="mask")]
    if not constant_params:
        signature.append(tf.TensorSpec(params.shape, tf.float32, name="params"))

    def fn(x, mask, fed_params=None):
        seq_lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1) if lengths == "mask" else \
            tf.fill([tf.shape(x)[0]], tf.shape(x)[1] - 1)
        zeros = tf.expand_dims(tf.zeros(tf.stack([tf.shape(x)[0], spec.units])), axis=1)
        inputs = tf.reverse_sequence(x, seq_lengths, seq_axis=1, batch_axis=0) if spec.backward else x
        kwargs = {"sequence_lengths": seq_lengths, "time_major": time_major} if op == "CudnnRNNV3" else {}
        outputs, h, c = getattr(tf.raw_ops, op)(
            input=inputs, input_h=zeros, input_c=zeros if spec.kind == "LSTM" else 0,
            params=params if fed_params is None else fed_params, is_training=True, rnn_mode=spec.kind.lower(),
            **kwargs)[:3]
        if spec.backward:
            outputs = tf.reverse(tf.reverse_sequence(outputs, seq_lengths, seq_axis=1, batch_axis=0), axis=[1])
        h = tf.squeeze(h, axis=1)
        found = {"seq": outputs, "last": h, "h": h, "c": tf.squeeze(c, axis=1) if spec.kind == "LSTM" else None}
        return tuple(found[name] for name in spec.returned)
    return tf.function(fn, input_signature=signature, autograph=False), signature, weights


READ = "Keras's cuDNN op {op} (the model was traced with a GPU): "  # how the reader's refusals start
FIX = ("masked_lstm_rewriter.convert", 'CUDA_VISIBLE_DEVICES=""')  # what every refusal says to do instead


class CudnnOp(FunctionCase):
    """``cudnn_function(spec, **options)`` converted with the plugin: referenced by numpy's masked
    recurrence (Keras's generic path); refused, the op stays, and its reason ends with the fix."""

    def __init__(self, spec: Loop = Loop(), opset: int = OPSET, **options):
        super().__init__(spec)
        self.replaces = options.get("op", "CudnnRNNV3")
        self.opset = opset
        self.fn, self.signature, _ = cudnn_function(spec, **options)

    def convert(self, mode):
        return convert(self.fn, self.signature, mode, opset=self.opset, returned=self.spec.returned)

    def assert_kept(self, model, report) -> None:
        super().assert_kept(model, report)
        assert all(fix in layer.detail for layer in report.layers for fix in FIX), str(report)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("mode", ["post", "any"])
def test_native_node_gives_keras_generic_path(kind, backward, mode):
    _, report = check_rewrites(CudnnOp(Loop(kind=kind, backward=backward)), mode, natives=[kind])
    (layer,) = report.layers
    assert layer.masked, layer


@pytest.mark.parametrize("options, reason", [
    ({"time_major": True}, "an attribute no Keras layer sets: time_major is 1 (Keras: 0)"),
    ({"op": "CudnnRNN"}, "only CudnnRNNV3 (Keras 3's) is read"),
    ({"constant_params": False}, "its weights are not constant"),
    ({"lengths": "other"}, "its sequence_lengths are neither a mask's count of steps nor the number of steps"),
])
def test_an_op_not_read_is_refused_with_its_reason_and_the_fix(options, reason):
    if options.get("op") == "CudnnRNN":
        options = dict(options, lengths="other")  # the op has no sequence_lengths input
    check_refuses(CudnnOp(**options), READ.format(op=options.get("op", "CudnnRNNV3")) + reason)


def test_a_backward_layer_whose_output_is_not_reversed_back_is_refused(monkeypatch):
    real_reverse = tf.reverse

    def without_time_reversal(tensor, axis):  # Keras reverses in time after the rows: leave that out
        return tensor if axis == [1] else real_reverse(tensor, axis)
    monkeypatch.setattr(tf, "reverse", without_time_reversal)  # while the function is traced and converted
    reason = "the output of a go_backwards layer is not reversed in time after its rows"
    check_refuses(CudnnOp(Loop(backward=True)), READ.format(op="CudnnRNNV3") + reason)


def test_below_opset_11_the_op_is_refused_with_the_opset_and_the_fix():
    check_refuses(CudnnOp(Loop(), opset=10), "opset 10: the native form is emitted for opset 11 and later")


@pytest.mark.parametrize("mode", ["post", "any"])
def test_at_opset_11_the_op_becomes_the_same_native_node(mode):
    check_rewrites(CudnnOp(Loop(kind="GRU", backward=True), opset=11), mode, natives=["GRU"])
