# SPDX-License-Identifier: Apache-2.0
"""The runtimes a conversion can target, each one entry holding every constraint measured on it.

A model converted for a target is exact there; without one (``runtime=None``), on every runtime
listed here. The reader, the planner, the emitter and the plugin consult this module only:

* :func:`target_refusal` keeps a layer a Loop for the chosen target (what its native ops cannot
  run, or what no runtime runs portably);
* :func:`not_for` lists, for a rewritten layer, the other runtimes that cannot run it exactly and
  how to convert for them (the report's ``not_for``); it sees the whole plan (the layer, and
  whether it shares one bidirectional node with its other half);
* :data:`DTYPE_REASONS` and :data:`REFUSED_ACTIVATION_REASONS` are what the reader refuses for
  every runtime; :func:`default_mask_mode` is a target's mask mode when none is asked for;
  :func:`shared_swaps_scrambled` tells the emitter to give each native node its own input;
  :func:`bidirectional_veto` tells the planner where a masked forward and backward layer cannot
  be one ``direction="bidirectional"`` node, :func:`bidirectional_slow` where it would be slower;
  :func:`cut_to_longest` tells the planner to run the masked nodes only up to the longest row (and
  :func:`ignoring_lengths` the plugin which runtimes get stock tf2onnx's nodes with lengths wrong), and
  :func:`steps_appended_by_concat` how the steps they did not run are appended at a batch of 1,
  :func:`zeros_past_lengths` that a node's ``Y`` can stand in for the zero step the emitter appends,
  :func:`explicit_zero_state` that a masked node is given its zero initial state;
  :func:`schedule_veto` why a graph gets no length-aware schedule for the target, and
  :func:`schedules_cell_stacks` whether a layer of stacked cells gets it.

Measured with onnxruntime 1.31 and OpenVINO 2026.4 (tests/test_float64.py and tests/test_openvino.py
pin them).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from onnx import TensorProto


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One runtime and what its native recurrent ops do not do as Keras does."""

    name: str                               # the target's name in the API ("openvino")
    title: str                              # as users write it ("OpenVINO")
    activations: Optional[tuple] = None     # what its native ops compile; None: every one the plugin reads
    activation_error: str = ""              # what it says when a native op has another one
    default_mask_mode: str = "post"
    guard_note: Optional[str] = None        # where the "post" guard's error can be dropped
    scrambles_shared_swaps: bool = False    # folds a Transpose read by several nodes into one Reshape
    # the native ops whose direction="bidirectional" node ignores sequence_lens when a dimension is dynamic
    # (the others honour it in both directions, given an explicit activations attribute, as the emitter writes)
    bidirectional_ignores_lengths: tuple = ()
    # the native ops whose direction="bidirectional" node runs slower than two forward nodes with their
    # reversals, with or without sequence_lens, whatever its attributes
    bidirectional_slow: tuple = ()
    # runs a recurrent node over every step of its input whatever its sequence_lens, and, with every
    # dimension static, as a per-step loop several times slower: the node's input is cut to the
    # batch's longest row (cut_to_longest), which also keeps its steps dynamic
    runs_every_step: bool = False
    # its recurrent nodes write zeros past each row's sequence_lens (everywhere in a row of length 0), with
    # dynamic shapes too, in both directions
    writes_zeros_past_lengths: bool = False
    # makes a recurrent node's missing initial h from the shape of its input, and so keeps the Transpose
    # in front of the node that it otherwise folds into its own layout
    folds_transposes_given_initial_h: bool = False
    # computes a division by a tensor (1 / x, c / x) as x / c where it fuses the division into a reduction
    # before it, which it does in a graph holding the schedule's If (schedule_veto)
    fuses_divisions_wrongly: bool = False
    # compiles the schedule of a layer of stacked cells (one If per cell, each reading the one below's)
    # once the model's shapes are made static
    compiles_scheduled_cell_stacks: bool = True
    # compiles a Pad that appends a computed number of steps to a node's outputs when the batch is
    # statically 1 (the steps a node cut at the longest row did not run, read by a layer above)
    compiles_step_pads_at_batch_one: bool = True
    # where the schedule cuts time (the lengths of the rows at these ranks, in 16ths of the batch, longest
    # first) and a segment's fixed cost in row-steps: what its segment nodes cost it (schedule_cuts)
    segment_ranks: tuple = (14, 12, 10, 8, 6, 4, 3, 2, 1)
    segment_cost: int = 10


# a bidirectional LSTM or GRU node, masked or not: 5-8% slower than two forward nodes at batch 32 and 128
# in a whole model (T=100, 128 units, one thread; equal at batch 1 and 8); a bidirectional RNN node 0-2% faster
# (tools/benchmark_bidirectional_layers.py)
ONNXRUNTIME = Runtime("onnxruntime", "onnxruntime", writes_zeros_past_lengths=True,
                      bidirectional_slow=("LSTM", "GRU"))
