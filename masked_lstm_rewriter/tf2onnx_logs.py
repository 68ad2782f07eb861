# SPDX-License-Identifier: Apache-2.0
"""tf2onnx's warnings that say nothing a user of the plugin can act on, and how a conversion leaves them unsaid.

As it freezes a traced model, tf2onnx drops the writes to variables it finds (a stateful layer's
states; Keras 3's dropout seed generators) and warns for each: "TF freezing failed. Attempting to
fix freezing errors.", then "Removed <op> <name>/AssignVariableOp". The writes are not wanted in
ONNX, where the plugin says what becomes of the states; the model is right. Shown with tf2onnx's
INFO level (the command line's ``-v``).
"""

from __future__ import annotations

import contextlib
import logging

TF2ONNX_FREEZING_FAILED = "TF freezing failed. Attempting to fix freezing errors."
FREEZING_LOGGER = "tf2onnx.tf_loader"


def not_a_state_write(record) -> bool:
    """False for tf2onnx's warnings about the variable writes it drops as it freezes a graph."""
    if record.msg == TF2ONNX_FREEZING_FAILED:
        return False
    return not (record.msg == "Removed %s %s" and "Assign" in str(record.args[-1] if record.args else ""))


@contextlib.contextmanager
def state_writes_unsaid():
    """While converting: tf2onnx's warnings about dropped variable writes left out, unless its INFO lines
    are shown."""
    freezing = logging.getLogger(FREEZING_LOGGER)
    if logging.getLogger("tf2onnx").isEnabledFor(logging.INFO):
        yield
        return
    freezing.addFilter(not_a_state_write)
    try:
        yield
    finally:
        freezing.removeFilter(not_a_state_write)
