# SPDX-License-Identifier: Apache-2.0
"""Differential fuzzing against Keras: random masked models x random batches with masks of every kind,
and, for a share of the cases, the same models without a mask (``mask_source="none"``).

A case is a pure description (frozen dataclasses: :class:`ModelCase` of :class:`LayerCase` s,
and :class:`BatchCase` s); :func:`model_cases` and :func:`batch_cases` are its hypothesis
strategies; :func:`build_model` makes the Keras model and :func:`batch_inputs` the batch.
:func:`check_case` converts the model once per mask mode, with the signature form the case drew
(dynamic, or one with a static batch or number of steps: tests/signatures.py; then every batch
takes the first batch's static sizes, and a batch-1 model takes the batches row by row), and
compares onnxruntime, and OpenVINO on the conversion made for it (:func:`openvino_conversion`),
with Keras on every batch, at every position (within ATOL; relative above 1, see
:func:`scaled_difference`; or, for ill-conditioned models, see :class:`Float64Referee`):
``"any"`` always, ``"post"`` on post-padded batches; on other batches ``"post"`` must fail with
the guard's message (on onnxruntime), never return numbers. The case's wiring makes stacks,
sequences read by more than the layer above, and parallel layers (see ``WIRINGS``). An unmasked case
(one in UNMASKED_SHARE, by a stable hash: :func:`unmasked_for`) feeds float features with no mask:
every layer must end up a native op (stock tf2onnx's own, or the plugin's where stock leaves a Loop)
with no mask machinery, and both modes must equal Keras on every batch. A case's route
(:func:`converted`) is the plugin in tf2onnx's conversion, or the ONNX-file route: stock tf2onnx's
file rewritten by ``rewrite_onnx``, checked the same way. It returns what it
saw (a :class:`CaseResult`) rather than raising, so that ``tests/fuzz.py`` can count;
``tests/test_fuzz.py`` asserts on it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from hypothesis import strategies as st

import runtimes
import signatures
from kerasutil import ATOL, FLAVOUR, convert, keras, keras_outputs, op_counts, randomize_weights, session
from models import FEATURES, AddOverTime, MeanOverTime, token_mask

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.corpus.check import uncompiled_nodes, unmasked_problems
from masked_lstm_rewriter.targets import REFUSED_ACTIVATION_REASONS
from masked_lstm_rewriter import targets
from masked_lstm_rewriter.plan.schedule import MIN_BATCH, Cuts

SEGMENTS = Cuts(*targets.schedule_cuts(None)).segments  # a model for any runtime's


@dataclasses.dataclass(frozen=True)
class RecurrentKind:
    """A Keras recurrent layer class and how many state tensors it carries."""

    name: str
    states: int
    gates: bool = True         # has a recurrent_activation (SimpleRNN has none)
    reset_after: bool = False  # takes reset_after (GRU)

    def layer(self, units, **options):
        return getattr(keras.layers, self.name)(units, **options)


# Every recurrent kind the builder knows, and those it samples (a new kind is one line in each).
KINDS = {"LSTM": RecurrentKind("LSTM", states=2), "GRU": RecurrentKind("GRU", states=1, reset_after=True),
         "SimpleRNN": RecurrentKind("SimpleRNN", states=1, gates=False)}
SAMPLED_KINDS = ("LSTM", "GRU", "SimpleRNN")

# docs/supported-layers.md, Activations: the activations the rewriter supports (either slot), plus softplus,
# which it refuses (the layer must stay a Loop with that reason, and still match Keras).
ACTIVATIONS = ("sigmoid", "tanh", "relu", "hard_sigmoid", "softsign", "softplus", "elu", "linear")
REFUSED_ACTIVATIONS = ("softplus",)
# docs/how-it-works.md ("How the outputs are built"): the recurrent activations whose gates reach
# exactly 0 and 1 (an LSTM's cell state is held over padded steps by driving them there)
SATURATING_ACTIVATIONS = ("sigmoid", "hard_sigmoid")
CELL_STATE_REFUSAL = "cannot hold it over padded steps"
DIRECTIONS = ("forward", "go_backwards", "bidirectional")
MERGE_MODES = ("concat", "sum", "mul", "ave", None)
MASK_SOURCES = ("embedding", "masking", "explicit", "computed")
# no mask: float features straight into the layers. One case in UNMASKED_SHARE is made unmasked after it
# is drawn (unmasked_for: a stable hash, so the derandomized sample keeps its size and its other cases)
UNMASKED = "none"
UNMASKED_SHARE = 5
MASK_VALUES = (0.0, -1.0, 2.5)
# "long-tailed": post-padded, one full row among short and empty ones, at least the schedule's
# MIN_BATCH rows: the batches that run masked_lstm_rewriter/schedule.py's segments
BATCH_KINDS = ("post", "pre", "holes", "both ends", "mixed", "random", "long-tailed")
ROW_KINDS = ("post", "pre", "holes", "both ends", "empty", "full")
MODES = ("any", "post")
# how the layers are wired, as whole models do: "chain" (each layer reads the one below); "skip" (the
# first layer's sequence is also a model output: it has readers besides the layer above, as with a
# Concatenate, a residual Add or an attention); "parallel" (a second layer like the first reads the
# same input, its sequence another model output); "summary" (a copy of the first layer returning its
# last output reads the first layer's sequence, and that output is added at every step of what the
# layer above reads: a residual summary); "concat" (the first layer's input and every layer's sequence,
# concatenated and averaged over every step, padded ones too: a text generator's pooling, which
# replaces the last sequence as a model output); "mask above" (an explicit mask reaches every layer
# but the first, which runs unmasked). The last three are the wirings of public models the rewriter
# once crashed or hung on. A repeat weighs a wiring more: "mask above" fits only a stack with an
# explicit mask (a quarter of the cases)
WIRINGS = ("chain", "chain", "skip", "parallel", "summary", "concat", "mask above", "mask above")
STACK_WIRINGS = ("skip", "summary", "concat", "mask above")  # need a layer above the first
EXPLICIT_MASKS = ("explicit", "computed")  # mask sources passed as mask= to each layer
VOCAB = 20
MAX_ROWS, MAX_STEPS = 16, 20
# a long-tailed batch runs the segments only where they pay against SEGMENTS nodes' fixed cost:
# about a third of these batches do for any runtime (40% for onnxruntime), at up to 40 steps
LONG_TAILED_MAX_STEPS = 40
# The length-aware schedule (make_rewriter(schedule=True)), which the "long-tailed" batches run: for
# half the cases by a stable hash (scheduled()); MLR_FUZZ_SCHEDULE=1 for every case, 0 for none
SCHEDULE = os.environ.get("MLR_FUZZ_SCHEDULE", "half")
# How a case's model reaches the rewriter (ModelCase.route): as tf2onnx's custom rewriter in the
# conversion, or as the file stock tf2onnx wrote, rewritten by rewrite_onnx (its Loops read as ONNX)
CONVERSION, ONNX_FILE = "conversion", "onnx file"


@dataclasses.dataclass(frozen=True)
class LayerCase:
    """One recurrent layer of the stack."""

    kind: str = "LSTM"
    units: int = 3
    direction: str = "forward"          # forward | go_backwards | bidirectional
    merge_mode: Optional[str] = "concat"  # Bidirectional only; None gives two outputs
    activation: str = "tanh"
    recurrent_activation: str = "sigmoid"  # ignored for SimpleRNN
    use_bias: bool = True
    reset_after: bool = True  # GRU only

    @property
    def onnx_layers(self) -> int:
        """Masked recurrent layers in tf2onnx's graph (a Bidirectional has two)."""
        return 2 if self.direction == "bidirectional" else 1

    @property
    def refused(self) -> bool:
        """The rewriter must leave this layer a Loop (an activation it refuses)."""
        used = {self.activation} | ({self.recurrent_activation} if KINDS[self.kind].gates else set())
        return bool(used & set(REFUSED_ACTIVATIONS))


