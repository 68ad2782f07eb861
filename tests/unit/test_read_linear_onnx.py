# SPDX-License-Identifier: Apache-2.0
"""The linear reader (read/linear.py) on ONNX Loop bodies built by hand: ONNX's spellings of a gate's
``x @ W + h @ R + b`` (test_read_linear.py has TensorFlow's): ``Split`` and ``Slice`` of the product,
``Slice``/``Split``/``Reshape``/``Expand`` of a constant, a ``[1, N]`` bias added to rows, and what
the loop feeds its body computed before it (:func:`declare_known`: the step input projected, an
invariant computed from constants). A read form is checked against onnxruntime: the body's value
at steps 0 and 1 is ``x_t @ kernel + h @ recurrent + bias`` with the form's arrays resolved."""

import numpy as np
import pytest

from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.read.linear import ConstRef, LinearForm, LinearReader, declare_known
from masked_lstm_rewriter.read.onnx_loop import _declare_outer_values, _multiplies, _projected_input
from _onnx_graphs import FLOAT, INT_MAX, Var, const, initializer_values, info, load, loop_model, node, run

STEPS, BATCH, FEATURES, UNITS = 3, 2, 3, 2
COLUMNS = 4 * UNITS
RNG = np.random.default_rng(0)
WEIGHTS = {name: RNG.normal(size=shape) for name, shape in (   # the main graph's initializers
    ("W0", (FEATURES, COLUMNS)), ("R0", (UNITS, COLUMNS)), ("b0", (COLUMNS,)), ("B20", (2, COLUMNS)),
    ("Wp", (FEATURES, COLUMNS)), ("bp", (COLUMNS,)), ("b_row", (1, COLUMNS)), ("b_two_rows", (2, COLUMNS)),
    ("Wsq", (COLUMNS, COLUMNS)))}
OUTER_INTS = (("zero", 0), ("zero_1", [0]), ("one_1", [1]), ("two_1", [2]))
BODY_INTS = (("rows", [1, COLUMNS]), ("cols", [COLUMNS]), ("one_b", [1]), ("i0", [0]), ("i1", [1]), ("sz_h", [UNITS]))
FEEDS = {"x": RNG.normal(size=(STEPS, BATCH, FEATURES)).astype(np.float32),
         "h0": RNG.normal(size=(BATCH, UNITS)).astype(np.float32)}
FEEDS["x_bm"] = FEEDS["x"].transpose(1, 0, 2).copy()

# x @ W + h @ R + b, the fused product of a gate (W, R, b: loop-invariant inputs 3, 4, 5)
Z = [node("MatMul", ["x_t", "W"], ["xw"]), node("Add", ["xw", "hr"], ["xr"]), node("Add", ["xr", "b"], ["z"])]
OUTER = [node("Shape", ["x"], ["x_shape"]), node("Gather", ["x_shape", "zero"], ["T"]),
         node("MatMul", ["x", "Wp"], ["xp"]), node("Add", ["xp", "bp"], ["P"]),                 # x_tm @ W + b
         node("MatMul", ["x_bm", "Wp"], ["xp_bm"]), node("Add", ["xp_bm", "bp"], ["P_bm"]),
         node("Transpose", ["P_bm"], ["P_tm"], perm=[1, 0, 2]),                 # batch-major, made time-major
         node("Slice", ["B20", "one_1", "two_1", "zero_1"], ["B2_row1"])]       # computed from constants


def gate_loop(nodes, probes, sequence="x", opset=15, extra=(), weights_as_inputs=False, consts=()):
    """A Loop reading ``x_t = sequence[t]`` and the state h (h @ R is ``hr``), its invariants W, R,
    b, B2 (a [2, N] bias) and ``extra`` (Var); ``probes``: body tensors returned as scan outputs.
    ``weights_as_inputs``: the projection's Wp is a graph input, not an initializer; ``consts``: (name,
    value) of more int64 constants of the body (shapes, slice bounds)."""
    body = [node("Gather", [sequence, "iter"], ["x_t"], axis=0), node("MatMul", ["h", "R"], ["hr"]),
            node("Neg", ["h"], ["h_next"])] + list(nodes)
    variables = [Var("h", FLOAT, (BATCH, UNITS), "h0", "h_next"), Var("W", FLOAT, (FEATURES, COLUMNS), "W0", "W"),
                 Var("R", FLOAT, (UNITS, COLUMNS), "R0", "R"), Var("b", FLOAT, (COLUMNS,), "b0", "b"),
                 Var("B2", FLOAT, (2, COLUMNS), "B20", "B2")] + list(extra)
    outer = [const(n, v) for n, v in WEIGHTS.items() if n != "Wp" or not weights_as_inputs] + \
        [const(n, v) for n, v in OUTER_INTS]
    inputs = [info("x", FLOAT, [STEPS, BATCH, FEATURES]), info("x_bm", FLOAT, [BATCH, STEPS, FEATURES]),
              info("h0", FLOAT, [BATCH, UNITS])]
    inputs += [info("Wp", FLOAT, [FEATURES, COLUMNS])] if weights_as_inputs else []
    return loop_model(body, variables, trip="T", probes=[(p, FLOAT) for p in probes],
                      body_initializers=[const(n, v) for n, v in BODY_INTS + tuple(consts)],
                      outer_nodes=OUTER, inputs=inputs, initializers=outer, opset=opset)


