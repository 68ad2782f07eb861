# SPDX-License-Identifier: Apache-2.0
"""graph.py's questions asked of ONNX graphs, on small graphs built by hand and loaded as the package
loads a file: a Loop body's next values (its inputs are [iter, cond, variables...], its outputs
[cond, variables..., scans...]), constants of the graph around a body, shape elements through
ONNX's Cast, Slice, Gather, Concat and Squeeze, zeros spelled Expand or ConstantOfShape, a
Transpose's permutation, and which input an output axis comes from."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from tf2onnx.graph import Graph

from masked_lstm_rewriter.graph import (axis_source, constant_element, filled_array, is_onnx_loop_body, is_zeros,
                                        next_value, outer_const, passes_through, shape_dim_of, shape_element,
                                        transpose_perm)
from _onnx_graphs import FLOAT, INT64, Var, const, info, load, loop_model, make_model, node

# --- a Loop body's next values ------------------------------------------------------------------


def counting_loop(extra=(), body_initializers=()):
    """Loop variables: a counter t (index 2), an invariant W (3, returned through two Identities), a
    state h (4); the body also reads the outer initializer V and the outer tensor x_shape by name."""
    body = [node("Add", ["t", "one_b"], ["t_next"]), node("Identity", ["W"], ["W_1"]),
            node("Identity", ["W_1"], ["W_2"]), node("Add", ["h", "V"], ["h_sum"]),
            node("Neg", ["h_sum"], ["h_next"]), node("Cast", ["x_shape"], ["shape_f"], to=FLOAT)] + list(extra)
    return loop_model(body, [Var("t", INT64, (), "zero", "t_next"), Var("W", FLOAT, (3, 2), "W0", "W_2"),
                             Var("h", FLOAT, (2,), "h0", "h_next")],
                      trip="T", probes=[("shape_f", FLOAT, 1)], body_initializers=[const("one_b", 1)] +
                      list(body_initializers),
                      outer_nodes=[node("Shape", ["x"], ["x_shape"]), node("Gather", ["x_shape", "zero"], ["T"]),
                                   node("Identity", ["V"], ["V_read"])],
                      inputs=[info("x", FLOAT, [5, 2]), info("h0", FLOAT, [2])],
                      initializers=[const("zero", 0), const("W0", np.ones((3, 2))), const("V", [1.0, 2.0])])


def test_a_loop_body_is_told_from_the_graph_around_it():
    graph, _, body = load(counting_loop())
    assert is_onnx_loop_body(body) and not is_onnx_loop_body(graph)


def test_next_values_of_a_loop_body_skip_the_iteration_number():
    _, _, body = load(counting_loop())
    assert body.input_names[:2] == ["iter", "cond"]
    assert next_value(body, 0) is None                       # the iteration number has none
    assert next_value(body, 1) == body.outputs[0]            # the condition
    assert next_value(body, 2) == "t_next"
    assert next_value(body, 4) == "h_next"


def test_passes_through_an_onnx_loop_body():
    _, _, body = load(counting_loop())
    assert passes_through(body, 3)                           # W, through Identities
    assert not passes_through(body, 2) and not passes_through(body, 4)
    assert not passes_through(body, 0)


def test_next_values_of_a_while_body_are_its_outputs_in_order():
    """A TensorFlow While body (tf2onnx's graph, no Loop around it): variable i's next value is output i."""
    graph = Graph([], opset=15)
    for name in ("a", "b"):
        graph.add_graph_input(name, TensorProto.FLOAT, [2])
    kept, changed = graph.make_node("Identity", ["a"]).output[0], graph.make_node("Neg", ["b"]).output[0]
    for output in (kept, changed):
        graph.add_graph_output(output, TensorProto.FLOAT, [2])
    assert not is_onnx_loop_body(graph)
    assert next_value(graph, 0) == kept and next_value(graph, 1) == changed
    assert passes_through(graph, 0) and not passes_through(graph, 1)


# --- constants of the graph around a body ---------------------------------------------------------


def test_outer_const_finds_a_constant_of_the_graph_around():
    _, _, body = load(counting_loop())
    found = outer_const(body, "V")
    assert found is not None and found.is_const()
    np.testing.assert_array_equal(found.get_tensor_value(as_list=False), [1.0, 2.0])
    assert outer_const(body, "V_read") is found              # through an Identity of the graph around


def test_outer_const_is_none_for_what_is_no_outer_constant():
    _, _, body = load(counting_loop())
    assert outer_const(body, "x_shape") is None              # computed around the loop
    assert outer_const(body, "h_next") is None               # computed in the body
    assert outer_const(body, "one_b") is None                # the body's own constant
    assert outer_const(body, "W") is None                    # a loop input


def test_outer_const_through_two_loops():
    """A Loop inside the body reads the main graph's V and the outer body's constant by name."""
    inner_body = helper.make_graph(
        [node("Add", ["V", "two_b"], ["sum"]), node("Add", ["g", "sum"], ["g_next"])], "inner",
        [info("i", INT64, []), info("c", TensorProto.BOOL, []), info("g", FLOAT, [2])],
        [info("c", TensorProto.BOOL, []), info("g_next", FLOAT, [2])])
    inner = node("Loop", ["one_b", "", "h"], ["g_final"], body=inner_body)
    graph, _, body = load(counting_loop([inner], [const("two_b", [2.0, 2.0])]))
    inner_loop = next(n for n in body.get_nodes() if n.type == "Loop")
    nested = inner_loop.get_body_graphs()["body"]
    assert outer_const(nested, "V").get_tensor_value(as_list=True) == [1.0, 2.0]
    assert outer_const(nested, "two_b").get_tensor_value(as_list=True) == [2.0, 2.0]
    assert outer_const(nested, "h") is None                  # a loop variable of the body around


# --- shape elements ---------------------------------------------------------------------------------

SHAPES = [
    node("Shape", ["x"], ["sx"]), node("Shape", ["y"], ["sy"]), node("Shape", ["x"], ["sx_from_1"], start=1),
    node("Cast", ["sx"], ["sx_f"], to=FLOAT), node("Cast", ["sx_f"], ["sx_cast"], to=INT64),
    node("Gather", ["sx", "idx_01"], ["sx_01"], axis=0), node("Gather", ["sx", "idx_20"], ["sx_20"], axis=0),
    node("Concat", ["sx_01", "sy"], ["cat"], axis=0), node("Concat", ["sx_01", "minus_one"], ["cat_const"], axis=0),
    node("Concat", ["dims_in", "sx"], ["cat_unknown"], axis=0),
    # scalars
    node("Gather", ["sx", "zero"], ["dim_gather"], axis=0),
    node("Gather", ["sx", "one_1"], ["g1"], axis=0), node("Squeeze", ["g1", "zero_1"], ["dim_squeezed_gather"]),
    node("Slice", ["sx", "one_1", "two_1", "zero_1"], ["s1"]), node("Squeeze", ["s1", "zero_1"], ["dim_slice"]),
    node("Slice", ["sx", "one_1", "two_1"], ["s1_no_axes"]), node("Squeeze", ["s1_no_axes"], ["dim_slice_no_axes"]),
    node("Slice", ["sx_cast", "two_1", "three_1", "zero_1", "one_1"], ["s2c"]), node("Squeeze", ["s2c"], ["dim_cast"]),
    node("Gather", ["cat", "three"], ["dim_concat"], axis=0),
    node("Gather", ["cat", "minus_one_0"], ["dim_last"], axis=0),                  # shape(y)[-1], i.e. (y, 1)
    node("Slice", ["sx", "zero_1", "two_1", "zero_1"], ["s01"]), node("Squeeze", ["s01"], ["dim_two_elements"]),
    node("Slice", ["sx", "zero_1", "one_1", "zero_1", "two_1"], ["s0_step2"]),
    node("Squeeze", ["s0_step2"], ["dim_step_two"]),
    node("Gather", ["sx", "index_in"], ["dim_unknown_index"], axis=0),
    node("Slice", ["dims_const", "zero_1", "one_1", "zero_1"], ["c0"]), node("Squeeze", ["c0"], ["dim_of_const"]),
    # Keras 3's RepeatVector: [shape(x)[0], 4, shape(x)[2:]], through a Cast
    node("Concat", ["s1", "four_1", "sx_from_1"], ["cat_four"], axis=0),
    node("Cast", ["cat_four"], ["cat_four_cast"], to=INT64),
]
SHAPE_CONSTS = [const(name, value) for name, value in (
    ("idx_01", [0, 1]), ("idx_20", [2, 0]), ("minus_one", [-1]), ("minus_one_0", -1), ("zero", 0), ("three", 3),
    ("zero_1", [0]), ("one_1", [1]), ("two_1", [2]), ("three_1", [3]), ("four_1", [4]), ("dims_const", [4, 5]))]


@pytest.fixture(scope="module")
def shapes():
    model = make_model(SHAPES, [info("x", FLOAT, ["T", 2, 3]), info("y", FLOAT, [4, 5]),
                                info("dims_in", INT64, ["n"]), info("index_in", INT64, [])],
                       [], SHAPE_CONSTS, exposed=[(n.output[0], INT64, []) for n in SHAPES
                                                  if n.output[0].startswith("dim_")])
    return load(model)[0]


@pytest.mark.parametrize("tensor, index, expected", [
    ("sx", 0, ("x", 0)), ("sx", 2, ("x", 2)), ("sx_cast", 1, ("x", 1)),
    ("sx_01", 1, ("x", 1)), ("sx_20", 0, ("x", 2)), ("sx_20", 1, ("x", 0)), ("sx_20", 2, None),
    ("cat", 1, ("x", 1)), ("cat", 2, ("y", 0)), ("cat", 3, ("y", 1)), ("cat", 4, None),
    ("cat_const", 0, ("x", 0)), ("cat_const", 2, None),   # a constant part is no dimension
    ("sx_from_1", 0, None),                                # Shape(x, start=1)
    ("cat_unknown", 3, None),                              # after a part of unknown length (not a shape)
])
def test_shape_element(shapes, tensor, index, expected):
    assert shape_element(shapes, tensor, index) == expected


@pytest.mark.parametrize("tensor, index, expected", [
    ("dims_const", 1, 5), ("cat_const", 2, -1), ("cat_const", 0, None),   # a dimension is no constant
    ("cat_four_cast", 1, 4), ("cat_four_cast", 0, None), ("cat_four_cast", 2, None), ("cat_four_cast", 3, None),
    ("cat_unknown", 3, None),
])
def test_constant_element(shapes, tensor, index, expected):
    assert constant_element(shapes, tensor, index) == expected


@pytest.mark.parametrize("scalar, expected", [
    ("dim_gather", ("x", 0)), ("dim_squeezed_gather", ("x", 1)), ("dim_slice", ("x", 1)),
    ("dim_slice_no_axes", ("x", 1)), ("dim_cast", ("x", 2)), ("dim_concat", ("y", 1)),
    ("dim_two_elements", None), ("dim_step_two", None), ("dim_unknown_index", None), ("dim_of_const", None),
])
def test_shape_dim_of(shapes, scalar, expected):
    assert shape_dim_of(shapes, scalar) == expected


def test_a_negative_index_into_a_concatenation_of_shapes(shapes):
    assert shape_dim_of(shapes, "dim_last") in (("y", 1), ("y", -1), None)


# --- zeros and permutations ---------------------------------------------------------------------------

ZEROS = [
    node("Expand", ["zero_f", "shape"], ["expand_zero"]), node("Expand", ["one_f", "shape"], ["expand_one"]),
    node("Identity", ["zero_f"], ["zero_read"]), node("Expand", ["zero_read", "shape"], ["expand_zero_read"]),
    node("Sub", ["a", "a"], ["a_minus_a"]), node("Expand", ["a_minus_a", "shape"], ["expand_computed"]),
    node("ConstantOfShape", ["shape"], ["cos_default"]),
    node("ConstantOfShape", ["shape"], ["cos_zero"], value=helper.make_tensor("v", FLOAT, [1], [0.0])),
    node("ConstantOfShape", ["shape"], ["cos_one"], value=helper.make_tensor("v", FLOAT, [1], [1.0])),
    node("Transpose", ["t3"], ["t_perm"], perm=[1, 0, 2]), node("Transpose", ["t3"], ["t_default"]),
]


@pytest.fixture(scope="module")
def zeros():
    inits = [const("zero_f", 0.0), const("one_f", 1.0), const("shape", [2, 3]), const("zeros_23", np.zeros((2, 3))),
             const("mixed_23", [[0.0, 0, 0], [0, 1, 0]])]
    exposed = [(n.output[0], FLOAT, [None] * 3 if n.op_type == "Transpose" else [2, 3])
               for n in ZEROS if n.op_type in ("Expand", "ConstantOfShape", "Transpose")]
    model = make_model(ZEROS, [info("a", FLOAT, []), info("t3", FLOAT, [2, 3, 4])], [], inits, exposed=exposed)
    return load(model)[0]


@pytest.mark.parametrize("tensor, expected", [
    ("expand_zero", True), ("expand_zero_read", True), ("cos_default", True), ("cos_zero", True), ("zeros_23", True),
    ("expand_one", False), ("expand_computed", False), ("cos_one", False), ("mixed_23", False), ("a", False),
    ("a_minus_a", False),
])
def test_is_zeros(zeros, tensor, expected):
    assert bool(is_zeros(zeros, tensor)) is expected  # (a numpy bool for some)


def test_the_array_a_constant_of_shape_makes(zeros):
    def filled(tensor):
        return filled_array(zeros, zeros.get_node_by_output(tensor))
    assert filled("cos_default").dtype == np.float32 and np.array_equal(filled("cos_default"), np.zeros((2, 3)))
    assert np.array_equal(filled("cos_one"), np.ones((2, 3)))
    assert filled("expand_zero") is None  # only a ConstantOfShape


def test_transpose_perm_of_the_onnx_attribute(zeros):
    assert transpose_perm(zeros, zeros.get_node_by_output("t_perm")) == [1, 0, 2]
    assert transpose_perm(zeros, zeros.get_node_by_output("t_default")) is None  # reversal: not said


def test_transpose_perm_of_tensorflow_s_second_input():
    graph = Graph([], opset=15)
    graph.add_graph_input("x", TensorProto.FLOAT, [2, 3, 4])
    graph.add_graph_input("p", TensorProto.INT32, [3])
    perm = graph.make_const("perm", np.array([0, 2, 1], np.int32)).output[0]
    assert transpose_perm(graph, graph.make_node("Transpose", ["x", perm])) == [0, 2, 1]
    assert transpose_perm(graph, graph.make_node("Transpose", ["x", "p"])) is None  # not a constant


# --- which input an output axis comes from -------------------------------------------------------


@pytest.fixture(name="axes", scope="module")
def axes_graph():
    """x [B, T, F] through the ops axis_source follows, each output exposed with its shape."""
    nodes = [node("Transpose", ["x"], ["x_tm"], perm=[1, 0, 2]), node("Sigmoid", ["x"], ["x_act"]),
             node("Unsqueeze", ["x", "one"], ["x_wide"]), node("Squeeze", ["x_wide", "one"], ["x_back"]),
             node("Squeeze", ["x_wide"], ["x_all_squeezed"]), node("MatMul", ["x", "W"], ["x_dense"]),
             node("Gather", ["E", "ids"], ["x_embedded"]), node("Max", ["x", "x_act"], ["x_max"]),
             node("Shape", ["x"], ["x_shape"]), node("Reshape", ["x_act", "x_shape"], ["x_reshaped"]),
             node("Reshape", ["y", "t_1_3"], ["y_kept"]), node("Reshape", ["y", "t_3_1"], ["y_unit_moved"]),
             node("Reshape", ["y", "one_t_3"], ["y_batch_major"]), node("Reshape", ["y", "three_t"], ["y_regrouped"]),
             node("Reshape", ["y", "t_1"], ["y_merged"]), node("Reshape", ["x", "two_5_3"], ["x_same"])]
    model = make_model(nodes, [info("x", FLOAT, [2, 5, 3]), info("ids", INT64, [2, 5]), info("y", FLOAT, ["T", 1, 3])],
                       [], [const("one", [1]), const("W", np.ones((3, 4))), const("E", np.ones((10, 3))),
                            const("t_1_3", [-1, 1, 3]), const("t_3_1", [-1, 3, 1]), const("two_5_3", [2, 5, 3]),
                            const("one_t_3", [1, -1, 3]), const("three_t", [3, -1]), const("t_1", [-1, 1])],
                       exposed=[("x_tm", FLOAT, [5, 2, 3]), ("x_act", FLOAT, [2, 5, 3]), ("x_back", FLOAT, [2, 5, 3]),
                                ("x_all_squeezed", FLOAT, [2, 5, 3]), ("x_dense", FLOAT, [2, 5, 4]),
                                ("x_embedded", FLOAT, [2, 5, 3]), ("x_max", FLOAT, [2, 5, 3]),
                                ("x_reshaped", FLOAT, [2, 5, 3]), ("x_wide", FLOAT, [2, 1, 5, 3]),
                                ("y_kept", FLOAT, ["T", 1, 3]), ("y_unit_moved", FLOAT, ["T", 3, 1]),
                                ("y_batch_major", FLOAT, [1, "T", 3]), ("y_regrouped", FLOAT, [3, "T"]),
                                ("y_merged", FLOAT, ["T3", 1]), ("x_same", FLOAT, [2, 5, 3])])
    graph, _, _ = load(model)
    return graph


@pytest.mark.parametrize("tensor, axis, expected", [
    ("x_tm", 0, ("x", 1)), ("x_tm", 1, ("x", 0)), ("x_act", 1, ("x", 1)),
    ("x_wide", 2, ("x", 1)), ("x_wide", 1, None),            # the inserted axis comes from no input
    ("x_back", 1, ("x_wide", 2)), ("x_all_squeezed", 1, None),  # squeezing every axis of size 1: not said
    ("x_dense", 1, ("x", 1)), ("x_dense", 2, None),          # x @ W: the leading axes are x's
    ("x_embedded", 1, ("ids", 1)), ("x_embedded", 2, None),  # E[ids]: the ids' axes, then E's
    ("x_max", 1, None),                                      # ONNX's Max is elementwise: the walks' own rule
    ("x_reshaped", 1, ("x", 1)),                              # to a shape read off x
    ("y_kept", 0, ("y", 0)), ("x_same", 1, ("x", 1)),        # to a constant shape keeping every other axis,
    ("y_unit_moved", 0, ("y", 0)), ("y_batch_major", 1, ("y", 0)),  # or moving only axes of size 1
    ("y_kept", 1, None), ("y_regrouped", 1, None), ("y_merged", 0, None),  # a unit axis; other axes regrouped
])
def test_axis_source(axes, tensor, axis, expected):
    assert axis_source(axes, axes.get_node_by_output(tensor), tensor, axis) == expected
