# SPDX-License-Identifier: Apache-2.0
"""int8 quantization of a converted model, with onnxruntime's own tooling, the native ops kept fast.

    quantized = quantize_model(onnx_model, "int8")

onnxruntime's dynamic quantization (``onnxruntime.quantization.quantize_dynamic``) makes each
``LSTM`` an ``onnxruntime`` ``DynamicQuantizeLSTM`` (int8 weights, the input and the state
quantized at run time) and each ``MatMul`` with constant weights (``Dense``) a
``DynamicQuantizeLinear`` + ``MatMulInteger``. onnxruntime has no quantized ``GRU`` or ``RNN``:
they stay float32, the ``MatMul``\\ s around them are quantized. Nothing else changes: the masks,
the lengths, the post-padding guard, a ``Loop`` left as it was (the nodes inside a ``Loop`` or an
``If``, such as the schedule's, stay float32: the quantizer does not reach into them).

Measured choices (onnxruntime 1.31, docs/quantization.md): weights int8 per tensor with
``reduce_range`` (7 bits), because onnxruntime's int8 kernels on x86 CPUs without VNNI (AVX2)
saturate int16 sums of full-range weights (measured: 15-25x the error, a quarter of the output's
scale on a ``SimpleRNN`` -> ``Dense``); per-channel weights measured no better. The ``Embedding``'s
``Gather`` stays float32: a lookup multiplies nothing (int8 would save size, not time). An ``LSTM``
whose input has the plugin's padding column (its final cell state is used: ``return_state``,
streaming) stays float32: that column's weights (:data:`PADDING_DRIVE`) would take the
whole int8 range.

The quantized model is for onnxruntime: ``DynamicQuantizeLSTM`` is its op (``com.microsoft``
domain); OpenVINO 2026.4 loads it, but runs it no faster than float32, with int8's error. Each
``DynamicQuantizeLSTM`` quantizes its whole input with one scale, padded steps included, so the
input of each ``LSTM`` with ``sequence_lens`` is first zeroed past each row's length
(:func:`zero_padded_steps`): padded steps may hold anything (1e4, NaN, inf), as in the float model,
without coarsening the valid ones. onnxruntime's tooling writes files and logs to the root logger:
it runs in a temporary folder, and what it says goes to this package's logger at DEBUG.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .corpus.ops import scheduled_layers
from .dependencies import MissingDependency
from .targets import check_runtime

logger = logging.getLogger("masked_lstm_rewriter")

MODES = ("int8",)
RUNTIME = "onnxruntime"  # the one runtime a quantized model is for
# what quantize_dynamic quantizes (of its IntegerOps: not Gather, Conv, Attention)
OP_TYPES = ("LSTM", "MatMul")
# the ops a quantized model holds: how verify tells one (ConvInteger: a model quantized elsewhere)
QUANTIZED_OPS = ("DynamicQuantizeLSTM", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")
# the padding column's weights: .cells.kind.PADDING_DRIVE, not imported from there (that imports
# TensorFlow); tests/unit/test_quantize.py checks that they agree
PADDING_DRIVE = 1e4


def schedule_for(schedule: Optional[bool], quantize: Optional[str]) -> bool:
    """Whether to emit the length-aware schedule: ``schedule`` if given, else on unless the model is
    quantized (onnxruntime's quantizer does not reach the recurrent nodes inside its ``If``)."""
    return quantize is None if schedule is None else bool(schedule)


def check_quantize(quantize: Optional[str], runtime: Optional[str] = None, schedule: Optional[bool] = None,
                   flags: bool = False) -> None:
    """A ``ValueError`` unless ``quantize`` is None or one of :data:`MODES`, for a model that onnxruntime
    runs (``runtime`` None or "onnxruntime"), without the schedule (the quantizer does not reach into
    its ``If``: ``schedule`` True is refused, None turns it off). ``flags``: name the command line's
    flags, not the keywords."""
    if quantize is None:
        return
    check_runtime(runtime)
    name = "--quantize" if flags else "quantize"
    if quantize not in MODES:
        raise ValueError(f"{name} must be one of {', '.join(MODES)}, not {quantize!r}" + ("" if flags else
                                                                                          " (or None: float32)"))
    given = f"--quantize {quantize}" if flags else f"quantize={quantize!r}"
    if runtime not in (None, RUNTIME):
        raise ValueError(f"{given} makes a model for onnxruntime (OpenVINO 2026.4 runs it no faster than float32, "
                         f"with int8's error), not for {_spelled('runtime', runtime, flags)}: convert without {name}")
    if schedule:
        raise ValueError(f"{given} does not go with {_spelled('schedule', True, flags)} (the quantizer does not "
                         "reach the LSTMs inside its If): give one of them")


def _spelled(option: str, value, flags: bool) -> str:
    """``runtime='openvino'``, ``schedule=True``; with ``flags``, ``--runtime openvino``, ``--schedule``."""
    if not flags:
        return f"{option}={value!r}"
    return {"runtime": f"--runtime {value}", "schedule": "--schedule"}[option]


def quantize_model(model: onnx.ModelProto, mode: str = "int8") -> onnx.ModelProto:
    """``model`` quantized (``mode``: "int8"), for onnxruntime: see the module docstring. The given
    ``ModelProto`` is not changed. Raises ``ValueError`` for a bad mode, a model already quantized or
    one whose tensors are in external files not loaded; :class:`.MissingDependency` without onnxruntime."""
    check_quantize(mode)
    problem = _cannot_quantize(model)
    if problem:
        raise ValueError(f"cannot quantize the model: {problem}")
    quantize_dynamic, int8 = _onnxruntime_quantization()
    kept = float_lstms(model)
    model = zero_padded_steps(model, kept)
    for name in kept:
        logger.info("LSTM node %s stays float32: its final cell state is used, and the padding column that "
                    "carries it would take the whole int8 range of its weights", name)
    with tempfile.TemporaryDirectory(prefix="mlr-quantize-") as folder:
        path = os.path.join(folder, "int8.onnx")
        with _their_messages_at_debug():
            quantize_dynamic(model, path, op_types_to_quantize=list(OP_TYPES), per_channel=False,
                             reduce_range=True, weight_type=int8, nodes_to_exclude=kept,
                             use_external_data_format=True)
        quantized = onnx.load(path)  # its tensors with it, from the folder
    logger.info("quantized (%s): %s", mode, describe(quantized) or "nothing to quantize")
    return quantized


def quantize_converted(model: onnx.ModelProto, report, mode: str):
    """(``model`` quantized, ``report`` saying so in its ``quantized``): what the front doors return;
    the report is also the thread's :func:`.last_report`."""
    from .report import note_quantized  # pylint: disable=import-outside-toplevel
    quantized = quantize_model(model, mode)
    return quantized, note_quantized(report, summary(quantized, mode))


def summary(model: onnx.ModelProto, mode: str = "int8") -> str:
    """The report's line for a quantized model: what is int8, what stays float32 and why."""
    kept = _float_ops(model)
    text = f"{mode} for onnxruntime: {describe(model) or 'nothing quantized'}"
    return text + (f"; float32: {', '.join(kept)}" if kept else "")


def _float_ops(model: onnx.ModelProto) -> list:
    """Each kind of recurrent node left float32, counted, with why."""
    padded = len(float_lstms(model))
    counts = {op: sum(node.op_type == op for node in model.graph.node) for op in ("LSTM", "GRU", "RNN", "Loop")}
    why = {"GRU": "onnxruntime has no int8 GRU", "RNN": "onnxruntime has no int8 RNN",
           "Loop": "not quantized inside"}
    kept = [f"{padded} LSTM (its final cell state is used: its padding column would take the int8 range)"] \
        if padded else []
    if counts["LSTM"] > padded:
        kept.append(f"{counts['LSTM'] - padded} LSTM (weights not constant)")
    return kept + [f"{counts[op]} {op} ({why[op]})" for op in why if counts[op]]


def zero_padded_steps(model: onnx.ModelProto, kept=()) -> onnx.ModelProto:
    """A copy of ``model`` in which each ``LSTM`` with ``sequence_lens`` (but those named in
    ``kept``) reads its input ``X`` [T, B, I] as zeros at steps past its row's length:
    ``Where(t < sequence_lens[b], X, 0)``. The node ignores those steps; the quantizer's one scale
    for the whole input then sees only the valid ones."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph, nodes = copy.graph, []
    old_axes = _opset(copy) < 13  # Unsqueeze's axes: an attribute before opset 13
    for node in graph.node:
        if node.op_type == "LSTM" and node.name not in kept and len(node.input) > 4 and node.input[4]:
            nodes.extend(_zeroed_input(node, old_axes))
        nodes.append(node)
    if len(nodes) > len(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)
    return copy


def _zeroed_input(node, old_axes: bool) -> list:
    """The nodes that compute ``node``'s input zeroed past each row's length; ``node`` then reads it."""
    x, lengths, prefix = node.input[0], node.input[4], f"{node.name or node.output[0]}/int8_padding"
    nodes = []

    def add(op, inputs, **attrs):
        output = f"{prefix}/{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def const(value, dtype=np.int64):
        return add("Constant", [], value=numpy_helper.from_array(np.array(value, dtype)))

    def unsqueeze(source, axis):
        if old_axes:
            return add("Unsqueeze", [source], axes=[axis])
        return add("Unsqueeze", [source, const([axis])])

    steps = add("Squeeze", [add("Gather", [add("Shape", [x]), const([0])], axis=0)])
    time = unsqueeze(add("Range", [const(0), steps, const(1)]), 1)                    # [T, 1]
    row_lengths = unsqueeze(add("Cast", [lengths], to=onnx.TensorProto.INT64), 0)    # [1, B]
    valid = unsqueeze(add("Less", [time, row_lengths]), 2)                            # [T, B, 1]
    node.input[0] = add("Where", [valid, x, const(0, np.float32)])
    return nodes


def _opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset."""
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 1)


