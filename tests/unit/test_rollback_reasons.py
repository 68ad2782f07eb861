# SPDX-License-Identifier: Apache-2.0
"""A rewrite that raises an exception nobody foresaw says where: the node the failing code held, the
stage in words, the module and function, then the exception; and the layer stays the exact Loop."""

import pytest

from masked_lstm_rewriter.emit import read_alone
from masked_lstm_rewriter.plan import masks

import _graphs as G

SPEC = G.Loop("GRU", outputs=("seq", "last"))


def _convert_failing(monkeypatch, module, name):
    def broken(*args, **kwargs):
        raise KeyError("unforeseen")

    monkeypatch.setattr(module, name, broken)
    fn, signature, weights = G.masked_loop(SPEC)
    return G.convert(fn, signature, "post", returned=SPEC.returned), weights


@pytest.mark.parametrize("module, name, reason", [
    # a node is held: the Transpose the barrier check started from
    (read_alone, "_swap_derived", "rewrite failed at node '{node}' (Transpose) while giving the native node an "
                                  "input of its own (emit/read_alone.py, _may_read_a_shared_swap): KeyError: "),
    # none is: the stage alone
    (masks.MaskPlanner, "_guard_post_padded", "rewrite failed while computing the mask's lengths, guard or "
                                              "reordering (plan/masks.py, _emit): KeyError: "),
], ids=["at a node", "no node"])
def test_the_reason_names_the_stage_and_the_node(monkeypatch, module, name, reason):
    converted, weights = _convert_failing(monkeypatch, module, name)
    assert "Loop" in converted.ops() and not converted.native_nodes()
    (detail,) = G.reasons(converted)
    prefix, _, rest = reason.partition("{node}")
    assert detail.startswith(prefix) and rest in detail and detail.endswith("'unforeseen'"), detail
    if "{node}" in reason:
        node = detail[len(prefix):].split("'")[0]
        assert node and "transpose" in node.lower(), detail
    G.assert_matches_reference(SPEC, converted, weights, G.POST_PADDED)

