# SPDX-License-Identifier: Apache-2.0
"""targets.py: each runtime is one entry, and every decision about runtimes is derived from the entries."""

import dataclasses

import pytest

from masked_lstm_rewriter import targets
from masked_lstm_rewriter.read.activation import Activation

SIGMOID, TANH, HARD = Activation("Sigmoid"), Activation("Tanh"), Activation("HardSigmoid", 0.2, 0.5)


@dataclasses.dataclass
class Cell:
    """What the checks read of a cell of the layer description."""

    kind: str = "LSTM"
    op: str = "LSTM"
    activations: tuple = (SIGMOID, TANH, TANH)
    carries_cell_state: bool = False


@dataclasses.dataclass
class Layer:
    cells: tuple = (Cell(),)
    mask: str = "mask"
    writes_sequence: bool = False


def test_the_targets_are_the_entries():
    assert targets.TARGETS == tuple(runtime.name for runtime in targets.RUNTIMES) == ("onnxruntime", "openvino")
    assert targets.runtime("openvino").title == "OpenVINO"


def test_default_mask_mode_comes_from_the_entry():
    assert [targets.default_mask_mode(t) for t in (None, "onnxruntime", "openvino")] == ["post", "post", "any"]


def test_check_runtime_names_the_choices_and_the_keyword():
    targets.check_runtime(None)
    with pytest.raises(ValueError, match="^runtime must be one of onnxruntime, openvino, not 'tensorrt'"):
        targets.check_runtime("tensorrt")
    with pytest.raises(ValueError, match="^target must be one of onnxruntime, openvino, not 'tensorrt'"):
        targets.check_runtime("tensorrt", "target")


def test_an_activation_the_runtime_does_not_compile_keeps_the_loop_for_it_only():
    layer = Layer((Cell(activations=(HARD, TANH, TANH)),))
    assert targets.target_refusal(layer, None) is None
    assert targets.target_refusal(layer, "onnxruntime") is None
    assert targets.target_refusal(layer, "openvino") == (
        "target openvino: OpenVINO's native LSTM op compiles only Sigmoid, Tanh, Relu activations, not HardSigmoid")


def test_an_activation_no_runtime_computes_exactly_keeps_the_loop_for_every_target():
    softplus = Activation("Softplus")
    for layer in (Layer((Cell(activations=(SIGMOID, softplus, TANH)),)), Layer((Cell(), Cell(activations=(softplus,))),
                                                                                mask=None)):
        for target in (None, *targets.TARGETS):
            assert targets.target_refusal(layer, target) == targets.REFUSED_ACTIVATION_REASONS["Softplus"]


def test_a_carried_cell_state_needs_a_saturating_recurrent_activation_on_every_target():
    relu = Layer((Cell(activations=(Activation("Relu"), TANH, TANH), carries_cell_state=True),))
    for target in (None, *targets.TARGETS):
        assert targets.target_refusal(relu, target).startswith("the final cell state is used and recurrent activation")
    assert targets.target_refusal(Layer((Cell(carries_cell_state=True),)), None) is None


def test_not_for_sees_the_native_ops():
    hard = Layer((Cell(activations=(HARD, TANH, TANH)),))
    assert targets.not_for(Layer(), "onnxruntime") == []
    vetoes = targets.not_for(hard, "onnxruntime")
    assert [(v.runtime, v.remedy) for v in vetoes] == [("openvino", "convert with runtime='openvino'")]
    assert targets.not_for(hard, "openvino") == []


def test_a_new_runtime_constraint_is_one_field_of_its_entry(monkeypatch):
    """A runtime whose native ops lack Tanh: one entry, and the refusal follows from it."""
    strict = targets.Runtime("strict", "Strict", activations=("Sigmoid",))
    monkeypatch.setattr(targets, "_BY_NAME", {**targets._BY_NAME, "strict": strict})  # pylint: disable=protected-access
    assert targets.target_refusal(Layer(), "strict") == (
        "target strict: Strict's native LSTM op compiles only Sigmoid activations, not Tanh")


def test_shared_swaps_are_kept_apart_while_a_runtime_scrambles_them():
    assert targets.shared_swaps_scrambled() is any(r.scrambles_shared_swaps for r in targets.RUNTIMES) is True


def lstm_model(path, activations):
    """A model of one bare LSTM node with these activations, saved at ``path``."""
    from onnx import TensorProto, helper, save  # pylint: disable=import-outside-toplevel
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=2, activations=activations)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                               for n in ("x", "W", "R")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    save(helper.make_model(graph), str(path))
    return str(path)


def test_the_corpus_checker_expects_a_refusal_where_the_entry_says_so(tmp_path):
    from masked_lstm_rewriter.corpus.check import known_refusal  # pylint: disable=import-outside-toplevel
    hard = lstm_model(tmp_path / "hard.onnx", ["HardSigmoid", "Tanh", "Tanh"])
    plain = lstm_model(tmp_path / "plain.onnx", ["Sigmoid", "Tanh", "Tanh"])
    assert known_refusal({}, "openvino", hard) == (
        "Unsupported activation function", "OpenVINO's native LSTM op compiles no HardSigmoid activation")
    assert known_refusal({}, "onnxruntime", hard) is None and known_refusal({}, "openvino", plain) is None


