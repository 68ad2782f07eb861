# SPDX-License-Identifier: Apache-2.0
"""Adversarial differential fuzzing: models close to, but not exactly, what the matcher knows.

Two families of mutants, each a pure description (:class:`AdversarialCase`):

* ``"cell"``: ``keras.layers.RNN(MutantCell(...))``, a cell written with the Keras algebra of an
  LSTM, GRU (both ``reset_after``) or SimpleRNN step plus one mutation from :data:`CELL_MUTATIONS`
  (an extra term, a clip, a swapped or coupled gate, a scaled recurrence, states returned in
  another order, an output that is not the new h, a third state, ...). ``"none"`` is the Keras
  algebra itself, written by hand.
* ``"loop"``: a hand-written ``tf.while_loop`` shaped like Keras's masked loop
  (:func:`keras_like_loop`, a copy of Keras 3's ``backend.rnn``), running an unmutated cell, with
  one mutation from :data:`LOOP_MUTATIONS` (other trip counts, other counters, other mask uses).

Both run in either Keras flavour, masked by an ``Embedding``, a ``Masking`` layer, a mask computed
from the token ids, a mask model input, or a ``[1, T]`` mask input that Keras broadcasts over the
batch; with dynamic or static input signatures (:mod:`signatures`); converted in one mask mode.

:func:`check_case` gives the verdict: **refused** (every masked recurrent loop stays a ``Loop``;
those the rewriter recognised with a reason in ``last_report()``) or **exact** (something was
rewritten, and every output at every position equals Keras's on every batch, and ``"post"`` fails
with the guard's message on every batch that is not post-padded). Anything else (wrong numbers,
another error, a crash) is a failure. ``tests/test_fuzz_adversarial.py`` runs a derandomized
sample in CI; ``tests/fuzz.py --adversarial --cases N`` runs more and counts.
"""

from __future__ import annotations

import collections
import dataclasses
import numpy as np
import tensorflow as tf

import fuzzgen
import signatures
from fuzzgen import BatchCase
from kerasutil import ATOL, FLAVOUR, convert, keras, keras_outputs, op_counts, randomize_weights, session
from models import token_mask

import masked_lstm_rewriter as mlr

FEATURES = 3
VOCAB = 20
GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}

# one mutation of the Keras algebra each; "none" is the algebra itself
CELL_MUTATIONS = {
    "LSTM": ("none", "extra_h", "extra_h_squeezed", "extra_c", "extra_x", "extra_const", "clip_c", "clip_h",
             "swap_if", "coupled_if", "scaled_recurrence", "scaled_h", "states_swapped", "output_c",
             "third_state", "third_state_used", "old_c_in_h", "mixed_activation", "shared_block", "bias_twice",
             "h_squared", "x_squared", "transposed_recurrent", "h_plus_c"),
    "GRU": ("none", "extra_h", "extra_h_squeezed", "swap_z", "no_reset", "reset_on_x", "scaled_recurrence",
            "scaled_h", "clip_h", "output_candidate", "third_state", "coupled_rz", "extra_x", "bias_twice",
            "mixed_activation", "h_squared", "extra_const"),
    "SimpleRNN": ("none", "extra_h", "extra_h_squeezed", "extra_h_unpacked", "clip_h", "scaled_recurrence",
                  "scaled_h", "output_pre", "third_state", "third_state_used", "extra_x", "h_squared",
                  "x_squared", "bias_twice", "extra_const"),
}
LOOP_MUTATIONS = ("keras", "stop_cond_t_minus_2", "stop_max_iterations_t_minus_2", "max_iterations_t",
                  "max_iterations_t_plus_3", "max_iterations_3", "cond_const_bound", "separate_counter",
                  "separate_counter_bound_t_minus_2", "counter_starts_at_1", "counter_steps_by_2", "cond_less_equal",
                  "cond_greater", "cond_or", "bound_carried", "bound_from_mask", "mask_negated", "mask_shifted",
                  "output_only_masked", "swapped_where", "reverse_x_only", "write_reversed", "initial_output_ones",
                  "zero_output_for_mask", "x_read_reversed", "initial_state_ones", "extra_loop_var",
                  "backend_input_length", "go_backwards", "output_list_longer", "last_output_list_of_t")