OPENVINO = Runtime(
    "openvino", "OpenVINO", activations=("Sigmoid", "Tanh", "Relu"), default_mask_mode="any",
    activation_error="Unsupported activation function",
    guard_note=("OpenVINO enforces the \"post\" guard except in synchronous inference with one thread "
                "(INFERENCE_NUM_THREADS=1, and OpenVINO's default on a machine or container with one CPU), "
                "which drops every runtime error and returns empty or stale outputs, or crashes: "
                "there, use mask_mode='any' (exact for any mask) or start_async() + wait()"),
    scrambles_shared_swaps=True, bidirectional_ignores_lengths=("RNN",),
    # a bidirectional node: 8-18% slower than two forward nodes at batch 32 and 128 in a whole model (GRU, RNN;
    # LSTM: over features), the same at batch 1 and 8; an LSTM or GRU node naming its activations 2-10x slower
    bidirectional_slow=("LSTM", "GRU", "RNN"), runs_every_step=True, folds_transposes_given_initial_h=True,
    # a LayerNormalization (tf2onnx's Rsqrt: Sqrt, then Reciprocal) feeding a layer with the schedule: 0.2-0.9
    # from Keras on the CPU, while Pow(x, -1) instead of the Reciprocal is exact (tests/test_schedule.py)
    fuses_divisions_wrongly=True,
    # "Can not create StaticMemory object. The memory desc is undefined" after model.reshape to static shapes
    compiles_scheduled_cell_stacks=False,
    # the same error for a model of input [1, T] whose backward layer feeds another (batch 2 or dynamic: compiles)
    compiles_step_pads_at_batch_one=False,
    # a segment costs it about 100 us in a whole model (a node's call, and its preparation again for each
    # batch's shapes):
    # 4 segments ran a long-tailed batch of 32 in 0.80 of the time 10 took, 128 rows the same
    segment_ranks=(8, 4, 2), segment_cost=90)
RUNTIMES = (ONNXRUNTIME, OPENVINO)
TARGETS = tuple(runtime.name for runtime in RUNTIMES)
# a model for any runtime: cuts between onnxruntime's and OpenVINO's. A long-tailed batch of 32 (timed one model
# at a time, each run on other lengths): onnxruntime 2.6x the unmasked op (its own cuts 2.7x), OpenVINO 1.7x
# (its own 1.7x; onnxruntime's 1.2-1.5x); a batch of 8 as fast as with onnxruntime's cuts there
ANY_RUNTIME_CUTS = ((13, 10, 6, 3, 1), 20)
_BY_NAME = {runtime.name: runtime for runtime in RUNTIMES}

OPENVINO_GUARD_NOTE = OPENVINO.guard_note

# the dtypes a layer may compute in besides float32, and why such a layer stays a Loop on every runtime
DTYPE_REASONS = {
    TensorProto.DOUBLE: "float64 layer: onnxruntime (1.31) has no float64 kernel for the native LSTM, GRU or RNN "
                        "(LSTM and GRU fail at run time, 'does not support double yet'; RNN fails to load), and "
                        "OpenVINO (2026.4) runs them in float32; the Loop computes in float64, as Keras does",
    TensorProto.FLOAT16: "float16 layer: onnxruntime (1.31) runs the native LSTM, GRU and RNN in float32 (casting "
                         "around them), so they do not round each step to float16 as Keras does; the Loop "
                         "computes in float16",
}
# activations ONNX's recurrent ops name but that are not exact in practice: op -> why not.
# onnxruntime's LSTM/GRU/RNN compute Softplus as log(1 + exp(x)): inf from x > 88, where Keras
# gives x (found by the differential fuzzer; the stand-alone Softplus op of the Loop is right)
REFUSED_ACTIVATION_REASONS = {
    "Softplus": "softplus activation: onnxruntime's native recurrent ops compute it as log(1 + exp(x)), "
                "which overflows to inf for x > 88 where Keras gives x",
}
# recurrent activations that reach exactly 0 and 1: the padding column can hold a cell state with them
SATURATING = ("Sigmoid", "HardSigmoid")


def runtime(name: str) -> Runtime:
    return _BY_NAME[name]


def _entries(target: Optional[str]) -> tuple:
    """The entries a model for ``target`` must run exactly on: every runtime for None."""
    return RUNTIMES if target is None else (runtime(target),)


def check_runtime(runtime: Optional[str], keyword: str = "runtime") -> None:
    """A ``ValueError`` unless ``runtime`` is None (any runtime) or one of :data:`TARGETS`; it names
    ``keyword``, the argument as the caller gave it."""
    if runtime is not None and runtime not in TARGETS:
        raise ValueError(f"{keyword} must be one of {', '.join(TARGETS)}, not {runtime!r} (or None: any runtime)")


