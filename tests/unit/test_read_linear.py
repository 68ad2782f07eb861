# SPDX-License-Identifier: Apache-2.0
"""The linear reader (read/linear.py): its small value types, and the reader on small graphs
built by hand (every spelling of ``x @ W + h @ R + b`` tf2onnx gives a loop body), checked
against numpy's evaluation of the same graph."""

import numpy as np
import pytest
from onnx import TensorProto
from tf2onnx.graph import Graph

from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.read.linear import ConstRef, LinearForm, LinearReader, Product


def test_const_ref_resolves_splits_and_column_slices():
    kernel = np.arange(24, dtype=np.float32).reshape(2, 12)
    ref = ConstRef(input_index=3)
    lookup = {3: kernel}.get
    np.testing.assert_array_equal(ref.then(("split", 1, 4, 2)).resolve(lookup), kernel[:, 6:9])
    np.testing.assert_array_equal(ref.then(("slice", 1, 9, None)).resolve(lookup), kernel[:, 9:])
    np.testing.assert_array_equal(ref.then(("split", -1, 4, 0)).then(("slice", 1, 1, 3)).resolve(lookup),
                                  kernel[:, 1:3])


def test_const_ref_unknown_or_unsplittable_is_none():
    assert ConstRef(input_index=1).resolve({}.get) is None
    assert ConstRef(value=np.zeros((2, 5))).then(("split", 1, 4, 0)).resolve({}.get) is None


def test_linear_form_rejects_a_term_twice():
    w = ConstRef(input_index=0)
    assert LinearForm(kernel=w).add(LinearForm(kernel=w)) is None
    both = LinearForm(kernel=w).add(LinearForm(recurrent=w))
    assert both == LinearForm(kernel=w, recurrent=w)


def test_split_columns_slices_every_term():
    form = LinearForm(kernel=ConstRef(input_index=0), bias=ConstRef(input_index=1)).split_columns(4, 3)
    assert form.kernel.steps == (("split", -1, 4, 3),) and form.bias.steps == (("split", -1, 4, 3),)
    assert form.recurrent is None


def test_biases_on_both_sides_sum_up():
    """A GRU gate adds the input side's and the recurrent side's bias; a folded scalar broadcasts."""
    values = {0: np.arange(4, dtype=np.float32), 1: np.full(4, 10, np.float32), 2: np.float32(3)}
    x_side = LinearForm(kernel=ConstRef(input_index=5), bias=ConstRef(input_index=0))
    h_side = LinearForm(recurrent=ConstRef(input_index=6), bias=ConstRef(input_index=1))
    both = x_side.add(h_side).add(LinearForm(bias=ConstRef(input_index=2)))
    assert both.kernel == x_side.kernel and both.recurrent == h_side.recurrent
    np.testing.assert_array_equal(both.bias.resolve(values.get), values[0] + values[1] + 3)


def test_squeeze_and_slice_steps_apply_to_sums_too():
    """Keras 3's GRU bias [2, 3H]: split on axis 0, squeezed, then a gate's columns."""
    bias = np.arange(12, dtype=np.float32).reshape(2, 6)
    rows = [ConstRef(input_index=0).then(("split", 0, 2, i)).then(("squeeze", 0, 0, 0)) for i in (0, 1)]
    form = LinearForm(bias=rows[0]).add(LinearForm(bias=rows[1])).then(("slice", -1, 2, 4))
    np.testing.assert_array_equal(form.bias.resolve({0: bias}.get), bias[0, 2:4] + bias[1, 2:4])


# --- the linear reader on small graphs: every spelling of x @ W + h @ R + b ---------------------

BATCH, INPUT, UNITS = 2, 3, 4
SHAPES = {"x": [BATCH, INPUT], "h": [BATCH, UNITS], "W": [INPUT, 2 * UNITS], "R": [UNITS, 2 * UNITS],
          "b": [2 * UNITS], "Wt": [2 * UNITS, INPUT], "x1": [1, INPUT], "h1": [1, UNITS],
          "WR": [INPUT + UNITS, 2 * UNITS], "WRt": [2 * UNITS, INPUT + UNITS]}


WEIGHTS = ("W", "R", "b", "Wt", "WR", "WRt")


