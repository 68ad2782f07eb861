#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Convert small recurrent Keras models with STOCK tf2onnx 1.17 and describe every ``Loop`` it writes.

    .venv/bin/python tools/stock_onnx_catalogue.py --keras keras3            # every case, Keras 3
    .venv/bin/python tools/stock_onnx_catalogue.py --keras tf_keras          # every case, tf_keras
    .venv/bin/python tools/stock_onnx_catalogue.py --keras keras3 --cases emb_lstm_seq,masking_gru
    .venv/bin/python tools/stock_onnx_catalogue.py --describe some.onnx      # describe an existing file only
    .venv/bin/python tools/stock_onnx_catalogue.py --list                    # the cases and their opsets

What it is for: the spelling catalogue of the Loops that stock tf2onnx makes of Keras recurrent
layers (the input of a reader that rewrites an existing ONNX file). It never imports
``masked_lstm_rewriter`` (whose start-up hook can patch tf2onnx): the script re-executes itself
with ``TF2ONNX_MASKED_LSTM`` removed from the environment and ``TF_USE_LEGACY_KERAS`` set for the
flavour asked for (TensorFlow reads it once, at import), and checks at the end that the plugin
was not loaded.

Earlier tf2onnx releases make their files the same way, the script run in an environment of their
own: ``testdata/onnx_in/tf2onnx-1.16`` with TensorFlow 2.19, ``tf2onnx-1.15`` with TensorFlow 2.13
and ``tf2onnx-1.13`` with TensorFlow 2.10 (Python 3.10; ``--keras tf_keras`` then takes TensorFlow's
built-in Keras 2).

``--litert`` converts each model the way a LiteRT (TensorFlow Lite) user reaches ONNX instead: the
model to a ``.tflite`` flatbuffer at a static shape, then ``tf2onnx.convert.from_tflite``
(``testdata/onnx_in/tf2onnx-litert``).

For each case and opset it writes, under ``--out`` (default ``/tmp/stock_catalogue``):

* ``<flavour>_<case>_op<opset>.onnx``: the stock conversion (``tf2onnx.convert.from_keras`` of a
  functional model with an explicit ``input_signature``);
* ``<flavour>_<case>_op<opset>.txt``: the description of every ``Loop`` (main graph and nested):
  its inputs with the main-graph op chain producing each, the body's inputs and outputs, every
  body node (op, inputs, outputs, attributes), the expression of each body output in terms of body
  inputs / outer tensors / constants, the body nodes reading outer-scope tensors and what those
  are, and which Loop outputs the enclosing graph consumes and how;
* ``<flavour>_<case>_op<opset>.json``: the same, as data;
* ``<flavour>_summary.json``: per file, the op counts, the number of Loops and the largest
  difference between Keras and onnxruntime on a padded batch (a sanity check of the conversion).

Every model is small (units 3-5, vocabulary 10, up to 6 steps) and built with fixed seeds
(``keras.utils.set_random_seed`` and every weight redrawn from ``numpy.random.default_rng`` so that
no bias is zero). Keras 3 models with several outputs of one layer get one ``Activation("linear")``
per output, named ``out0``, ``out1``...: tf2onnx 1.17 keeps one ONNX output per distinct Keras
output name and Keras 3 names every output of a layer after it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

FLAVOURS = ("keras3", "tf_keras")
LEGACY = "TF_USE_LEGACY_KERAS"
REEXEC = "_STOCK_ONNX_CATALOGUE_CHILD"
PLUGIN_VARS = ("TF2ONNX_MASKED_LSTM", "TF2ONNX_MASKED_LSTM_TARGET")
DEFAULT_OUT = "/tmp/stock_catalogue"


# --------------------------------------------------------------------------------------------
# process set-up: the flavour is chosen before TensorFlow is imported
# --------------------------------------------------------------------------------------------

def ensure_flavour(flavour: str | None) -> None:
    """Re-execute this script with the environment ``flavour`` needs, unless it already has it."""
    want = None if flavour is None else ("1" if flavour == "tf_keras" else "0")
    ok = (want is None or os.environ.get(LEGACY) == want) and not any(v in os.environ for v in PLUGIN_VARS) \
        and "tensorflow" not in sys.modules
    if ok:
        return
    if os.environ.get(REEXEC):
        raise SystemExit("stock_onnx_catalogue: could not set up the environment for " + str(flavour))
    env = dict(os.environ)
    for name in PLUGIN_VARS:
        env.pop(name, None)
    if want is not None:
        env[LEGACY] = want
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[REEXEC] = "1"
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)


# --------------------------------------------------------------------------------------------
# describing Loops (needs only onnx and numpy)
# --------------------------------------------------------------------------------------------

def _np_dtype(onnx, code: int):
    """numpy's dtype of an ONNX element type (onnx 1.12, beside TensorFlow 2.10, has only the mapping table)."""
    convert = getattr(onnx.helper, "tensor_dtype_to_np_dtype", None)
    return convert(code) if convert else onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[code]


MAX_CHAIN_DEPTH = 14
MAX_CONST_SHOWN = 8


