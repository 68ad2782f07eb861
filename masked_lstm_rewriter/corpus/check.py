# SPDX-License-Identifier: Apache-2.0
"""Check a converted ONNX model (or, for an ONNX-file entry, the rewritten file) against its manifest entry.

:func:`check_onnx` runs every check and raises :class:`CorpusFailure` listing every problem:

* the native recurrent nodes (``LSTM``, ``GRU``, ``RNN``: how many, which direction) are those
  recorded in the manifest when the corpus was generated, and no ``Loop`` is left but one for each
  layer the entry expects the plugin to refuse;
* an entry without a mask (``"unmasked": true``) has no mask machinery: no guard node, and no
  ``sequence_lens`` on its native nodes;
* the model's input and output names are the manifest's, outputs in order (a Keras file converted
  by the plugin's command line: its inputs named as in Keras, its outputs in that order, see
  :func:`names_for`), and its inputs have the shapes of the entry's signature (the same fixed
  sizes, dynamic elsewhere);
* ``onnx.checker`` (full check) and strict shape inference accept it;
* on the runtime, every output of every batch equals the stored Keras output (for an ONNX file
  from stock tf2onnx: the original file's) at every position within the manifest's tolerance;
* for a ``"post"`` entry, the batch that is not post-padded fails with the guard's message.

OpenVINO runs each model twice: compiled with the input shapes the model declares (dynamic, as a
user loading the file gets) and with them made static for each batch. Its CPU plugin ignores
``sequence_lens`` with a dynamic dimension (measured, 2024.6 to 2026.4); the emitted graph does
not depend on it, and both must give Keras's numbers.
"""

from __future__ import annotations

import logging
import re

from .. import targets
from ..sessions import RUNTIMES, onnxruntime_session, openvino_runner
from .manifest import feeds_for, load_npz, reference, regenerate_ops
from .ops import RECURRENT_OPS, native_ops, op_counts, walk_nodes

LOG = logging.getLogger(__name__)
GUARD_NODE_TEXT = "the mask is not post-padded"  # in the name of the guard's node (plan.masks.GUARD_MESSAGE)
SEQUENCE_LENS = 4  # the input of LSTM, GRU and RNN that takes the lengths
KERAS_FILE_FORMATS = ("keras", "h5")  # the entries tf2onnx and the command line load as Keras files
class CorpusFailure(AssertionError):
    """An entry does not convert or check as its manifest entry says."""


def check_onnx(entry: dict, corpus: str, onnx_path: str, runtime: str = "onnxruntime", path: str = "library") -> float:
    """Check the model converted from ``entry`` by conversion path ``path`` (see the module
    docstring) on ``runtime``; returns the largest |ONNX - Keras| (an ONNX file's entry: |rewritten
    - original|, or - Keras) over every output. Raises CorpusFailure with every problem found."""
    import onnx  # pylint: disable=import-outside-toplevel
    model_proto = onnx.load(onnx_path)
    entry = names_for(entry, path, model_proto)
    problems = structure_problems(entry, model_proto)
    if problems:
        raise CorpusFailure("; ".join(problems))
    worst, problems = 0.0, []
    for shapes, run in runners(model_proto, onnx_path, runtime):
        error, found = compare_batches(entry, corpus, run, runtime)
        found.extend(guard_problems(entry, corpus, run))
        worst = max(worst, error)
        problems.extend(f"{shapes}: {problem}" if shapes else problem for problem in found)
    if problems:
        raise CorpusFailure("; ".join(problems))
    LOG.debug("%s on %s: max |onnx - %s| = %.3g", entry["name"], runtime, reference(entry), worst)
    return worst


def names_for(entry: dict, path: str, model_proto) -> dict:
    """``entry`` with the names conversion path ``path`` gives the model. The manifest's are
    tf2onnx's (``tokens:0``, ``Identity:0`` for a Keras file); the plugin's command line names a
    Keras file's inputs and outputs as Keras does (as ``convert`` and tf2onnx's ``from_keras``):
    each input its ``name``, and each output, in the manifest's order, the Keras model's output
    name, which the manifest does not record (taken from the model by position)."""
    if path != "cli" or entry.get("format") not in KERAS_FILE_FORMATS:
        return entry
    named = dict(entry, inputs=[dict(spec, onnx_name=spec["name"]) for spec in entry["inputs"]])
    outputs = [value.name for value in model_proto.graph.output]
    if len(outputs) == len(entry["outputs"]):  # else the check says how many there are
        named["outputs"] = [dict(spec, onnx_name=name) for spec, name in zip(entry["outputs"], outputs)]
    return named


def structure_problems(entry: dict, model_proto) -> list:
    """Ops, input and output names, and validity; empty when all is as the manifest says."""
    problems = op_problems(entry, model_proto) + unmasked_problems(entry, model_proto)
    graph_inputs = [i.name for i in model_proto.graph.input]
    graph_outputs = [o.name for o in model_proto.graph.output]
    want_inputs = [spec["onnx_name"] for spec in entry["inputs"]]
    want_outputs = [spec["onnx_name"] for spec in entry["outputs"]]
    if sorted(graph_inputs) != sorted(want_inputs):
        problems.append(f"model inputs {graph_inputs}, expected {want_inputs}")
    else:
        problems.extend(signature_problems(entry, model_proto))
    if graph_outputs != want_outputs:
        problems.append(f"model outputs {graph_outputs}, expected {want_outputs} (in this order)")
    return problems + validity_problems(model_proto)