def default_mask_mode(target: Optional[str]) -> str:
    """The mask mode of a conversion for ``target`` that asks for none: ``"any"`` where the runtime can
    drop the guard's error, else ``"post"``."""
    return "post" if target is None else runtime(target).default_mask_mode


def shared_swaps_scrambled() -> bool:
    """Must each native node read its input through a node of its own? Yes as long as one runtime
    scrambles a Transpose several nodes read: a model converted for one runtime is still opened on
    others (one ``Max`` per node, measured free)."""
    return any(runtime.scrambles_shared_swaps for runtime in RUNTIMES)


def cut_to_longest(target: Optional[str]) -> bool:
    """Does a masked node run only up to the batch's longest row for ``target`` (None: every runtime)?
    Where a runtime runs every step of a node's input (:attr:`Runtime.runs_every_step`); a runtime
    that honours ``sequence_lens`` stops there by itself."""
    return any(entry.runs_every_step for entry in _entries(target))


def ignoring_lengths(target: Optional[str]) -> tuple:
    """The titles of the runtimes of ``target`` (None: every runtime) that run every step of a native
    node whatever its ``sequence_lens`` (:attr:`Runtime.runs_every_step`)."""
    return tuple(entry.title for entry in _entries(target) if entry.runs_every_step)


def steps_appended_by_concat(target: Optional[str]) -> bool:
    """Are the steps a node did not run appended to its outputs as a Concat of zeros, not a Pad, where the
    batch is statically 1, for ``target`` (None: every runtime)? Where a runtime cannot compile the Pad
    there (:attr:`Runtime.compiles_step_pads_at_batch_one`); elsewhere the Pad costs fewer nodes."""
    return not all(entry.compiles_step_pads_at_batch_one for entry in _entries(target))


def zeros_past_lengths(target: Optional[str]) -> bool:
    """Do a masked node's outputs past each row's length read as zeros for ``target`` (None: every
    runtime)? Then the fix-ups read them there instead of a zero step appended to the node's ``Y``
    (a copy of all of it); a model made so is wrong where a runtime writes other values there."""
    return all(entry.writes_zeros_past_lengths for entry in _entries(target))


def explicit_zero_state(target: Optional[str]) -> bool:
    """Is a masked node starting from zeros given them as its initial h (made from the batch size) for
    ``target`` (None: every runtime)? Where a runtime folds the transposes around the node only then
    (about 2% of a masked LSTM at batch 32 on OpenVINO); elsewhere the op's default zeros cost no node."""
    return any(entry.folds_transposes_given_initial_h for entry in _entries(target))


ZEROS_VETO = "{title} writes other values than zeros there with dynamic shapes"

# ops that divide by their input, as TensorFlow (before tf2onnx converts its ops) and ONNX spell them; and
# those that divide by their second input (a division by a tensor when the first is a constant)
RECIPROCAL_OPS = ("Rsqrt", "Reciprocal", "Inv")
QUOTIENT_OPS = ("Div", "RealDiv", "DivNoNan")


def schedule_veto(graph, target: Optional[str]) -> Optional[str]:
    """Why a model of ``graph`` for ``target`` (None: every runtime) gets no length-aware schedule, or None:
    a runtime computes one of its divisions by a tensor (a ``LayerNormalization``'s ``Rsqrt``) wrongly beside
    the schedule's ``If`` (:attr:`Runtime.fuses_divisions_wrongly`)."""
    for entry in _entries(target):
        if entry.fuses_divisions_wrongly:
            node = next((node for node in graph.get_nodes() if _divides_by_a_tensor(node)), None)
            if node is not None:
                return (f"{entry.title} computes {node.type} node '{node.name}' (a division by a tensor) wrongly "
                        f"in a graph with the schedule's If")
    return None


def schedule_cuts(target: Optional[str]) -> tuple:
    """(ranks in 16ths, a segment's cost in row-steps) where the schedule cuts time for ``target``: its
    runtime's entry; for any runtime (None), ANY_RUNTIME_CUTS."""
    if target is None:
        return ANY_RUNTIME_CUTS
    entry = runtime(target)
    return entry.segment_ranks, entry.segment_cost


def schedules_cell_stacks(target: Optional[str]) -> bool:
    """Does a layer of stacked cells get the length-aware schedule for ``target`` (None: every runtime)?"""
    return all(entry.compiles_scheduled_cell_stacks for entry in _entries(target))


def _divides_by_a_tensor(node) -> bool:
    if node.type in RECIPROCAL_OPS:
        return True
    numerator = node.inputs[0] if node.type in QUOTIENT_OPS and node.inputs else None
    return numerator is not None and numerator.is_const()


