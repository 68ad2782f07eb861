#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Digest the graphs the plugin emits for the regression corpus, to compare two revisions node for node.

A refactoring of the plugin must not change what it emits. This converts every corpus entry of the
current Keras flavour in several settings (its own mask mode, the other one, for OpenVINO, with the
schedule; at opsets 13, 15 and 18) and writes, per conversion, a digest of the graph: one line per
node giving its op, its attributes, and a hash of what each input is computed from (so that names,
which carry counters and which tf2onnx picks differently from one run to the next, do not matter,
and two graphs that compute the same thing with the same nodes give the same lines). Node names
are kept only where they carry meaning: the guard's message, the schedule's Ifs. The body of a
``Loop`` (stock tf2onnx's, for a layer the plugin leaves alone) counts by its ops only: tf2onnx
merges its duplicate nodes differently from one run to the next.

    .venv/bin/python tools/golden_graphs.py write OUT.json      # in one flavour's process
    .venv/bin/python tools/golden_graphs.py compare A.json B.json

Run ``write`` once per flavour (``TF_USE_LEGACY_KERAS=1`` for tf_keras); the files hold both.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (label, mask_mode, target, schedule, opset or None for the entry's)
SETTINGS = (("own", "entry", None, False, None), ("post", "post", None, False, None),
            ("any", "any", None, False, None), ("openvino", None, "openvino", False, None),
            ("schedule", "post", None, True, None), ("opset13", "entry", None, False, 13),
            ("opset18", "entry", None, False, 18))
_COUNTER = re.compile(r"\d+")  # counters and TensorFlow function ids: they vary between runs


def _hash(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def _attribute(attr, outer: dict, op_type: str = ""):
    from onnx import helper  # pylint: disable=import-outside-toplevel
    if attr.type == attr.GRAPH and op_type == "Loop":  # stock tf2onnx's: its body varies from run to run
        return ("loop body", tuple(sorted(collections.Counter(n.op_type for n in attr.g.node).items())))
    if attr.type == attr.GRAPH:
        return ("graph", tuple(digest_graph(attr.g, outer)))
    if attr.type == attr.TENSOR:
        from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
        value = numpy_helper.to_array(attr.t)
        return ("tensor", str(value.dtype), value.shape, value.tobytes())
    value = helper.get_attribute_value(attr)
    return _COUNTER.sub("", value.decode()) if isinstance(value, bytes) else value


def _free_names(graph) -> set:
    """The tensors a (sub)graph reads from the scopes around it."""
    local = {t.name for t in graph.input} | {t.name for t in graph.initializer}
    local |= {out for node in graph.node for out in node.output}
    return {name for node in graph.node for name in _needed(node)} - local - {""}


def _needed(node) -> set:
    """What a node reads: its inputs and what its subgraphs read from outside."""
    names = set(node.input)
    for attr in node.attribute:
        if attr.type == attr.GRAPH:
            names |= _free_names(attr.g)
    return names


def digest_graph(graph, outer: dict = None) -> list:
    """Sorted lines, one per node: op, name without counters, attributes, and the inputs' hashes."""
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
    known = dict(outer or {})
    for init in graph.initializer:
        value = numpy_helper.to_array(init)
        known[init.name] = _hash("init", str(value.dtype), value.shape, value.tobytes())
    for index, tensor in enumerate(graph.input):  # a subgraph's inputs carry counters: by position
        known[tensor.name] = _hash("input", tensor.name if outer is None else index)
    lines, pending = [], list(graph.node)
    while pending:
        progressed, left = False, []
        for node in pending:
            if not all(name == "" or name in known for name in _needed(node)):
                left.append(node)
                continue
            attrs = tuple(sorted((a.name, repr(_attribute(a, known, node.op_type))) for a in node.attribute))
            inputs = tuple(known.get(name, "") for name in node.input)
            # a name is kept only where it means something (the guard's message, the schedule's Ifs):
            # tf2onnx merges duplicate nodes keeping either one's name, whichever it meets first
            name = _COUNTER.sub("", node.name) if node.name.startswith("masked_lstm_rewriter") else ""
            key = _hash(node.op_type, node.domain, name, attrs, inputs)
            for index, output in enumerate(node.output):
                known[output] = _hash(key, index)
            lines.append(f"{node.op_type} {name} {_hash(attrs)} {' '.join(i or '-' for i in inputs)} -> {key}")
            progressed = True
        if not progressed:  # names read from an outer scope the digest does not know: hash them by name
            for node in left:
                for name in node.input:
                    known.setdefault(name, _hash("outer", _COUNTER.sub("", name)))
        pending = left
    outputs = [f"output {known.get(t.name, t.name)}" for t in graph.output]
    return sorted(lines) + outputs


def _convert(entry, corpus, output, mask_mode, target, schedule, opset) -> None:
    import tf2onnx.convert  # pylint: disable=import-outside-toplevel

    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    from masked_lstm_rewriter.corpus import manifest  # pylint: disable=import-outside-toplevel
    args = manifest.convert_args(dict(entry, opset=opset or entry["opset"]), corpus, output)
    saved = sys.argv
    sys.argv = ["tf2onnx.convert"] + args
    try:
        with mlr.enable(mask_mode, target, schedule):
            tf2onnx.convert.main()
    finally:
        sys.argv = saved


def write(path: str, keyword: str = "") -> None:
    """Convert the current flavour's entries (whose name holds ``keyword``) in every setting; add their
    digests to ``path``."""
    import logging  # pylint: disable=import-outside-toplevel

    import onnx  # pylint: disable=import-outside-toplevel
    from masked_lstm_rewriter.corpus import manifest  # pylint: disable=import-outside-toplevel
    from masked_lstm_rewriter.corpus.quiet import quiet_loggers, quiet_stderr  # pylint: disable=import-outside-toplevel
    quiet_loggers(logging.ERROR)
    flavour = manifest.current_flavour()
    corpus = manifest.DATA_DIR
    entries = manifest.entries_for(manifest.load_manifest(corpus), flavour, keyword)
    digests = json.load(open(path)) if os.path.exists(path) else {}
    with tempfile.TemporaryDirectory() as tmp:
        for number, entry in enumerate(entries, 1):
            for label, mode, target, schedule, opset in SETTINGS:
                mode = entry["mask_mode"] if mode == "entry" else mode
                output = os.path.join(tmp, "model.onnx")
                key = f"{entry['name']} {label}"
                try:
                    with quiet_stderr():
                        _convert(entry, corpus, output, mode, target, schedule, opset)
                    digests[key] = digest_graph(onnx.load(output).graph)
                except BaseException as error:  # pylint: disable=broad-except
                    if isinstance(error, KeyboardInterrupt):
                        raise
                    digests[key] = [f"failed: {type(error).__name__}: {error}"]
            print(f"{number}/{len(entries)} {entry['name']}", file=sys.stderr, flush=True)
    with open(path, "w") as out:
        json.dump(digests, out, indent=0, sort_keys=True)


def compare(first: str, second: str) -> int:
    """Print the conversions whose digests differ; 0 when none does."""
    a, b = (json.load(open(p)) for p in (first, second))
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    for key in differ:
        only_a = sorted(set(a.get(key, [])) - set(b.get(key, [])))
        only_b = sorted(set(b.get(key, [])) - set(a.get(key, [])))
        print(f"{key}: {len(only_a)} node(s) only in {first}, {len(only_b)} only in {second}")
        for line in only_a[:5]:
            print(f"  - {line}")
        for line in only_b[:5]:
            print(f"  + {line}")
    print(f"{len(set(a) | set(b)) - len(differ)} conversions identical, {len(differ)} differ")
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    writer = sub.add_parser("write")
    writer.add_argument("output")
    writer.add_argument("--keyword", default="", help="only the entries whose name holds it")
    both = sub.add_parser("compare")
    both.add_argument("first")
    both.add_argument("second")
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.output, args.keyword)
        return 0
    return compare(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
