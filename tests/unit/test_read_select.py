# SPDX-License-Identifier: Apache-2.0
"""The select reader (read/select.py): ``Where(mask, new, old)`` in each spelling a Loop body gives it,
on small ONNX Loops built by hand. A read is checked twice: the (new, old) it names, and, on
onnxruntime, that the body's value is ``where(mask, new, old)`` at every step (so that a reading
with new and old swapped cannot pass). Selects over anything but the step's mask read as None."""

import numpy as np
import pytest

from masked_lstm_rewriter.read.select import Select, read_select
from _onnx_graphs import BOOL, FLOAT, Var, const, info, load, loop_model, node, run

STEPS, BATCH, UNITS = 4, 3, 2


def select_loop(select_nodes, mask_width=1, opset=15, body_initializers=()):
    """A Loop whose body reads x_t and the step's mask m_t (and another mask's o_t), computes
    ``new = tanh(x_t + h)`` and returns ``sel`` (what ``select_nodes`` compute) as h's next value."""
    body = [node("Gather", ["x", "iter"], ["x_t"], axis=0),
            node("Gather", ["mask", "iter"], ["m_t"], axis=0),
            node("Gather", ["other", "iter"], ["o_t"], axis=0),
            node("Add", ["x_t", "h"], ["pre"]), node("Tanh", ["pre"], ["new"])]
    body += list(select_nodes) + [node("Identity", ["sel"], ["h_next"])]
    return loop_model(
        body, [Var("h", FLOAT, (BATCH, UNITS), "h0", "h_next")], trip="T", start="",
        probes=[("sel", FLOAT), ("new", FLOAT), ("h", FLOAT)], body_initializers=body_initializers,
        outer_nodes=[node("Shape", ["x"], ["x_shape"]), node("Gather", ["x_shape", "zero"], ["T"], axis=0)],
        inputs=[info("x", FLOAT, [STEPS, BATCH, UNITS]), info("mask", BOOL, [STEPS, BATCH, mask_width]),
                info("other", BOOL, [STEPS, BATCH, 1]), info("h0", FLOAT, [BATCH, UNITS])],
        initializers=[const("zero", 0)], opset=opset)


def read(select_nodes, **kwargs):
    model = select_loop(select_nodes, **kwargs)
    _, _, body = load(model)
    return model, read_select(body, "sel", "m_t")


def assert_computes(model, select: Select, mask_width=1):
    """The body's ``sel`` is ``where(m_t, new, old)`` at every step, the names as read."""
    rng = np.random.default_rng(0)
    rows = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 0, 1]], bool)  # [T, B]: each row both ways
    feeds = {"x": rng.normal(size=(STEPS, BATCH, UNITS)).astype(np.float32),
             "mask": np.repeat(rows[:, :, None], mask_width, axis=2),
             "other": ~rows[:, :, None], "h0": rng.normal(size=(BATCH, UNITS)).astype(np.float32)}
    values = run(model, feeds)
    scanned = {name: values[f"{name}__scanned"] for name in ("sel", "new", "h")}
    expected = np.where(rows[:, :, None], scanned[select.new], scanned[select.old])
    np.testing.assert_array_equal(scanned["sel"], expected)


def arithmetic(valid_first: bool, mask_first_new: bool, mask_first_old: bool):
    """tf2onnx's select, ``Cast(m) * new + Cast(Not(m)) * old``, in one order of its operands."""
    def product(cast, value, name, mask_first):
        return node("Mul", [cast, value] if mask_first else [value, cast], [name])
    return [node("Cast", ["m_t"], ["m_f"], to=FLOAT), node("Not", ["m_t"], ["not_m"]),
            node("Cast", ["not_m"], ["not_m_f"], to=FLOAT),
            product("m_f", "new", "kept_new", mask_first_new), product("not_m_f", "h", "kept_old", mask_first_old),
            node("Add", ["kept_new", "kept_old"] if valid_first else ["kept_old", "kept_new"], ["sel"])]


def reduced(op="ReduceMin", axes=(1,), keepdims=1, negated=True, opset=15):
    """jax2onnx's condition over a mask broadcast to the features: ``Cast(ReduceMin(Cast(Not(m)),
    axes=[1], keepdims=1))`` (true where the row's step is padded), then ``Where(c, old, new)``."""
    source = "not_m" if negated else "m_t"
    reduce = (node(op, ["as_float", "axes"], ["r"], keepdims=keepdims) if opset >= 18
              else node(op, ["as_float"], ["r"], axes=list(axes), keepdims=keepdims))
    return [node("Not", ["m_t"], ["not_m"]), node("Cast", [source], ["as_float"], to=FLOAT), reduce,
            node("Cast", ["r"], ["c"], to=BOOL),
            node("Where", ["c", "h", "new"] if negated else ["c", "new", "h"], ["sel"])]


READS = {
    "Where(m, new, old)": [node("Where", ["m_t", "new", "h"], ["sel"])],
    "through Identity and Cast": [node("Identity", ["m_t"], ["m_i"]), node("Cast", ["m_i"], ["m_c"], to=BOOL),
                                  node("Where", ["m_c", "new", "h"], ["sel"])],
    "Where(Not(m), old, new)": [node("Not", ["m_t"], ["not_m"]), node("Where", ["not_m", "h", "new"], ["sel"])],
    "Where(Not(Not(m)), new, old)": [node("Not", ["m_t"], ["not_m"]), node("Not", ["not_m"], ["m_again"]),
                                     node("Where", ["m_again", "new", "h"], ["sel"])],
}