@dataclasses.dataclass(frozen=True)
class ModelCase:
    """A stack of 1-3 masked recurrent layers; the options below apply to the last (outputs) or
    the first (initial_state) layer, the middle ones return sequences."""

    layers: tuple = (LayerCase(),)
    return_sequences: bool = True
    return_state: bool = False
    mask_source: str = "embedding"     # embedding | masking | explicit | computed | none (UNMASKED)
    mask_value: float = 0.0            # for "masking"
    initial_state: bool = False        # states given to the first layer as model inputs
    seed: int = 0
    signature: str = "dynamic"         # a form of tests/signatures.py: what the conversion fixes
    wiring: str = "chain"              # see WIRINGS
    route: str = dataclasses.field(default=CONVERSION, repr=False)  # CONVERSION or ONNX_FILE (out of the
                                       # repr, which the stable hashes read: describe() prints it)

    @property
    def unmasked(self) -> bool:
        return self.mask_source == UNMASKED

    def masked(self, index: int) -> bool:
        """Does layer ``index`` of the stack get a mask? (The first layer's copies get the first's.)"""
        return not self.unmasked and not (index == 0 and self.wiring == "mask above")

    @property
    def partly_unmasked(self) -> bool:
        """Some layer runs without a mask: stock tf2onnx may make it native itself (not in the report)."""
        return not all(self.masked(i) for i in range(len(self.layers)))

    def stays_a_loop(self, index: int) -> bool:
        """Layer ``index`` must stay a Loop: an activation the rewriter refuses, or (the last
        layer of a masked model, with its states returned) an LSTM cell state no padding column can hold."""
        layer = self.layers[index]
        cell_state_used = index == len(self.layers) - 1 and self.return_state and layer.kind == "LSTM" \
            and self.masked(index)
        return layer.refused or (cell_state_used and layer.recurrent_activation not in SATURATING_ACTIVATIONS)

    @property
    def first_layer_copies(self) -> int:
        """Layers like the first that the wiring adds (they return no states)."""
        return 1 if self.wiring in ("parallel", "summary") else 0

    @property
    def loop_layers(self) -> list:
        """The layers that must stay Loops (the copies of the first layer return no states)."""
        copies = [self.layers[0]] * self.first_layer_copies if self.layers[0].refused else []
        return [layer for i, layer in enumerate(self.layers) if self.stays_a_loop(i)] + copies

    @property
    def guarded(self) -> bool:
        """Does the "post" conversion hold a guard? Only a masked layer the rewriter makes native has one
        (with every masked layer refused, "post" is stock tf2onnx's Loops: exact for any mask)."""
        masked = [i for i in range(len(self.layers)) if self.masked(i)]
        return any(not self.stays_a_loop(i) for i in masked) or \
            bool(self.first_layer_copies and 0 in masked and not self.layers[0].refused)

    @property
    def softplus_loop(self) -> bool:
        """A layer the rewriter refuses (softplus) stays tf2onnx's Loop, whose Softplus OpenVINO computes
        in float32 as log(1 + exp(x)): 0 (even -1.9e-6) below about x = -15, where Keras's is exp(x)."""
        return any(layer.refused for layer in self.loop_layers)

    @property
    def all_layers(self) -> list:
        """Every recurrent layer of the model: the stack, and the first layer's copies."""
        return list(self.layers) + [self.layers[0]] * self.first_layer_copies


@dataclasses.dataclass(frozen=True)
class BatchCase:
    rows: int = 4
    steps: int = 6
    kind: str = "mixed"                # see BATCH_KINDS
    seed: int = 0


# --- strategies --------------------------------------------------------------------------------

@st.composite
def layer_cases(draw, last=True, kinds=SAMPLED_KINDS):
    direction = draw(st.sampled_from(DIRECTIONS))
    merge_modes = MERGE_MODES if last else MERGE_MODES[:-1]  # a middle layer needs one output
    return LayerCase(
        kind=draw(st.sampled_from(kinds)),
        units=draw(st.integers(1, 6)),
        direction=direction,
        merge_mode=draw(st.sampled_from(merge_modes)) if direction == "bidirectional" else "concat",
        activation=draw(st.sampled_from(ACTIVATIONS)),
        recurrent_activation=draw(st.sampled_from(ACTIVATIONS)),
        use_bias=draw(st.booleans()),
        reset_after=draw(st.booleans()))