def body_graph():
    """A graph whose inputs stand for a loop body's: step inputs x (or x1, batch 1), states h (h1),
    and weights W, R, b (Wt: W stored transposed). Like a While body, it returns the weights
    unchanged (loop-invariant, so they read as constants) and the other inputs changed."""
    graph = Graph([], opset=15)
    for name, shape in SHAPES.items():
        graph.add_graph_input(name, TensorProto.FLOAT, shape)
    for name, shape in SHAPES.items():
        output = name if name in WEIGHTS else graph.make_node("Neg", [name]).output[0]
        graph.add_graph_output(output, TensorProto.FLOAT, shape)
    return graph


def values(seed=0):
    rng = np.random.default_rng(seed)
    found = {name: rng.normal(size=shape).astype(np.float32) for name, shape in SHAPES.items()}
    found["Wt"], found["WRt"] = found["W"].T.copy(), found["WR"].T.copy()
    found["x1"], found["h1"] = found["x"][:1], found["h"][:1]
    return found


def evaluate(graph, tensor, feeds):
    """numpy's value of ``tensor`` (the few ops these tests build, with TensorFlow's and ONNX's meaning)."""
    node = graph.get_node_by_output(tensor)
    if node.is_graph_input():
        return feeds[tensor]
    if node.is_const():
        return node.get_tensor_value(as_list=False)
    args = [evaluate(graph, t, feeds) for t in node.input]
    if node.type == "MatMul":
        a, b = (m.T if node.get_attr_value(k, 0) else m for m, k in zip(args, ("transpose_a", "transpose_b")))
        return a @ b
    if node.type == "Gemm":
        a, b = (m.T if node.get_attr_value(k, 0) else m for m, k in zip(args, ("transA", "transB")))
        c = args[2] if len(args) > 2 else 0.0
        return node.get_attr_value("alpha", 1.0) * (a @ b) + node.get_attr_value("beta", 1.0) * c
    if node.type in ("Add", "AddV2", "BiasAdd"):
        return args[0] + args[1]
    if node.type == "Mul":
        return args[0] * args[1]
    if node.type == "Transpose":
        return np.transpose(args[0], args[1])
    if node.type == "ConcatV2":
        return np.concatenate(args[:-1], axis=int(args[-1]))
    if node.type == "Concat":
        return np.concatenate(args, axis=node.get_attr_value("axis"))
    if node.type == "Squeeze":
        axes = node.get_attr_value("squeeze_dims", [])
        return np.squeeze(args[0], tuple(axes) if axes else None)
    if node.type == "Reshape":
        return np.reshape(args[0], args[1])
    raise NotImplementedError(node.type)


def assert_reads_as_evaluated(graph, tensor, x="x", h="h"):
    """The form read from ``tensor`` computes what the graph computes, row by row."""
    form = LinearReader(graph, x, h).read(tensor)
    assert form is not None and form.kernel is not None and form.recurrent is not None, form
    feeds = values()
    lookup = {i: feeds[name] for i, name in enumerate(graph.input_names)}.get
    expected = evaluate(graph, tensor, feeds)
    bias = form.bias.resolve(lookup) if form.bias is not None else 0.0
    got = feeds[x] @ form.kernel.resolve(lookup) + feeds[h] @ form.recurrent.resolve(lookup) + bias
    np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-5, atol=1e-6)
    return form


def matmul(graph, a, b, transpose_b=0):
    return graph.make_node("MatMul", [a, b], attr={"transpose_a": 0, "transpose_b": transpose_b}).output[0]


def gemm(graph, *inputs, **attr):
    return graph.make_node("Gemm", list(inputs), attr={"transA": 0, "transB": 0, **attr}).output[0]


def test_dynamic_batch_sum_of_matmuls_and_bias():
    graph = body_graph()
    total = graph.make_node("AddV2", [matmul(graph, "x", "W"), matmul(graph, "h", "R")]).output[0]
    assert_reads_as_evaluated(graph, graph.make_node("BiasAdd", [total, "b"]).output[0])


def concat(graph, parts, axis=1, onnx=False):
    if onnx:
        return graph.make_node("Concat", list(parts), attr={"axis": axis}).output[0]
    return graph.make_node("ConcatV2", list(parts) + [graph.make_const("axis", np.array(axis, np.int32)).output[0]]
                           ).output[0]