ACTIVATIONS = ("sigmoid", "tanh", "hard_sigmoid", "softsign", "relu", "linear")
MASK_SOURCES = ("embedding", "masking", "explicit", "computed", "explicit [1, T]")
MODES = ("any", "post")
TALLY = collections.Counter()  # verdicts of the cases checked in this process (the test summary prints them)


@dataclasses.dataclass(frozen=True)
class AdversarialCase:
    family: str = "cell"                 # "cell" (RNN(MutantCell)) or "loop" (keras_like_loop)
    kind: str = "LSTM"                   # the algebra the mutant starts from
    mutation: str = "none"
    units: int = 3
    activation: str = "tanh"
    recurrent_activation: str = "sigmoid"
    use_bias: bool = True
    reset_after: bool = True
    direction: str = "forward"           # forward | go_backwards | bidirectional (cells only)
    return_sequences: bool = True
    return_state: bool = False
    mask_source: str = "explicit"
    signature: str = "dynamic"           # a form of signatures.FORMS
    mode: str = "any"
    rows: int = 5
    steps: int = 7
    seed: int = 0
    route: str = dataclasses.field(default=fuzzgen.CONVERSION, repr=False)  # or fuzzgen.ONNX_FILE

    @property
    def recurrent_layers(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


# --- the mutant cell ---------------------------------------------------------------------------

def _activation(name):
    return keras.activations.get(name)


@keras.utils.register_keras_serializable(package="masked_lstm_rewriter_tests")
class MutantCell(keras.layers.Layer):
    """A recurrent cell with the Keras algebra of ``kind`` plus ``mutation`` (see CELL_MUTATIONS),
    written with one fused kernel and a Split, as Keras writes its cells. (Serializable: Keras 3's
    Bidirectional rebuilds its forward layer from its config.)"""

    def __init__(self, kind="LSTM", units=3, mutation="none", activation="tanh", recurrent_activation="sigmoid",
                 use_bias=True, reset_after=True, **kwargs):
        super().__init__(**kwargs)
        self._options = dict(kind=kind, units=units, mutation=mutation, activation=activation,
                             recurrent_activation=recurrent_activation, use_bias=use_bias, reset_after=reset_after)
        self.kind, self.units, self.mutation = kind, units, mutation
        self.activation, self.recurrent_activation = _activation(activation), _activation(recurrent_activation)
        self.use_bias, self.reset_after = use_bias, reset_after
        states = 2 if kind == "LSTM" else 1
        states += mutation in ("third_state", "third_state_used")
        self.state_size = [units] * states
        self.output_size = units

    def get_config(self):
        return {**super().get_config(), **self._options}

    def build(self, input_shape):
        gates = GATES[self.kind] * self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], gates), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, gates), name="recurrent_kernel")
        if self.use_bias:
            shape = (2, gates) if self.kind == "GRU" and self.reset_after else (gates,)
            self.bias = self.add_weight(shape=shape, name="bias")
        self.built = True

    def call(self, inputs, states, training=False):  # pylint: disable=unused-argument
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        step = {"LSTM": self._lstm, "GRU": self._gru, "SimpleRNN": self._simple_rnn}[self.kind]
        output, new_states = step(inputs, states)
        if self.mutation in ("third_state", "third_state_used"):
            new_states.append(states[-1] + new_states[0])
        return output, new_states

    # the pieces every kind shares
    def _recurrent_product(self, h):
        if self.mutation == "transposed_recurrent":  # h @ R as (R^T h^T)^T
            return tf.transpose(tf.matmul(self.recurrent_kernel, h, transpose_a=True, transpose_b=True))
        product = tf.matmul(h, self.recurrent_kernel)
        return 0.5 * product if self.mutation == "scaled_recurrence" else product

    def _input_product(self, x):
        return tf.matmul(x * x if self.mutation == "x_squared" else x, self.kernel)

    def _bias(self, z, bias):
        z = z + bias
        return z + bias if self.mutation == "bias_twice" else z

    def _extra(self, pre, x, h, states):
        """The mutations that add a term to a gate's pre-activation."""
        extra = {
            "extra_h": lambda: h,
            "extra_h_squeezed": lambda: tf.squeeze(h, 0) if h.shape[0] == 1
            else tf.squeeze(h[:1], 0),  # batch 1: the whole state squeezed, else row 0 for every row
            "extra_h_unpacked": lambda: tf.unstack(h, num=1, axis=0)[0] if h.shape[0] == 1
            else tf.unstack(tf.transpose(h))[0][:, None],
            "extra_c": lambda: states[1],
            "extra_x": lambda: x[:, :1],
            "extra_const": lambda: tf.constant(0.25, pre.dtype),
            "third_state_used": lambda: states[-1],
            "h_squared": lambda: h * h,
            "h_plus_c": lambda: h + states[1],
        }.get(self.mutation)
        return pre if extra is None else pre + extra()

    def _clip(self, tensor, name):
        return tf.clip_by_value(tensor, -0.5, 0.5) if self.mutation == name else tensor

    def _lstm(self, x, states):
        h, c = states[0], states[1]
        z = self._input_product(x) + self._recurrent_product(h)
        if self.use_bias:
            z = self._bias(z, self.bias)
        z0, z1, z2, z3 = tf.split(z, 4, axis=1)
        if self.mutation == "shared_block":
            z1 = z0
        z2 = self._extra(z2, x, h, states)
        i = self.recurrent_activation(z0)
        f = (keras.activations.get("hard_sigmoid") if self.mutation == "mixed_activation"
             else self.recurrent_activation)(z1)
        if self.mutation == "coupled_if":
            i = 1.0 - f
        g = self.activation(z2)
        o = self.recurrent_activation(z3)
        c_new = i * c + f * g if self.mutation == "swap_if" else f * c + i * g
        c_new = self._clip(c_new, "clip_c")
        h_new = o * self.activation(c if self.mutation == "old_c_in_h" else c_new)
        h_new = self._clip(h_new, "clip_h")
        if self.mutation == "scaled_h":
            h_new = 0.9 * h_new
        if self.mutation == "states_swapped":
            return h_new, [c_new, h_new]
        if self.mutation == "output_c":
            return c_new, [h_new, c_new]
        return h_new, [h_new, c_new]

    def _gru(self, x, states):
        h = states[0]
        units = self.units
        input_bias = recurrent_bias = None
        if self.use_bias:
            input_bias, recurrent_bias = (tf.unstack(self.bias) if self.reset_after else (self.bias, None))
        matrix_x = self._input_product(x)
        if input_bias is not None:
            matrix_x = self._bias(matrix_x, input_bias)
        x_z, x_r, x_h = tf.split(matrix_x, 3, axis=-1)
        if self.reset_after:
            matrix_inner = self._recurrent_product(h)
            if recurrent_bias is not None:
                matrix_inner = matrix_inner + recurrent_bias
        else:
            matrix_inner = tf.matmul(h, self.recurrent_kernel[:, :2 * units])
        recurrent_z, recurrent_r = matrix_inner[:, :units], matrix_inner[:, units:2 * units]
        z_pre = self._extra(x_z + recurrent_z, x, h, states)
        z = self.recurrent_activation(z_pre)
        r_activation = keras.activations.get("hard_sigmoid") if self.mutation == "mixed_activation" \
            else self.recurrent_activation
        r = z if self.mutation == "coupled_rz" else r_activation(x_r + recurrent_r)
        if self.reset_after:
            recurrent_h = matrix_inner[:, 2 * units:]
            if self.mutation == "reset_on_x":
                hh_pre = r * x_h + recurrent_h
            elif self.mutation == "no_reset":
                hh_pre = x_h + recurrent_h
            else:
                hh_pre = x_h + r * recurrent_h
        else:
            if self.mutation == "reset_on_x":
                hh_pre = r * x_h + tf.matmul(h, self.recurrent_kernel[:, 2 * units:])
            elif self.mutation == "no_reset":
                hh_pre = x_h + tf.matmul(h, self.recurrent_kernel[:, 2 * units:])
            else:
                hh_pre = x_h + tf.matmul(r * h, self.recurrent_kernel[:, 2 * units:])
        hh = self.activation(hh_pre)
        h_new = (1 - z) * h + z * hh if self.mutation == "swap_z" else z * h + (1 - z) * hh
        h_new = self._clip(h_new, "clip_h")
        if self.mutation == "scaled_h":
            h_new = 0.9 * h_new
        if self.mutation == "output_candidate":
            return hh, [h_new]
        return h_new, [h_new]

    def _simple_rnn(self, x, states):
        h = states[0]
        pre = self._input_product(x)
        if self.use_bias:
            pre = self._bias(pre, self.bias)
        pre = self._extra(pre + self._recurrent_product(h), x, h, states)
        h_new = self._clip(self.activation(pre), "clip_h")
        if self.mutation == "scaled_h":
            h_new = 0.9 * h_new
        if self.mutation == "output_pre":
            return pre, [h_new]
        return h_new, [h_new]


