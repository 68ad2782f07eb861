# SPDX-License-Identifier: Apache-2.0
"""The GRU cell kind: ``h = z*h + (1-z)*hh``; ONNX ``GRU`` with ``linear_before_reset`` from Keras's
``reset_after``; state h."""

from __future__ import annotations

from ..failure import Refusal
from ..graph import mul_operands, skip_identity
from ..read.gates import one_minus, read_gate, read_gates, sum_of_products
from ..read.linear import NOT_READ, LinearForm, LinearReader, Product
from .kind import CellAlgebra, CellKind


def read_gru_cell(graph, x_item, h_prev, h_new, cell_state=None):  # pylint: disable=unused-argument
    """Gate forms and activations from ``h_new = z * h_prev + (1 - z) * hh``, or None when the
    step does not have that shape (then it is no GRU; a Refusal says why a GRU is not supported).

    ``hh = act(x W_h + b + r * (h R_h + Rb))`` (``reset_after=True``, ONNX ``linear_before_reset=1``)
    or ``act(x W_h + b + (r * h) R_h)`` (``reset_after=False``)."""
    products = sum_of_products(graph, h_new)
    keep = [p for p in products or () if h_prev in p]
    if len(keep) != 1:
        return None
    z_gate = next(t for t in keep[0] if t != h_prev)
    update = products[1 - products.index(keep[0])]
    found = [(a, b) for a, b in (update, update[::-1]) if one_minus(graph, a) == z_gate]
    if not found:
        return None
    hh = found[0][1]

    reader = LinearReader(graph, x_item, h_prev)
    candidate = {}

    def read_candidate(tensor):
        candidate["r"], form, candidate["linear_before_reset"] = _read_candidate(graph, reader, x_item, tensor)
        return form
    act, h_form = read_gate(graph, reader, hh, "GRU", read_candidate)
    (recurrent_act, z_form), (r_act, r_form) = read_gates(graph, reader, (z_gate, candidate["r"]), "GRU")
    if r_act != recurrent_act:
        raise Refusal("the z and r gates of the GRU use different activations")
    return CellAlgebra("GRU", {"z": z_form, "r": r_form, "h": h_form}, (recurrent_act, act),
                       (("linear_before_reset", candidate["linear_before_reset"]),))


def _read_candidate(graph, reader, x_item, hh_pre):
    """(r, the candidate's form, linear_before_reset) from ``x W_h + b + r * (h R_h + Rb)`` or
    ``x W_h + b + (r * h) R_h``; raises a Refusal at the last node not read when it is neither.
    The sum's terms may come in any grouping (TensorFlow moves hard_sigmoid's ``+ 3`` next to the
    reset term, tf2onnx fuses a product and the term added to it into a Gemm)."""
    stops = [None]

    def attempt(read, *args):
        try:
            return read(*args)
        except Refusal as stop:
            stops.append(stop.node)
            return None

    x_form, rest = None, []
    for term in reader.sum_terms(hh_pre):
        form = attempt(reader.read_term, term)
        if form is not None and form.recurrent is None:
            x_form = form if x_form is None else x_form.add(form)
            if x_form is None:
                raise Refusal(NOT_READ, stops[-1])
        else:
            rest.append(term)
    if x_form is None or x_form.kernel is None or len(rest) != 1:
        raise Refusal(NOT_READ, stops[-1])
    factor, r_part = rest[0]
    found = _reset_after(graph, r_part, factor, lambda rh: attempt(reader.read, rh)) \
        if not isinstance(r_part, Product) else _reset_before(graph, reader, x_item, r_part, factor)
    if found is None:
        raise Refusal(NOT_READ, stops[-1])
    r_gate, rh_form, linear_before_reset = found
    return r_gate, LinearForm(x_form.kernel, rh_form.recurrent, x_form.bias, rh_form.bias), linear_before_reset


def _reset_after(graph, r_part, factor, read):
    """(r, the form of ``h R_h + Rb``, 1) from ``r * (h R_h + Rb)`` (Keras ``reset_after=True``), or None."""
    operands = mul_operands(graph, r_part) or []
    for r_gate, rh in (operands, operands[::-1]) if operands else ():
        rh_form = read(rh)
        if rh_form is not None and rh_form.kernel is None and rh_form.recurrent is not None:
            return r_gate, rh_form.scaled(factor), 1
    return None


def _reset_before(graph, reader, x_item, r_part, factor):
    """(r, the form of ``(r * h) R_h``, 0) (Keras ``reset_after=False``), or None: with
    linear_before_reset=0, ONNX adds Rb outside the product, as a bias here would be."""
    reset_h = mul_operands(graph, skip_identity(graph, r_part.a))
    sources = [reader.step_source(t) for t in reset_h or ()]
    if sources.count("h") != 1:
        return None
    r_gate = reset_h[1 - sources.index("h")]
    try:
        rh_form = LinearReader(graph, x_item, skip_identity(graph, r_part.a)).read_term((factor, r_part))
    except Refusal:
        return None
    if rh_form.kernel is None and rh_form.recurrent is not None:
        return r_gate, rh_form, 0
    return None


KIND = CellKind(name="GRU", op="GRU", keras_name="GRU", keras_gates=("z", "r", "h"), onnx_gates=("z", "r", "h"), states=1,
                read=read_gru_cell, cudnn_mode="gru", cudnn_gates=("r", "z", "h"), default_activations=("Sigmoid", "Tanh"))
