# SPDX-License-Identifier: Apache-2.0
"""The runtimes a converted model must give Keras's numbers on: onnxruntime and OpenVINO.

Each runs the model with the input shapes it declares: a model converted with a dynamic
signature is compiled with dynamic dimensions on OpenVINO too (as a user loading the file would),
one converted with a static signature with static ones. OpenVINO is on by default (CI runs it);
``MLR_OPENVINO=0`` leaves it out, and it is skipped where openvino is not installed.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort

try:
    import openvino as ov
except ImportError:  # pragma: no cover - openvino is in .[test]
    ov = None

from masked_lstm_rewriter.corpus.check import OPENVINO_CONFIG  # exact float32, one thread


def run_onnxruntime(onnx_model, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    sess = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_openvino(onnx_model, feeds: dict, static: bool = False) -> list:
    """OpenVINO's ONNX front end on the CPU, compiled with the model's own (possibly dynamic)
    shapes, or (``static``) with those of ``feeds``."""
    core = ov.Core()
    model = core.read_model(onnx_model.SerializeToString(), b"")
    if static:
        model.reshape({name: ov.PartialShape(list(value.shape)) for name, value in feeds.items()})
    compiled = core.compile_model(model, "CPU", OPENVINO_CONFIG)
    results = compiled(feeds)
    return [np.asarray(results[compiled.output(o.name)]) for o in onnx_model.graph.output]


RUNNERS = {"onnxruntime": run_onnxruntime, "openvino": run_openvino}


def runtimes() -> tuple:
    """The runtimes numeric tests compare with Keras."""
    use_openvino = ov is not None and os.environ.get("MLR_OPENVINO", "1") != "0"
    return ("onnxruntime", "openvino") if use_openvino else ("onnxruntime",)
