# SPDX-License-Identifier: Apache-2.0
"""Read a gate's pre-activation ``x @ W + h @ R + b`` out of a While body, however tf2onnx spelled it.

:class:`LinearReader` reads it into references to the body's inputs (plus column slices): one
fused kernel then a ``Split``, ``SplitV`` or column slices of the product (GRU), or one kernel
slice per gate (``implementation=1``, used with dropout). Biases added on both sides (GRU's input
and recurrent biases) sum up. A sum may be written as ``Add``/``AddV2``/``BiasAdd`` of two terms or
as one ``Gemm`` (``alpha * A @ B + beta * C``, which tf2onnx fuses ``MatMul`` + ``Add`` into when
the batch size is static); with a static batch of 1, a term may also have its batch axis squeezed
away (``Squeeze`` of a [1, N] product, broadcast back by the sum).

Weights are loop inputs of the body, so their values are only known in the main graph: a
:class:`~.const_ref.ConstRef` names the body input and the slicing to apply once the value is known (ONNX's
``Slice``, ``Reshape`` and ``Expand`` of a constant or a ``ConstantOfShape``: jax2onnx's spellings).

A failed read raises a :class:`~..failure.Refusal` naming the node it stopped at; one that can recover catches it.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from typing import Optional

from ..failure import Refusal
from ..graph import filled_array, is_ones, outer_const, passes_through, producer, scalar_value, skip_identity
from .const_ref import ConstRef, ConstSum


@dataclasses.dataclass(frozen=True)
class LinearForm:
    """``x @ kernel + h @ recurrent + bias``; any part may be missing (None).

    ``recurrent_bias`` is only set by the GRU reader: the bias that ONNX's GRU with
    ``linear_before_reset=1`` adds inside ``r * (h @ R + Rb)``.
    """

    kernel: Optional[ConstRef] = None
    recurrent: Optional[ConstRef] = None
    bias: Optional[object] = None    # ConstRef or ConstSum
    recurrent_bias: Optional[object] = None

    def add(self, other: "LinearForm") -> Optional["LinearForm"]:
        merged = {}
        for field in ("kernel", "recurrent"):
            mine, theirs = getattr(self, field), getattr(other, field)
            if mine is not None and theirs is not None:
                return None  # the same term twice: not a plain gate
            merged[field] = mine if mine is not None else theirs
        biases = [b for b in (self.bias, other.bias) if b is not None]
        merged["bias"] = biases[0] if len(biases) == 1 else (ConstSum(tuple(biases)) if biases else None)
        if self.recurrent_bias is not None or other.recurrent_bias is not None:
            return None
        return LinearForm(**merged)

    def then(self, step: tuple) -> "LinearForm":
        """The form of the columns one slicing ``step`` on axis -1 keeps."""
        return LinearForm(*(None if ref is None else ref.then(step)
                            for ref in (self.kernel, self.recurrent, self.bias, self.recurrent_bias)))

    def split_columns(self, parts: int, index: int) -> "LinearForm":
        """The form of column block ``index`` of ``parts`` (what a ``Split`` on axis -1 keeps)."""
        return self.then(("split", -1, parts, index))

    def scaled(self, factor: float) -> "LinearForm":
        """The form of ``factor`` times this one (Gemm's alpha and beta; 1 changes nothing)."""
        return self if factor == 1.0 else self.then(("scale", 0, factor, 0))


# ops that add terms (a MatMul is a sum of one product), and every op the linear reader reads
SUM_OPS = ("Add", "AddV2", "BiasAdd", "MatMul", "Gemm")
READ_OPS = SUM_OPS + ("Identity", "Squeeze", "Split", "SplitV", "StridedSlice", "Slice")
# a failed read's text: never shown, the gate reader words the reason from the node it stopped at
NOT_READ = "not a linear form the reader knows"


@dataclasses.dataclass(frozen=True)
class Product:
    """``a @ b``, one addend of a sum: a ``MatMul``, or the product part of a ``Gemm``.

    ``a`` is the left operand as the product uses it (a transposed operand already seen through
    its ``Transpose``), ``b`` the right operand as stored, ``trans_b`` whether the product uses it
    transposed."""

    a: str
    b: str
    trans_b: bool = False
    node: object = dataclasses.field(default=None, compare=False)  # the MatMul or Gemm


def _is_onnx_split(graph, node) -> bool:
    """ONNX's ``Split`` (the tensor first, its axis an attribute), not TensorFlow's (the axis first, a
    scalar: ONNX's Split made from it may still carry its ``num_split`` before tf2onnx writes the model)."""
    return node.get_attr("num_split") is None or scalar_value(graph, node.input[0]) is None


_KNOWN = weakref.WeakKeyDictionary()  # body graph -> {tensor: what the loop feeds it} (declare_known)


def declare_known(body, tensor: str, known) -> None:
    """Tell every reader of ``body`` what the loop around it feeds ``tensor``: a :class:`LinearForm`
    ``x @ W + b`` for a step input that is the layer's input projected before the loop (Keras's JAX
    GRU without a mask), a :class:`ConstRef` for a loop-invariant input computed from constants
    before the loop (its recurrent bias); their weights are values of the main graph."""
    _KNOWN.setdefault(body, {})[tensor] = known


class LinearReader:
    """Reads gate pre-activations of one body graph, given its step input and previous state.

    ``x_item`` is the tensor holding this step's input, ``h_prev`` the previous hidden state. Where
    the step input is the input projected already (:func:`declare_known`), it reads as that form,
    and a product of it is no term. A read that fails raises a :class:`Refusal` whose
    ``node`` is the node the reader stopped at (what it did not understand; None for a loop input).
    """

    def __init__(self, graph, x_item: str, h_prev: str):
        self.graph = graph
        self.x_item = x_item
        self.h_prev = h_prev
        self._input_index = {name: i for i, name in enumerate(graph.input_names)}
        self._known = _KNOWN.get(graph, {})
        self.x_form = self._known.get(x_item) if isinstance(self._known.get(x_item), LinearForm) else None

    def read(self, tensor: str) -> LinearForm:
        """The linear form of ``tensor``; raises a :class:`Refusal` when it is not ``x W + h R + b``."""
        if self.x_form is not None and tensor == self.x_item:
            return self.x_form
        node = producer(self.graph, tensor)
        if node is None:
            raise Refusal(NOT_READ)
        if node.type == "Identity":
            return self.read(node.input[0])
        if node.type in SUM_OPS:
            return self._read_sum(node)
        if node.type in ("Squeeze", "Reshape"):
            return self._read_batch_squeeze(node)
        if node.type == "Split" and not _is_onnx_split(self.graph, node):
            return self._read_split_output(node, tensor)
        if node.type in ("SplitV", "StridedSlice", "Split", "Slice"):
            whole = self.read(node.input[0])
            step = self._columns(node, tensor)
            return self._stop(node) if step is None else whole.then(step)
        return self._stop(node)

    def _columns(self, node, tensor: str) -> Optional[tuple]:
        """The step (``("slice", -1, begin, end)`` or ``("split", -1, parts, index)``) that keeps the
        last-axis columns ``tensor`` holds, for the ops that keep some: TensorFlow's ``SplitV`` and
        ``StridedSlice``, ONNX's ``Split`` and ``Slice``; None for any other slicing."""
        if node.type == "Split":
            step = self._onnx_split(node, tensor)  # on the last axis: said so, as every column step says it
            ok = step is not None and self._is_last_axis(node.input[0], step[1])
            return (step[0], -1) + step[2:] if ok else None
        columns = {"SplitV": self._splitv_columns, "StridedSlice": lambda n, _: self._column_slice(n),
                   "Slice": lambda n, _: self._onnx_slice_columns(n)}[node.type](node, tensor)
        return None if columns is None else ("slice", -1) + columns

    def _onnx_split(self, node, tensor: str) -> Optional[tuple]:
        """The step that gives output ``tensor`` of an ONNX ``Split``: equal parts, or the sizes of its
        second input (opset 13) or ``split`` attribute."""
        axis, index = node.get_attr_value("axis", 0), list(node.output).index(tensor)
        sizes = (self._const_list(node.input[1]) if len(node.input) > 1 and node.input[1]
                 else node.get_attr_value("split", None))
        if not sizes:
            return "split", axis, len(node.output), index
        if len(sizes) != len(node.output) or any(size < 0 for size in sizes):
            return None
        begin = sum(sizes[:index])
        return "slice", axis, begin, begin + sizes[index]

    def try_read(self, tensor: str) -> Optional[LinearForm]:
        """The linear form of ``tensor``, or None when it is not one (a probe, not a failure)."""
        try:
            return self.read(tensor)
        except Refusal:
            return None

    @staticmethod
    def _stop(node):
        """Give up at ``node``: it is what was not understood."""
        raise Refusal(NOT_READ, node)

    def addends(self, node) -> Optional[list]:
        """The terms a sum op adds, as (factor, tensor or :class:`Product`), or None.

        ``Add``, ``AddV2``, ``BiasAdd``: its two inputs; ``MatMul``: itself, one product;
        ``Gemm(A, B, C)``: ``alpha * A' @ B'`` and ``beta * C`` (with its transA / transB)."""
        if node is None or node.type not in SUM_OPS:
            return None
        if node.type in ("Add", "AddV2", "BiasAdd"):
            if node.type == "BiasAdd" and node.get_attr_value("data_format", b"NHWC") != b"NHWC":
                return None
            return [(1.0, tensor) for tensor in node.input]
        gemm = node.type == "Gemm"
        transposed = [node.get_attr_value(name, 0) for name in
                      (("transA", "transB") if gemm else ("transpose_a", "transpose_b"))]
        left = node.input[0] if not transposed[0] else self._transposed_matrix(node.input[0])
        if left is None:
            return None
        terms = [(float(node.get_attr_value("alpha", 1.0)) if gemm else 1.0,
                  Product(left, node.input[1], bool(transposed[1]), node))]
        if gemm and len(node.input) > 2 and node.input[2]:
            terms.append((float(node.get_attr_value("beta", 1.0)), node.input[2]))
        return terms

    def read_term(self, term: tuple) -> LinearForm:
        """The form of one ``(factor, tensor or Product)`` addend; a constant is a bias."""
        factor, item = term
        if isinstance(item, Product):
            return self._read_product(item).scaled(factor)
        try:
            form = self.read(item)
        except Refusal:
            bias = self.const_ref(item)
            if bias is None:
                raise
            form = LinearForm(bias=dataclasses.replace(bias, added_to_rows=True))  # not a failure after all
        return form.scaled(factor)

    def sum_terms(self, tensor: str, factor: float = 1.0) -> list:
        """The addends of ``tensor`` as (factor, tensor or Product), opening the sums (``Add``,
        ``Gemm``, ...) the reader cannot read as a whole; anything else is one term."""
        node = producer(self.graph, tensor)
        terms = self.addends(node) if self.try_read(tensor) is None else None
        if terms is None:  # a term that does not read is read again, and fails again, by the caller
            return [(factor, tensor)]
        found = []
        for term_factor, item in terms:
            if isinstance(item, Product):
                found.append((factor * term_factor, item))
            else:
                found.extend(self.sum_terms(item, factor * term_factor))
        return found

    def _read_sum(self, node) -> LinearForm:
        terms = self.addends(node)
        if terms is None:
            return self._stop(node)
        total = None
        for term in terms:
            form = self.read_term(term)
            total = form if total is None else total.add(form)
            if total is None:
                return self._stop(node)  # the same term twice: not a plain gate
        return total

    def _read_product(self, product: Product) -> LinearForm:
        weight = self.const_ref(product.b)
        if weight is None:
            return self._stop(producer(self.graph, skip_identity(self.graph, product.b)) or product.node)
        blocks = self._row_blocks(product.a)
        if blocks is None or (self.x_form is not None and "x" in dict(blocks)):  # x is projected already
            return self._stop(producer(self.graph, skip_identity(self.graph, product.a)) or product.node)
        if product.trans_b:
            weight = weight.then(("transpose", 0, 0, 0))
        form = LinearForm()
        for source, rows in blocks:
            part = weight if rows is None else weight.then(("slice", 0) + rows)
            form = form.add(LinearForm(kernel=part) if source == "x" else LinearForm(recurrent=part))
            if form is None:  # x or h twice
                return self._stop(product.node)
        return form

    def _row_blocks(self, tensor: str) -> Optional[list]:
        """What a product's left operand is, as ``[(source, rows)]``: the step's input or previous state
        (``"x"``, ``"h"``) meeting every row of the weight (rows None); or both concatenated on the last
        axis (TensorFlow 1's cells multiply ``[x, h]`` by one kernel), each meeting its rows (begin, end)."""
        source = self.step_source(tensor)
        if source is not None:
            return [(source, None)]
        node = producer(self.graph, skip_identity(self.graph, tensor))
        if node is None or node.type not in ("ConcatV2", "Concat"):
            return None
        tf_concat = node.type == "ConcatV2"
        axis = scalar_value(self.graph, node.input[-1]) if tf_concat else node.get_attr_value("axis")
        if axis is None or not self._is_last_axis(node.output[0], int(axis)):
            return None
        blocks, begin = [], 0
        for part in node.input[:-1] if tf_concat else node.input:
            source, shape = self.step_source(part), self.graph.get_shape(part)
            if source is None or not shape or shape[-1] is None or shape[-1] < 0:
                return None
            blocks.append((source, (begin, begin + shape[-1])))
            begin += shape[-1]
        return blocks

    def _transposed_matrix(self, tensor: str) -> Optional[str]:
        """t when ``tensor`` is ``Transpose(t, [1, 0])`` (a product's operand used transposed)."""
        node = producer(self.graph, skip_identity(self.graph, tensor))
        if node is None or node.type != "Transpose" or len(node.input) < 2:
            return None
        perm = producer(self.graph, skip_identity(self.graph, node.input[1]))
        if perm is None or not perm.is_const() or perm.get_tensor_value(as_list=True) != [1, 0]:
            return None
        return node.input[0]

    def _read_batch_squeeze(self, node) -> LinearForm:
        """With a static batch of 1, TensorFlow squeezes a [1, N] term (all its unit axes, or
        axis 0; LiteRT reshapes it to [N]) and the sum broadcasts it back: row by row, the same form."""
        shape = self.graph.get_shape(node.input[0])
        if shape is None or len(shape) != 2 or shape[0] != 1:
            return self._stop(node)
        if node.type == "Reshape":
            squeezed = self._const_list(node.input[1]) in ([shape[1]], [-1]) and shape[1] is not None
        else:
            axes = node.get_attr_value("squeeze_dims", []) or node.get_attr_value("axis", []) or \
                node.get_attr_value("axes", []) or (self._const_list(node.input[1]) if len(node.input) > 1 else [])
            squeezed = list(axes) in ([], [0], [-2])
        return self.read(node.input[0]) if squeezed else self._stop(node)

    def _splitv_columns(self, node, tensor: str) -> Optional[tuple]:
        """(begin, end) of the columns output ``tensor`` of a ``SplitV`` on the last axis keeps.

        tf_keras writes ``split(x, [H, H, -1], axis=-1)``: -1 is taken only as the last size."""
        sizes = producer(self.graph, skip_identity(self.graph, node.input[1]))
        axis = scalar_value(self.graph, node.input[2])
        if sizes is None or not sizes.is_const() or axis not in (1.0, -1.0):
            return None
        sizes = sizes.get_tensor_value(as_list=True)
        index = list(node.output).index(tensor)
        if any(size < 0 for size in sizes[:-1]) or index >= len(sizes):
            return None
        begin = sum(sizes[:index])
        return begin, (None if sizes[index] < 0 else begin + sizes[index])

    def _onnx_slice_steps(self, node) -> Optional[list]:
        """One ``("slice", axis, begin, end)`` step per axis an ONNX ``Slice`` (opset 10+, step 1) names:
        exact for a constant, whatever its shape."""
        starts, ends = (self._const_list(t) for t in node.input[1:3])
        axes = self._const_list(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        steps = self._const_list(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if starts is None or ends is None or len(starts) != len(ends):
            return None
        axes = list(range(len(starts))) if axes is None else axes
        if len(axes) != len(starts) or (steps is not None and steps != [1] * len(starts)):
            return None
        return [("slice", axis, start, end) for axis, start, end in zip(axes, starts, ends)]

    def _onnx_slice_columns(self, node) -> Optional[tuple]:
        """(begin, end) of ``data[..., a:b]``, an ONNX ``Slice`` (step 1) of the last axis of a tensor of
        rows; every other axis it names provably taken whole (tf2onnx writes ``t[:, a:b]`` so)."""
        steps = self._onnx_slice_steps(node) or []
        columns = [(start, end) for _, axis, start, end in steps if self._is_last_axis(node.input[0], axis)]
        shape = self.graph.get_shape(node.input[0]) or []
        whole = all(start == 0 and (end >= 2 ** 31 - 1 or (axis < len(shape) and 0 <= shape[axis] <= end))
                    for _, axis, start, end in steps if not self._is_last_axis(node.input[0], axis))
        if len(columns) != 1 or not whole or columns[0][0] < 0:
            return None
        begin, end = columns[0]
        return begin, (None if end >= 2 ** 31 - 1 else end)

    def _const_list(self, tensor: str) -> Optional[list]:
        node = producer(self.graph, skip_identity(self.graph, tensor))
        if node is None or not node.is_const():
            return None
        value = node.get_tensor_value(as_list=True)
        return value if isinstance(value, list) else (None if value is None else [value])

    def _is_last_axis(self, tensor: str, axis: int) -> bool:
        """Is ``axis`` the last one of ``tensor`` (rank 2, or unknown and given as -1)?"""
        rank = len(self.graph.get_shape(tensor) or []) or None
        return axis == -1 or (axis == 1 and rank in (None, 2)) or (rank is not None and axis == rank - 1)

    def _read_split_output(self, node, tensor: str) -> LinearForm:
        axis = scalar_value(self.graph, node.input[0])
        whole = self.read(node.input[1])
        if axis not in (1.0, -1.0):
            return self._stop(node)
        return whole.split_columns(len(node.output), list(node.output).index(tensor))

    def step_source(self, tensor: str) -> Optional[str]:
        """'x' or 'h' when ``tensor`` is this step's input or previous state.

        Inference-time dropout leaves ``t * ones_like(t)`` behind (tf_keras), a constant of ones
        when the shape is static: seen through.
        """
        tensor = skip_identity(self.graph, tensor)
        if tensor == self.x_item:
            return "x"
        if tensor == self.h_prev:
            return "h"
        node = producer(self.graph, tensor)
        if node is not None and node.type == "Mul":
            for pos in (0, 1):
                if is_ones(self.graph, node.input[1 - pos]):
                    return self.step_source(node.input[pos])
        return None

    def const_ref(self, tensor: str) -> Optional[ConstRef]:
        """A reference to a constant: a loop-invariant body input (a captured weight), a Const (or a
        ConstantOfShape), or a slice of one. A loop-carried input (a state, whatever its shape) is no
        weight, even where the main graph feeds it a constant (a state's zeros, with a static batch)."""
        tensor = skip_identity(self.graph, tensor)
        if tensor in self._input_index:
            index = self._input_index[tensor]
            if not passes_through(self.graph, index):
                return None
            known = self._known.get(tensor)  # computed from constants before the loop
            return known if isinstance(known, ConstRef) else ConstRef(input_index=index)
        node = producer(self.graph, tensor) or outer_const(self.graph, tensor)
        if node is None:
            return None
        value = node.get_tensor_value(as_list=False) if node.is_const() else filled_array(self.graph, node)
        if value is not None:
            return ConstRef(value=value)
        if node.type in ("Slice", "Reshape", "Expand") or (node.type == "Split" and _is_onnx_split(self.graph, node)):
            whole, steps = self.const_ref(node.input[0]), self._onnx_const_steps(node, tensor)
            return None if whole is None or steps is None else functools.reduce(ConstRef.then, steps, whole)
        if node.type == "Split":
            whole = self.const_ref(node.input[1])
            axis = scalar_value(self.graph, node.input[0])
            if whole is None or axis is None:
                return None
            return whole.then(("split", int(axis), len(node.output), list(node.output).index(tensor)))
        if node.type == "StridedSlice":
            whole, columns = self.const_ref(node.input[0]), self._column_slice(node)
            return None if whole is None or columns is None else whole.then(("slice", -1) + columns)
        if node.type == "Unpack":  # tf_keras's GRU: bias[0], bias[1] with implementation=1
            whole, axis, parts = self.const_ref(node.input[0]), node.get_attr_value("axis", 0), len(node.output)
            index = list(node.output).index(tensor)
            return None if whole is None else whole.then(("split", axis, parts, index)).then(("squeeze", axis, 0, 0))
        if node.type == "Squeeze":
            whole = self.const_ref(node.input[0])
            axes = node.get_attr_value("squeeze_dims", []) or node.get_attr_value("axis", []) or \
                node.get_attr_value("axes", []) or (self._const_list(node.input[1]) if len(node.input) > 1 else [])
            return None if whole is None or len(axes) != 1 else whole.then(("squeeze", axes[0], 0, 0))
        return None

    def _onnx_const_steps(self, node, tensor: str) -> Optional[list]:
        """The steps that give output ``tensor`` of an ONNX ``Split``, ``Slice``, ``Reshape`` or ``Expand``
        of a constant: a Reshape or Expand to a constant shape (jax2onnx broadcasts a bias as
        ``Expand(Reshape(b, [1, N]), [1, N])``, its shapes written as a Concat of constants)."""
        if node.type in ("Split", "Slice"):
            steps = [self._onnx_split(node, tensor)] if node.type == "Split" else self._onnx_slice_steps(node)
            return None if steps is None or None in steps else steps
        concat = producer(self.graph, skip_identity(self.graph, node.input[1]))
        parts = [self._const_list(t) for t in (concat.input if concat is not None and concat.type == "Concat"
                                                else [node.input[1]])]
        if any(part is None for part in parts):
            return None
        shape = tuple(v for part in parts for v in part)
        return None if node.type == "Reshape" and 0 in shape else [(node.type.lower(), 0, shape, 0)]

    def _column_slice(self, node) -> Optional[tuple]:
        """(begin, end) on the last axis of ``t[:, a:b]`` (rank 2) or ``t[a:b]`` (rank 1), as Keras
        writes them (kernel and bias slices of implementation=1, GRU's slices of ``h @ R``)."""
        ends = [producer(self.graph, skip_identity(self.graph, t)) for t in node.input[1:4]]
        if any(n is None or not n.is_const() for n in ends):
            return None
        begin, end, strides = (n.get_tensor_value(as_list=True) for n in ends)
        masks = {k: node.get_attr_value(k, 0) for k in
                 ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
        last = len(begin) - 1
        whole_leading = all(masks["begin_mask"] & masks["end_mask"] & (1 << d) for d in range(last))
        if (len(begin) not in (1, 2) or strides != [1] * len(begin) or not whole_leading
                or masks["ellipsis_mask"] or masks["new_axis_mask"] or masks["shrink_axis_mask"]):
            return None
        start = 0 if masks["begin_mask"] & (1 << last) else begin[last]
        stop = None if masks["end_mask"] & (1 << last) else end[last]
        return start, stop
