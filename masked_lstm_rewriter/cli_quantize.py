# SPDX-License-Identifier: Apache-2.0
"""The command line's ``--quantize int8``, as :func:`.conversion.convert`'s ``quantize``.

The option is checked with the others before TensorFlow loads (a bad value, ``--runtime openvino``
or ``--schedule`` beside it: a one-line usage error), and the model is quantized
(:mod:`.quantize`) in the hidden file tf2onnx wrote, before that file is renamed to ``--output``.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import onnx

from .cli_input import UsageError, pop_choice
from .cli_logging import progress
from .dependencies import MissingDependency
from .quantize import MODES, check_quantize, quantize_converted

FLAG = "--quantize"


def pop_quantize(args: list, runtime, schedule: Optional[bool]) -> tuple:
    """(the mode ``--quantize`` gives, or None; the other arguments), checked against ``runtime`` and
    ``schedule``."""
    if not any(arg == FLAG or arg.startswith(FLAG + "=") for arg in args):
        return None, args
    mode, rest = pop_choice(args, FLAG, "", MODES)  # no environment variable: "" is never set
    try:
        check_quantize(mode, runtime, schedule, flags=True)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if importlib.util.find_spec("onnxruntime") is None:  # before TensorFlow loads, not after the conversion
        raise MissingDependency("onnxruntime.quantization")
    return mode, rest


def quantize_file(path: str, mode: str) -> None:
    """Quantize the ONNX file at ``path`` in place (the hidden file tf2onnx wrote); the thread's last
    report says so."""
    from .report import last_report  # pylint: disable=import-outside-toplevel
    progress("quantizing (%s, for onnxruntime)", mode)
    quantized, _ = quantize_converted(onnx.load(path), last_report(), mode)
    onnx.save_model(quantized, path)