def op_problems(entry: dict, model_proto) -> list:
    """Loops left, and native nodes that differ in number or direction from those recorded."""
    expected = entry["expected_ops"]
    problems = []
    loops = op_counts(model_proto)["Loop"]
    if loops != expected["Loop"]:
        problems.append(f"{loops} Loop node(s) where the manifest expects {expected['Loop']}: "
                        "a masked recurrent layer stayed a Loop, or one the plugin must refuse was rewritten")
    got = native_ops(model_proto)
    differences = [f"{op}: {_nodes(got.get(op, []))} here, {_nodes(expected['native'].get(op, []))} in the manifest"
                   for op in RECURRENT_OPS if got.get(op, []) != expected["native"].get(op, [])]
    if differences:
        problems.append(
            f"the native recurrent nodes differ from the manifest's ({'; '.join(differences)}). The manifest's "
            f"were recorded from a conversion with {expected['recorded_with']}; if the plugin now emits other "
            f"nodes on purpose, record them again: {regenerate_ops(entry)}")
    return problems


def unmasked_problems(entry: dict, model_proto) -> list:
    """An entry without a mask must get no mask machinery: no guard, no lengths on a native node."""
    if not entry.get("unmasked"):
        return []
    nodes = list(walk_nodes(model_proto.graph, segments=True))
    problems = [f"a guard node ({node.name}) in a model without a mask" for node in nodes
                if GUARD_NODE_TEXT in node.name]
    problems += [f"{node.op_type} node {node.name} is given lengths ({node.input[SEQUENCE_LENS]}) in a model "
                 "without a mask" for node in nodes
                 if node.op_type in RECURRENT_OPS and len(node.input) > SEQUENCE_LENS and node.input[SEQUENCE_LENS]]
    return problems


def _nodes(directions: list) -> str:
    """``["forward", "reverse"]`` -> ``"2 nodes (forward, reverse)"``."""
    return f"{len(directions)} node{'' if len(directions) == 1 else 's'}" + \
        (f" ({', '.join(directions)})" if directions else "")


def signature_problems(entry: dict, model_proto) -> list:
    """Each ONNX input has the shape of the entry's signature: the same fixed sizes, dynamic elsewhere."""
    shapes = {i.name: [d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim]
              for i in model_proto.graph.input}
    return [f"input {spec['onnx_name']} has shape {shapes[spec['onnx_name']]} in the model, the signature "
            f"{spec['shape']} in the manifest (None: dynamic)"
            for spec in entry["inputs"] if shapes[spec["onnx_name"]] != spec["shape"]]


def validity_problems(model_proto) -> list:
    """Problems found by ``onnx.checker`` (full check) and strict shape inference, if any."""
    import onnx  # pylint: disable=import-outside-toplevel
    problems = []
    try:
        onnx.checker.check_model(model_proto, full_check=True)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        problems.append(f"onnx.checker (full_check): {first_line(error)}")
    try:
        onnx.shape_inference.infer_shapes(model_proto, check_type=True, strict_mode=True)
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        problems.append(f"strict shape inference: {first_line(error)}")
    return problems


def compare_batches(entry: dict, corpus: str, run, runtime: str) -> tuple:
    """(largest |ONNX - Keras|, problems) over every batch and output of the entry."""
    worst = 0.0
    problems = []
    output_names = [spec["onnx_name"] for spec in entry["outputs"]]
    for number, batch in enumerate(entry["batches"]):
        label = f"batch {number} ({batch['description']})"
        try:
            got = run(output_names, feeds_for(entry, load_npz(corpus, batch["inputs"])))
        except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
            problems.append(f"{label}: {runtime} failed: {first_line(error)}")
            continue
        expected = load_npz(corpus, batch["expected"])
        for spec, value in zip(entry["outputs"], got):
            error, problem = compare(value, expected[spec["name"]], entry["tolerance"], reference(entry))
            worst = max(worst, error)
            if problem:
                problems.append(f"{label}, output {spec['name']}: {problem}")
    return worst, problems


