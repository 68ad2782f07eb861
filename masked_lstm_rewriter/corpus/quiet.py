# SPDX-License-Identifier: Apache-2.0
"""Keep TensorFlow's and tf2onnx's own chatter out of a command's output."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

NOISY_LOGGERS = ("tf2onnx", "tensorflow", "absl", "keras")


@contextlib.contextmanager
def quiet_stderr(enabled: bool = True):
    """Hide what is written to stderr meanwhile, native code included (TensorFlow's start-up and
    CUDA notices, which TF_CPP_MIN_LOG_LEVEL no longer silences). An exception raised inside
    still shows: it is printed after stderr is restored."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_loggers(level: int = logging.ERROR) -> None:
    """Only errors from TensorFlow's, tf2onnx's and Keras's Python loggers."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(level)