# --- the Keras-like loop -----------------------------------------------------------------------

def _int(value):
    return tf.constant(value, tf.int32)


def keras_like_loop(cell, x, mask, mutation="keras", go_backwards=False, return_sequences=True):
    """``(last_output, outputs, states)`` of ``cell`` over ``x`` [B, T, F] masked by ``mask`` [B', T], by
    a ``tf.while_loop`` written as Keras 3's ``backend.rnn`` writes it, with one ``mutation``."""
    x_tm = tf.transpose(x, [1, 0, 2])
    mask_tm = tf.transpose(tf.expand_dims(tf.cast(mask, tf.bool), -1), [1, 0, 2])
    steps = tf.shape(x_tm)[0]
    batch = tf.shape(x_tm)[1]
    fill = 1.0 if mutation == "initial_state_ones" else 0.0
    states = tuple(tf.fill(tf.stack([batch, size]), tf.constant(fill, x.dtype)) for size in cell.state_size)
    reverse_x = go_backwards or mutation in ("go_backwards", "reverse_x_only")
    reverse_mask = go_backwards or mutation == "go_backwards"
    input_ta = tf.TensorArray(x.dtype, size=steps).unstack(tf.reverse(x_tm, [0]) if reverse_x else x_tm)
    mask_ta = tf.TensorArray(tf.bool, size=steps, clear_after_read=mutation != "mask_shifted").unstack(
        tf.reverse(mask_tm, [0]) if reverse_mask else mask_tm)
    output_time_zero, _ = cell(x_tm[0], states)
    zero_output = tf.zeros_like(output_time_zero)
    initial_output = tf.ones_like(output_time_zero) if mutation == "initial_output_ones" else zero_output
    # Keras reserves one element per step (or one, for the last output only)
    output_size = steps if return_sequences or mutation == "last_output_list_of_t" else 1
    output_ta = tf.TensorArray(x.dtype, size=output_size + 2 if mutation == "output_list_longer" else output_size)
    start = 1 if mutation == "counter_starts_at_1" else 0
    stride = 2 if mutation == "counter_steps_by_2" else 1

    def tile(mask_t, like):  # as Keras: multiples of ones (the where broadcasts [B, 1] over [B, units])
        return tf.tile(mask_t, [1] * len(mask_t.shape) + [1] * (len(like.shape) - len(mask_t.shape)))

    def body(time, counter, bound, output_ta_t, prev_output, *loop_states):
        extra = loop_states[len(cell.state_size):]
        loop_states = loop_states[:len(cell.state_size)]
        read_at = steps - 1 - time if mutation == "x_read_reversed" else time
        current = input_ta.read(read_at)
        mask_t = mask_ta.read(tf.minimum(time + 1, steps - 1) if mutation == "mask_shifted" else time)
        if mutation == "mask_negated":
            mask_t = tf.logical_not(mask_t)
        output, new_states = cell(current, list(loop_states))
        new_states = list(new_states) if isinstance(new_states, (list, tuple)) else [new_states]
        masked_output = zero_output if mutation == "zero_output_for_mask" else prev_output
        new_output = tf.where(tile(mask_t, output), output, masked_output)
        if mutation == "output_only_masked":
            final_states = new_states
        elif mutation == "swapped_where":
            final_states = [tf.where(tile(mask_t, n), s, n) for n, s in zip(new_states, loop_states)]
        else:
            final_states = [tf.where(tile(mask_t, n), n, s) for n, s in zip(new_states, loop_states)]
        if not return_sequences or mutation == "last_output_list_of_t":
            write_at = 0
        elif mutation == "write_reversed":
            write_at = steps - 1 - time
        else:
            write_at = time
        output_ta_t = output_ta_t.write(write_at, new_output)
        extra = tuple(e + new_output for e in extra)
        bound = bound - 1 if mutation == "bound_carried" else bound
        return (time + stride, counter + 1, bound, output_ta_t, new_output) + tuple(final_states) + extra

    bound = {"stop_cond_t_minus_2": steps - 2, "cond_const_bound": _int(5),
             "bound_from_mask": tf.shape(mask)[1]}.get(mutation, steps)
    if mutation == "separate_counter_bound_t_minus_2":
        bound = steps - 2

    def cond(time, counter, loop_bound, *_):
        if mutation in ("separate_counter", "separate_counter_bound_t_minus_2"):
            return counter < loop_bound
        if mutation == "cond_less_equal":
            return time <= loop_bound - 1
        if mutation == "cond_greater":
            return loop_bound > time
        if mutation == "cond_or":
            return tf.logical_or(time < loop_bound - 2, tf.equal(time, -5))
        if mutation == "bound_carried":
            return time < loop_bound + counter  # loop_bound shrinks by one a step: still T steps
        return time < loop_bound

    maximum_iterations = {"stop_max_iterations_t_minus_2": steps - 2, "max_iterations_t": steps,
                          "max_iterations_t_plus_3": steps + 3, "max_iterations_3": _int(3)}.get(mutation)
    extra_vars = (zero_output,) if mutation == "extra_loop_var" else ()
    final = tf.while_loop(cond, body, (_int(start), _int(0), bound, output_ta, initial_output) + states + extra_vars,
                          maximum_iterations=maximum_iterations, parallel_iterations=32)
    outputs = tf.transpose(final[3].stack(), [1, 0, 2])
    last_output = final[4] + (final[-1] if extra_vars else 0.0)
    return last_output, outputs, list(final[5:5 + len(cell.state_size)])