@st.composite
def model_cases(draw, kinds=SAMPLED_KINDS, unmasked=None, route=CONVERSION):
    """Model cases; ``unmasked``: None for the share :func:`unmasked_for` picks, True for every case, False
    for none; ``route``: how every case reaches the rewriter (ModelCase.route)."""
    depth = draw(st.integers(1, 3))
    layers = tuple(draw(layer_cases(last=i == depth - 1, kinds=kinds)) for i in range(depth))
    source = draw(st.sampled_from(MASK_SOURCES))
    case = ModelCase(
        layers=layers,
        return_sequences=draw(st.booleans()),
        return_state=draw(st.booleans()),
        mask_source=source,
        mask_value=draw(st.sampled_from(MASK_VALUES)) if source == "masking" else 0.0,
        initial_state=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)), route=route)
    if unmasked_for(case) if unmasked is None else unmasked:
        case = dataclasses.replace(case, mask_source=UNMASKED, mask_value=0.0)
    case = dataclasses.replace(case, wiring=wiring_for(case))
    return dataclasses.replace(case, signature=signature_for(case))


def wiring_for(case: ModelCase) -> str:
    """The wiring of ``case``, by a stable hash of the rest of it (as :func:`signature_for`: the
    derandomized sample keeps its cases, and each gets a wiring) among those it can have: a single
    layer has none of STACK_WIRINGS, and "mask above" needs a mask passed to each layer."""
    return _hashed_choice(repr(dataclasses.replace(case, wiring="chain")) + "/wiring", wirings_for(case))


def wirings_for(case: ModelCase) -> tuple:
    """The wirings ``case`` can have (WIRINGS' repeats kept: they weigh the choice)."""
    def possible(wiring):
        if wiring in STACK_WIRINGS and len(case.layers) < 2:
            return False
        return wiring != "mask above" or case.mask_source in EXPLICIT_MASKS
    return tuple(w for w in WIRINGS if possible(w))


def unmasked_for(case: ModelCase) -> bool:
    """Does ``case`` lose its mask? One case in UNMASKED_SHARE, by a stable hash of the case as drawn:
    the other cases, and so their wirings and signatures, stay as they were."""
    return _hashed_choice(repr(case) + "/unmasked", (True,) + (False,) * (UNMASKED_SHARE - 1))


def _hashed_choice(key: str, choices):
    """One of ``choices``, the same every time for the same ``key``."""
    return choices[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(choices)]


def signature_for(case: ModelCase) -> str:
    """The signature form ``case`` is converted with: the declared (dynamic) one for half the cases,
    a static form for the other half, by a stable hash of the rest of the case. (Drawn by
    hypothesis, the choice came out lumpy in the derandomized CI sample of 50: two of the five
    static forms never; hashed, every form is in it.)"""
    choices = ("dynamic",) * len(signatures.STATIC_FORMS) + signatures.STATIC_FORMS
    return _hashed_choice(repr(dataclasses.replace(case, signature="dynamic")), choices)


def scheduled(case: ModelCase) -> bool:
    """Is ``case`` converted with the length-aware schedule? Half the cases, by a stable hash of the
    case (so that the CI sample holds both and a printed case replays as it ran), unless
    MLR_FUZZ_SCHEDULE says every case (1) or none (0)."""
    if SCHEDULE in ("0", "1"):
        return SCHEDULE == "1"
    return _hashed_choice(repr(case) + "/schedule", (True, False))


def for_onnxruntime(case: ModelCase) -> bool:
    """Is ``case`` converted for onnxruntime (``runtime="onnxruntime"``: a masked Bidirectional layer
    one node, unscheduled; the schedule's single node reading onnxruntime's zeros)? Half the cases,
    by another stable hash."""
    return _hashed_choice(repr(case) + "/onnxruntime", (True, False))


OPSETS = (15,) * 4 + (11, 12, 13, 18)  # tf2onnx's default for half; where the emitted spellings change


def opset_for(case: ModelCase) -> int:
    """The opset ``case`` is converted at: tf2onnx's default (15) for half the cases, else 11 or 12
    (nodes spelled as before opset 13), 13 or 18, by a stable hash of the case (salted so that the
    derandomized CI sample holds every one)."""
    return _hashed_choice(repr(case) + "/at opset", OPSETS)


def converted(model, spec, case: ModelCase, mode: str, runtime=None, schedule=True) -> tuple:
    """(ONNX model, report): ``model`` with ``mode``, ``runtime`` and ``schedule`` at the case's opset,
    through the case's route: the plugin as tf2onnx's rewriter, or stock tf2onnx's file rewritten
    by ``rewrite_onnx``."""
    if case.route == ONNX_FILE:
        stock = convert(model, spec, rewriter=None, opset=opset_for(case))
        return mlr.rewrite_onnx(stock, mask_mode=mode, runtime=runtime, schedule=schedule)
    rewriter = mlr.make_rewriter(mode, runtime=runtime, schedule=schedule)
    return convert(model, spec, rewriter=rewriter, opset=opset_for(case)), mlr.last_report()


def case_conversion(model, spec, case: ModelCase, mode: str) -> tuple:
    """(ONNX model, report) ``case`` is checked with in ``mode``: with the schedule or not
    (:func:`scheduled`), for onnxruntime (:func:`for_onnxruntime`) or for any runtime."""
    return converted(model, spec, case, mode, "onnxruntime" if for_onnxruntime(case) else None, scheduled(case))


@st.composite
def batch_cases(draw, kind=None):
    kind = kind or draw(st.sampled_from(BATCH_KINDS))
    if kind == "long-tailed":
        return BatchCase(rows=draw(st.integers(MIN_BATCH, MAX_ROWS)),
                         steps=draw(st.integers(SEGMENTS, LONG_TAILED_MAX_STEPS)),
                         kind=kind, seed=draw(st.integers(0, 2**16)))
    return BatchCase(rows=draw(st.integers(1, MAX_ROWS)), steps=draw(st.integers(1, MAX_STEPS)),
                     kind=kind, seed=draw(st.integers(0, 2**16)))


