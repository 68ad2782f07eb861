# SPDX-License-Identifier: Apache-2.0
"""Shared test helpers: build Keras models, convert them, compare ONNX with Keras.

Keras is the oracle: every numeric check runs the Keras model and onnxruntime on the same
batch and compares every output at every position, padded ones included.
"""

import collections
import hashlib
import logging
import weakref

import numpy as np
import pytest
import tensorflow as tf
import tf2onnx

import masked_lstm_rewriter as mlr
import runtimes
import signatures
from masked_lstm_rewriter import io_names
from masked_lstm_rewriter.corpus.ops import native_ops, op_counts, scheduled_layers, walk_nodes  # noqa: F401
from masked_lstm_rewriter.flavours import current_flavour
from masked_lstm_rewriter.sessions import onnxruntime_session as session  # noqa: F401

FLAVOUR = current_flavour()
if FLAVOUR == "tf_keras":
    import tf_keras as keras  # noqa: F401
else:
    import keras  # noqa: F401

ATOL = 1e-5
# for a test whose subject does not depend on the Keras flavour (a command line's argument errors):
# it runs once per suite, in the keras3 run
ONCE_PER_SUITE = pytest.mark.skipif(
    FLAVOUR != "keras3", reason="independent of the Keras flavour: runs once per suite, in the keras3 run")
for _name in ("tf2onnx", "tensorflow"):
    logging.getLogger(_name).setLevel(logging.ERROR)