def loaded(model, x_item="x_t"):
    """(graph, loop, body, reader, lookup: a body input's index -> the constant the loop feeds it)."""
    graph, loop, body = load(model)
    values = initializer_values(model)
    lookup = {i: values[name] for i, name in enumerate(loop.input) if name in values}.get
    return graph, loop, body, LinearReader(body, x_item, "h"), lookup


def assert_computes(model, probe, form, lookup):
    """The body's ``probe`` at steps 0 and 1 is ``x[t] @ kernel + h @ recurrent + bias`` (x the layer's input)."""
    scanned = run(model, FEEDS)[f"{probe}__scanned"]
    for t, h in ((0, FEEDS["h0"]), (1, -FEEDS["h0"])):
        parts = [FEEDS["x"][t] @ form.kernel.resolve(lookup), h @ form.recurrent.resolve(lookup)]
        parts += [] if form.bias is None else [form.bias.resolve(lookup)]
        np.testing.assert_allclose(sum(parts), scanned[t], rtol=1e-5, atol=1e-5, err_msg=f"{probe} at step {t}")


def assert_reads(nodes, probes, **kwargs):
    model = gate_loop(nodes, probes, **kwargs)
    *_, reader, lookup = loaded(model)
    forms = [reader.read(p) for p in probes]
    for probe, form in zip(probes, forms):
        assert form.kernel is not None and form.recurrent is not None and form.bias is not None, form
        assert_computes(model, probe, form, lookup)
    return forms, lookup


def stop_of(nodes, probe, **kwargs):
    """The op the read of ``probe`` stopped at (the node its Refusal names)."""
    *_, reader, _ = loaded(gate_loop(nodes, [probe], **kwargs))
    with pytest.raises(Refusal) as refused:
        reader.read(probe)
    return refused.value.node.type


# --- Split and Slice of the product -------------------------------------------------------------

GATES = ["g0", "g1", "g2", "g3"]


@pytest.mark.parametrize("axis", [1, -1])
def test_split_in_equal_parts(axis):
    forms, _ = assert_reads(Z + [node("Split", ["z"], GATES, axis=axis)], GATES)
    assert [f.kernel.steps for f in forms] == [(("split", -1, 4, k),) for k in range(4)]


def test_split_by_sizes_input():
    sizes = [UNITS, UNITS, 2 * UNITS]
    forms, _ = assert_reads(Z + [node("Split", ["z", "sizes"], GATES[:3], axis=1)], GATES[:3],
                            consts=[("sizes", sizes)])
    assert forms[2].kernel.steps == (("slice", -1, 2 * UNITS, 4 * UNITS),)


def test_split_by_attribute_opset_11():
    assert_reads(Z + [node("Split", ["z"], GATES[:3], axis=1, split=[UNITS, UNITS, 2 * UNITS])], GATES[:3], opset=11)


def test_split_on_another_axis_is_not_read():
    assert stop_of(Z + [node("Split", ["z"], ["row0", "row1"], axis=0)], "row0") == "Split"


SLICES = {  # (starts, ends, axes): columns 2:4 (or 4: to the end) of every row
    "columns": ([2], [4], [1]), "last axis": ([2], [4], [-1]), "to the end": ([4], [INT_MAX], [1]),
    "rows to the end": ([0, 2], [INT_MAX, 4], [0, 1]), "rows to the static batch": ([0, 2], [BATCH, 4], [0, 1]),
}
DROPPING = {  # what must not read
    "the first row dropped": ([1, 2], [INT_MAX, 4], [0, 1]), "the first row alone": ([0, 2], [1, 4], [0, 1]),
    "rows only": ([0], [1], [0]), "every other column": ([2], [6], [1], [2]),
}


def slice_loop(spec):
    names = ["starts", "ends", "axes", "steps"][:len(spec)]
    return dict(nodes=Z + [node("Slice", ["z"] + names, ["cut"])], consts=list(zip(names, spec)))


