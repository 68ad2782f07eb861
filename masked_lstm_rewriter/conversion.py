# SPDX-License-Identifier: Apache-2.0
"""One call for export scripts: a Keras model, a Keras file or a SavedModel in, an ONNX model out.

    import masked_lstm_rewriter as mlr
    onnx_model, report = mlr.convert(model, "model.onnx")

It converts with tf2onnx under :func:`.plugin.enable`, so the Keras 3 fixes apply too (the
Keras front-door fixes of :mod:`.patches.tf2onnx_keras`, the ``TimeDistributed`` tracing of
:mod:`.patches.time_distributed`), infers the input signature (:mod:`.keras_source`), names the
inputs, outputs and dimensions as the command line does (:mod:`.io_names`) and writes the file
all at once (:mod:`.output_file`).
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple, Optional

import onnx
import tensorflow as tf
import tf2onnx
from tf2onnx import tf_loader, utils

from . import backend_process, io_names, keras_source, output_file
from .dependencies import check_large_model
from .plugin import enable
from .quantize import check_quantize, quantize_converted, schedule_for
from .report import ConversionReport, last_report, start_conversion
from .targets import TARGETS
from .tf2onnx_logs import state_writes_unsaid

logger = logging.getLogger("masked_lstm_rewriter")

# tf2onnx options that choose what is read from a SavedModel (the rest go to the conversion)
SAVED_MODEL_OPTIONS = ("tag", "signature_def", "concrete_function", "use_graph_names")


class Converted(NamedTuple):
    """What :func:`convert` returns: the ONNX model and what the rewriter did with each masked layer."""

    onnx_model: onnx.ModelProto
    report: ConversionReport


def convert(model, output_path=None, *, mask_mode: Optional[str] = None, runtime: Optional[str] = None,
            input_signature=None, opset: Optional[int] = None, schedule: Optional[bool] = None,
            keep_wrong: bool = False,
            streaming: Optional[bool] = None, quantize: Optional[str] = None,
            custom_objects: Optional[dict] = None, **tf2onnx_options) -> Converted:
    """Convert ``model`` to ONNX with its masked recurrent layers as native ops.

    ``model``: a Keras model (Keras 3 on any backend, or tf_keras; ``Sequential``, functional or
    subclassed), or the path of a ``.keras`` / ``.h5`` file or of a SavedModel directory. A Keras 3
    model on JAX or torch (or a path, where this process's Keras is on one) is converted in a
    child process on TensorFlow (:mod:`.backend_process`).
    ``output_path``: where to write the ONNX file (written only if the conversion succeeds).
    ``mask_mode``: ``"post"``, ``"any"``, or None for the runtime's default (``"any"`` for
    OpenVINO, else ``"post"``). ``runtime``: None (any runtime), ``"onnxruntime"`` or
    ``"openvino"`` (as in :func:`.make_rewriter`). ``schedule``: the length-aware schedule, for
    long-tailed batches (:func:`.make_rewriter`); None (the default): on, unless ``quantize``.
    ``streaming``: each recurrent layer takes its initial states as inputs and returns its final
    states as outputs (``<layer>/h_in`` ... ``<layer>/h_out``; see docs/streaming.md), so the model
    runs chunk by chunk; None (the default): on for a Keras model with a ``stateful=True`` layer
    (said at INFO), else off. False keeps a stateful model's states frozen as constants (said at INFO).
    ``keep_wrong``: write a model known to compute other values than its source (a SavedModel
    holding Keras 3's broken ``TimeDistributed`` trace) instead of failing with :class:`.KnownWrong`.
    ``quantize``: ``"int8"`` quantizes the converted model with onnxruntime's dynamic quantization
    (:mod:`.quantize`: an ``LSTM`` becomes ``DynamicQuantizeLSTM``, a ``Dense`` ``MatMulInteger``), for
    onnxruntime only; None (the default): float32.
    ``custom_objects``: ``{name: class}`` of the custom classes (layers, cells) a ``.keras`` /
    ``.h5`` file names that are not registered with Keras, as Keras's ``load_model`` takes them
    (also for a model on JAX or torch, which the TensorFlow process loads from a file).
    ``input_signature``: ``tf.TensorSpec``s; by default the model's own inputs, dynamic in batch
    and time (a SavedModel keeps its serving signature). Other keyword arguments go to tf2onnx
    (``from_keras``'s, such as ``inputs_as_nchw`` or ``target``, tf2onnx's workarounds for rs4 ...
    tensorrt; for a SavedModel also ``tag``, ``signature_def``).
    """
    schedule = _checked_options(tf2onnx_options, runtime, schedule, quantize, output_path)
    if backend_process.needs_tensorflow_process(model):  # a Keras 3 model on JAX or torch
        return _in_tensorflow_process(model, output_path, tf2onnx_options, quantize, mask_mode=mask_mode,
                                      runtime=runtime, schedule=schedule, opset=opset, keep_wrong=keep_wrong,
                                      streaming=streaming, input_signature=input_signature,
                                      custom_objects=custom_objects)
    start_conversion()
    with enable(mask_mode, runtime, schedule, keep_wrong=keep_wrong, streaming=bool(streaming)):
        if isinstance(model, (str, os.PathLike)) and keras_source.is_saved_model(model):
            if input_signature is not None:
                raise keras_source.SourceError(f"{os.fspath(model)}: a SavedModel is converted with its serving "
                                               "signature; input_signature= is for Keras models")
            onnx_model, storage = _from_saved_model(os.fspath(model), opset, tf2onnx_options)
        else:
            keras_model = keras_source.load(model, custom_objects) if isinstance(model, (str, os.PathLike)) else model
            if not keras_source.is_keras_model(keras_model):
                raise TypeError(f"expected a Keras model or a path, not {type(keras_model).__name__}")
            with enable(mask_mode, runtime, schedule, keep_wrong=keep_wrong,
                        streaming=streaming_for(keras_model, streaming)), state_writes_unsaid():
                onnx_model, storage = _from_keras(keras_model, input_signature, opset, tf2onnx_options)
    io_names.name_dimensions(onnx_model)  # batch, time: not tf2onnx's unk__N
    return _finished(onnx_model, last_report() or ConversionReport(), quantize, output_path, storage)


def _checked_options(tf2onnx_options: dict, runtime, schedule, quantize, output_path) -> bool:
    """Fail on options that do not go together, before the work; the schedule to emit."""
    if tf2onnx_options.get("target") in TARGETS:
        raise ValueError(f"target= is tf2onnx's option (rs4, rs5, rs6, caffe2, tensorrt, nhwc); for the runtime "
                         f"the model is for, use runtime={tf2onnx_options['target']!r}")
    check_large_model(bool(tf2onnx_options.get("large_model")))
    check_quantize(quantize, runtime, schedule)
    if output_path is not None:
        output_file.check_writable(output_path)
    return schedule_for(schedule, quantize)


def _finished(onnx_model, report: ConversionReport, quantize: Optional[str], output_path, storage=None) -> Converted:
    """The conversion's result: quantized if asked (:mod:`.quantize`), written if ``output_path`` is given."""
    if quantize is not None:
        onnx_model, report = quantize_converted(onnx_model, report, quantize)
    if output_path is not None:
        save(onnx_model, output_path, storage)
    return Converted(onnx_model, report)


def _in_tensorflow_process(model, output_path, tf2onnx_options: dict, quantize: Optional[str] = None,
                           **options) -> Converted:
    """:func:`convert` of a Keras 3 model on JAX or torch, in a TensorFlow process (``options``: convert's);
    ``quantize`` here, on the model it returns."""
    if tf2onnx_options:
        raise ValueError(f"a model on the {backend_process.process_backend()} backend is converted in a TensorFlow "
                         f"process, which does not take tf2onnx's options ({', '.join(sorted(tf2onnx_options))})")
    onnx_model, report = backend_process.convert_in_tensorflow_process(model, **options)
    return _finished(onnx_model, report, quantize, output_path)


def streaming_for(model, streaming: Optional[bool]) -> bool:
    """``streaming``, or where not given, whether ``model`` has stateful recurrent layers (said at INFO)."""
    if streaming is not None:
        return streaming
    stateful = keras_source.stateful_layers(model)
    if stateful:
        logger.info("stateful layer(s) %s: converted for streaming (states as inputs and outputs); "
                    "streaming=False freezes the states they hold now", ", ".join(stateful))
    return bool(stateful)


def _from_keras(model, spec, opset, options: dict):
    """tf2onnx's ``from_keras`` (its trace, its names, its ``continue_on_error``), through the trace the
    command line also uses for a Keras file (:func:`.io_names.keras_graph`); ``spec`` None: the
    model's own inputs (:func:`.keras_source.input_signature`)."""
    if spec is not None:
        keras_source.check_given_signature(model, spec)
    spec = spec if spec is not None else keras_source.input_signature(model)
    traced = io_names.keras_graph(model, spec)
    with tf.device("/cpu:0"):
        return tf2onnx.convert._convert_common(  # pylint: disable=protected-access
            traced.graph_def, name=model.name, opset=opset, input_names=traced.inputs, output_names=traced.outputs,
            tensors_to_rename=traced.renames, initialized_tables=traced.tables,
            **{"continue_on_error": True, **options})


def _from_saved_model(path: str, opset, options: dict):
    """tf2onnx's own SavedModel conversion (what ``python -m tf2onnx.convert --saved-model`` does)."""
    loader = {name: options.pop(name) for name in SAVED_MODEL_OPTIONS if name in options}
    graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
        path, None, None, loader.get("tag"), loader.get("signature_def"), loader.get("concrete_function"),
        False, return_initialized_tables=True, return_tensors_to_rename=True,
        use_graph_names=loader.get("use_graph_names", False))
    with tf.device("/cpu:0"):
        return tf2onnx.convert._convert_common(  # pylint: disable=protected-access
            graph_def, name=path, opset=opset, input_names=inputs, output_names=outputs,
            tensors_to_rename=renames, initialized_tables=tables, **options)


def save(onnx_model, path, external_storage=None) -> None:
    """Write ``onnx_model`` to ``path`` all at once (a zip with its tensors for a large model)."""
    with output_file.atomic_path(path) as partial:
        if external_storage is not None:
            utils.save_onnx_zip(partial, onnx_model, external_storage)
        else:
            onnx.save_model(onnx_model, partial)
    logger.info("ONNX model written to %s", os.fspath(path))