class Scope:
    """One graph (main or a subgraph) with name lookups, and its enclosing scope."""

    def __init__(self, graph, parent=None, label="main", prefix="m"):
        self.graph = graph
        self.parent = parent
        self.label = label
        self.prefix = prefix  # node k of this graph is called prefix + k in chains ("m" main, "n" a body)
        self.producer = {}  # tensor name -> (node, output index)
        self.number = {}  # tensor name -> index of its producer in graph.node
        for k, node in enumerate(graph.node):
            for i, out in enumerate(node.output):
                if out:
                    self.producer[out] = (node, i)
                    self.number[out] = k
        self.inits = {t.name: t for t in graph.initializer}
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.consumers = {}  # tensor name -> [(node, input index, node index)]
        for k, node in enumerate(graph.node):
            for i, name in enumerate(node.input):
                self.consumers.setdefault(name, []).append((node, i, k))
            for name in subgraph_outer_names(node):
                self.consumers.setdefault(name, []).append((node, "subgraph", k))

    def defines(self, name):
        return name in self.producer or name in self.inits or name in self.inputs

    def owner(self, name):
        scope = self
        while scope is not None:
            if scope.defines(name):
                return scope
            scope = scope.parent
        return None


def subgraph_outer_names(node):
    """Names that the subgraphs of ``node`` read from outside themselves (recursively)."""
    import onnx  # pylint: disable=import-outside-toplevel
    names = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                local.update(o for o in n.output if o)
            for n in g.node:
                for name in list(n.input) + subgraph_outer_names(n):
                    if name and name not in local and name not in names:
                        names.append(name)
            for o in g.output:
                if o.name not in local and o.name not in names:
                    names.append(o.name)
    return names


def tensor_text(t, show_values=True):
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel
    dtype = _np_dtype(onnx, t.data_type).name if t.data_type else "?"
    dims = list(t.dims)
    text = f"{dtype}{dims}"
    if show_values:
        try:
            arr = numpy_helper.to_array(t)
            if arr.size <= MAX_CONST_SHOWN:
                vals = arr.tolist()
                text += f"={vals}"
        except Exception:  # pylint: disable=broad-except
            pass
    return text


def attr_value(attr):
    import onnx  # pylint: disable=import-outside-toplevel
    h = onnx.helper
    if attr.type == onnx.AttributeProto.GRAPH:
        return f"<graph {attr.g.name}: {len(attr.g.node)} nodes>"
    if attr.type == onnx.AttributeProto.GRAPHS:
        return f"<{len(attr.graphs)} graphs>"
    if attr.type == onnx.AttributeProto.TENSOR:
        return "tensor " + tensor_text(attr.t)
    value = h.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, list):
        value = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
    if isinstance(value, float):
        value = float(f"{value:.7g}")
    if attr.name == "to":
        value = _np_dtype(onnx, value).name
    return value


def attrs_dict(node):
    return {a.name: attr_value(a) for a in node.attribute}


def attrs_text(node, skip_graphs=True):
    import onnx  # pylint: disable=import-outside-toplevel
    parts = []
    for a in node.attribute:
        if skip_graphs and a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            continue
        parts.append(f"{a.name}={attr_value(a)}")
    return "{" + ", ".join(parts) + "}" if parts else ""


def chain(name, scope, stop=None, memo=None, depth=0, outer_leaf=False):
    """The op chain that produces ``name``, e.g. ``Cast{to=int64}(Squeeze(Slice(Shape(input:x), ...)))``.

    ``stop``: names to print as leaves (a body's inputs, as ``$v3``); ``memo``: a set shared by the
    chains of one listing, so that a node expanded once is printed ``^m12`` (node 12 of the main
    graph, ``n12`` of a body) afterwards; ``outer_leaf``: print a tensor of an enclosing graph as
    ``outer'name'`` instead of expanding it."""
    if not name:
        return "<none>"
    if stop and name in stop:
        return stop[name]
    owner = scope.owner(name)
    if owner is None:
        return f"?{name}"
    prefix = "" if owner is scope else "outer:"
    if name in owner.inits:
        return f"{prefix}init'{name}':{tensor_text(owner.inits[name])}"
    if name in owner.inputs:
        return f"{prefix}input'{name}'"
    if outer_leaf and owner is not scope:
        return f"outer'{name}'"
    node, idx = owner.producer[name]
    k = owner.number[name]
    label = f"{owner.prefix}{k}"
    if node.op_type == "Constant":
        return f"{prefix}Constant:{attrs_text(node)[1:-1]}"
    out = f":{idx}" if len(node.output) > 1 else ""
    if memo is not None:
        if (owner.prefix, k) in memo:
            return f"{prefix}^{label}{out}"
        memo.add((owner.prefix, k))
    if depth >= MAX_CHAIN_DEPTH:
        return f"{prefix}…{node.op_type}^{label}{out}"
    args = ", ".join(chain(i, owner, stop if owner is scope else None, memo, depth + 1,
                           outer_leaf and owner is scope) for i in node.input)
    return f"{prefix}{node.op_type}[{label}]{out}{attrs_text(node)}({args})"


def consumers_tree(name, scope, depth=0, max_depth=4):
    """How the graph uses ``name``: its consumers, theirs... down to ``max_depth`` levels."""
    lines = []
    if name in scope.outputs:
        lines.append("  " * depth + f"graph output '{name}'")
    for node, idx, k in scope.consumers.get(name, []):
        label = f"{scope.prefix}{k}"
        lines.append("  " * depth + f"-> {node.op_type}[{label}]{attrs_text(node)} '{node.name}' (input {idx})"
                     + (f" other inputs: {[chain(i, scope, memo=set()) for j, i in enumerate(node.input) if j != idx][:3]}"
                        if node.op_type in ("Gather", "Slice", "Squeeze", "Unsqueeze", "Concat", "Reshape",
                                            "ReverseSequence", "Add", "Mul", "Where", "Split") else ""))
        if depth + 1 < max_depth:
            for out in node.output:
                lines.extend(consumers_tree(out, scope, depth + 1, max_depth))
    return lines


