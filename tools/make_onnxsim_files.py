#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Simplify ONNX files with onnx-simplifier, as users do before deploying (test data for ONNX files in).

    python -m venv /tmp/simvenv && /tmp/simvenv/bin/pip install onnxsim onnx onnxruntime
    /tmp/simvenv/bin/python tools/make_onnxsim_files.py testdata/onnx_in/tf2onnx/NAME.onnx ... \\
        --out testdata/onnx_in/onnxsim

Each file is simplified with ``onnxsim.simplify`` (its own check on onnxruntime included) and
written under the same name to ``--out``, with the number of Loops left. onnx-simplifier is not a
dependency of the project: run this in an environment of its own. The files in
``testdata/onnx_in/onnxsim`` were made with onnxsim 0.8.1 from the stock tf2onnx files beside them.
"""

import argparse
import os

import onnx
import onnxsim


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="ONNX files to simplify")
    parser.add_argument("--out", required=True, help="folder to write the simplified files to")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.files:
        simplified, checked = onnxsim.simplify(onnx.load(path))
        if not checked:
            print(f"{path}: onnxsim's check failed; not written")
            failed += 1
            continue
        target = os.path.join(args.out, os.path.basename(path))
        onnx.save(simplified, target)
        loops = sum(node.op_type == "Loop" for node in simplified.graph.node)
        print(f"{target}: {loops} Loop(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
