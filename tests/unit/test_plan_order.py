# SPDX-License-Identifier: Apache-2.0
"""plan/order.py: layers are emitted bottom-up, whatever order a source lists them in (a stack whose
upper layer came first closed a cycle through the mask plan they share: tests/unit/test_source_onnx_loop.py's
``masking_lstm_stack_states`` files)."""

from __future__ import annotations

from types import SimpleNamespace

from masked_lstm_rewriter.plan.order import bottom_up


class _Graph:
    """What the walk asks of tf2onnx's graph: the node computing a tensor."""

    def __init__(self, *nodes):
        self._by_output = {name: node for node in nodes for name in node.output}

    def get_node_by_output(self, name, search_in_parent_graphs=True):  # pylint: disable=unused-argument
        return self._by_output.get(name)


def _node(name, inputs, outputs):
    return SimpleNamespace(name=name, input=list(inputs), output=list(outputs))


def _layer(name, x, mask, loop):
    """A layer whose node reads nothing itself: its input and mask are read from outside (an ONNX Loop)."""
    return SimpleNamespace(layer=name, x_source=x, mask=mask, while_node=loop if loop else _node(name, [], []))


def test_a_layer_reading_another_comes_after_it():
    lower_loop = _node("lower", ["x_tm", "mask"], ["lower:0"])
    graph = _Graph(_node("transpose", ["x"], ["x_tm"]), lower_loop,
                   _node("seq", ["lower:0"], ["seq"]), _node("upper_in", ["seq"], ["seq_tm"]))
    lower, upper = _layer("lower", "x_tm", "mask", lower_loop), _layer("upper", "seq_tm", "mask", None)
    assert [layer.layer for layer in bottom_up(graph, [upper, lower])] == ["lower", "upper"]
    assert [layer.layer for layer in bottom_up(graph, [lower, upper])] == ["lower", "upper"]


def test_a_mask_computed_from_another_layer_orders_too():
    first_loop = _node("first", ["x_tm"], ["first:0"])
    graph = _Graph(first_loop, _node("masking", ["first:0"], ["mask2"]))
    first, second = _layer("first", "x_tm", None, first_loop), _layer("second", "y_tm", "mask2", None)
    assert [layer.layer for layer in bottom_up(graph, [second, first])] == ["first", "second"]


def test_independent_layers_keep_their_order():
    graph = _Graph(_node("a", ["x"], ["a:0"]), _node("b", ["x"], ["b:0"]))
    layers = [_layer(name, "x", "mask", None) for name in ("b", "a", "c")]
    assert bottom_up(graph, layers) == layers


def test_what_the_node_itself_reads_orders_too():
    """A While loop reads its input through a TensorList built outside it, a cuDNN op directly."""
    lower_loop = _node("lower", ["x_tm"], ["lower:0"])
    graph = _Graph(lower_loop, _node("list", ["lower:0"], ["list:0"]))
    upper_loop = _node("upper", ["list:0"], ["upper:0"])
    lower, upper = _layer("lower", "x", None, lower_loop), _layer("upper", "", None, upper_loop)
    assert [layer.layer for layer in bottom_up(graph, [upper, lower])] == ["lower", "upper"]