def _onnxruntime_quantization() -> tuple:
    """(onnxruntime's ``quantize_dynamic``, its int8 weight type), imported on first use;
    :class:`.MissingDependency` naming the extra that brings onnxruntime."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic  # pylint: disable=import-outside-toplevel
    except ModuleNotFoundError as error:
        if error.name in ("onnxruntime", "onnxruntime.quantization"):
            raise MissingDependency("onnxruntime.quantization") from None
        raise
    return quantize_dynamic, QuantType.QInt8


def _cannot_quantize(model: onnx.ModelProto) -> Optional[str]:
    """Why ``model`` cannot be quantized here, or None."""
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"expected an onnx.ModelProto, not {type(model).__name__}")
    if is_quantized(model):
        return f"it is quantized already (it holds {', '.join(quantized_ops(model))})"
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in model.graph.initializer):
        return "its tensors are in external data not loaded (onnx.load the file with its data beside it)"
    if scheduled_layers(model):
        return ("its recurrent layers run inside the length-aware schedule's If nodes, which onnxruntime's "
                "quantizer does not reach: convert with quantize='int8' (--quantize int8), which leaves the "
                "schedule out, or with schedule=False (--no-schedule)")
    return None


def quantized_ops(model: onnx.ModelProto) -> list:
    """The quantized op types (:data:`QUANTIZED_OPS`) in ``model``'s main graph, sorted."""
    return sorted({node.op_type for node in model.graph.node if node.op_type in QUANTIZED_OPS})