def batch_lists(size=4):
    """``size`` batches: the first post-padded (so "post" is compared on every model), the rest any kind."""
    return st.tuples(batch_cases(kind="post"), *[batch_cases() for _ in range(size - 1)])


# --- the Keras model ---------------------------------------------------------------------------

def _input(name, shape, dtype):
    return keras.Input(shape, dtype=dtype, name=name), tf.TensorSpec((None,) + shape, dtype, name=name)


def _any_not_equal(x, value):
    """The Masking layer's mask computed in the graph (to pass it explicitly with initial_state)."""
    if FLAVOUR == "keras3":
        return keras.ops.any(keras.ops.not_equal(x, value), axis=-1)
    return tf.reduce_any(tf.not_equal(x, value), axis=-1)


def _keras_layer(layer: LayerCase, return_sequences, return_state):
    kind = KINDS[layer.kind]
    options = dict(return_sequences=return_sequences, return_state=return_state, activation=layer.activation,
                   use_bias=layer.use_bias)
    if kind.gates:
        options["recurrent_activation"] = layer.recurrent_activation
    if kind.reset_after:
        options["reset_after"] = layer.reset_after
    if layer.direction == "bidirectional":
        return keras.layers.Bidirectional(kind.layer(layer.units, **options), merge_mode=layer.merge_mode)
    return kind.layer(layer.units, go_backwards=layer.direction == "go_backwards", **options)


def initial_state_count(case: ModelCase) -> int:
    first = case.layers[0]
    return KINDS[first.kind].states * first.onnx_layers if case.initial_state else 0


def build_model(case: ModelCase, weights_from=None):
    """(Keras model, input signature) for ``case``, with random non-zero weights (or, cast to
    floatx, those of the model ``weights_from``).

    Keras 3 drops an implicit mask when ``initial_state=`` is given (docs/limits.md), so the first
    layer then gets its mask explicitly (for Embedding/Masking: computed from the input in the graph)."""
    keras.utils.set_random_seed(case.seed)
    inputs, spec, mask = [], [], None
    if case.mask_source in ("embedding", "computed"):
        tokens, token_spec = _input("tokens", (None,), "int32")
        inputs, spec = [tokens], [token_spec]
        x = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=case.mask_source == "embedding")(tokens)
        if case.mask_source == "computed" or case.initial_state:
            mask = token_mask(tokens)
    else:
        features, features_spec = _input("features", (None, FEATURES), keras.backend.floatx())
        inputs, spec, x = [features], [features_spec], features
        if case.mask_source == "masking":
            x = keras.layers.Masking(mask_value=case.mask_value)(features)
            mask = _any_not_equal(features, case.mask_value) if case.initial_state else None
        elif not case.unmasked:  # explicit: a mask input
            mask, mask_spec = _input("mask", (None,), "bool")
            inputs.append(mask)
            spec.append(mask_spec)
    states = [_input(f"state{i}", (case.layers[0].units,), keras.backend.floatx())
              for i in range(initial_state_count(case))]
    inputs += [s for s, _ in states]
    spec += [s for _, s in states]
    explicit_everywhere = case.mask_source in EXPLICIT_MASKS
    extra = []  # the other model outputs the wiring adds

    def mask_of(i):
        given = mask is not None and (i == 0 or explicit_everywhere) and case.masked(i)
        return {"mask": mask} if given else {}
    if case.wiring == "parallel":
        copy = _keras_layer(case.layers[0], True, False)(x, **mask_of(0))
        extra += list(copy) if isinstance(copy, (list, tuple)) else [copy]
    pooled = [x]  # "concat": the first layer's input and every layer's sequence
    for i, layer in enumerate(case.layers):
        last = i == len(case.layers) - 1
        keras_layer = _keras_layer(layer, case.return_sequences if last else True, case.return_state and last)
        kwargs = mask_of(i)
        if i == 0 and states:
            kwargs["initial_state"] = [s for s, _ in states]
        x = keras_layer(x, **kwargs)
        if i == 0 and not last and case.wiring == "skip":
            extra.append(x)
        if i == 0 and not last and case.wiring == "summary":
            x = AddOverTime()([x, _keras_layer(case.layers[0], False, False)(x, **mask_of(0))])
        if not last or (case.return_sequences and not case.return_state and not isinstance(x, (list, tuple))):
            pooled.append(x)
    if case.wiring == "concat":  # the pooling is the last sequence's only reader, as in a text generator
        pooling = MeanOverTime()(keras.layers.Concatenate()(pooled))
        x, extra = (pooling, extra) if pooled[-1] is x else (x, extra + [pooling])
    model = keras.Model(inputs, ([x] if not isinstance(x, (list, tuple)) else list(x)) + extra if extra else x)
    if weights_from is None:
        randomize_weights(model, seed=case.seed)
    else:
        model.set_weights([w.astype(keras.backend.floatx()) for w in weights_from.get_weights()])
    return model, tuple(spec)


@contextlib.contextmanager
def floatx(dtype):
    """Layers built meanwhile compute in ``dtype`` (Keras 3 also needs its dtype policy set)."""
    saved = keras.backend.floatx()
    keras.backend.set_floatx(dtype)
    if FLAVOUR == "keras3":
        keras.config.set_dtype_policy(dtype)
    try:
        yield
    finally:
        keras.backend.set_floatx(saved)
        if FLAVOUR == "keras3":
            keras.config.set_dtype_policy(saved)


