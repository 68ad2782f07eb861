# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the scripts in tools/ (run as ``python tools/NAME.py``).

The scripts are for a checkout: its package comes first on ``sys.path``, ahead of any installed copy.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# pylint: disable=wrong-import-position,unused-import
from masked_lstm_rewriter.corpus.ops import op_counts  # noqa: E402,F401
from masked_lstm_rewriter.corpus.quiet import quiet_stderr  # noqa: E402,F401


def without_guard(onnx_model, guard_message: str):
    """Copy of the model with the guard (a Split named by ``guard_message``) bypassed and the nodes
    only it used removed, or None when the model has no guard: what the guard costs."""
    import onnx
    model = onnx.ModelProto()
    model.CopyFrom(onnx_model)
    graph = model.graph
    guards = [n for n in graph.node if n.name.startswith(guard_message)]
    if not guards:
        return None
    from masked_lstm_rewriter.corpus.ops import walk_nodes
    for guard in guards:
        for node in walk_nodes(graph, segments=True):  # If branches read outer tensors by name too
            for i, name in enumerate(node.input):
                if name == guard.output[0]:
                    node.input[i] = guard.input[0]
        graph.node.remove(guard)
    while True:  # prune the nodes nothing reads any more, then the initializers
        used = {name for n in walk_nodes(graph, segments=True) for name in n.input} | {o.name for o in graph.output}
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)
    return model
