# SPDX-License-Identifier: Apache-2.0
"""Unmasked loops that stock tf2onnx leaves as Loops become one native node, with no mask machinery."""

import numpy as np
import pytest

from _graphs import POST_PADDED, Loop, assert_matches_reference, convert_loop

KINDS = [Loop(kind="GRU", mask="none"), Loop(kind="GRU", reset_after=False, mask="none"),
         Loop(kind="RNN", mask="none"), Loop(kind="LSTM", mask="none")]
MASK_MACHINERY = {"Split", "ScatterElements", "CumSum", "ReverseSequence", "Where", "Loop"}


def ids(spec):
    return f"{spec.kind}{'' if spec.reset_after else '-reset_before'}-{spec.recurrent_activation}"


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("spec", KINDS, ids=ids)
def test_one_native_node_and_keras_numbers(spec, backward):
    spec = Loop(**{**spec.__dict__, "backward": backward})
    converted, weights = convert_loop(spec)
    assert [n.op_type for n in converted.native_nodes()] == [spec.kind]
    assert not MASK_MACHINERY & set(converted.ops()), converted.ops()
    node = converted.native_nodes()[0]
    assert node.input[4] == "" if len(node.input) > 4 else True  # no sequence_lens
    assert_matches_reference(spec, converted, weights, np.ones_like(POST_PADDED))


@pytest.mark.parametrize("spec", KINDS[:3], ids=ids)
def test_the_report_marks_the_layer_as_unmasked(spec):
    converted, _ = convert_loop(spec)
    (layer,) = converted.report.layers
    assert layer.rewritten and not layer.masked and str(layer).endswith("(no mask)")


def test_last_output_only():
    spec = Loop(kind="GRU", mask="none", sequence=False)
    converted, weights = convert_loop(spec)
    assert [n.op_type for n in converted.native_nodes()] == ["GRU"] and "Loop" not in converted.ops()
    assert_matches_reference(spec, converted, weights, np.ones_like(POST_PADDED))


@pytest.mark.parametrize("mode, opset", [("any", 15), ("post", 13), ("post", 18)])
def test_every_mode_and_opset(mode, opset):
    """No mask, so the mask mode changes nothing; the nodes are emitted in each opset's form."""
    spec = Loop(kind="GRU", mask="none", backward=True)
    converted, weights = convert_loop(spec, mode, opset=opset)
    assert [n.op_type for n in converted.native_nodes()] == ["GRU"]
    assert not MASK_MACHINERY & set(converted.ops()), converted.ops()
    assert_matches_reference(spec, converted, weights, np.ones_like(POST_PADDED))


def test_below_opset_11_the_loop_stays_with_its_reason():
    converted, weights = convert_loop(Loop(kind="GRU", mask="none"), "post", opset=10)
    assert "Loop" in converted.ops() and not converted.native_nodes()
    (layer,) = converted.report.left_as_loop
    assert layer.detail.startswith("opset 10:") and not layer.masked
    assert_matches_reference(Loop(kind="GRU", mask="none"), converted, weights, np.ones_like(POST_PADDED))