class LoopLayer(keras.layers.Layer):
    """A masked recurrent layer that runs its cell with :func:`keras_like_loop`."""

    def __init__(self, cell, mutation="keras", return_sequences=True, return_state=False, **kwargs):
        super().__init__(**kwargs)
        self.cell, self.mutation = cell, mutation
        self.return_sequences, self.return_state = return_sequences, return_state
        self.supports_masking = True

    def build(self, input_shape):
        self.cell.build(input_shape[1:])
        self.built = True

    def call(self, inputs, mask=None):
        if self.mutation == "backend_input_length":
            last, outputs, states = _backend_rnn(self.cell, inputs, mask, self.return_sequences)
        else:
            last, outputs, states = keras_like_loop(self.cell, inputs, mask, self.mutation,
                                                    return_sequences=self.return_sequences)
        output = outputs if self.return_sequences else last
        return [output] + list(states) if self.return_state else output

    def compute_mask(self, inputs, mask=None):  # pylint: disable=unused-argument
        return None


def _backend_rnn(cell, inputs, mask, return_sequences):
    """Keras's own backend loop with ``input_length=3``: Keras 3 stops after 3 steps whatever T is
    (tf_keras sets maximum_iterations only under XLA: there it runs every step)."""
    batch = tf.shape(inputs)[0]
    states = [tf.zeros(tf.stack([batch, size]), inputs.dtype) for size in cell.state_size]

    def step(x_t, step_states):
        output, new_states = cell(x_t, list(step_states))
        return output, list(new_states)
    if FLAVOUR == "keras3":
        from keras.src.backend.tensorflow.rnn import rnn  # pylint: disable=import-outside-toplevel
    else:
        rnn = keras.backend.rnn
    last, outputs, new_states = rnn(step, inputs, states, mask=mask, input_length=3,
                                    return_all_outputs=return_sequences)
    return last, outputs, list(new_states)


