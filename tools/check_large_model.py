#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrite an ONNX model over 2 GB end to end, as a user would, and check it against the original.

Builds the model from a stock tf2onnx file of the test data (an ``Embedding(mask_zero=True) ->
LSTM`` whose ``Loop`` the rewrite makes native), with its embedding table grown past protobuf's
2 GB limit (the rows the tokens use keep their values; the others are zeros), saved with its
tensors in a file beside it, as such models are. Then runs the command line's ``rewrite`` on it
and compares both models on onnxruntime, every output at every position, on post-padded rows with
a full and an empty row. Prints the sizes, the times, the peak memory and the largest difference;
exits non-zero if anything differs. Takes a few minutes and about 3x the model's size in memory and
disk (in ``--workdir``, a temporary folder by default).

    .venv/bin/python tools/check_large_model.py [--gigabytes 2.2] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

from toolutil import ROOT

SOURCE = os.path.join(ROOT, "testdata", "onnx_in", "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")
LENGTHS = (6, 3, 0, 1)  # a full row, an empty one, others
STEPS = 6


def grown_model(gigabytes: float) -> tuple:
    """(the source model with its embedding table, the initializer a Gather reads rows of, grown; the
    table's original number of rows)."""
    model = onnx.load(SOURCE)
    initializers = {init.name: init for init in model.graph.initializer}
    gather = next(node for node in model.graph.node if node.op_type == "Gather" and node.input[0] in initializers)
    table = numpy_helper.to_array(initializers[gather.input[0]])
    rows = int(gigabytes * 1e9 / (table.shape[1] * table.itemsize)) + 1
    grown = np.zeros((rows, table.shape[1]), table.dtype)
    grown[:table.shape[0]] = table
    initializers[gather.input[0]].CopyFrom(numpy_helper.from_array(grown, gather.input[0]))
    return model, table.shape[0]


def tokens(vocabulary: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    batch = np.zeros((len(LENGTHS), STEPS), np.int32)
    for row, length in enumerate(LENGTHS):
        batch[row, :length] = rng.integers(1, vocabulary, length)
    return batch


def outputs(path: str, batch: np.ndarray) -> list:
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: batch})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=2.2, help="the size of the grown model (2.2)")
    parser.add_argument("--workdir", help="where the models are written (a temporary folder by default)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        original, rewritten = os.path.join(folder, "large.onnx"), os.path.join(folder, "large_native.onnx")
        start = time.perf_counter()
        model, vocabulary = grown_model(args.gigabytes)
        onnx.save_model(model, original, save_as_external_data=True, location="large.onnx.data")
        del model
        print(f"built {os.path.getsize(original + '.data') / 1e9:.2f} GB of tensors in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", "rewrite", original, "-o", rewritten],
                              capture_output=True, text=True, check=False)
        took = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        written = sorted(name for name in os.listdir(folder) if name.startswith("large_native"))
        sizes = ", ".join(f"{name} {os.path.getsize(os.path.join(folder, name)) / 1e9:.3f} GB" for name in written)
        print(f"rewrite: {took:.0f} s, peak memory {peak:.1f} GB; wrote {sizes}")
        print(done.stdout.strip())
        batch = tokens(vocabulary)
        expected, got = outputs(original, batch), outputs(rewritten, batch)
        worst = max(float(np.max(np.abs(e - g))) for e, g in zip(expected, got))
        ops = sorted({node.op_type for node in onnx.load(rewritten, load_external_data=False).graph.node})
        print(f"outputs: {len(got)}, max |original - rewritten| = {worst:.3g}; ops {ops}")
        return 0 if worst <= 1e-5 and "Loop" not in ops and "LSTM" in ops else 1


if __name__ == "__main__":
    sys.exit(main())
