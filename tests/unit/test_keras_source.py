# SPDX-License-Identifier: Apache-2.0
"""How :mod:`masked_lstm_rewriter.keras_source` reads a subclassed model's ``call``: whether its input
tensors go in as one argument each (``call(tokens, states)``) or as one list, and what the inputs
are named. Stand-in models: only the type name, ``name`` and ``call`` are read. No Keras."""

from __future__ import annotations

import pytest
import tensorflow as tf

from masked_lstm_rewriter.keras_source import (SourceError, argument_groups, check_given_signature, named_after_arguments,
                                               spreads_inputs)


class Step:
    """A subclassed model as keras_source sees it."""

    name = "step"

    def __init__(self, call):
        self.call = call


class Functional(Step):
    """A functional model: Keras packs its inputs itself."""


@pytest.mark.parametrize("call, count, spreads", [
    (lambda tokens, states: None, 2, True),
    (lambda tokens, states=None, return_state=False: None, 2, True),
    (lambda *args: None, 3, True),
    (lambda inputs: None, 2, False),
    (lambda inputs, training=None, mask=None: None, 2, False),
    (lambda tokens, states: None, 1, False),
    (lambda x, mask: None, 2, True),  # a required mask is an input tensor; with a default, Keras's own option
    (lambda x, mask=None: None, 2, False),
])
def test_several_tensors_are_as_many_arguments_where_call_takes_them(call, count, spreads):
    assert spreads_inputs(Step(call), count) is spreads


def test_a_functional_model_takes_its_inputs_its_own_way():
    assert spreads_inputs(Functional(lambda inputs, training=None, mask=None: None), 2) is False


def test_more_tensors_than_call_takes_fail_in_one_line_naming_its_arguments():
    with pytest.raises(SourceError, match=r"^model 'step' is called as call\(tokens, states\): 3 input tensors do "
                                          r"not fit it; give input_signature= with one spec"):
        spreads_inputs(Step(lambda tokens, states: None), 3)


def test_unnamed_specs_take_the_names_of_call_arguments():
    specs = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, 4], tf.float32, name="h")]
    named = named_after_arguments(Step(lambda tokens, states, training=None: None), specs)
    assert [spec.name for spec in named] == ["tokens", "h"]
    assert [spec.shape.as_list() for spec in named] == [[None, None], [None, 4]]


def test_a_nested_list_of_unnamed_specs_is_named_after_its_argument_and_position():
    state = tf.TensorSpec([None, 4], tf.float32)
    specs = [tf.TensorSpec([None, None], tf.int32), [state, tf.TensorSpec([None, 4], tf.float32, name="c")]]
    named = named_after_arguments(Step(lambda tokens, states: None), specs)
    assert [spec.name for spec in tf.nest.flatten(named)] == ["tokens", "states_0", "c"]
    assert isinstance(named[1], list) and len(named[1]) == 2


@pytest.mark.parametrize("call, names, groups", [
    (lambda tokens, states: None, ["tokens", "states_0", "states_1"], [0, [1, 2]]),
    (lambda tokens, states: None, ["tokens", "h", "c"], [0, [1, 2]]),
    (lambda tokens, states: None, ["h", "c", "tokens"], [2, [0, 1]]),
    (lambda tokens, states=None, return_state=False: None, ["tokens", "h", "c"], [0, [1, 2]]),
    (lambda states, tokens: None, ["h", "c", "tokens"], [[0, 1], 2]),
    (lambda tokens, states: None, ["tokens", "states"], None),      # one tensor each: spread as they are
    (lambda tokens, states, extra: None, ["tokens", "h", "c"], None),  # a required argument left without
    (lambda tokens, states=None: None, ["a", "b", "c"], None),  # no input named after an argument
], ids=["named by position", "named by the user", "reordered", "defaults after", "list first", "flat",
        "required left", "names say nothing"])
def test_argument_groups_give_the_one_argument_no_input_is_named_after_the_rest(call, names, groups):
    assert argument_groups(Step(call), names) == groups


def test_a_functional_model_has_no_argument_groups():
    assert argument_groups(Functional(lambda inputs, training=None, mask=None: None), ["a", "b"]) is None


def test_a_signature_short_of_the_required_arguments_fails_in_one_line():
    with pytest.raises(SourceError, match=r"^input_signature= gives 1 spec\(s\), but model 'step' is called as "
                                          r"call\(tokens, states\): give one spec per argument$"):
        check_given_signature(Step(lambda tokens, states, training=None: None), [tf.TensorSpec([None, None])])
    check_given_signature(Step(lambda tokens, states=None: None), [tf.TensorSpec([None, None])])


def test_a_required_keyword_only_argument_fails_in_one_line():
    with pytest.raises(SourceError, match=r"^model 'step' requires the keyword-only argument\(s\) states in its call"):
        check_given_signature(Step(lambda tokens, *, states: None), [tf.TensorSpec([None, None])] * 2)