# --- the model ---------------------------------------------------------------------------------

def _cell(case: AdversarialCase, mutation=None):
    return MutantCell(case.kind, case.units, case.mutation if mutation is None else mutation, case.activation,
                      case.recurrent_activation, case.use_bias, case.reset_after)


def _recurrent_layer(case: AdversarialCase):
    options = dict(return_sequences=case.return_sequences, return_state=case.return_state)
    if case.family == "loop":
        return LoopLayer(_cell(case, "none"), case.mutation, **options)
    if case.direction == "bidirectional":
        return keras.layers.Bidirectional(keras.layers.RNN(_cell(case), **options),
                                          backward_layer=keras.layers.RNN(_cell(case), go_backwards=True, **options))
    return keras.layers.RNN(_cell(case), go_backwards=case.direction == "go_backwards", **options)


def _specs(case: AdversarialCase):
    """The declared (dynamic) input specs; a ``[1, T]`` mask input is declared with batch 1."""
    if case.mask_source in ("embedding", "computed"):
        spec = [tf.TensorSpec((None, None), tf.int32, name="tokens")]
    else:
        spec = [tf.TensorSpec((None, None, FEATURES), tf.float32, name="features")]
    if case.mask_source == "explicit":
        spec.append(tf.TensorSpec((None, None), tf.bool, name="mask"))
    elif case.mask_source == "explicit [1, T]":
        spec.append(tf.TensorSpec((1, None), tf.bool, name="mask"))
    return spec