class Float64Referee:
    """The same Keras model in float64, built on first use. Some random models amplify float32
    rounding far beyond 1e-5 (unbounded gates, such as ``recurrent_activation="linear"``, over
    stacked layers and 20 steps): there, how far Keras's own float32 result is from the exact one
    bounds what the converted model may differ by."""

    FACTOR = 10  # the converted model may be this many times further from exact than Keras is
    DRAWS = 4    # perturbed float64 runs that measure how far float32 rounding alone moves the model

    def __init__(self, case: ModelCase, model, build=None):
        """``build(case, weights_from=model)``: the case's model builder (default: :func:`build_model`)."""
        self.case, self.model32, self.model64 = case, model, None
        self.build = build or build_model

    def accepts(self, inputs, expected, got, also=()) -> tuple:
        """(ok, the error allowed for, the converted model's error), both vs Keras in float64: FACTOR
        times Keras float32's error or, where larger, the model's :meth:`sensitivity`.

        ``also``: Keras's float32 outputs for the same inputs computed another way (a row within
        its whole batch): Keras's error is the largest, as either way is Keras's own float32. A
        kernel that sums in another order than Keras (a native op's one GEMM over every step) rounds
        differently; a model that amplifies rounding (unbounded gates such as ``elu`` or ``linear``,
        measured: 4e-5 where Keras happened to be 8e-6 off, and one draw of its sensitivity 1e-5)
        moves by that much for any such order."""
        with floatx("float64"):
            if self.model64 is None:
                self.model64, _ = self.build(self.case, weights_from=self.model32)
            inputs64 = [x.astype(np.float64) if x.dtype == np.float32 else x for x in inputs]
            exact = keras_outputs(self.model64, inputs64)
        keras_error = max(scaled_difference(exact, outputs) for outputs in (expected,) + tuple(also))
        onnx_error = scaled_difference(exact, got)
        if onnx_error <= self.FACTOR * keras_error:
            return True, keras_error, onnx_error
        allowed = max(keras_error, self.sensitivity(inputs64, exact))
        return onnx_error <= self.FACTOR * allowed, allowed, onnx_error

    def sensitivity(self, inputs64, exact) -> float:
        """How far the float64 model moves from ``exact`` when each weight and float input is off by a
        float32 rounding (relative 2**-24, random; the largest of DRAWS runs, the same draws every time)."""
        rng = np.random.default_rng(0)
        weights = self.model64.get_weights()

        def rounded(x):
            return x * (1 + 2.0 ** -24 * rng.standard_normal(x.shape)) if x.dtype == np.float64 else x
        worst = 0.0
        with floatx("float64"):
            try:
                for _ in range(self.DRAWS):
                    self.model64.set_weights([rounded(w) for w in weights])
                    moved = keras_outputs(self.model64, [rounded(x) for x in inputs64])
                    worst = max(worst, scaled_difference(exact, moved))
            finally:
                self.model64.set_weights(weights)
        return worst


# --- the batch ---------------------------------------------------------------------------------

def _row(kind, steps, rng):
    row = np.zeros(steps, bool)
    length = int(rng.integers(0, steps + 1))
    if kind == "post":
        row[:length] = True
    elif kind == "pre":
        row[steps - length:] = True
    elif kind == "full":
        row[:] = True
    elif kind == "holes":
        row[:] = rng.random(steps) < 0.6
        if steps >= 3:  # at least one hole: valid, padded, valid
            first, hole, last = sorted(rng.choice(steps, 3, replace=False))
            row[[first, last]], row[hole] = True, False
    elif kind == "both ends" and steps >= 3:
        start = int(rng.integers(1, steps - 1))
        row[start:int(rng.integers(start + 1, steps))] = True
    elif kind == "both ends":
        row[steps - 1:] = steps > 1  # too short for both ends: pre-padded
    return row


def long_tailed_mask(rows: int, steps: int, rng) -> np.ndarray:
    """Post-padded rows: one full, the others geometric lengths around steps / 8 (empty ones too)."""
    lengths = np.minimum(rng.geometric(min(1.0, 8.0 / steps), rows) - 1, steps)
    lengths[rng.integers(rows)] = steps
    return np.arange(steps)[None, :] < lengths[:, None]


def batch_mask(batch: BatchCase) -> np.ndarray:
    """[rows, steps] bool mask of the batch's kind; "mixed" draws each row's kind, "random" each bit."""
    rng = np.random.default_rng(batch.seed)
    if batch.kind == "random":
        return rng.random((batch.rows, batch.steps)) < 0.5
    if batch.kind == "long-tailed":
        return long_tailed_mask(batch.rows, batch.steps, rng)
    if batch.kind == "mixed":
        kinds = rng.choice(ROW_KINDS, batch.rows)
    elif batch.kind in ("post", "pre"):  # with empty and full rows now and then
        kinds = rng.choice([batch.kind] * 4 + ["empty", "full"], batch.rows)
    else:
        kinds = [batch.kind] * batch.rows
    return np.array([_row(kind, batch.steps, rng) for kind in kinds], bool).reshape(batch.rows, batch.steps)


def fit_batches(case: ModelCase, batches) -> list:
    """The batches as the case's signature takes them: a static batch size or number of steps is
    the first batch's, for every batch."""
    batch_axis, time_axis = signatures.FORMS[case.signature]
    first = batches[0]
    return [dataclasses.replace(batch, rows=first.rows if batch_axis == "rows" else batch.rows,
                                steps=first.steps if time_axis == "steps" else batch.steps) for batch in batches]


def feeds(case: ModelCase, rows: int) -> list:
    """How a batch of ``rows`` rows reaches the model: whole, or (batch-1 signatures) row by row."""
    return [slice(row, row + 1) for row in range(rows)] if signatures.FORMS[case.signature][0] == 1 \
        else [slice(None)]


def is_post_padded(mask: np.ndarray) -> bool:
    """No padded step is followed by a valid one in any row."""
    return not np.any(mask[:, 1:] & ~mask[:, :-1])


def batch_inputs(case: ModelCase, batch: BatchCase):
    """(inputs in the signature's order, the mask they carry: every step, without a mask)."""
    mask = np.ones((batch.rows, batch.steps), bool) if case.unmasked else batch_mask(batch)
    rng = np.random.default_rng(batch.seed + 1)
    shape = (batch.rows, batch.steps)
    if case.mask_source in ("embedding", "computed"):
        inputs = [(rng.integers(1, VOCAB, size=shape) * mask).astype(np.int32)]
    else:
        features = rng.normal(size=shape + (FEATURES,)).astype(np.float32)
        if case.mask_source == "masking":
            inputs = [np.where(mask[..., None], features, np.float32(case.mask_value)).astype(np.float32)]
        elif case.unmasked:
            inputs = [features]
        else:  # the padded steps keep their random features: only the mask may hide them
            inputs = [features, mask]
    units = case.layers[0].units
    inputs += [rng.normal(size=(batch.rows, units)).astype(np.float32) for _ in range(initial_state_count(case))]
    return inputs, mask


