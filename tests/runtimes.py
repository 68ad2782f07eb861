# SPDX-License-Identifier: Apache-2.0
"""The runtimes a converted model must give Keras's numbers on: onnxruntime and OpenVINO.

Each runs the model with the input shapes it declares: a model converted with a dynamic
signature is compiled with dynamic dimensions on OpenVINO too (as a user loading the file would),
one converted with a static signature with static ones. OpenVINO is on by default (CI runs it);
``MLR_OPENVINO=0`` leaves it out, and it is skipped where openvino is not installed.
"""

from __future__ import annotations

import os

try:
    import openvino as ov
except ImportError:  # pragma: no cover - openvino is in .[test]
    ov = None

# pylint: disable-next=unused-import
from masked_lstm_rewriter.sessions import OPENVINO_CONFIG, onnxruntime_session, openvino_compiled  # noqa: F401
from masked_lstm_rewriter.sessions import openvino_runner


def run_onnxruntime(onnx_model, feeds: dict) -> list:
    return onnxruntime_session(onnx_model).run(None, feeds)


def run_openvino(onnx_model, feeds: dict, static: bool = False) -> list:
    """OpenVINO's ONNX front end on the CPU, compiled with the model's own (possibly dynamic)
    shapes, or (``static``) with those of ``feeds``; asynchronous requests (the library's runner), whose
    errors are raised with one inference thread too (a machine with one CPU)."""
    run = openvino_runner(onnx_model, static=static)
    return run([o.name for o in onnx_model.graph.output], feeds)


RUNNERS = {"onnxruntime": run_onnxruntime, "openvino": run_openvino}


def runtimes() -> tuple:
    """The runtimes numeric tests compare with Keras."""
    use_openvino = ov is not None and os.environ.get("MLR_OPENVINO", "1") != "0"
    return ("onnxruntime", "openvino") if use_openvino else ("onnxruntime",)