def describe_loop(loop, scope, path):
    """A dict describing one Loop node in ``scope``."""
    body = next(a.g for a in loop.attribute if a.name == "body")
    bscope = Scope(body, scope, label=f"{path}/{loop.name}", prefix=scope.prefix.replace("m", "") + "n")
    body_inputs = [i.name for i in body.input]
    roles = {}
    n_carried = len(loop.input) - 2
    for k, name in enumerate(body_inputs):
        roles[name] = "iter" if k == 0 else "cond_in" if k == 1 else f"v{k - 2}"
    stop = {name: f"${roles[name]}" for name in body_inputs}
    # values of body-local constants shown inline; outer names shown as outer:...
    info = {
        "loop": loop.name,
        "path": path,
        "inputs": [],
        "body_inputs": [],
        "body_outputs": [],
        "body_nodes": [],
        "outer_reads": [],
        "outputs": [],
        "nested": [],
    }
    labels = ["M (trip count)", "cond"] + [f"v_initial{k}" for k in range(n_carried)]
    for k, name in enumerate(loop.input):
        info["inputs"].append({"index": k, "role": labels[k], "name": name, "chain": chain(name, scope, memo=set())})
    for k, vi in enumerate(body.input):
        info["body_inputs"].append({"index": k, "role": roles[vi.name], "name": vi.name, "type": type_text(vi)})
    n_scan = len(body.output) - 1 - n_carried
    memo = set()
    for k, vo in enumerate(body.output):
        role = "cond_out" if k == 0 else (f"v{k - 1} (carried)" if k - 1 < n_carried
                                            else f"scan{k - 1 - n_carried}")
        invariant = 1 <= k <= n_carried and vo.name == body_inputs[k + 1]
        passthrough = None
        if 1 <= k <= n_carried and vo.name in bscope.producer:
            node, _ = bscope.producer[vo.name]
            if node.op_type == "Identity" and node.input[0] == body_inputs[k + 1]:
                invariant = True
                passthrough = "Identity"
        info["body_outputs"].append({
            "index": k, "role": role, "name": vo.name, "type": type_text(vo),
            "invariant": invariant, "via": passthrough,
            "expr": chain(vo.name, bscope, stop, memo, outer_leaf=True)})
    for n, node in enumerate(body.node):
        entry = {"i": n, "op": node.op_type, "name": node.name, "inputs": list(node.input),
                 "outputs": list(node.output), "attrs": attrs_dict(node)}
        info["body_nodes"].append(entry)
        outer = [i for i in node.input if i and not bscope.defines(i)]
        for name in outer:
            owner = scope.owner(name)
            what = chain(name, scope, memo=set()) if owner is not None else "?undefined"
            info["outer_reads"].append({"node": n, "op": node.op_type, "node_name": node.name, "name": name,
                                        "what": what})
        for attr in node.attribute:
            if attr.name in ("body", "then_branch", "else_branch"):
                for sub in ([attr.g] if attr.g.name or attr.g.node else []):
                    for m in sub.node:
                        if m.op_type == "Loop":
                            info["nested"].append(describe_loop(m, Scope(sub, bscope, label=attr.name,
                                                                      prefix=bscope.prefix + "s"),
                                                                f"{path}/{loop.name}/{node.name}.{attr.name}"))
    for k, name in enumerate(loop.output):
        role = f"v_final{k}" if k < n_carried else f"scan{k - n_carried}"
        used = consumers_tree(name, scope) if name else []
        info["outputs"].append({"index": k, "role": role, "name": name, "used": used})
    info["n_carried"] = n_carried
    info["n_scan"] = n_scan
    return info


def type_text(vi):
    import onnx  # pylint: disable=import-outside-toplevel
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return str(vi.type).replace("\n", " ")
    dtype = _np_dtype(onnx, t.elem_type).name if t.elem_type else "?"
    if not t.HasField("shape"):
        return f"{dtype}[?rank]"
    dims = [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?")
            for d in t.shape.dim]
    return f"{dtype}{dims}"


def find_loops(graph, scope, path="main"):
    """Every Loop in ``graph`` and its subgraphs (but not inside Loop bodies, which
    :func:`describe_loop` handles as nested)."""
    import onnx  # pylint: disable=import-outside-toplevel
    found = []
    for node in graph.node:
        if node.op_type == "Loop":
            found.append(describe_loop(node, scope, path))
        else:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    sub = Scope(attr.g, scope, label=f"{path}/{node.name}.{attr.name}", prefix=scope.prefix + "g")
                    found.extend(find_loops(attr.g, sub, f"{path}/{node.op_type}'{node.name}'.{attr.name}"))
    return found


def describe_model(model):
    graph = model.graph
    scope = Scope(graph)
    ops = {}

    def count(g):
        for n in g.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            for a in n.attribute:
                if a.g.node:
                    count(a.g)
                for sub in a.graphs:
                    count(sub)
    count(graph)
    main_ops = {}
    for n in graph.node:
        main_ops[n.op_type] = main_ops.get(n.op_type, 0) + 1
    return {
        "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": [f"{i.name}:{type_text(i)}" for i in graph.input],
        "outputs": [f"{o.name}:{type_text(o)} <= {chain(o.name, scope, memo=set())[:600]}" for o in graph.output],
        "main_ops": main_ops,
        "all_ops": ops,
        "loops": find_loops(graph, scope),
        "main_nodes": [{"i": k, "op": n.op_type, "name": n.name, "inputs": list(n.input), "outputs": list(n.output),
                        "attrs": attrs_dict(n)} for k, n in enumerate(graph.node)],
        "initializers": {t.name: tensor_text(t) for t in graph.initializer},
    }