# --- the check ---------------------------------------------------------------------------------

@dataclasses.dataclass
class CaseResult:
    """What one model case did on its batches, in both modes."""

    comparisons: int = 0        # model/batch/mode comparisons with Keras
    passed: int = 0
    ill_conditioned: list = dataclasses.field(default_factory=list)  # passed by the referee:
    #   (mode, |diff| vs Keras, the error allowed for (Float64Referee.accepts), ONNX vs float64)
    non_finite: int = 0         # comparisons skipped: Keras's own output overflowed (inf or nan)
    openvino_softplus: int = 0  # OpenVINO off where onnxruntime matched, in a model with a softplus Loop (_compare)
    row_rounding: int = 0       # off by no more than float32 rounding of the largest value the row holds (_compare)
    stock_overflow: int = 0     # ... or stock tf2onnx's model did too, or every layer was refused (see _compare)
    stock_differs: int = 0      # a model of stock tf2onnx's Loops alone, as far from Keras as stock tf2onnx's (_compare)
    mismatches: list = dataclasses.field(default_factory=list)   # (mode, batch, |diff| or reason)
    non_post: int = 0           # batches (batch-1 signatures: rows) whose mask is not post-padded
    guard_fired: int = 0        # ... on which "post" failed with the guard's message
    guard_missed: list = dataclasses.field(default_factory=list)  # (batch, what happened instead)
    worst: float = 0.0          # largest scaled_difference from Keras seen (referee or not)
    openvino: bool = False      # compared on OpenVINO too
    loops: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # reason -> layers
    unmasked_problems: list = dataclasses.field(default_factory=list)  # an unmasked model's mask machinery

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.guard_missed and not self.loops and not self.unmasked_problems


def scaled_difference(expected, got) -> float:
    """Largest |expected - got| / max(1, |expected|) over every output and position: the absolute
    difference where Keras's values are at most 1, relative above (random activations such as
    ``linear`` or ``softplus`` let values grow far beyond 1, where float32 cannot hold 1e-5
    absolute); inf when the outputs' number or shapes differ."""
    if len(expected) != len(got):
        return float("inf")
    worst = 0.0
    for e, g in zip(expected, got):
        if e.shape != g.shape:
            return float("inf")
        scaled = np.abs(e - g) / np.maximum(1.0, np.abs(e))
        if np.isnan(scaled).any():  # NaN where Keras has a number (or the reverse): never a pass
            return float("inf")
        worst = max([worst] + ([float(np.max(scaled))] if scaled.size else []))
    return worst


def row_scaled_difference(expected, got) -> float:
    """Largest |expected - got| / max(1, the largest |expected| in the same row of that output): the
    difference float32 rounding allows a kernel that mixes a row's values in another order. A gate
    computed to float32's absolute precision (about 6e-8 near 0) times a state of 6e3 moves the
    next output by 4e-4 (measured: onnxruntime's native GRU, a linear-activation layer whose state
    falls from -6071 to -12.8 in one step; numpy's float32 and Keras's stay within 2e-5)."""
    worst = 0.0
    for e, g in zip(expected, got):
        if e.shape != g.shape or not e.size:
            continue
        rows = np.abs(e).reshape(len(e), -1).max(axis=1) if e.ndim else np.abs(e).reshape(1)
        scale = np.maximum(1.0, rows).reshape((-1,) + (1,) * max(e.ndim - 1, 0))
        worst = max(worst, float(np.max(np.abs(e - g) / scale)))
    return worst


def all_finite(outputs) -> bool:
    return all(np.all(np.isfinite(o)) for o in outputs)


REFUSED_REASONS = set(REFUSED_ACTIVATION_REASONS.values())


def convert_and_report(model, spec, mode, case: ModelCase, result: CaseResult):
    """(the ONNX model in ``mode``, whether it is for OpenVINO too). Every layer must be rewritten
    except the refused ones, which must stay Loops for their reason; anything else left as a Loop
    is recorded as a failure. It is not for OpenVINO when the conversion says a layer is not (the
    schedule; an activation OpenVINO does not compile)."""
    onnx_model, report = case_conversion(model, spec, case, mode)
    for layer in report.left_as_loop:
        if layer.detail not in REFUSED_REASONS and CELL_STATE_REFUSAL not in layer.detail:
            result.loops[f"{mode}: {layer.detail}"] += 1
    loops = sum(layer.onnx_layers for layer in case.loop_layers)
    expected = sum(layer.onnx_layers for layer in case.all_layers) - loops
    # unmasked layers: stock tf2onnx makes some native itself (not in the report), the plugin the others
    rewritten = len(report.rewritten) <= expected if case.partly_unmasked else len(report.rewritten) == expected
    if not rewritten or op_counts(onnx_model)["Loop"] != loops:
        result.loops[f"{mode}: {len(report.rewritten)} of {expected} layers rewritten, "
                     f"{op_counts(onnx_model)['Loop']} Loop(s) (expected {loops})"] += 1
    if case.unmasked:
        result.unmasked_problems += [f"{mode}: {problem}" for problem in unmasked_problems({"unmasked": True},
                                                                                            onnx_model)]
        result.unmasked_problems += [f"{mode}: {layer} reported as masked" for layer in report.layers if layer.masked]
    for_openvino = not any("openvino" in layer.not_for for layer in report.layers)
    return onnx_model, for_openvino