@pytest.mark.parametrize("case", sorted(READS))
def test_where_over_the_step_mask_reads(case):
    model, select = read(READS[case])
    assert select == Select("m_t", "new", "h")
    assert_computes(model, select)


@pytest.mark.parametrize("op, axes", [("ReduceMin", (1,)), ("ReduceMax", (-1,))])
def test_jax2onnx_condition_reduced_per_row_reads(op, axes):
    model, select = read(reduced(op, axes), mask_width=UNITS)
    assert select == Select("m_t", "new", "h")
    assert_computes(model, select, mask_width=UNITS)


def test_reduced_condition_with_its_axes_as_an_input_opset_18():
    nodes = reduced(opset=18)
    model, select = read(nodes, mask_width=UNITS, opset=18, body_initializers=[const("axes", [1])])
    assert select == Select("m_t", "new", "h")
    assert_computes(model, select, mask_width=UNITS)


def test_reduced_condition_not_negated_reads_the_other_way_round():
    model, select = read(reduced(negated=False), mask_width=UNITS)
    assert select == Select("m_t", "new", "h")
    assert_computes(model, select, mask_width=UNITS)


@pytest.mark.parametrize("valid_first", [True, False], ids=["valid+padded", "padded+valid"])
@pytest.mark.parametrize("mask_first_new", [True, False], ids=["m*new", "new*m"])
@pytest.mark.parametrize("mask_first_old", [True, False], ids=["notm*old", "old*notm"])
def test_tf2onnx_arithmetic_select_reads_in_any_operand_order(valid_first, mask_first_new, mask_first_old):
    model, select = read(arithmetic(valid_first, mask_first_new, mask_first_old))
    assert select == Select("m_t", "new", "h")
    assert_computes(model, select)


# --- what must not read ------------------------------------------------------------------------

NOT_READ = {
    "a Where over another condition": [node("Greater", ["h", "zero_f"], ["positive"]),
                                       node("Where", ["positive", "new", "h"], ["sel"])],
    "a mask that is not the step's": [node("Where", ["o_t", "new", "h"], ["sel"])],
    "the step's mask and another": [node("And", ["m_t", "o_t"], ["both"]),
                                    node("Where", ["both", "new", "h"], ["sel"])],
    "no select at all": [node("Mul", ["new", "h"], ["sel"])],
    "a difference, not a sum": [node("Cast", ["m_t"], ["m_f"], to=FLOAT), node("Not", ["m_t"], ["not_m"]),
                                node("Cast", ["not_m"], ["not_m_f"], to=FLOAT),
                                node("Mul", ["m_f", "new"], ["kept_new"]), node("Mul", ["not_m_f", "h"], ["kept_old"]),
                                node("Sub", ["kept_new", "kept_old"], ["sel"])],
    "both terms kept where valid": [node("Cast", ["m_t"], ["m_f"], to=FLOAT), node("Mul", ["m_f", "new"], ["a"]),
                                    node("Mul", ["m_f", "h"], ["b"]), node("Add", ["a", "b"], ["sel"])],
    "a term over another mask": [node("Cast", ["m_t"], ["m_f"], to=FLOAT), node("Not", ["o_t"], ["not_o"]),
                                 node("Cast", ["not_o"], ["not_o_f"], to=FLOAT), node("Mul", ["m_f", "new"], ["a"]),
                                 node("Mul", ["not_o_f", "h"], ["b"]), node("Add", ["a", "b"], ["sel"])],
    "a product of the value with itself": [node("Mul", ["new", "new"], ["a"]), node("Mul", ["h", "h"], ["b"]),
                                           node("Add", ["a", "b"], ["sel"])],
}


@pytest.mark.parametrize("case", sorted(NOT_READ))
def test_what_is_not_a_select_over_the_step_mask_reads_as_none(case):
    _, select = read(NOT_READ[case], body_initializers=[const("zero_f", 0.0)])
    assert select is None


@pytest.mark.parametrize("op, axes, keepdims", [("ReduceMin", (0,), 1), ("ReduceMin", (1,), 0)],
                         ids=["over the batch", "without keepdims"])
def test_a_reduction_other_than_per_row_is_not_read(op, axes, keepdims):
    nodes = reduced(op, axes, keepdims)
    if keepdims == 0:  # [B] condition: made [B, 1] again so that the model stays valid
        nodes[-2:] = [node("Cast", ["r"], ["c_flat"], to=BOOL), node("Unsqueeze", ["c_flat", "last"], ["c"]),
                      nodes[-1]]
    _, select = read(nodes, mask_width=UNITS, body_initializers=[const("last", [1])])
    assert select is None


def test_a_tensor_nothing_in_the_body_computes_is_no_select():
    _, _, body = load(select_loop(READS["Where(m, new, old)"]))
    assert read_select(body, "h", "m_t") is None
    assert read_select(body, "x", "m_t") is None  # a tensor of the graph around the loop


def test_the_mask_asked_for_decides():
    """The same Where is a select over o_t when o_t is the step's mask, and none over m_t."""
    _, _, body = load(select_loop([node("Where", ["o_t", "new", "h"], ["sel"])]))
    assert read_select(body, "sel", "o_t") == Select("o_t", "new", "h")
    assert read_select(body, "sel", "m_t") is None