def render(desc, title):
    lines = [f"# {title}", f"opset: {desc['opset']}", "inputs: " + ", ".join(desc["inputs"]),
             "main-graph ops: " + ", ".join(f"{k}x{v}" for k, v in sorted(desc["main_ops"].items())),
             "outputs:"]
    lines += [f"  {o}" for o in desc["outputs"]]
    if not desc["loops"]:
        lines.append("NO LOOP")
    for n, loop in enumerate(desc["loops"]):
        lines += render_loop(loop, n)
    lines.append("== main graph nodes (m<k>: k-th node; ^m<k> in a chain: that node, expanded before)")
    for b in desc["main_nodes"]:
        at = (" " + json.dumps(b["attrs"], default=str)) if b["attrs"] else ""
        lines.append(f"  m{b['i']:<3} {b['op']}({', '.join(b['inputs'])}) -> {', '.join(b['outputs'])}{at}")
    lines.append("== initializers")
    lines += [f"  {k}: {v}" for k, v in desc["initializers"].items()]
    return "\n".join(lines) + "\n"


def render_loop(loop, n, indent=""):
    p = indent
    lines = [f"{p}== Loop #{n} '{loop['loop']}' in {loop['path']}: {loop['n_carried']} carried, "
             f"{loop['n_scan']} scan outputs"]
    lines.append(f"{p}-- Loop inputs")
    for i in loop["inputs"]:
        lines.append(f"{p}  [{i['index']}] {i['role']}: '{i['name']}' = {i['chain']}")
    lines.append(f"{p}-- body inputs")
    for i in loop["body_inputs"]:
        lines.append(f"{p}  [{i['index']}] ${i['role']} '{i['name']}' {i['type']}")
    lines.append(f"{p}-- body outputs")
    for o in loop["body_outputs"]:
        inv = " INVARIANT" + (f" (via {o['via']})" if o["via"] else "") if o["invariant"] else ""
        lines.append(f"{p}  [{o['index']}] {o['role']}{inv} '{o['name']}' {o['type']}")
        lines.append(f"{p}       = {o['expr']}")
    lines.append(f"{p}-- body nodes ({len(loop['body_nodes'])})")
    for b in loop["body_nodes"]:
        attrs = {k: v for k, v in b["attrs"].items()}
        at = (" " + json.dumps(attrs, default=str)) if attrs else ""
        lines.append(f"{p}  n{b['i']:<3} {b['op']}({', '.join(b['inputs'])}) -> {', '.join(b['outputs'])}{at}")
    lines.append(f"{p}-- body nodes reading outer-scope tensors")
    if not loop["outer_reads"]:
        lines.append(f"{p}  (none)")
    for r in loop["outer_reads"]:
        lines.append(f"{p}  n{r['node']} {r['op']} reads '{r['name']}' = {r['what']}")
    lines.append(f"{p}-- Loop outputs and their use")
    for o in loop["outputs"]:
        lines.append(f"{p}  [{o['index']}] {o['role']} '{o['name']}'" + ("" if o["used"] else "  (unused)"))
        lines += [f"{p}      {u}" for u in o["used"]]
    for k, nested in enumerate(loop["nested"]):
        lines += render_loop(nested, k, indent + "    ")
    return lines


# --------------------------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------------------------

VOCAB, EMB, FEAT, UNITS = 10, 4, 3, 4
LENGTHS = [6, 3, 1]  # the check batch: post-padded rows (batch 3, 6 steps)
ALL_OPSETS = (13, 15, 18)