def test_nodes_run_up_to_the_longest_row_where_a_runtime_runs_every_step():
    assert targets.cut_to_longest("openvino") and targets.cut_to_longest(None)
    assert not targets.cut_to_longest("onnxruntime")


def test_steps_not_run_are_appended_by_a_concat_where_a_runtime_cannot_compile_the_pad():
    assert targets.steps_appended_by_concat("openvino") and targets.steps_appended_by_concat(None)
    assert not targets.steps_appended_by_concat("onnxruntime")


def test_outputs_past_the_lengths_are_read_as_zeros_only_where_every_runtime_writes_them():
    assert targets.zeros_past_lengths("onnxruntime")
    assert not targets.zeros_past_lengths("openvino") and not targets.zeros_past_lengths(None)


def test_a_zero_initial_state_is_explicit_only_where_a_runtime_folds_transposes_then():
    assert targets.explicit_zero_state("openvino") and targets.explicit_zero_state(None)
    assert not targets.explicit_zero_state("onnxruntime")


def test_a_sequence_read_from_the_zeros_past_the_lengths_is_not_for_openvino():
    sequence = Layer(writes_sequence=True)
    vetoes = targets.not_for(sequence, "onnxruntime")
    assert [(v.runtime, v.remedy) for v in vetoes] == [("openvino", "convert with runtime='openvino'")]
    assert vetoes[0].reason == "OpenVINO writes other values than zeros there with dynamic shapes"
    assert targets.not_for(sequence, None) == []
    assert targets.not_for(sequence, "openvino") == []
    assert targets.not_for(Layer(), "onnxruntime") == []  # the last output reads no zeros
    assert targets.not_for(Layer(mask=None, writes_sequence=True), "onnxruntime") == []


def test_a_bidirectional_node_is_slow_where_any_runtime_of_the_target_runs_it_slower():
    """onnxruntime runs a bidirectional LSTM or GRU node slower than two forward nodes, OpenVINO every
    op's; a runtime that compiles no such node has no say."""
    assert targets.bidirectional_slow("GRU", None) == "onnxruntime"
    assert targets.bidirectional_slow("RNN", None) == "OpenVINO"
    assert targets.bidirectional_slow("RNN", "onnxruntime") is None
    assert targets.bidirectional_slow("RNN", "openvino") == "OpenVINO"
    assert targets.bidirectional_slow("LSTM", "openvino", ["HardSigmoid", "Tanh", "Tanh"]) is None
    assert targets.bidirectional_slow("RNN", None, ["Softsign"]) is None  # onnxruntime's is as fast


def _graph_with(op_type: str, numerator_const: bool = False):
    """A tf2onnx graph computing ``op_type`` of x (with a constant or x as the first input of a division)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto  # pylint: disable=import-outside-toplevel
    from tf2onnx.graph import Graph  # pylint: disable=import-outside-toplevel
    graph = Graph([], opset=15)
    graph.add_graph_input("x", TensorProto.FLOAT, [2, 3])
    two = graph.make_const("two", np.array(2.0, np.float32)).output[0]
    inputs = ["x"] if op_type in targets.RECIPROCAL_OPS else ([two, "x"] if numerator_const else ["x", two])
    graph.make_node(op_type, inputs, name="the_division")
    return graph


@pytest.mark.parametrize("op_type, numerator_const, vetoed", [
    ("Rsqrt", False, True), ("Reciprocal", False, True), ("Inv", False, True),
    ("Div", True, True), ("RealDiv", True, True), ("Div", False, False), ("Mul", True, False),
])
def test_a_division_by_a_tensor_vetoes_the_schedule_where_a_runtime_fuses_it_wrongly(op_type, numerator_const, vetoed):
    graph = _graph_with(op_type, numerator_const)
    for target in (None, "openvino"):
        veto = targets.schedule_veto(graph, target)
        assert (veto is not None) == vetoed, veto
        assert veto is None or ("OpenVINO" in veto and f"{op_type} node 'the_division'" in veto)
    assert targets.schedule_veto(graph, "onnxruntime") is None


def test_a_stack_of_cells_gets_the_schedule_only_where_every_runtime_compiles_it():
    assert targets.schedules_cell_stacks("onnxruntime")
    assert not targets.schedules_cell_stacks("openvino") and not targets.schedules_cell_stacks(None)


def test_the_schedule_cuts_time_as_its_runtime_entry_says():
    """A runtime whose segments cost more gets fewer of them; a model for any runtime cuts between
    them."""
    fine, coarse, between = (targets.schedule_cuts(t) for t in ("onnxruntime", "openvino", None))
    assert len(fine[0]) > len(between[0]) > len(coarse[0]) and fine[1] < between[1] < coarse[1]
    for ranks, _ in (fine, coarse, between):
        assert all(0 < rank < 16 for rank in ranks) and list(ranks) == sorted(set(ranks), reverse=True)

