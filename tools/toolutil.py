# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the scripts in tools/ (run as ``python tools/NAME.py``)."""

import contextlib
import os
import sys


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


def op_counts(model_proto):
    """Op types over the main graph and every subgraph (a Loop's body included)."""
    import collections  # pylint: disable=import-outside-toplevel
    counts = collections.Counter()

    def visit(graph):
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    visit(sub)

    visit(model_proto.graph)
    return counts