def randomize_weights(model, seed=0, scale=0.5):
    """Non-trivial weights everywhere (Keras initialises biases to zero, which hides bugs)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([rng.normal(0, scale, w.shape).astype(w.dtype) for w in weights])
    return model


def convert(model, spec, rewriter="default", opset=15):
    """ONNX ModelProto of ``model``; ``rewriter=None`` gives stock tf2onnx. The model is traced as
    ``mlr.convert`` traces it (tf2onnx's ``from_keras`` trace and names: :func:`_traced`), once for
    all the conversions of a model with one signature, weights and plugin state."""
    if rewriter == "default":
        rewriter = mlr.rewrite_masked_lstm
    traced = _traced(model, spec)
    graph_def = tf.compat.v1.GraphDef()
    graph_def.CopyFrom(traced.graph_def)  # the conversion is handed its own copy
    with tf.device("/cpu:0"):
        onnx_model, _ = tf2onnx.convert._convert_common(  # pylint: disable=protected-access
            graph_def, name=model.name, continue_on_error=True, opset=opset,
            custom_rewriter=None if rewriter is None else [rewriter], input_names=traced.inputs,
            output_names=traced.outputs, tensors_to_rename=traced.renames, initialized_tables=traced.tables)
    return onnx_model


_TRACES = collections.OrderedDict()  # (model, spec, weights, plugin state) -> (model ref, KerasGraph), the last few
_TRACES_SIZE = 4


def _traced(model, spec):
    """``model`` traced and frozen with ``spec`` (:func:`masked_lstm_rewriter.io_names.keras_graph`,
    what ``mlr.convert`` and tf2onnx's ``from_keras`` do), kept for the next conversions of the same
    model object with the same signature, weights and plugin state (``mlr.enable``'s patches change
    the trace): a test converting one model several ways (modes, runtimes, stock) traces it once.
    Tracing and freezing are about half of a conversion."""
    key = (id(model), repr(spec), _digest(model.get_weights()), mlr.enabled_mode())
    kept = _TRACES.get(key)
    if kept is None or kept[0]() is not model:
        kept = (weakref.ref(model), io_names.keras_graph(model, spec))
        _TRACES[key] = kept
        while len(_TRACES) > _TRACES_SIZE:
            _TRACES.popitem(last=False)
    _TRACES.move_to_end(key)
    return kept[1]


def keras_outputs(model, inputs):
    out = model(inputs if len(inputs) > 1 else inputs[0], training=False)
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o) for o in out]


def onnx_outputs(onnx_model, spec, inputs, runtime="onnxruntime"):
    feeds = {s.name: np.asarray(x) for s, x in zip(spec, inputs)}
    return runtimes.RUNNERS[runtime](onnx_model, feeds)


_ORACLE = collections.OrderedDict()  # (model, weights, batch) -> Keras's outputs, the last few
_ORACLE_SIZE = 8
_ORACLE_ROWS = collections.OrderedDict()  # (model, weights, one row's inputs) -> that row of a batch's outputs
_ORACLE_ROWS_SIZE = 256


def _digest(arrays) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _remember_rows(model, weights, inputs, outputs):
    """Each row of a batch Keras ran, as the batch of one row a batch-1 signature feeds: Keras
    computes the rows of a batch independently, so row ``r`` of its outputs is its answer for row
    ``r`` alone (to float rounding, far inside ``ATOL``)."""
    rows = {np.asarray(x).shape[0] for x in inputs} | {o.shape[0] if o.ndim else -1 for o in outputs}
    if len(rows) != 1:
        return  # an output without the batch axis first: no row of it stands for one row alone
    for row in range(rows.pop()):
        key = (id(model), weights, _digest([np.asarray(x)[row:row + 1] for x in inputs]))
        _ORACLE_ROWS[key] = (model, [o[row:row + 1] for o in outputs])
    while len(_ORACLE_ROWS) > _ORACLE_ROWS_SIZE:
        _ORACLE_ROWS.popitem(last=False)


def oracle_outputs(model, inputs):
    """Keras's outputs for ``inputs``, computed once for the same model, weights and batch.

    A check runs each batch on several runtimes and signature forms; calling Keras again for each
    took about a fifth of a numeric test's time, and a batch-1 form feeds every row of a batch on
    its own: such a row is answered from the batch's outputs. The entry keeps the model itself and
    is used only for that object (an ``id`` may be reused once a model is freed) with the same
    weights. Any other callable (a ``tf.function`` around the model) is called every time."""
    if not hasattr(model, "get_weights"):
        return keras_outputs(model, inputs)
    weights = _digest(model.get_weights())
    key = (id(model), weights, _digest(inputs))
    entry = _ORACLE.get(key) or _ORACLE_ROWS.get(key)
    if entry is None or entry[0] is not model:
        entry = _ORACLE[key] = (model, keras_outputs(model, inputs))
        while len(_ORACLE) > _ORACLE_SIZE:
            _ORACLE.popitem(last=False)
        _remember_rows(model, weights, inputs, entry[1])
    if key in _ORACLE:
        _ORACLE.move_to_end(key)
    return [output.copy() for output in entry[1]]


def max_error(model, onnx_model, spec, inputs, runtime="onnxruntime"):
    """Largest absolute difference between Keras and ``runtime`` over every output and position."""
    expected = oracle_outputs(model, inputs)
    got = onnx_outputs(onnx_model, spec, inputs, runtime)
    assert len(expected) == len(got)
    worst = 0.0
    for e, g in zip(expected, got):
        assert e.shape == g.shape, (e.shape, g.shape)
        worst = max(worst, float(np.max(np.abs(e - g))) if e.size else 0.0)
    return worst


MAX_ERRORS = []  # every comparison's error, reported at the end of the run (conftest)


def assert_matches_keras(model, onnx_model, spec, inputs, runtime="onnxruntime"):
    error = max_error(model, onnx_model, spec, inputs, runtime)
    MAX_ERRORS.append(error)
    assert error <= ATOL, f"max |keras - onnx| = {error} on {runtime}"
    return error


def _runtimes_needing_a_target(rewriter) -> set:
    """The runtimes that cannot run a layer the last conversion (with ``rewriter``) emitted."""
    report = mlr.last_report()
    if rewriter is None or report is None:
        return set()
    return {runtime for layer in report.layers for runtime in layer.not_for}


def check_conversion(model, spec, inputs, rewriter="default", ops=None, opset=15):
    """Converts ``model`` with its declared ``spec`` and with the static signature forms sampled for the test
    (:mod:`signatures`), and checks each conversion on every runtime (:mod:`runtimes`) against
    Keras on ``inputs``, at every position. ``ops``: the expected native layers per op
    (``{"LSTM": 2}``: a bidirectional node counts as its two halves, :func:`native_layers`), or a
    function of the signature form that gives them, checked with no Loop left. Returns the model
    converted with ``spec``."""
    return check_batches(model, spec, [inputs], rewriter, ops, opset)


def check_batches(model, spec, batches, rewriter="default", ops=None, opset=15):
    """:func:`check_conversion` on several batches (each a list of inputs): each signature form is
    converted once for all the batches it gives the same spec (the declared form always), not
    once per batch."""
    rewriter = mlr.rewrite_masked_lstm if rewriter == "default" else rewriter
    converted = None
    for form in signatures.forms_for():
        by_spec = {}  # the form's spec (as text) -> (spec, the batches to feed it)
        for inputs in batches:
            form_spec, fed = signatures.signature(spec, inputs, form)
            by_spec.setdefault(repr(form_spec), (form_spec, []))[1].extend(fed)
        for form_spec, fed in by_spec.values():
            onnx_model = _check_form(model, form, form_spec, fed, rewriter, ops, opset)
            if converted is None:
                converted = onnx_model
    return converted


def check_whole_model(model, spec, batches, mode, native):
    """:func:`check_batches` under ``enable(mask_mode=mode)`` (as the CLI converts: Keras 3 traces
    ``TimeDistributed`` right only there), then: no Loop, ``native`` recurrent nodes in all, and every
    layer reported rewritten."""
    with mlr.enable(mask_mode=mode):
        onnx_model = check_batches(model, spec, batches, rewriter=mlr.make_rewriter(mode))
    counts = op_counts(onnx_model)
    assert "Loop" not in counts and sum(native_layers(onnx_model).values()) == native, counts
    report = mlr.last_report()
    assert report.rewritten and not report.left_as_loop, str(report)


def _check_form(model, form, form_spec, batches, rewriter, ops, opset):
    """One conversion with ``form_spec``, checked on every runtime and batch; returns it."""
    onnx_model = convert(model, form_spec, rewriter=rewriter, opset=opset)
    needs_target = _runtimes_needing_a_target(rewriter)
    for op, count in ((ops(form) if callable(ops) else ops) or {}).items():
        assert_native(onnx_model, lstm=count, op=op)
    for runtime in runtimes.runtimes():
        runtime_model = onnx_model
        if runtime in needs_target:  # convert as a user targeting that runtime would
            runtime_model = convert(model, form_spec, mlr.make_rewriter(rewriter.mask_mode, runtime), opset)
        for index, batch in enumerate(batches):
            try:
                assert_matches_keras(model, runtime_model, form_spec, batch, runtime)
            except AssertionError as error:
                where = f"signature {form!r} ({[s.shape for s in form_spec]}), batch {index} of the form"
                raise AssertionError(f"{where}: {error}") from error
    return onnx_model


def canonical(onnx_model):
    """The graph without its generated names: op types, attributes, wiring by position, initializers."""
    names = {}

    def rename(tensor):
        return names.setdefault(tensor, f"t{len(names)}") if tensor else ""
    for graph_input in onnx_model.graph.input:
        rename(graph_input.name)
    nodes = []
    for node in onnx_model.graph.node:
        attrs = sorted((a.name, str(a).replace(a.name, "")) for a in node.attribute if a.type != 5)
        nodes.append((node.op_type, tuple(rename(t) for t in node.input), tuple(rename(t) for t in node.output),
                      tuple(attrs)))
    inits = sorted(init.raw_data or str(init).encode() for init in onnx_model.graph.initializer)
    return nodes, inits


def structure(onnx_model):
    """The graph's nodes and initializers, independent of node order: tf2onnx's topological sort
    breaks ties by names, which carry counters (its own, and Keras's layer numbering) that differ
    between two conversions of one model."""
    nodes, initializers = canonical(onnx_model)
    return sorted((op_type, len(inputs), len(outputs), attrs) for op_type, inputs, outputs, attrs in nodes), \
        initializers


def native_layers(onnx_model) -> collections.Counter:
    """The Keras layers behind the native recurrent nodes, per op: a ``direction="bidirectional"`` node
    holds a Bidirectional layer's two halves and counts twice."""
    return collections.Counter({op: sum(2 if direction == "bidirectional" else 1 for direction in directions)
                                for op, directions in native_ops(onnx_model).items()})


def assert_native(onnx_model, lstm=1, op="LSTM"):
    """No Loop left, and ``lstm`` native ``op`` layers (LSTM, GRU or RNN; :func:`native_layers`)."""
    counts = op_counts(onnx_model)
    assert counts["Loop"] == 0, counts
    assert native_layers(onnx_model)[op] == lstm, (counts, native_ops(onnx_model))


def layer_directions(onnx_model, op="LSTM"):
    """Sorted directions of the Keras layers behind the native ``op`` nodes: every node runs
    forward (ONNX ``direction="forward"``), a backward layer over its rows reversed within their
    length (its input comes from a ReverseSequence, or is gathered at indices that do), but a Bidirectional layer's one
    ``direction="bidirectional"`` node, which holds a forward and a reverse layer. A scheduled layer
    counts once (its single node)."""
    producers = {out: n for n in walk_nodes(onnx_model.graph, segments=True) for out in n.output}
    directions = []
    for node in walk_nodes(onnx_model.graph):
        if node.op_type != op:
            continue
        attrs = {a.name: a for a in node.attribute}
        if attrs["direction"].s == b"bidirectional":
            directions += ["forward", "reverse"]
            continue
        assert attrs["direction"].s == b"forward", "every native node must run forward, or be bidirectional"
        source = producers.get(node.input[0])
        while source is not None and (source.op_type in ("Where", "Pad")  # the padding column
                                      or source.op_type == "Slice" and len(source.input) < 5):  # the cut at the longest row
            source = producers.get(source.input[1] if source.op_type == "Where" else source.input[0])
        if source is not None and source.op_type == "Gather":  # gathered rows: reversed by their indices
            source = producers.get(source.input[1])
            if source is not None and source.op_type == "Slice":  # cut at the longest row first
                source = producers.get(source.input[0])
        directions.append("reverse" if source is not None and source.op_type == "ReverseSequence" else "forward")
    return sorted(directions)


def post_padded_tokens(lengths, steps, vocab=50, seed=0):
    """int32 [B, T] token ids, row b valid (non-zero) for its first lengths[b] steps."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(len(lengths), steps)).astype(np.int32)
    for row, length in enumerate(lengths):
        tokens[row, length:] = 0
    return tokens


def mask_from_lengths(lengths, steps):
    return np.arange(steps)[None, :] < np.asarray(lengths)[:, None]


def token_spec(name="tokens"):
    return tf.TensorSpec((None, None), tf.int32, name=name)


# a batch with a full row, an empty row, and rows of different lengths
LENGTHS = [7, 3, 0, 1, 6]
STEPS = 7
