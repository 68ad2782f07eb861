# SPDX-License-Identifier: Apache-2.0
"""Emit stage, the length-aware schedule (``schedule=True``): the golden structure of a layer's If, and
its single node's branch against numpy and stock tf2onnx's Loop on every runtime.

The batches of ``_graphs.py`` have fewer rows than the plan's ``MIN_BATCH``, so they run the single
node's branch (the segments are checked against Keras in tests/test_schedule.py). The structure:

* the layer's If returns, first, the shape its rows are read with, and the Reshapes after it read
  that shape: a shape known only at run time, which is what keeps OpenVINO from resizing other
  tensors into the If's outputs before they are read (emit.node._rows_shape);
* the single node's branch holds that node alone, its output the If's rows (its input made outside
  the If, every fix-up after it: anything else in the branch slows the node down on onnxruntime or
  OpenVINO); for any runtime a zero row is appended to the rows after the If (a Pad), for onnxruntime
  they are gathered from as they are.
"""

import pytest

import _graphs as G
from _harness import check_rewrites
from masked_lstm_rewriter.plan.schedule import SCHEDULE_NAME

KINDS = [pytest.param(G.Loop("LSTM"), id="lstm"), pytest.param(G.Loop("LSTM", backward=True), id="lstm-backward"),
         pytest.param(G.Loop("GRU"), id="gru"), pytest.param(G.Loop("RNN"), id="simple_rnn")]


def layer_if(model):
    (node,) = [n for n in model.graph.node if n.op_type == "If" and n.name.startswith(SCHEDULE_NAME)
               and "_plan" not in n.name]
    return node


def branch(node, name):
    return next(a.g for a in node.attribute if a.name == name)


@pytest.mark.parametrize("runtime", [None, "onnxruntime"])
@pytest.mark.parametrize("mode", ["post", "any"])
@pytest.mark.parametrize("spec", KINDS)
def test_the_single_nodes_branch_matches(spec, mode, runtime):
    model, _ = check_rewrites(G.WhileLoop(spec, runtime=runtime, schedule=True), mode)
    node = layer_if(model)
    readers = [n for n in model.graph.node if node.output[0] in n.input]
    assert readers and all(n.op_type == "Reshape" and list(n.input)[1] == node.output[0] for n in readers)
    single = branch(node, "else_branch")
    (native,) = [n for n in single.node if n.op_type == spec.kind]
    assert list(single.node) == [native]  # its shape output a constant of the branch
    assert single.output[1].name == native.output[0]
    (reshape,) = [n for n in readers if node.output[1] in n.input]
    after = {n.op_type for n in model.graph.node if reshape.output[0] in n.input}
    assert after == ({"Gather"} if runtime == "onnxruntime" else {"Pad"})