@pytest.mark.parametrize("order", [("x", "h"), ("h", "x")])
@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("onnx", [False, True], ids=["ConcatV2", "Concat"])
def test_one_kernel_over_the_input_and_state_concatenated(order, axis, onnx):
    """TensorFlow 1's cells: ``concat([x, h]) @ W + b``, W's rows split between x and h (in either order)."""
    graph = body_graph()
    product = matmul(graph, concat(graph, order, axis, onnx), "WR")
    form = assert_reads_as_evaluated(graph, graph.make_node("BiasAdd", [product, "b"]).output[0])
    rows = (0, INPUT) if order[0] == "x" else (UNITS, UNITS + INPUT)
    assert form.kernel.steps == (("slice", 0) + rows,)


def test_one_kernel_stored_transposed_over_the_concatenation():
    graph = body_graph()
    assert_reads_as_evaluated(graph, gemm(graph, concat(graph, ("x", "h")), "WRt", "b", transB=1))


@pytest.mark.parametrize("parts, axis", [(("x", "x"), 1), (("x", "h"), 0), (("x", "b"), 1)],
                         ids=["x twice", "rows", "a weight"])
def test_a_concatenation_of_other_than_input_and_state_is_not_read(parts, axis):
    graph = body_graph()
    product = matmul(graph, concat(graph, parts, axis), "WR")
    with pytest.raises(Refusal):
        LinearReader(graph, "x", "h").read(product)


def test_static_batch_gemm_of_the_input_product_with_the_recurrent_one_as_c():
    """tf2onnx's Gemm of MatMul + Add (static batch): Gemm(x, W, h @ R), then the bias."""
    graph = body_graph()
    fused = gemm(graph, "x", "W", matmul(graph, "h", "R"))
    assert_reads_as_evaluated(graph, graph.make_node("BiasAdd", [fused, "b"]).output[0])


def test_gemm_with_the_bias_as_c_nested_in_another_gemm():
    """SimpleRNN with a static batch: Gemm(h, R, Gemm(x, W, b))."""
    graph = body_graph()
    assert_reads_as_evaluated(graph, gemm(graph, "h", "R", gemm(graph, "x", "W", "b")))


@pytest.mark.parametrize("alpha, beta", [(2.0, 1.0), (1.0, 0.5), (-1.5, 3.0)])
def test_gemm_alpha_and_beta_scale_their_terms(alpha, beta):
    graph = body_graph()
    form = assert_reads_as_evaluated(graph, gemm(graph, "x", "W", gemm(graph, "h", "R", "b"), alpha=alpha, beta=beta))
    assert form.bias.steps == ((("scale", 0, beta, 0),) if beta != 1.0 else ())


def test_gemm_trans_b_and_a_transposed_left_operand():
    graph = body_graph()
    perm = graph.make_const("perm", np.array([1, 0], np.int32)).output[0]
    x_t = graph.make_node("Transpose", ["x", perm]).output[0]
    fused = gemm(graph, x_t, "Wt", matmul(graph, "h", "R"), transA=1, transB=1)
    assert_reads_as_evaluated(graph, fused)


def test_gemm_without_c():
    graph = body_graph()
    total = graph.make_node("AddV2", [gemm(graph, "x", "W"), matmul(graph, "h", "R")]).output[0]
    assert_reads_as_evaluated(graph, total)


@pytest.mark.parametrize("axes", [[], [0]], ids=["all unit axes", "axis 0"])
def test_batch_one_term_squeezed_and_broadcast_back(axes):
    """Static batch 1: Gemm(x, W, Squeeze(h @ R)) ([16] broadcast to [1, 16])."""
    graph = body_graph()
    squeezed = graph.make_node("Squeeze", [matmul(graph, "h1", "R")], attr={"squeeze_dims": axes}).output[0]
    assert_reads_as_evaluated(graph, graph.make_node("BiasAdd", [gemm(graph, "x1", "W", squeezed), "b"]).output[0],
                              x="x1", h="h1")


@pytest.mark.parametrize("shape", [[2 * UNITS], [-1]])
def test_batch_one_term_reshaped_to_a_vector_and_broadcast_back(shape):
    """Static batch 1 through LiteRT: Gemm(x, W, Reshape(h @ R, [N]))."""
    graph = body_graph()
    flat = graph.make_const("flat", np.array(shape, np.int64)).output[0]
    reshaped = graph.make_node("Reshape", [matmul(graph, "h1", "R"), flat]).output[0]
    assert_reads_as_evaluated(graph, graph.make_node("BiasAdd", [gemm(graph, "x1", "W", reshaped), "b"]).output[0],
                              x="x1", h="h1")