def bidirectional_veto(op: str, target: Optional[str]) -> Optional[str]:
    """Why a masked forward and backward layer of native ``op`` cannot be one ``direction="bidirectional"``
    node for ``target`` (None: every runtime), or None: its reverse direction starts each row at its
    last valid step only where the runtime honours ``sequence_lens``."""
    for entry in _entries(target):
        if op in entry.bidirectional_ignores_lengths:
            return (f"{entry.title} ignores the sequence_lens of a bidirectional {op} node when a dimension is "
                    f"dynamic")
    return None


def bidirectional_slow(op: str, target: Optional[str], activations=()) -> Optional[str]:
    """The runtime (its title) among ``target``'s (None: every runtime) that runs a bidirectional node of
    ``op`` slower than two forward nodes, masked or not, or None. ``activations``: the names the node's
    ``activations`` attribute holds (() where it has none): a runtime that compiles no such node
    (:func:`uncompiled_activations`) has no say."""
    return next((entry.title for entry in _entries(target)
                 if op in entry.bidirectional_slow and not uncompiled_activations(entry.name, activations)), None)


def portability_refusal(layer) -> Optional[str]:
    """Why the layer cannot be emitted without depending on how a runtime treats padded steps, or None.

    The final cell state is carried over padded steps by an input column that drives the input
    gate to 0 and the forget gate to 1 there: only a saturating recurrent activation reaches
    them. Otherwise the native node's ``Y_c`` would be right only where the runtime honours
    ``sequence_lens`` (onnxruntime; OpenVINO only with static shapes), and the Loop stays."""
    for cell in layer.cells:
        if cell.carries_cell_state and cell.activations[0].name not in SATURATING:
            return (f"the final cell state is used and recurrent activation {cell.activations[0].name} cannot "
                    f"hold it over padded steps: a native LSTM would depend on the runtime honouring sequence_lens "
                    f"(OpenVINO does not with dynamic shapes)")
    return None


def uncompiled_activations(runtime_name: str, activations) -> list:
    """The activations (ONNX names) a runtime's native recurrent ops do not compile, sorted."""
    allowed = runtime(runtime_name).activations
    return [] if allowed is None else sorted(set(activations) - set(allowed))


def activation_refusal(layer) -> Optional[str]:
    """Why ``layer``'s activations keep it a Loop for every runtime (:data:`REFUSED_ACTIVATION_REASONS`),
    or None: whichever source read it (a While body refuses them as it reads the step, an ONNX Loop here)."""
    return next((REFUSED_ACTIVATION_REASONS[activation.name] for cell in layer.cells
                 for activation in cell.activations if activation.name in REFUSED_ACTIVATION_REASONS), None)


def target_refusal(layer, target: Optional[str]) -> Optional[str]:
    """Why ``layer`` must stay a Loop for ``target`` (None: any runtime), or None.

    The Loop is what such a runtime can run: OpenVINO runs tf2onnx's masked Loops exactly where
    its native ops refuse the activation (measured on every activation the plugin supports)."""
    refused = activation_refusal(layer) or (portability_refusal(layer) if layer.mask is not None else None)
    if refused or target is None or runtime(target).activations is None:
        return refused
    for cell in layer.cells:
        unsupported = uncompiled_activations(target, [a.name for a in cell.activations])
        if unsupported:
            return (f"target {target}: {runtime(target).title}'s native {cell.op} op compiles only "
                    f"{', '.join(runtime(target).activations)} activations, not {', '.join(unsupported)}")
    return None


@dataclasses.dataclass(frozen=True)
class Veto:
    """Another runtime cannot run a rewritten layer exactly: why, and how to convert for it."""

    runtime: str
    reason: str
    remedy: str
    what: str = ""  # what of the plan it is about, for the log ("" for the layer's native ops)


def not_for(layer, target: Optional[str], bidirectional: bool = False) -> list:
    """The :class:`Veto` of each thing that keeps another runtime from running the rewritten ``layer``
    exactly, seeing the whole plan: its native ops (convert for that runtime), then the one bidirectional
    node it shares with its other half (``bidirectional``, masked)."""
    found = [Veto(other, reason, f"convert with runtime={other!r}") for other in TARGETS
             if other != target and (reason := target_refusal(layer, other))]
    if bidirectional and layer.mask is not None:
        found += [Veto(other, reason, f"convert with runtime={other!r}", " is one direction=bidirectional node")
                  for other in TARGETS if other != target and other not in {veto.runtime for veto in found}
                  and (reason := bidirectional_veto(layer.top.op, other))]
    if layer.mask is not None and layer.writes_sequence and zeros_past_lengths(target):
        found += [Veto(other, ZEROS_VETO.format(title=runtime(other).title), f"convert with runtime={other!r}",
                       " reads the native node's zeros past each row's length")
                  for other in TARGETS if other != target and other not in {veto.runtime for veto in found}
                  and not runtime(other).writes_zeros_past_lengths]
    return found