@pytest.mark.parametrize("case", sorted(SLICES))
def test_slice_of_the_product_keeping_every_row(case):
    spec = slice_loop(SLICES[case])
    assert_reads(spec["nodes"], ["cut"], consts=spec["consts"])


@pytest.mark.parametrize("case", sorted(DROPPING))
def test_slice_that_drops_rows_or_steps_is_not_read(case):
    spec = slice_loop(DROPPING[case])
    assert stop_of(spec["nodes"], "cut", consts=spec["consts"]) == "Slice"


# --- biases: Reshape, Expand, a [1, N] row --------------------------------------------------------

def test_bias_reshaped_and_expanded_to_one_row_jax2onnx():
    """``Expand(Reshape(b, Concat([1], [N])), Concat([1], [N]))`` added to the rows."""
    nodes = [node("MatMul", ["x_t", "W"], ["xw"]), node("Add", ["xw", "hr"], ["xr"]),
             node("Concat", ["one_b", "cols"], ["shape"], axis=0), node("Reshape", ["b", "shape"], ["b_2d"]),
             node("Expand", ["b_2d", "shape"], ["b_row_x"]), node("Add", ["xr", "b_row_x"], ["z"])]
    [form], lookup = assert_reads(nodes, ["z"])
    assert form.bias.added_to_rows and form.bias.input_index == 5
    assert [kind for kind, *_ in form.bias.steps] == ["reshape", "expand"]
    np.testing.assert_allclose(form.bias.resolve(lookup), WEIGHTS["b0"], rtol=1e-6)


def test_a_one_row_constant_is_a_bias_of_the_rows():
    """A [1, N] initializer of the graph around (read by name) added to the rows resolves to [N]."""
    [form], _ = assert_reads([node("MatMul", ["x_t", "W"], ["xw"]), node("Add", ["xw", "hr"], ["xr"]),
                              node("Add", ["b_row", "xr"], ["z"])], ["z"])
    assert form.bias.resolve({}.get).shape == (COLUMNS,)


def test_a_constant_of_several_rows_added_is_no_bias():
    """Adding a [B, N] constant (B = 2 rows) broadcasts nothing: it reads, but resolves to no bias."""
    *_, reader, _ = loaded(gate_loop([node("MatMul", ["x_t", "W"], ["xw"]), node("Add", ["xw", "hr"], ["xr"]),
                                      node("Add", ["xr", "b_two_rows"], ["z"])], ["z"]))
    assert reader.read("z").bias.resolve({}.get) is None


# --- slices of constants: one step per axis ---------------------------------------------------------

CONST_SLICES = {  # body nodes giving "c", and the numpy value of it (B2: the [2, N] invariant, B20 outside)
    "Slice of an invariant, two axes": ([node("Slice", ["B2", "s", "e", "a"], ["c"])], lambda w: w["B20"][1:2, 2:6]),
    "Slice of an outer constant, squeezed": ([node("Slice", ["B20", "i1", "e0", "i0"], ["row"]),
                                              node("Squeeze", ["row", "i0"], ["c"])], lambda w: w["B20"][1]),
    "Split of an invariant on axis 0": ([node("Split", ["B2"], ["c", "c_other"], axis=0)], lambda w: w["B20"][:1]),
    "Split by sizes on axis 1": ([node("Split", ["W", "sz"], ["c", "c_other"], axis=1)], lambda w: w["W0"][:, :2]),
    "Reshape of the bias": ([node("Reshape", ["b", "rows"], ["c"])], lambda w: w["b0"].reshape(1, -1)),
    "Expand of a row": ([node("Reshape", ["b", "rows"], ["b2"]), node("Expand", ["b2", "two_rows"], ["c"])],
                        lambda w: np.broadcast_to(w["b0"], (2, COLUMNS))),
}
SLICE_CONSTS = (("s", [1, 2]), ("e", [2, 6]), ("a", [0, 1]), ("e0", [2]), ("sz", [2, COLUMNS - 2]),
                ("two_rows", [2, COLUMNS]), ("s2", [0]), ("e2", [COLUMNS]), ("st2", [2]), ("zero_in", [0, COLUMNS]))


def const_read(nodes):
    """(the ConstRef the reader makes of the body's "c", the lookup of the loop's constant inputs)."""
    *_, reader, lookup = loaded(gate_loop(nodes, [], consts=SLICE_CONSTS))
    return reader.const_ref("c"), lookup