def openvino_conversion(model, spec, mode, onnx_model, for_openvino, case: ModelCase):
    """(model, kept a Loop): the conversion a user deploying on OpenVINO makes (``onnx_model`` where no
    layer names OpenVINO in ``not_for``, its schedule included; else ``runtime="openvino"``), and whether it kept a layer as stock
    tf2onnx's Loop for the target. (None, False) when the suite leaves OpenVINO out, or when an
    unmasked layer keeps stock tf2onnx's own native op with an activation OpenVINO does not compile
    (tf_keras's hard_sigmoid LSTM: no conversion makes that model for OpenVINO): every node OpenVINO
    does not compile is one of those, as many as stock tf2onnx's own conversion has."""
    if "openvino" not in runtimes.runtimes():
        return None, False
    model_for_openvino, kept = onnx_model, False
    if not for_openvino:
        model_for_openvino, report = converted(model, spec, case, mode, "openvino")
        kept = bool(report.left_as_loop)
    uncompiled = uncompiled_nodes(model_for_openvino, "openvino") if case.partly_unmasked else []
    stock = convert(model, spec, rewriter=None, opset=opset_for(case))
    if uncompiled and len(uncompiled) <= len(uncompiled_nodes(stock, "openvino")):
        return None, False
    return model_for_openvino, kept


def openvino_session(onnx_model):
    """OpenVINO's model compiled once, with the shapes ``onnx_model`` declares, behind
    onnxruntime's ``run(None, feeds)``."""
    compiled = runtimes.openvino_compiled(onnx_model)
    names = [output.name for output in onnx_model.graph.output]

    class Session:  # pylint: disable=too-few-public-methods
        @staticmethod
        def run(_, feeds):
            results = compiled(feeds)
            return [np.asarray(results[compiled.output(name)]) for name in names]
    return Session()


def _run(sess, spec, inputs):
    return sess.run(None, {s.name: np.asarray(x) for s, x in zip(spec, inputs)})


@dataclasses.dataclass
class Feed:
    """What one run of the converted model gets: a batch, or (batch-1 signatures) one of its rows.

    A row is first compared with its slice of Keras's outputs for the whole batch (one Keras run
    per batch, as for the other forms). On an ill-conditioned model Keras's own float32 result
    for a row moves with the rows batched with it (by 10x more than 1e-5, measured), so where
    that comparison fails, Keras runs on the row alone, as the converted model did, and both of
    Keras's results bound its float32 error for the referee."""

    batch: BatchCase
    inputs: list
    mask: np.ndarray
    expected: list                          # Keras's outputs for these inputs (a row: its batch's slice)
    alone: Optional[Callable[[], list]] = None  # a row: Keras run on the row alone
    overflowed_inside: bool = False          # a layer's Keras output is not finite (see keras_outputs_and_overflow)

def _compare(result, mode, feed: Feed, got, referee, stock=False, softplus=False, stock_run=None) -> bool:
    """One comparison: within ATOL, or (ill-conditioned models) as close to exact as Keras itself.
    Returns whether it passed (or was not compared).

    ``stock``: every layer was refused, so the model is stock tf2onnx's Loops, which write
    Keras's masked selects as arithmetic: a candidate state that overflows at a step Keras
    discards turns into NaN there (as in :func:`keras_outputs_and_overflow`, but inside the layer).
    That is tf2onnx's, not the plugin's: counted apart, not compared. So is a difference from Keras
    beyond the referee's where the outputs equal stock tf2onnx's own conversion's (``stock_run``; found:
    softplus-gated LSTMs whose values reach 6e13, 6% off in stock tf2onnx's Loops alike).

    ``softplus``: an OpenVINO run of a model with a softplus layer left as tf2onnx's Loop, whose
    onnxruntime run matched Keras on the same feed: OpenVINO's Softplus loses all precision below
    about -15 (:attr:`ModelCase.softplus_loop`), which a model whose states grow large (linear or
    softplus activations) turns into errors far above ATOL. That is OpenVINO's: counted apart.

    A difference within float32 rounding of the largest value the row holds (:func:`row_scaled_difference`),
    where the referee finds Keras closer to exact, is the runtime kernel's order of operations: counted
    apart, not a pass.

    ``stock_run``: stock tf2onnx's outputs for the feed on the same runtime. Where the model's outputs
    are not finite and Keras's are, positions at which stock tf2onnx's model is not finite either
    (a model whose values near float32's limit: 1e36 found) are taken out of the comparison, counted
    apart; every other position is compared."""
    result.comparisons += 1
    if not all_finite(feed.expected) or feed.overflowed_inside:
        # overflowed in Keras: the order of float32 operations decides where
        result.non_finite += 1
        return True
    if stock and not all_finite(got):
        result.stock_overflow += 1
        return True
    if not all_finite(got) and stock_run is not None:
        got = _without_stock_overflow(got, stock_run(), feed.expected)
        result.stock_overflow += all_finite(got)
    expected, also = feed.expected, ()
    diff = scaled_difference(expected, got)
    if diff > ATOL and feed.alone is not None:
        expected, also = feed.alone(), (expected,)
        diff = scaled_difference(expected, got)
    if diff <= ATOL:
        result.worst = max(result.worst, diff)
        result.passed += 1
        return True
    ok, keras_error, onnx_error = referee.accepts(feed.inputs, expected, got, also)
    if ok:
        result.worst = max(result.worst, diff)
        result.passed += 1
        result.ill_conditioned.append((mode, diff, keras_error, onnx_error))
    elif softplus:
        result.openvino_softplus += 1
    elif stock and stock_run is not None and scaled_difference(stock_run(), got) <= ATOL:
        result.stock_differs += 1
        return True
    elif row_scaled_difference(expected, got) <= ATOL:
        result.row_rounding += 1
        return True
    else:
        result.worst = max(result.worst, diff)
        result.mismatches.append((mode, feed.batch, diff))
    return ok


def _without_stock_overflow(got, stock, expected) -> list:
    """``got`` with Keras's values where it and stock tf2onnx's outputs are not finite alike (at the
    same positions); ``got`` unchanged where they differ."""
    if len(got) != len(stock) or any(g.shape != s.shape for g, s in zip(got, stock)):
        return got
    if any(not np.array_equal(~np.isfinite(g), ~np.isfinite(s)) for g, s in zip(got, stock)):
        return got
    return [np.where(np.isfinite(g), g, e) for g, e in zip(got, expected)]