def build_model(case: AdversarialCase, weights_from=None):
    """(Keras model, the declared input signature), with random weights (or, cast to floatx,
    those of the model ``weights_from``: the float64 referee's)."""
    keras.utils.set_random_seed(case.seed)
    spec = _specs(case)
    if case.mask_source in ("embedding", "computed"):
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        inputs = [tokens]
        x = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=case.mask_source == "embedding")(tokens)
        mask = token_mask(tokens) if case.mask_source == "computed" else None
    else:
        features = keras.Input((None, FEATURES), name="features", dtype=keras.backend.floatx())
        inputs, x, mask = [features], features, None
        if case.mask_source == "masking":
            x = keras.layers.Masking(0.0)(features)
        elif case.mask_source.startswith("explicit"):
            batch = 1 if case.mask_source == "explicit [1, T]" else None
            mask = keras.Input((None,), batch_size=batch, dtype="bool", name="mask")
            inputs.append(mask)
    layer = _recurrent_layer(case)
    outputs = layer(x) if mask is None else layer(x, mask=mask)
    model = keras.Model(inputs, outputs)
    if weights_from is None:
        randomize_weights(model, seed=case.seed)
    else:
        model.set_weights([w.astype(keras.backend.floatx()) for w in weights_from.get_weights()])
    return model, tuple(spec)


def batches_for(case: AdversarialCase):
    """Two batches of ``case.rows`` x ``case.steps``: one post-padded with a full and an empty row, one
    with rows of every kind (pre-padded, holes, both ends, ...)."""
    post = fuzzgen.batch_mask(BatchCase(case.rows, case.steps, "post", case.seed))
    post[0], post[-1] = True, False
    mixed = fuzzgen.batch_mask(BatchCase(case.rows, case.steps, "mixed", case.seed + 1))
    return [post, mixed]


def batch_inputs(case: AdversarialCase, mask: np.ndarray) -> list:
    """The model's inputs carrying ``mask`` (a ``[1, T]`` mask input gets the first row's mask)."""
    rng = np.random.default_rng(case.seed + int(mask.sum()))
    if case.mask_source in ("embedding", "computed"):
        return [(rng.integers(1, VOCAB, size=mask.shape) * mask).astype(np.int32)]
    features = rng.normal(size=mask.shape + (FEATURES,)).astype(np.float32)
    if case.mask_source == "masking":
        return [np.where(mask[..., None], features, np.float32(0.0)).astype(np.float32)]
    if case.mask_source == "explicit [1, T]":
        return [features, mask[:1]]
    return [features, mask]


def effective_mask(case: AdversarialCase, mask: np.ndarray) -> np.ndarray:
    """The mask the model applies to each row (a [1, T] mask input: its row, broadcast)."""
    return np.broadcast_to(mask[:1], mask.shape) if case.mask_source == "explicit [1, T]" else mask


def signature_for(case: AdversarialCase, spec, inputs):
    """(spec, batches) of ``case.signature`` for one batch; the [1, T] mask input keeps batch 1."""
    form_spec, batches = signatures.signature(spec, inputs, case.signature)
    if case.mask_source == "explicit [1, T]":
        steps = form_spec[0].shape[1]
        form_spec = (form_spec[0], tf.TensorSpec((1, steps), tf.bool, name="mask"))
        batches = [[b[0], inputs[1]] for b in batches]
    return form_spec, batches