def compare(value, keras_value, tolerance: float, label: str = "keras") -> tuple:
    """(largest |value - keras_value|, the problem or "") for one output; ``label`` names the
    reference in the problem (``"original"``: an ONNX file's own outputs)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    if value.shape != keras_value.shape:
        return 0.0, f"shape {value.shape}, {'Keras' if label == 'keras' else label} {keras_value.shape}"
    if not value.size:
        return 0.0, ""
    diff = np.abs(value.astype(np.float64) - keras_value.astype(np.float64))
    diff[np.isnan(diff)] = np.inf  # a NaN is the worst difference, never a pass
    error = float(np.max(diff))
    if error <= tolerance:
        return error, ""
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return error, f"max |onnx - {label}| = {error:.3g} > {tolerance} at index {where}"


def guard_problems(entry: dict, corpus: str, run) -> list:
    """A ``"post"`` entry's batch that is not post-padded must fail with the guard's message."""
    must_fail = entry.get("must_fail")
    if not must_fail:
        return []
    output_names = [spec["onnx_name"] for spec in entry["outputs"]]
    try:
        run(output_names, feeds_for(entry, load_npz(corpus, must_fail["inputs"])))
    except Exception as error:  # noqa: BLE001  pylint: disable=broad-except
        if must_fail["message"] in str(error):
            return []
        return [f"the non-post-padded batch failed, but without '{must_fail['message']}': {first_line(error)}"]
    return [f"the non-post-padded batch ({must_fail['description']}) ran without error; "
            f"expected a failure with '{must_fail['message']}'"]


# ---------------------------------------------------------------- runtimes

def runners(model_proto, onnx_path: str, runtime: str = "onnxruntime") -> list:
    """``[(how, run)]``, each ``run(output_names, feeds) -> [arrays]`` on ``runtime``; ``how`` says
    which shapes OpenVINO compiled ("" for onnxruntime, which takes the model as it is)."""
    if runtime == "onnxruntime":
        return [("", onnxruntime_session(model_proto).run)]
    if runtime == "openvino":
        # OpenVINO 2026.4 reads tf2onnx's masked Loop from memory but not from a file path (see
        # docs/openvino.md, for a layer the plugin leaves as a Loop): a user loads such a model so
        from_memory = op_counts(model_proto)["Loop"] > 0
        return [("dynamic shapes", openvino_runner(onnx_path, static=False, from_memory=from_memory)),
                ("static shapes", openvino_runner(onnx_path, static=True, from_memory=from_memory))]
    raise ValueError(f"unknown runtime {runtime!r}, expected one of {RUNTIMES}")


def known_refusal(entry: dict, runtime: str, onnx_path: str):
    """(text expected in the runtime's error, why) when ``runtime`` is known to refuse the converted
    model, from its entry in :mod:`..targets`: a native node with an activation it does not compile
    (a model converted without that runtime as its target)."""
    import onnx  # pylint: disable=import-outside-toplevel
    for node, missing in uncompiled_nodes(onnx.load(onnx_path), runtime)[:1]:
        entry_of = targets.runtime(runtime)
        return entry_of.activation_error, (f"{entry_of.title}'s native {node.op_type} op compiles no "
                                           f"{', '.join(missing)} activation")
    return None


def uncompiled_nodes(model_proto, runtime: str) -> list:
    """``[(node, activations)]``: the native recurrent nodes with activations ``runtime``'s native op
    does not compile (per :mod:`..targets`; none for a runtime it has no entry for)."""
    if runtime not in targets.TARGETS:
        return []
    found = []
    for node in walk_nodes(model_proto.graph):
        if node.op_type in RECURRENT_OPS:
            names = next((list(a.strings) for a in node.attribute if a.name == "activations"), [])
            missing = targets.uncompiled_activations(runtime, [n.decode() for n in names])
            if missing:
                found.append((node, missing))
    return found


def first_line(error) -> str:
    """The telling line of an error: the first, or for OpenVINO's nested 'Exception from <source
    file>' lines the last, which names the cause; for TensorFlow's and Keras's headed errors
    ("Graph execution error:", "Exception encountered when calling ..."), the cause line after
    the header (:func:`tensorflow_cause`)."""
    text = ANSI_ESCAPE.sub("", str(error))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Exception from "):
        lines = [line for line in lines if not line.startswith("Exception from ")][-1:] or lines
    if lines and lines[0].startswith(TENSORFLOW_HEADERS):
        return tensorflow_cause(text) or lines[0]
    return (lines or [type(error).__name__])[0]


# the first line of TensorFlow's and Keras's errors whose cause comes on a later line
TENSORFLOW_HEADERS = ("Graph execution error", "Exception encountered when calling", "{{function_node ")
# lines of those errors that are not the cause: where it happened, stack frames (indented), the arguments
_NOT_THE_CAUSE = ("Graph execution error", "Detected at node", "Node:", "<stack traces unavailable>",
                  "Call arguments received", "Arguments received", "Exception encountered when calling")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # Keras 3 makes parts of its messages bold


def tensorflow_cause(text: str) -> str:
    """The line of a TensorFlow or Keras error ``text`` that says what went wrong (its last line that
    is not indented and not a header, such as ``indices[0,9] = -1 is not in [0, 50)``), without
    TensorFlow's node and op decorations, prefixed with the Keras layer that raised it if named;
    "" when there is none."""
    causes = [line.strip() for line in text.splitlines()
              if line.strip() and not line[0].isspace() and not line.startswith(_NOT_THE_CAUSE)]
    if not causes:
        return ""
    cause = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", causes[-1])
    cause = re.sub(r"\s*\[Op:[^\]]*\].*$", "", cause).strip() or causes[-1]
    layer = re.search(r"^Exception encountered when calling (.+?)\.?$", text, re.MULTILINE)
    return f"{layer.group(1)}: {cause}" if layer else cause