def check_case(case: ModelCase, batches) -> CaseResult:
    """Build ``case``, convert it in both modes once (with its signature form), and check it on
    every batch (fitted to the signature: :func:`fit_batches`, :func:`feeds`)."""
    keras.backend.clear_session()
    result = CaseResult()
    model, spec = build_model(case)
    batches = fit_batches(case, batches)
    spec, _ = signatures.signature(spec, batch_inputs(case, batches[0])[0], case.signature)
    referee = Float64Referee(case, model)
    sessions, stock_loops = {}, set()
    for mode in MODES:
        onnx_model, for_openvino = convert_and_report(model, spec, mode, case, result)
        sessions[mode] = session(onnx_model)
        openvino_model, target_loops = openvino_conversion(model, spec, mode, onnx_model, for_openvino, case)
        if openvino_model is not None:
            sessions[f"{mode} on openvino"] = openvino_session(openvino_model)
            result.openvino = True
            if target_loops:  # stock tf2onnx's Loop, kept for the target: its select may overflow (_compare)
                stock_loops.add(f"{mode} on openvino")
    # with every layer refused, the model is stock tf2onnx's Loops (see _compare)
    stock = len(case.loop_layers) == len(case.all_layers)

    @functools.lru_cache(maxsize=None)
    def stock_session(on_openvino: bool):
        """Stock tf2onnx's conversion, made only if a feed needs it (_compare's stock_run)."""
        stock_model = convert(model, spec, rewriter=None, opset=opset_for(case))
        return openvino_session(stock_model) if on_openvino else session(stock_model)
    with_layers = _with_layer_outputs(model)
    for batch in batches:
        whole_inputs, whole_mask = batch_inputs(case, batch)
        whole_expected, overflowed = keras_outputs_and_overflow(with_layers, len(model.outputs), whole_inputs)
        for rows in feeds(case, batch.rows):
            if rows == slice(None):
                feed = Feed(batch, whole_inputs, whole_mask, whole_expected, overflowed_inside=overflowed)
            else:
                inputs = [x[rows] for x in whole_inputs]
                feed = Feed(batch, inputs, whole_mask[rows], [e[rows] for e in whole_expected],
                            functools.partial(keras_outputs, model, inputs), overflowed_inside=overflowed)
            _check_feed(result, sessions, spec, feed, referee, case.guarded, stock, stock_loops, stock_session)
    return result


def _with_layer_outputs(model):
    """The Keras model returning ``model``'s outputs, then every layer's (see :func:`keras_outputs_and_overflow`)."""
    outputs = [layer.output for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    layers = [t for out in outputs for t in (out if isinstance(out, (list, tuple)) else [out])]
    return keras.Model(model.inputs, list(model.outputs) + layers)


def keras_outputs_and_overflow(with_layers, count: int, inputs) -> tuple:
    """The model's ``count`` outputs, and whether a layer's Keras output holds inf or NaN, even where
    the model's outputs do not, from one run of :func:`_with_layer_outputs`'s model. Keras's
    masked ``where`` drops a value at a masked step, but stock tf2onnx writes that select as
    arithmetic (``x * mask + y * (1 - mask)``), so a layer left as its Loop turns the overflow of
    the layer below into NaN (found by the fuzzer: a GRU with relu gates under go_backwards,
    whose reversed output the next layer reads under the unreversed mask)."""
    outputs = keras_outputs(with_layers, inputs)
    return outputs[:count], not all_finite(outputs[count:])


def _check_feed(result, sessions, spec, feed: Feed, referee, guarded, stock, stock_loops=frozenset(),
                stock_session=None):
    """"any" on the feed; "post" too where its mask is post-padded, else "post" must fail with the guard
    (on onnxruntime: OpenVINO's synchronous single-thread inference drops errors, see docs/openvino.md).
    ``stock_session(on_openvino)``: stock tf2onnx's model, for _compare's ``stock_run``."""
    def stock_run(on_openvino):
        return None if stock_session is None else lambda: _run(stock_session(on_openvino), spec, feed.inputs)

    exact_modes = ["any"] + (["post"] if is_post_padded(feed.mask) or not guarded else [])
    for mode in exact_modes:
        matched = _compare(result, mode, feed, _run(sessions[mode], spec, feed.inputs), referee, stock=stock,
                           stock_run=stock_run(False))
        name = f"{mode} on openvino"
        if name in sessions:
            _compare(result, name, feed, _run(sessions[name], spec, feed.inputs), referee,
                     stock=stock or name in stock_loops, softplus=matched and referee.case.softplus_loop,
                     stock_run=stock_run(True))
    if "post" in exact_modes:
        return
    result.non_post += 1
    try:
        got = _run(sessions["post"], spec, feed.inputs)
    except Exception as error:  # pylint: disable=broad-except  (onnxruntime's own exception types)
        if mlr.GUARD_MESSAGE in str(error):
            result.guard_fired += 1
        else:
            result.guard_missed.append((feed.batch, f"failed without the guard's message: {error}"))
        return
    diff = scaled_difference(feed.expected, got)
    result.guard_missed.append((feed.batch, f"returned numbers (max |diff| {diff:.3g})"))


def describe(case: ModelCase, batches, result: CaseResult) -> str:
    """A failure report that can be pasted into tests/test_fuzz_regressions.py."""
    lines = [f"case = {case!r}"] + ([f"case = dataclasses.replace(case, route={case.route!r})"]
                                    if case.route != CONVERSION else [])
    lines += [f"batches = {tuple(batches)!r}", f"  converted at opset {opset_for(case)}"]
    lines += [f"  mismatch ({mode}) on {batch!r}: max |diff| {diff:.3g}" for mode, batch, diff in result.mismatches]
    lines += [f"  guard missed on {batch!r}: {what}" for batch, what in result.guard_missed]
    lines += [f"  left as Loop: {reason} (x{count})" for reason, count in result.loops.items()]
    lines += [f"  without a mask: {problem}" for problem in result.unmasked_problems]
    return "\n".join(lines)