# --- drawing cases -----------------------------------------------------------------------------

def draw_case(seed: int) -> AdversarialCase:
    """One random case, a pure function of ``seed`` (CI's sample and tests/fuzz.py draw the same)."""
    rng = np.random.default_rng(seed)
    pick = lambda options: options[int(rng.integers(len(options)))]  # noqa: E731
    family = pick(("cell", "loop"))
    kind = pick(tuple(GATES))
    mutation = pick(CELL_MUTATIONS[kind] if family == "cell" else LOOP_MUTATIONS)
    # half the cases dynamic: static signatures mostly stay Loops until the reader reads Gemm (issue 12)
    signature = "dynamic" if rng.random() < 0.5 else pick(signatures.STATIC_FORMS)
    return AdversarialCase(
        family=family, kind=kind, mutation=mutation,
        units=int(rng.integers(1, 5)),
        activation=pick(ACTIVATIONS[:4]),
        recurrent_activation=pick(ACTIVATIONS),
        use_bias=bool(rng.random() < 0.5),
        reset_after=bool(rng.random() < 0.5),
        direction=pick(("forward", "go_backwards", "bidirectional")) if family == "cell" else "forward",
        return_sequences=bool(rng.random() < 0.5),
        return_state=bool(rng.random() < 0.5),
        mask_source=pick(MASK_SOURCES),
        signature=signature,
        mode=pick(MODES),
        rows=int(rng.integers(3, 7)),
        steps=int(rng.integers(4, 10)),
        seed=seed % 2**16)


def draw_cases(count: int, seed: int = 0, route: str = fuzzgen.CONVERSION) -> list:
    """``count`` cases of run ``seed``: case i is :func:`draw_case` of ``seed * 1_000_003 + i``, each
    reaching the rewriter by ``route`` (fuzzgen.CONVERSION, or fuzzgen.ONNX_FILE: stock tf2onnx's file
    rewritten by ``rewrite_onnx``)."""
    return [dataclasses.replace(draw_case(seed * 1_000_003 + i), route=route) for i in range(count)]


# --- the verdict -------------------------------------------------------------------------------

@dataclasses.dataclass
class Verdict:
    """What one adversarial case did."""

    verdict: str = ""            # "refused", "exact" or "failure"
    rewritten: int = 0           # masked recurrent layers rewritten
    reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # refusals
    unrecognised: int = 0        # Loops the rewriter did not take for masked recurrent loops (no report entry)
    comparisons: int = 0
    non_finite: int = 0          # batches where Keras itself overflowed: not compared
    ill_conditioned: int = 0     # passed by the float64 referee (beyond 1e-5, as close as Keras itself)
    stock_differs: int = 0       # an ONNX file's rewrite equal to the file where the file differs from Keras
    guard_fired: int = 0
    worst: float = 0.0
    problems: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict in ("refused", "exact")


def check_case(case: AdversarialCase) -> Verdict:
    """Convert ``case`` with its signature and mode; refused, or exact on every batch."""
    keras.backend.clear_session()
    verdict = Verdict()
    model, spec = build_model(case)
    masks = batches_for(case)
    feeds = [batch_inputs(case, mask) for mask in masks]
    form_spec, _ = signature_for(case, spec, feeds[0])
    onnx_model, report, stock = _converted(model, form_spec, case)
    verdict.rewritten = len(report.rewritten)
    for layer in report.left_as_loop:
        verdict.reasons[layer.detail] += 1
        if not layer.detail:
            verdict.problems.append(f"layer {layer.layer!r} left as a Loop without a reason")
    loops = op_counts(onnx_model)["Loop"]
    verdict.unrecognised = max(0, loops - len(report.left_as_loop))
    if loops + 2 * verdict.rewritten < case.recurrent_layers:
        verdict.problems.append(f"{loops} Loop(s) and {verdict.rewritten} rewritten layer(s) for "
                                f"{case.recurrent_layers} recurrent layer(s)")
    if not verdict.rewritten:
        verdict.verdict = "failure" if verdict.problems else "refused"
        return verdict
    sess, stock_sess = session(onnx_model), None if stock is None else _loaded(stock)
    referee = fuzzgen.Float64Referee(case, model, build=build_model)
    for mask, inputs in zip(masks, feeds):
        _, batches = signature_for(case, spec, inputs)
        applied = effective_mask(case, mask)
        row_masks = [applied] if len(batches) == 1 else [applied[row:row + 1] for row in range(len(batches))]
        for batch, batch_mask in zip(batches, row_masks):
            _compare(verdict, case, referee, (sess, stock_sess), form_spec, batch, batch_mask)
    verdict.verdict = "failure" if verdict.problems else "exact"
    return verdict