def test_a_term_of_several_rows_reshaped_is_not_read():
    """Reshaping h @ R of a batch of rows mixes them: not a term of each row."""
    graph = body_graph()
    flat = graph.make_const("flat", np.array([-1], np.int64)).output[0]
    reshaped = graph.make_node("Reshape", [matmul(graph, "h", "R"), flat]).output[0]
    assert stop_of(LinearReader(graph, "x", "h"), reshaped).type == "Reshape"


def stop_of(reader, tensor):
    """The node a read of ``tensor`` stopped at: what its Refusal names."""
    with pytest.raises(Refusal) as refused:
        reader.read(tensor)
    return refused.value.node


def test_a_squeeze_of_a_real_batch_is_not_read():
    graph = body_graph()
    squeezed = graph.make_node("Squeeze", [matmul(graph, "h", "R")], attr={"squeeze_dims": [0]}).output[0]
    reader = LinearReader(graph, "x", "h")
    assert stop_of(reader, gemm(graph, "x", "W", squeezed)).type == "Squeeze"


def test_dropout_ones_folded_to_a_constant_are_seen_through():
    """tf_keras's inference-time dropout, h * ones_like(h), with a static shape: h * Const(ones)."""
    graph = body_graph()
    ones = graph.make_const("ones", np.ones(SHAPES["h"], np.float32)).output[0]
    twos = graph.make_const("twos", np.full(SHAPES["h"], 2, np.float32)).output[0]
    h_ones = graph.make_node("Mul", ["h", ones]).output[0]
    assert_reads_as_evaluated(graph, gemm(graph, h_ones, "R", gemm(graph, "x", "W", "b")))
    h_twos = graph.make_node("Mul", ["h", twos]).output[0]
    reader = LinearReader(graph, "x", "h")
    assert stop_of(reader, gemm(graph, h_twos, "R", gemm(graph, "x", "W", "b"))).type == "Mul"


def test_what_is_not_read_is_named():
    graph = body_graph()
    scaled = graph.make_node("Mul", ["x", "x"]).output[0]
    reader = LinearReader(graph, "x", "h")
    assert stop_of(reader, graph.make_node("AddV2", [matmul(graph, scaled, "W"), "b"]).output[0]).type == "Mul"
    unknown = graph.make_node("Erf", [matmul(graph, "x", "W")]).output[0]
    assert stop_of(reader, graph.make_node("AddV2", [unknown, matmul(graph, "h", "R")]).output[0]).type == "Erf"


def test_a_recovered_attempt_leaves_no_trace():
    """A bias term is first tried as a form (and fails at the loop input), then read as a constant."""
    graph = body_graph()
    reader = LinearReader(graph, "x", "h")
    assert reader.read(graph.make_node("BiasAdd", [gemm(graph, "x", "W", matmul(graph, "h", "R")), "b"]).output[0])


def test_sum_terms_open_a_gemm_into_its_product_and_c():
    """The GRU candidate with reset_after=False: Gemm(r * h, R_h, x-side) is opened, the product kept whole."""
    graph = body_graph()
    r_h = graph.make_node("Mul", ["h", "h"]).output[0]
    x_side = gemm(graph, "x", "W", "b")
    reader = LinearReader(graph, "x", "h")
    terms = reader.sum_terms(gemm(graph, r_h, "R", x_side, beta=2.0))
    assert [factor for factor, _ in terms] == [1.0, 2.0]
    assert terms[0][1] == Product(r_h, "R") and terms[1][1] == x_side
    form = reader.read_term(terms[1])
    assert form.kernel.steps == (("scale", 0, 2.0, 0),)


def test_scale_and_transpose_steps():
    kernel = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref = ConstRef(input_index=0).then(("transpose", 0, 0, 0)).then(("scale", 0, 2.0, 0))
    resolved = ref.resolve({0: kernel}.get)
    np.testing.assert_array_equal(resolved, 2 * kernel.T)
    assert resolved.dtype == np.float32
    assert LinearForm(kernel=ConstRef(input_index=0)).scaled(1.0) == LinearForm(kernel=ConstRef(input_index=0))


def test_a_scalar_term_broadcasts_through_column_steps():
    """A folded scalar (hard_sigmoid's + 3) summed with a bias and then split keeps its value."""
    scalar = ConstRef(value=np.float32(3)).then(("split", -1, 4, 1)).then(("slice", -1, 0, 2))
    assert scalar.resolve({}.get) == 3