# name -> (opsets, flavours, summary); the builders are in build_case
CASES = {
    "emb_lstm_seq": (ALL_OPSETS, FLAVOURS, "Embedding(mask_zero) -> LSTM(4, return_sequences=True)"),
    "emb_gru_seq": (ALL_OPSETS, FLAVOURS, "Embedding(mask_zero) -> GRU(4, return_sequences=True) (reset_after=True)"),
    "emb_gru_ra_false_seq": (ALL_OPSETS, FLAVOURS, "Embedding(mask_zero) -> GRU(4, reset_after=False, return_sequences=True)"),
    "emb_rnn_seq": ((15,), FLAVOURS, "Embedding(mask_zero) -> SimpleRNN(4, return_sequences=True)"),
    "emb_lstm_last": ((15,), FLAVOURS, "Embedding(mask_zero) -> LSTM(4) (return_sequences=False)"),
    "emb_lstm_state": ((15,), FLAVOURS, "Embedding(mask_zero) -> LSTM(4, return_state=True): out, h, c"),
    "emb_lstm_seq_state": ((15,), FLAVOURS,
                           "Embedding(mask_zero) -> LSTM(4, return_sequences=True, return_state=True): seq, h, c"),
    "emb_lstm_backwards": ((15,), FLAVOURS, "Embedding(mask_zero) -> LSTM(4, go_backwards=True, return_sequences=True)"),
    "emb_bilstm_concat": ((15,), FLAVOURS,
                          "Embedding(mask_zero) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode='concat')"),
    "emb_bilstm_sum": ((15,), FLAVOURS,
                       "Embedding(mask_zero) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode='sum')"),
    "emb_bilstm_none": ((15,), FLAVOURS,
                        "Embedding(mask_zero) -> Bidirectional(LSTM(4, return_sequences=True), merge_mode=None): fw, bw"),
    "emb_bilstm_last": ((15,), FLAVOURS, "Embedding(mask_zero) -> Bidirectional(LSTM(4)) concat, return_sequences=False"),
    "masking_gru": ((15,), FLAVOURS, "Masking(0.0) over float x[.,.,3] -> GRU(4, return_sequences=True)"),
    "explicit_mask_lstm": ((15,), FLAVOURS, "LSTM(4, return_sequences=True)(x, mask=m), m a bool input"),
    "stacked_cells": (ALL_OPSETS, FLAVOURS,
                      "Embedding(mask_zero) -> RNN([LSTMCell(4), GRUCell(3)], return_sequences=True)"),
    "emb_lstm_gru_stack": ((15,), FLAVOURS,
                           "Embedding(mask_zero) -> LSTM(4, return_sequences=True) -> GRU(3, return_sequences=True)"),
    "masking_lstm_stack_states": ((15,), FLAVOURS,
                                  "Masking(0.0) over float x[.,.,3] -> LSTM(4, return_sequences=True, return_state=True)"
                                  " -> LSTM(3): the lower layer's seq, h, c and the upper's output"),
    "emb_lstm_recurrent_dropout": ((15,), ("tf_keras",), "Embedding(mask_zero) -> LSTM(4, dropout=0.2, "
                                   "recurrent_dropout=0.2, return_sequences=True): tf_keras multiplies by ones"),
    "emb_gru_recurrent_dropout": ((15,), ("tf_keras",), "Embedding(mask_zero) -> GRU(4, dropout=0.2, "
                                  "recurrent_dropout=0.2, return_sequences=True)"),
    "initial_state_mask": ((15,), FLAVOURS,
                           "LSTM(4, return_sequences=True)(x, mask=m, initial_state=[h0, c0]), all inputs"),
    "emb_lstm_relu_hardsig": ((15,), FLAVOURS,
                              "Embedding(mask_zero) -> LSTM(4, activation='relu', recurrent_activation='hard_sigmoid', "
                              "return_sequences=True)"),
    "unmasked_lstm": ((15,), FLAVOURS, "x[.,.,3] -> LSTM(4, return_sequences=True), no mask (reference)"),
    "unmasked_gru": ((15,), FLAVOURS, "x[.,.,3] -> GRU(4, return_sequences=True), no mask"),
    "unmasked_rnn": ((15,), FLAVOURS, "x[.,.,3] -> SimpleRNN(4, return_sequences=True), no mask"),
    "unmasked_rnn_backwards": ((15,), FLAVOURS,
                               "x[.,.,3] -> SimpleRNN(4, go_backwards=True, return_sequences=True), no mask"),
    "static_emb_lstm": ((15,), FLAVOURS,
                        "ids[2,6] (static signature) -> Embedding(mask_zero) -> LSTM(4, return_sequences=True)"),
    "static_masking_gru": ((15,), FLAVOURS, "x[2,6,3] (static signature) -> Masking -> GRU(4, return_sequences=True)"),
    "static_emb_rnn": ((15,), FLAVOURS,
                       "ids[2,6] (static signature) -> Embedding(mask_zero) -> SimpleRNN(4, return_sequences=True)"),
    "static_emb_bilstm_concat": ((15,), FLAVOURS, "ids[2,6] (static signature) -> Embedding(mask_zero) -> "
                                 "Bidirectional(LSTM(4, return_sequences=True), merge_mode='concat')"),
    "static_batch_emb_lstm": ((15,), FLAVOURS,
                              "ids[2,None] (static batch only) -> Embedding(mask_zero) -> LSTM(4, return_sequences=True)"),
    "static_time_emb_lstm": ((15,), FLAVOURS,
                             "ids[None,6] (static time only) -> Embedding(mask_zero) -> LSTM(4, return_sequences=True)"),
    "emb_lstm_states_only": ((15,), FLAVOURS, "Embedding(mask_zero) -> LSTM(4, return_state=True): "
                             "only h and c are outputs (an encoder)"),
    "emb_gru_state_only": ((15,), FLAVOURS, "Embedding(mask_zero) -> GRU(4, return_state=True): only h is an output"),
    "static_emb_bilstm_stack": ((15,), FLAVOURS, "ids[2,6] (static signature) -> Embedding(mask_zero) -> "
                                "Bidirectional(LSTM(4, return_sequences=True)) -> Bidirectional(LSTM(3))"),
    "static_emb_gru_lstm_stack": ((15,), FLAVOURS, "ids[2,6] (static signature) -> Embedding(mask_zero) -> "
                                  "GRU(4, return_sequences=True) -> LSTM(3, return_sequences=True)"),
    "static_time_emb_gru_lstm_stack": ((15,), FLAVOURS, "ids[None,6] (static time only) -> Embedding(mask_zero) -> "
                                       "GRU(4, return_sequences=True) -> LSTM(3, return_sequences=True)"),
    "static_batch_emb_gru_lstm_stack": ((15,), FLAVOURS, "ids[2,None] (static batch only) -> Embedding(mask_zero) "
                                        "-> GRU(4, return_sequences=True) -> LSTM(3, return_sequences=True)"),
    "static_one_emb_gru_back_lstm_stack": ((15,), FLAVOURS, "ids[1,6] (static signature, one row) -> Embedding("
                                           "mask_zero) -> GRU(4, return_sequences=True, go_backwards=True) -> "
                                           "LSTM(3, return_sequences=True, go_backwards=True); both sequences are "
                                           "outputs"),
    "static_step_emb_bigru_bilstm_stack": ((15,), FLAVOURS, "ids[1,1] (static signature, one row of one step) -> "
                                           "Embedding(mask_zero) -> Bidirectional(GRU(4, return_sequences=True)) -> "
                                           "Bidirectional(LSTM(3, return_sequences=True))"),
}

