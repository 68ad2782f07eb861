# SPDX-License-Identifier: Apache-2.0
"""Emit stage, the length-aware schedule (``schedule=True``): the golden structure of a layer's If, and
its single node's branch against numpy and stock tf2onnx's Loop on every runtime.

The batches of ``_graphs.py`` have fewer rows than the plan's ``MIN_BATCH``, so they run the single
node's branch (the segments are checked against Keras in tests/test_schedule.py). The structure:

* the layer's If returns, first, the shape its rows are read with, and the Reshapes after it read
  that shape: a shape known only at run time, which is what keeps OpenVINO from resizing other
  tensors into the If's outputs before they are read (emit.node._rows_shape);
* for any runtime the single node's branch appends a zero row to its rows (a Concat) and reads its
  input cut at the longest row; for onnxruntime it returns the node's own output.
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
    made_by = {output: n for n in single.node for output in n.output}
    (native,) = [n for n in single.node if n.op_type == spec.kind]
    rows = made_by[single.output[1].name]
    if runtime == "onnxruntime":
        assert rows is native
    else:
        assert rows.op_type == "Concat" and made_by[native.input[0]].op_type in ("Slice", "Transpose", "Gather")
