# SPDX-License-Identifier: Apache-2.0
"""An exception nobody foresaw, raised while a layer was planned and emitted, as a reason users can act on.

The rewrite is rolled back (:mod:`.snapshot`) and the layer stays tf2onnx's Loop; the reason then
says what the rewriter was doing (the stage, in words), at which node of tf2onnx's graph (the
innermost one the failing code held), the exception, and the code it came from, for a report:

    rewrite failed at node 'lstm_1/masked_lstm__251' (LSTM) while giving the native node an input
    of its own (emit/read_alone.py, _swap_derived_here): AttributeError: ...
"""

from __future__ import annotations

import os
import traceback

from tf2onnx.graph import Node

from ..failure import Refusal

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what each module of the plan and emit stages does, as the reason says it (a module not listed
# gives its caller's words: graph.py's helpers are asked by every stage)
STAGES = {
    "plan/masks.py": "computing the mask's lengths, guard or reordering",
    "plan/batch.py": "broadcasting the mask to the input's batch",
    "plan/schedule.py": "planning the length-aware schedule",
    "emit/layer.py": "emitting the layer's outputs from the native node",
    "emit/node.py": "emitting the native node",
    "emit/bidirectional.py": "emitting a forward and a backward layer as one bidirectional node",
    "emit/read_alone.py": "giving the native node an input of its own",
    "emit/rewire.py": "pointing the loop's consumers at the native node's outputs",
    "emit/segments.py": "emitting the schedule's segments",
    "emit/unmasked.py": "emitting the unmasked layer",
    "cells": "laying out the cell's weights for the native op",
    "targets.py": "checking which runtimes can run the layer",
}
DEFAULT_STAGE = "emitting the layer"


def failed_rewrite(error: BaseException, layer_node) -> Refusal:
    """The refusal of a layer whose rewrite raised ``error``: the stage, the node and the code it came
    from; the node is the innermost one the failing code held, else ``layer_node`` (the loop)."""
    frames = [(os.path.relpath(frame.f_code.co_filename, _PACKAGE).replace(os.sep, "/"), frame)
              for frame, _ in traceback.walk_tb(error.__traceback__)
              if os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep)]
    stage, where = DEFAULT_STAGE, ""
    staged = [(module, frame) for module, frame in reversed(frames)  # innermost first
              if STAGES.get(module) or STAGES.get(module.split("/")[0])]
    if staged:
        module = staged[0][0]
        stage = STAGES.get(module) or STAGES[module.split("/")[0]]
        # the function, not a comprehension in it
        function = next((frame.f_code.co_name for name, frame in staged
                         if name == module and not frame.f_code.co_name.startswith("<")), "")
        where = f" ({module}, {function})" if function else f" ({module})"
    node = _innermost_node(frame for _, frame in reversed(frames))
    what = f"{type(error).__name__}: {error}"
    if node is None:
        return Refusal(f"rewrite failed while {stage}{where}: {what}", layer_node)
    return Refusal(f"rewrite failed at node '{node.name}' ({node.type}) while {stage}{where}: {what}", node)


def _innermost_node(frames):
    """The tf2onnx node the innermost frame that held one was working on (its local ``node``, else
    any node among its locals), or None."""
    for frame in frames:
        local = frame.f_locals
        candidates = [local["node"]] if isinstance(local.get("node"), Node) else []
        candidates += [value for value in local.values() if isinstance(value, Node)]
        if candidates:
            return candidates[0]
    return None