# the input signature's (batch, time) per case: None is dynamic
STATIC_SHAPES = {"static_batch_": (2, None), "static_time_": (None, 6), "static_one_": (1, 6), "static_step_": (1, 1),
                 "static_": (2, 6)}


def signature_shape(name):
    for prefix, shape in STATIC_SHAPES.items():
        if name.startswith(prefix):
            return shape
    return (None, None)


def build_case(name, keras, tf, np, shape=None):  # pylint: disable=too-many-locals,too-many-statements,too-many-branches
    """(model, input_signature, feeds) of case ``name``; ``shape``: its (batch, steps) instead of the case's own."""
    keras.utils.set_random_seed(1234)
    L = keras.layers
    rng = np.random.default_rng(7)
    shape = shape or signature_shape(name)
    batch, steps = (shape[0] or 3), (shape[1] or 6)
    lengths = [min(n, steps) for n in LENGTHS[:batch]]

    def ids_input():
        inp = keras.Input(shape=shape[1:], batch_size=shape[0], dtype="int32", name="ids")
        spec = tf.TensorSpec(shape, tf.int32, name="ids")
        ids = np.zeros((batch, steps), np.int32)
        for r, n in enumerate(lengths):
            ids[r, :n] = rng.integers(1, VOCAB, n)
        return inp, spec, ids

    def float_input(nm="x", padded=True):
        inp = keras.Input(shape=shape[1:] + (FEAT,), batch_size=shape[0], dtype="float32", name=nm)
        spec = tf.TensorSpec(shape + (FEAT,), tf.float32, name=nm)
        x = rng.normal(0, 1, (batch, steps, FEAT)).astype(np.float32)
        if padded:
            for r, n in enumerate(lengths):
                x[r, n:] = 0.0
        return inp, spec, x

    def mask_input():
        inp = keras.Input(shape=shape[1:], batch_size=shape[0], dtype="bool", name="m")
        spec = tf.TensorSpec(shape, tf.bool, name="m")
        m = np.zeros((batch, steps), bool)
        for r, n in enumerate(lengths):
            m[r, :n] = True
        return inp, spec, m

    def emb(inp):
        return L.Embedding(VOCAB, EMB, mask_zero=True, name="emb")(inp)

    def named(outs):
        return [L.Activation("linear", name=f"out{k}")(o) for k, o in enumerate(outs)]

    inputs, specs, feeds = [], [], []

    def add(triple):
        inputs.append(triple[0])
        specs.append(triple[1])
        feeds.append(triple[2])
        return triple[0]

    if name in ("emb_lstm_seq", "static_emb_lstm", "static_batch_emb_lstm", "static_time_emb_lstm"):
        outs = [L.LSTM(UNITS, return_sequences=True, name="lstm")(emb(add(ids_input())))]
    elif name == "emb_gru_seq":
        outs = [L.GRU(UNITS, return_sequences=True, name="gru")(emb(add(ids_input())))]
    elif name == "emb_gru_ra_false_seq":
        outs = [L.GRU(UNITS, return_sequences=True, reset_after=False, name="gru")(emb(add(ids_input())))]
    elif name in ("emb_rnn_seq", "static_emb_rnn"):
        outs = [L.SimpleRNN(UNITS, return_sequences=True, name="rnn")(emb(add(ids_input())))]
    elif name == "emb_lstm_last":
        outs = [L.LSTM(UNITS, name="lstm")(emb(add(ids_input())))]
    elif name == "emb_lstm_state":
        outs = named(L.LSTM(UNITS, return_state=True, name="lstm")(emb(add(ids_input()))))
    elif name == "emb_lstm_seq_state":
        outs = named(L.LSTM(UNITS, return_sequences=True, return_state=True, name="lstm")(emb(add(ids_input()))))
    elif name == "emb_lstm_backwards":
        outs = [L.LSTM(UNITS, return_sequences=True, go_backwards=True, name="lstm")(emb(add(ids_input())))]
    elif name in ("emb_bilstm_concat", "emb_bilstm_sum", "static_emb_bilstm_concat"):
        mode = name.rsplit("_", 1)[1]
        outs = [L.Bidirectional(L.LSTM(UNITS, return_sequences=True), merge_mode=mode, name="bi")(
            emb(add(ids_input())))]
    elif name == "emb_bilstm_none":
        outs = named(L.Bidirectional(L.LSTM(UNITS, return_sequences=True), merge_mode=None, name="bi")(
            emb(add(ids_input()))))
    elif name == "emb_bilstm_last":
        outs = [L.Bidirectional(L.LSTM(UNITS), name="bi")(emb(add(ids_input())))]
    elif name in ("masking_gru", "static_masking_gru"):
        outs = [L.GRU(UNITS, return_sequences=True, name="gru")(L.Masking(0.0, name="masking")(add(float_input())))]
    elif name == "explicit_mask_lstm":
        x = add(float_input(padded=False))
        m = add(mask_input())
        outs = [L.LSTM(UNITS, return_sequences=True, name="lstm")(x, mask=m)]
    elif name == "stacked_cells":
        cells = [L.LSTMCell(UNITS, name="lstm_cell"), L.GRUCell(3, name="gru_cell")]
        outs = [L.RNN(cells, return_sequences=True, name="stacked")(emb(add(ids_input())))]
    elif name == "emb_lstm_gru_stack":
        lower = L.LSTM(UNITS, return_sequences=True, name="lstm")(emb(add(ids_input())))
        outs = [L.GRU(3, return_sequences=True, name="gru")(lower)]
    elif name == "masking_lstm_stack_states":
        masked = L.Masking(0.0, name="masking")(add(float_input()))
        sequence, h, c = L.LSTM(UNITS, return_sequences=True, return_state=True, name="lstm")(masked)
        outs = named([sequence, h, c, L.LSTM(3, name="lstm_top")(sequence)])
    elif name in ("emb_lstm_recurrent_dropout", "emb_gru_recurrent_dropout"):
        kind = L.LSTM if name.startswith("emb_lstm") else L.GRU
        outs = [kind(UNITS, dropout=0.2, recurrent_dropout=0.2, return_sequences=True, name="rnn")(emb(add(ids_input())))]
    elif name == "initial_state_mask":
        x = add(float_input(padded=False))
        m = add(mask_input())
        hin = keras.Input(shape=(UNITS,), batch_size=shape[0], dtype="float32", name="h0")
        cin = keras.Input(shape=(UNITS,), batch_size=shape[0], dtype="float32", name="c0")
        for inp, nm in ((hin, "h0"), (cin, "c0")):
            inputs.append(inp)
            specs.append(tf.TensorSpec((shape[0], UNITS), tf.float32, name=nm))
            feeds.append(rng.normal(0, 1, (batch, UNITS)).astype(np.float32))
        outs = [L.LSTM(UNITS, return_sequences=True, name="lstm")(x, mask=m, initial_state=[hin, cin])]
    elif name == "emb_lstm_relu_hardsig":
        outs = [L.LSTM(UNITS, activation="relu", recurrent_activation="hard_sigmoid", return_sequences=True,
                       name="lstm")(emb(add(ids_input())))]
    elif name == "emb_lstm_states_only":
        outs = named(L.LSTM(UNITS, return_state=True, name="lstm")(emb(add(ids_input())))[1:])
    elif name == "emb_gru_state_only":
        outs = [L.GRU(UNITS, return_state=True, name="gru")(emb(add(ids_input())))[1]]
    elif name == "static_emb_bilstm_stack":
        lower = L.Bidirectional(L.LSTM(UNITS, return_sequences=True), name="bi")(emb(add(ids_input())))
        outs = [L.Bidirectional(L.LSTM(3), name="bi_top")(lower)]
    elif name in ("static_emb_gru_lstm_stack", "static_time_emb_gru_lstm_stack", "static_batch_emb_gru_lstm_stack"):
        lower = L.GRU(UNITS, return_sequences=True, name="gru")(emb(add(ids_input())))
        outs = [L.LSTM(3, return_sequences=True, name="lstm")(lower)]
    elif name == "static_one_emb_gru_back_lstm_stack":
        lower = L.GRU(UNITS, return_sequences=True, go_backwards=True, name="gru")(emb(add(ids_input())))
        outs = [lower, L.LSTM(3, return_sequences=True, go_backwards=True, name="lstm")(lower)]
    elif name == "static_step_emb_bigru_bilstm_stack":
        lower = L.Bidirectional(L.GRU(UNITS, return_sequences=True), name="bi_gru")(emb(add(ids_input())))
        outs = [L.Bidirectional(L.LSTM(3, return_sequences=True), name="bi_lstm")(lower)]
    elif name == "unmasked_lstm":
        outs = [L.LSTM(UNITS, return_sequences=True, name="lstm")(add(float_input(padded=False)))]
    elif name == "unmasked_gru":
        outs = [L.GRU(UNITS, return_sequences=True, name="gru")(add(float_input(padded=False)))]
    elif name == "unmasked_rnn":
        outs = [L.SimpleRNN(UNITS, return_sequences=True, name="rnn")(add(float_input(padded=False)))]
    elif name == "unmasked_rnn_backwards":
        outs = [L.SimpleRNN(UNITS, return_sequences=True, go_backwards=True, name="rnn")(
            add(float_input(padded=False)))]
    else:
        raise KeyError(name)
    model = keras.Model(inputs, outs if len(outs) > 1 else outs[0], name=name)
    wrng = np.random.default_rng(0)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([wrng.normal(0, 0.5, w.shape).astype(w.dtype) for w in weights])
    return model, specs, feeds


