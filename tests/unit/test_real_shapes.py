# SPDX-License-Identifier: Apache-2.0
"""Two loops wired as the public models of issue 29 wire their layers, in raw TensorFlow.

* A loop over another loop's last output repeated over time (a residual summary; a ``TimeDistributed``
  recurrent layer's outputs are such last outputs): the upper node's barrier check (``read_alone``)
  walked into the lower native node and its omitted optional inputs (``""``), and the rewrite
  failed with ``AttributeError: 'NoneType' object has no attribute 'is_const'``.
* A masked loop over an unmasked one, the mask a function input (so it is broadcast to the batch):
  the broadcast read its batch off the unmasked loop's stacked outputs, which rewriting that loop
  removes, and the conversion itself failed ("Cannot find node with output ...").
* Two stacked loops with a static batch of 1 in ``mask_mode="any"``: the reordering lost the static
  batch, the layers' outputs had no known batch, and a ``Concatenate`` with the input then made
  tf2onnx's transpose optimizer add Reshapes without end (it converts in seconds: the sizes the
  reordering knows are set, so the upper loop's input and both outputs keep their batch of 1).

Each must end with every loop native and the numbers of the numpy oracle.
"""

import numpy as np
import pytest
import tensorflow as tf

import masked_lstm_rewriter as mlr

import _graphs as G

MASKS = {"post": G.POST_PADDED, "any": G.NOT_POST_PADDED}  # the "post" guard refuses the other


def _loop(spec):
    fn, _, weights = G.masked_loop(spec)
    return fn.python_function, weights


def _assert_close(got, expected):
    assert got.shape == expected.shape and np.max(np.abs(got - expected)) < 1e-5, np.max(np.abs(got - expected))


@pytest.mark.parametrize("mode", ["post", "any"])
def test_a_loop_over_a_loops_repeated_last_output(mode):
    lower = G.Loop("LSTM", units=3, sequence=False, outputs=("last",))
    upper = G.Loop("GRU", units=2, features=3, outputs=("seq",), seed=1)
    (run_lower, w_lower), (run_upper, w_upper) = _loop(lower), _loop(upper)

    def fn(x, mask):
        (last,) = run_lower(x, mask)
        repeated = tf.tile(last[:, None, :], tf.stack([1, tf.shape(x)[1], 1]))
        return run_upper(repeated, mask)

    signature = [tf.TensorSpec([None, None, 3], tf.float32, name="x"), tf.TensorSpec([None, None], tf.bool, name="mask")]
    converted = G.convert(tf.function(fn, input_signature=signature, autograph=False), signature, mode,
                          returned=("seq",))
    assert sorted(n.op_type for n in converted.native_nodes()) == ["GRU", "LSTM"] and "Loop" not in converted.ops(), \
        G.reasons(converted)
    feeds, mask = G.batch(lower, MASKS[mode])
    last = G.reference(lower, w_lower, feeds["x"], mask)["last"]
    expected = G.reference(upper, w_upper, np.repeat(last[:, None, :], mask.shape[1], axis=1), mask)["seq"]
    _assert_close(converted.run(feeds)["seq"], expected)


def test_a_masked_loop_over_an_unmasked_one_with_a_mask_input():
    lower = G.Loop("RNN", units=3, mask="none", outputs=("seq",))
    upper = G.Loop("LSTM", units=2, features=3, outputs=("seq",), seed=1)
    (run_lower, w_lower), (run_upper, w_upper) = _loop(lower), _loop(upper)

    def fn(x, mask):
        (sequence,) = run_lower(x)
        return run_upper(sequence, mask)

    signature = [tf.TensorSpec([None, None, 3], tf.float32, name="x"), tf.TensorSpec([None, None], tf.bool, name="mask")]
    converted = G.convert(tf.function(fn, input_signature=signature, autograph=False), signature, "post",
                          returned=("seq",))
    assert sorted(n.op_type for n in converted.native_nodes()) == ["LSTM", "RNN"] and "Loop" not in converted.ops()
    feeds, mask = G.batch(upper, G.POST_PADDED)
    lower_seq = G.reference(lower, w_lower, feeds["x"], np.ones_like(mask))["seq"]
    _assert_close(converted.run(feeds)["seq"], G.reference(upper, w_upper, lower_seq, mask)["seq"])


def _sequence_batch(graph, tensor):
    """The batch size tf2onnx knows for a rewired loop's sequence as Keras's batch-major consumers read
    it (the plugin's batch-major Gather, or a Transpose of the time-major sequence), or None."""
    node = graph.get_node_by_output(tensor)
    if node is not None and node.type == "Transpose":
        shape = graph.get_shape(node.input[0])
        return shape[1] if shape and len(shape) == 3 else None
    shape = graph.get_shape(tensor)
    return shape[0] if shape and len(shape) == 3 else None


def test_any_mode_keeps_a_static_batch_of_one(monkeypatch):
    """Both loops' sequences, as the main graph holds them after the plugin (before tf2onnx's
    optimizer), keep the signature's batch of 1, as in "post": read batch-major, or through transposes
    that tf2onnx then turns into Reshapes (left Transposes, they made its optimizer loop without end)."""
    lower = G.Loop("LSTM", units=3, outputs=("seq",))
    upper = G.Loop("LSTM", units=3, features=3, outputs=("seq",), seed=1)
    (run_lower, w_lower), (run_upper, w_upper) = _loop(lower), _loop(upper)
    seen = {}

    def fn(x, mask):
        (first,) = run_lower(x, mask)
        (second,) = run_upper(first, mask)
        return (tf.reduce_sum(tf.concat([x, first, second], axis=-1), axis=1),)

    class Seen(Exception):
        """Stops the conversion once the plugin has run (before the optimizer, which looped without end)."""

    def batch_of_outputs(graph, ops):
        concat = [n for n in ops if n.type == "ConcatV2" and len(n.input) == 4]
        if concat and not getattr(graph, "_is_subgraph", False):
            seen["sequences"] = [_sequence_batch(graph, tensor) for tensor in concat[0].input[1:3]]
        return ops

    def stop(*args, **kwargs):
        raise Seen()

    signature = [tf.TensorSpec([1, None, 3], tf.float32, name="x"), tf.TensorSpec([1, None], tf.bool, name="mask")]
    function = tf.function(fn, input_signature=signature, autograph=False)
    with monkeypatch.context() as patched, pytest.raises(Seen):
        patched.setattr(G.tf2onnx.optimizer, "optimize_graph", stop)
        G.tf2onnx.convert.from_function(function, input_signature=signature, opset=G.OPSET,
                                        custom_rewriter=[mlr.make_rewriter("any"), batch_of_outputs])
    assert all(layer.rewritten for layer in mlr.last_report().layers) and len(mlr.last_report().layers) == 2
    assert seen["sequences"] == [1, 1], seen
    model, _ = G.tf2onnx.convert.from_function(function, input_signature=signature, opset=G.OPSET,
                                               custom_rewriter=[mlr.make_rewriter("any")])
    converted = G.Converted(model, mlr.last_report(), ("sum",))
    feeds, mask = G.batch(lower, G.NOT_POST_PADDED[1:2])  # holes
    first = G.reference(lower, w_lower, feeds["x"], mask)["seq"]
    second = G.reference(upper, w_upper, first, mask)["seq"]
    _assert_close(converted.run(feeds)["sum"], np.concatenate([feeds["x"], first, second], -1).sum(axis=1))
