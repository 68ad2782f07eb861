# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the scripts in tools/ (run as ``python tools/NAME.py``).

The scripts are for a checkout: its package comes first on ``sys.path``, ahead of any installed copy.
"""

import importlib
import logging
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# pylint: disable=wrong-import-position,unused-import
from masked_lstm_rewriter import flavours  # noqa: E402
from masked_lstm_rewriter.corpus.ops import op_counts  # noqa: E402,F401
from masked_lstm_rewriter.corpus.quiet import quiet_stderr  # noqa: E402,F401


def import_stack(flavour: str, verbose: bool = False) -> types.SimpleNamespace:
    """TensorFlow with ``flavour``'s Keras, numpy, onnx, onnxruntime, tf2onnx and this checkout's
    plugin (``np``, ``onnx``, ``ort``, ``tf``, ``tf2onnx``, ``mlr``, ``keras``), imported after the
    flavour is selected and, unless ``verbose``, without their start-up noise: what a script that
    converts Keras models starts with."""
    flavours.select(flavour)
    with quiet_stderr(not verbose):
        modules = {name: importlib.import_module(module) for name, module in (
            ("np", "numpy"), ("onnx", "onnx"), ("ort", "onnxruntime"), ("tf", "tensorflow"), ("tf2onnx", "tf2onnx"),
            ("mlr", "masked_lstm_rewriter"), ("keras", "tf_keras" if flavour == "tf_keras" else "keras"))}
    if not verbose:
        modules["tf"].get_logger().setLevel(logging.ERROR)
        logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    return types.SimpleNamespace(**modules)