@pytest.mark.parametrize("case", sorted(CONST_SLICES))
def test_const_ref_of_an_onnx_spelling(case):
    nodes, expected = CONST_SLICES[case]
    ref, lookup = const_read(nodes)
    np.testing.assert_allclose(ref.resolve(lookup), expected(WEIGHTS), rtol=1e-6)


@pytest.mark.parametrize("nodes", [[node("Slice", ["b", "s2", "e2", "s2", "st2"], ["c"])],
                                   [node("Reshape", ["B2", "zero_in"], ["c"])],
                                   [node("Slice", ["h", "s2", "e0", "s2"], ["c"])]],
                         ids=["a step of 2", "Reshape copying a dimension (0)", "a slice of the state"])
def test_const_ref_refuses(nodes):
    assert const_read(nodes)[0] is None


# --- what the loop feeds its body computed before it ---------------------------------------------------

PROJECTED = [node("Slice", ["x_t", "i0", "sz_h", "i1"], ["x_gate"]),
             node("Slice", ["hr", "i0", "sz_h", "i1"], ["h_gate"]), node("Add", ["x_gate", "h_gate"], ["zp"])]


@pytest.mark.parametrize("sequence, batch_major", [("P", False), ("P_tm", True)], ids=["x_tm @ W + b", "batch-major"])
def test_a_projected_step_input_reads_as_its_projection(sequence, batch_major):
    """Keras's JAX GRU: the loop reads (x @ W + b)[t] and only slices it; declared, the slice reads as
    the projection's columns, and the body's value is computed from the layer's input x."""
    model = gate_loop(PROJECTED, ["zp"], sequence=sequence)
    graph, _, body, _, lookup = loaded(model)
    projection = _projected_input(graph, body, sequence, "x_t")
    assert projection is not None and projection.x == ("x_bm" if batch_major else "x")
    assert projection.batch_major is batch_major
    np.testing.assert_allclose(projection.form.kernel.resolve(lookup), WEIGHTS["Wp"], rtol=1e-6)
    declare_known(body, "x_t", projection.form)
    form = LinearReader(body, "x_t", "h").read("zp")
    assert form.kernel.input_index is None and form.recurrent.input_index == 4
    assert_computes(model, "zp", form, lookup)


def test_a_body_that_multiplies_its_step_input_does_not_read_it_projected():
    """A Dense layer before an LSTM: the loop reads (x @ Wp + bp)[t], and the body multiplies it: it is
    the layer's input, not a projection to declare."""
    graph, _, body, _, _ = loaded(gate_loop([node("MatMul", ["x_t", "Wsq"], ["xw"])], ["xw"], sequence="P"))
    assert _multiplies(body, "x_t")
    assert _projected_input(graph, body, "P", "x_t") is None
    _, _, body, _, _ = loaded(gate_loop(PROJECTED, ["zp"], sequence="P"))
    assert not _multiplies(body, "x_t")


def test_a_projection_from_a_weight_that_is_no_constant_is_not_read():
    """x @ W + b with W a graph input: not a value of the main graph, so not declared."""
    graph, _, body, _, _ = loaded(gate_loop(PROJECTED, ["zp"], sequence="P", weights_as_inputs=True))
    assert _projected_input(graph, body, "P", "x_t") is None


def test_a_product_of_the_declared_projection_is_refused():
    _, _, body, _, _ = loaded(gate_loop(PROJECTED + [node("MatMul", ["x_t", "Wsq"], ["twice"])], [], sequence="P"))
    declare_known(body, "x_t", LinearForm(kernel=ConstRef(value=WEIGHTS["Wp"]), bias=ConstRef(value=WEIGHTS["bp"])))
    with pytest.raises(Refusal) as refused:
        LinearReader(body, "x_t", "h").read("twice")
    assert refused.value.node.type == "Gather"  # the step input, which is no input to multiply


def test_an_invariant_computed_from_constants_is_declared():
    """Loop input 7 is Slice(B20) computed before the loop: undeclared, a reference to the input (no
    constant of the main graph); once the loop's values are declared, the slice of B20 itself."""
    model = gate_loop(Z[:2] + [node("Add", ["xr", "rb"], ["z"])], ["z"],
                      extra=[Var("rb", FLOAT, (1, COLUMNS), "B2_row1", "rb")])
    graph, loop, body, reader, lookup = loaded(model)
    assert reader.const_ref("rb") == ConstRef(input_index=7) and lookup(7) is None
    _declare_outer_values(graph, loop, body, {3, 4, 5, 6, 7}, "x", "x_t")
    form = LinearReader(body, "x_t", "h").read("z")
    np.testing.assert_allclose(form.bias.resolve(lookup), WEIGHTS["B20"][1], rtol=1e-6)
    assert_computes(model, "z", form, lookup)