# --------------------------------------------------------------------------------------------

LITERT_SHAPE = (4, 6)  # LiteRT converts static shapes (a dynamic one needs TensorFlow ops tf2onnx cannot read)


def litert_conversion(model, opset, path, tf, tf2onnx):
    """``model`` (built with static input shapes) converted to a LiteRT flatbuffer (``<stem>.tflite`` beside
    ``path``), then by ``tf2onnx.convert.from_tflite`` (``python -m tf2onnx.convert --tflite``): the ONNX model."""
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    flatbuffer = os.path.splitext(path)[0] + ".tflite"
    with open(flatbuffer, "wb") as handle:
        handle.write(converter.convert())
    onnx_model, _ = tf2onnx.convert.from_tflite(flatbuffer, opset=opset, output_path=path)
    return onnx_model


def save_keras_outputs(path, onnx_model, specs, feeds, expected, np) -> None:
    """``<stem>.npz`` beside ``path``: the check batch as the file's inputs (``post.in.<name>``: LiteRT names
    input ``x`` ``serving_default_x:0``, in an order of its own) and Keras's outputs on it (``post.out.<k>``),
    the layout of the JAX exports' stored outputs."""
    names = [graph_input.name for graph_input in onnx_model.graph.input]
    arrays = {}
    for spec, value in zip(specs, feeds):
        (name,) = [n for n in names if n in (spec.name, f"serving_default_{spec.name}:0")]
        arrays[f"post.in.{name}"] = value
    arrays.update({f"post.out.{k}": np.asarray(value) for k, value in enumerate(expected)})
    np.savez(os.path.splitext(path)[0] + ".npz", **arrays)


