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

try:
    import openvino as ov
except ImportError:  # pragma: no cover - openvino is in .[test]
    ov = None

# pylint: disable-next=unused-import
from masked_lstm_rewriter.sessions import OPENVINO_CONFIG, onnxruntime_session, openvino_compiled  # noqa: F401


def run_onnxruntime(onnx_model, feeds: dict) -> list:
    return onnxruntime_session(onnx_model).run(None, feeds)


def run_openvino(onnx_model, feeds: dict, static: bool = False) -> list:
    """OpenVINO's ONNX front end on the CPU, compiled with the model's own (possibly dynamic)
    shapes, or (``static``) with those of ``feeds``. Run asynchronously: on a machine with one CPU
    (or pinned to one) OpenVINO runs one inference thread, whose synchronous inference drops runtime
    errors (test_openvino.py pins that); the tests check the model's, so they must see them."""
    compiled = openvino_compiled(onnx_model, {name: value.shape for name, value in feeds.items()} if static else None)
    request = compiled.create_infer_request()
    request.start_async(feeds)
    request.wait()
    return [np.array(request.get_tensor(compiled.output(o.name)).data) for o in onnx_model.graph.output]


RUNNERS = {"onnxruntime": run_onnxruntime, "openvino": run_openvino}


def runtimes() -> tuple:
    """The runtimes numeric tests compare with Keras."""
    use_openvino = ov is not None and os.environ.get("MLR_OPENVINO", "1") != "0"
    return ("onnxruntime", "openvino") if use_openvino else ("onnxruntime",)