def _loaded(stock):
    """onnxruntime's session of stock tf2onnx's file, or None where it cannot load it (tf2onnx writes some
    mutants' loops with mismatched integer types): Keras alone is the reference then."""
    try:
        return session(stock)
    except Exception:  # pylint: disable=broad-except  (onnxruntime's own exception types)
        return None


def _converted(model, spec, case: AdversarialCase) -> tuple:
    """(ONNX model, report, stock tf2onnx's model or None) of ``case`` in its mode, through its route."""
    if case.route == fuzzgen.ONNX_FILE:
        stock = convert(model, spec, rewriter=None)
        onnx_model, report = mlr.rewrite_onnx(stock, mask_mode=case.mode)
        return onnx_model, report, stock
    return convert(model, spec, rewriter=mlr.make_rewriter(case.mode)), mlr.last_report(), None


def _compare(verdict: Verdict, case, referee, sessions, spec, batch, mask):
    """One batch: Keras's numbers, or (``"post"``, a mask that is not post-padded) the guard's error.

    Within 1e-5 (relative above 1), or, for a model that amplifies float32 rounding by itself (a
    linear gate over several steps), no more than 10x as far from Keras in float64 as Keras in
    float32 is (:class:`fuzzgen.Float64Referee`, as the differential fuzzer does). ``sessions``: the
    model's, and stock tf2onnx's for an ONNX file: where the file itself differs from Keras (a loop
    stock tf2onnx converts wrongly, such as one writing its outputs backwards), the rewrite must
    equal the file."""
    expected = keras_outputs(referee.model32, batch)
    guarded = case.mode == "post" and not fuzzgen.is_post_padded(mask)
    sess, stock_sess = sessions
    feeds = {s.name: np.asarray(x) for s, x in zip(spec, batch)}
    try:
        got = sess.run(None, feeds)
    except Exception as error:  # pylint: disable=broad-except  (onnxruntime's own exception types)
        if guarded and mlr.GUARD_MESSAGE in str(error):
            verdict.guard_fired += 1
        else:
            verdict.problems.append(f"failed on a{' non-' if guarded else ' '}post-padded batch: {error}")
        return
    if guarded:
        verdict.problems.append("\"post\" returned numbers for a batch that is not post-padded")
        return
    verdict.comparisons += 1
    if not fuzzgen.all_finite(expected):
        verdict.non_finite += 1
        return
    diff = fuzzgen.scaled_difference(expected, got)
    verdict.worst = max(verdict.worst, diff)
    if diff <= ATOL:
        return
    ok, keras_error, onnx_error = referee.accepts(batch, expected, got)
    stock_out = None if ok or stock_sess is None else stock_sess.run(None, feeds)
    if ok:
        verdict.ill_conditioned += 1
    elif stock_out is not None and fuzzgen.scaled_difference(expected, stock_out) > ATOL and \
            fuzzgen.scaled_difference(stock_out, got) <= ATOL:
        verdict.stock_differs += 1
    else:
        verdict.problems.append(f"max |keras - onnx| = {diff:.3g} on a batch of {mask.shape[0]} row(s) (vs Keras "
                                f"in float64: {onnx_error:.3g}, Keras in float32 itself: {keras_error:.3g})")


def describe(case: AdversarialCase, verdict: Verdict) -> str:
    lines = [f"case = {case!r}"] + ([f"case = dataclasses.replace(case, route={case.route!r})"]
                                    if case.route != fuzzgen.CONVERSION else [])
    lines += [f"  verdict: {verdict.verdict}; rewritten {verdict.rewritten}"]
    lines += [f"  {problem}" for problem in verdict.problems]
    lines += [f"  left as Loop: {reason} (x{count})" for reason, count in verdict.reasons.items()]
    return "\n".join(lines)