def _keras(flavour: str, tf):
    """The Keras module of ``flavour``; for "tf_keras" under TensorFlow 2.15 and earlier, which has no
    tf_keras package, its built-in Keras 2 (``tf.keras``), so that older tf2onnx releases can make files."""
    if flavour != "tf_keras":
        import keras  # pylint: disable=import-outside-toplevel
        return keras
    try:
        import tf_keras  # pylint: disable=import-outside-toplevel
        return tf_keras
    except ImportError:
        if int(tf.__version__.split(".")[1]) > 15:
            raise
        keras = tf.keras
        if not hasattr(keras, "__version__"):
            keras.__version__ = tf.__version__
        return keras


def run_cases(args):  # pylint: disable=too-many-locals
    import logging  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf2onnx  # pylint: disable=import-outside-toplevel
    keras = _keras(args.keras, tf)
    tf.get_logger().setLevel(logging.ERROR)
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    print(f"flavour {args.keras}: tensorflow {tf.__version__}, keras {keras.__version__}, "
          f"tf2onnx {tf2onnx.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    wanted = args.cases.split(",") if args.cases else list(CASES)
    summary_path = os.path.join(args.out, f"{args.keras}_summary.json")
    summary = {}
    if os.path.exists(summary_path) and args.cases:
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
    failures = 0
    for case in wanted:
        opsets, flavours, text = CASES[case]
        if args.keras not in flavours:
            continue
        for opset in (args.opsets or opsets):
            stem = f"{args.keras}_{case}_op{opset}"
            path = os.path.join(args.out, stem + ".onnx")
            entry = {"case": case, "model": text, "opset": opset}
            try:
                if args.litert:
                    model, specs, feeds = build_case(case, keras, tf, np, LITERT_SHAPE)
                    onnx_model = litert_conversion(model, opset, path, tf, tf2onnx)
                else:
                    model, specs, feeds = build_case(case, keras, tf, np)
                    onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=specs, opset=opset,
                                                               output_path=path)
                expected = model([tf.constant(v) for v in feeds] if len(feeds) > 1 else tf.constant(feeds[0]),
                                 training=False)
                expected = expected if isinstance(expected, (list, tuple)) else [expected]
                if args.litert:  # Keras's outputs beside the file: tf2onnx's file of a stack does not load
                    save_keras_outputs(path, onnx_model, specs, feeds, expected, np)
                sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
                got = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), feeds)})
                entry["onnx_inputs"] = [i.name for i in sess.get_inputs()]
                entry["onnx_outputs"] = [o.name for o in sess.get_outputs()]
                if len(got) != len(expected):
                    entry["max_diff"] = f"output count {len(got)} != Keras {len(expected)}"
                else:
                    entry["max_diff"] = max(float(np.max(np.abs(np.asarray(e) - g))) for e, g in zip(expected, got))
                desc = describe_model(onnx_model)
                entry["loops"] = len(desc["loops"])
                entry["nested_loops"] = sum(len(lp["nested"]) for lp in desc["loops"])
                entry["ops"] = desc["all_ops"]
                title = f"{stem}: {text}; stock tf2onnx {tf2onnx.__version__}; max |keras-onnx| {entry['max_diff']}"
                with open(os.path.join(args.out, stem + ".txt"), "w", encoding="utf-8") as f:
                    f.write(render(desc, title))
                with open(os.path.join(args.out, stem + ".json"), "w", encoding="utf-8") as f:
                    json.dump(desc, f, indent=1, default=str)
                print(f"{stem}: loops={entry['loops']} max_diff={entry['max_diff']} "
                      f"ops={sum(desc['all_ops'].values())}", flush=True)
                if args.print:
                    print(render(desc, title))
            except Exception as exc:  # pylint: disable=broad-except
                failures += 1
                entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                print(f"{stem}: FAILED {entry['error'][:500]}", flush=True)
            summary[stem] = entry
            keras.backend.clear_session()
    with open(summary_path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    assert "masked_lstm_rewriter" not in sys.modules, "the plugin was imported: the conversions are not stock"
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras", choices=FLAVOURS, default="keras3", help="the Keras flavour (default keras3)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--opsets", type=lambda s: [int(v) for v in s.split(",")],
                        help="comma-separated opsets, instead of each case's own")
    parser.add_argument("--print", action="store_true", help="also print each description")
    parser.add_argument("--describe", metavar="ONNX", nargs="+", help="only describe these ONNX files")
    parser.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--litert", action="store_true",
                        help=f"convert through a LiteRT flatbuffer (tf2onnx --tflite), static shape {LITERT_SHAPE}")
    args = parser.parse_args(argv)
    if args.list:
        for name, (opsets, flavours, text) in CASES.items():
            print(f"{name:24} opsets {','.join(map(str, opsets)):9} {'/'.join(flavours):16} {text}")
        return 0
    if args.describe:
        import onnx  # pylint: disable=import-outside-toplevel
        for path in args.describe:
            print(render(describe_model(onnx.load(path)), path))
        return 0
    if args.cases:
        unknown = [c for c in args.cases.split(",") if c not in CASES]
        if unknown:
            parser.error(f"unknown cases {unknown}; --list lists them")
    ensure_flavour(args.keras)
    return run_cases(args)


if __name__ == "__main__":
    sys.exit(main())