def is_quantized(model: onnx.ModelProto) -> bool:
    return bool(quantized_ops(model))


def describe(model: onnx.ModelProto) -> str:
    """"1 DynamicQuantizeLSTM, 2 MatMulInteger": the quantized nodes of ``model``."""
    counts = {}
    for node in model.graph.node:
        if node.op_type in QUANTIZED_OPS and node.op_type != "DynamicQuantizeLinear":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return ", ".join(f"{count} {op}" for op, count in sorted(counts.items()))


def float_lstms(model: onnx.ModelProto) -> list:
    """The names of the ``LSTM`` nodes to keep float32: those whose ``W`` has the plugin's padding
    column (its last input column drives gates with :data:`PADDING_DRIVE`)."""
    weights = {tensor.name: tensor for tensor in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type == "LSTM" and len(node.input) > 1 and node.input[1] in weights:
            w = numpy_helper.to_array(weights[node.input[1]])
            if w.ndim == 3 and np.any(np.abs(w[..., -1]) >= PADDING_DRIVE):
                kept.append(node.name)
    return kept


class _Diverted(logging.Filter):
    """Root-logger records (onnxruntime's quantization tools log there) go to this package's logger at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger.debug("onnxruntime.quantization: %s", record.getMessage())
        return False


@contextlib.contextmanager
def _their_messages_at_debug():
    """Within: what onnxruntime's quantization tools log (to the root logger) or print is logged at
    DEBUG instead, and no handler is added to the root logger (``logging.warning`` would)."""
    root = logging.getLogger()
    diverted, placeholder = _Diverted(), logging.NullHandler()
    root.addFilter(diverted)
    root.addHandler(placeholder)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        root.removeHandler(placeholder)
        root.removeFilter(diverted)
        for line in printed.getvalue().splitlines():
            logger.debug("onnxruntime.quantization: %s", line)
