# SPDX-License-Identifier: Apache-2.0
"""The corpus check's own logic, on hand-made models: no conversion, no TensorFlow needed.

Above all, that a change in the native nodes the plugin emits (another emitter: a Bidirectional
layer as two forward nodes, say) fails with a message that says which op, how many nodes on each
side and in which directions, and how to record them again.
"""

import copy

import pytest
from onnx import TensorProto, helper

from masked_lstm_rewriter.corpus import check, command, convert, manifest
from masked_lstm_rewriter.report import ConversionReport, LayerReport

ENTRY = manifest.entries_for(manifest.load_manifest(), "keras3", "keras3/bidirectional_concat/saved_model")[0]


def model_with(nodes, inputs=(("tokens", [None, None]),)):
    """A graph of ``nodes`` (not meant to run: the op checks only read it)."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, TensorProto.INT32, shape) for name, shape in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph)


def lstm(direction, name):
    return helper.make_node("LSTM", ["x", "w", "r"], [name], direction=direction, hidden_size=4)


def test_the_recorded_ops_pass():
    assert check.op_problems(ENTRY, model_with([lstm("forward", "a"), lstm("forward", "y")])) == []


def test_a_different_node_count_says_what_differs_and_how_to_record_it():
    problems = check.op_problems(ENTRY, model_with([lstm("bidirectional", "y")]))
    assert len(problems) == 1
    assert "LSTM: 1 node (bidirectional) here, 2 nodes (forward, forward) in the manifest" in problems[0]
    assert "tools/make_corpus.py --ops-only" in problems[0]
    assert ENTRY["expected_ops"]["recorded_with"] in problems[0]


def test_another_op_type_and_a_loop_are_both_named():
    loop = helper.make_node("Loop", ["m", "c"], ["y"], body=helper.make_graph([], "body", [], []))
    gru = helper.make_node("GRU", ["x", "w", "r"], ["g"], hidden_size=4)
    problems = check.op_problems(ENTRY, model_with([gru, loop]))
    assert "1 Loop node(s) where the manifest expects 0" in problems[0]
    assert "GRU: 1 node (forward) here, 0 nodes in the manifest" in problems[1]
    assert "LSTM: 0 nodes here, 2 nodes (forward, forward) in the manifest" in problems[1]


def report_of(*refusals, rewritten=1):
    """A conversion report: ``rewritten`` layers made native, one layer left as a Loop per reason."""
    return ConversionReport(tuple(LayerReport(f"native_{i}", True, "GRU, forward", "post")
                                  for i in range(rewritten)) +
                            tuple(LayerReport(f"loop_{i}", False, reason, "post") for i, reason in enumerate(refusals)))


def test_a_layer_left_as_a_loop_passes_only_for_the_reason_the_entry_expects():
    """A refusal entry (float64, a target's activation) checks that the plugin still refuses the
    layer, and for that reason: neither a rewrite nor another refusal passes."""
    entry = {"masked_layers": 2, "left_as_loop": ["target openvino"]}
    convert.check_report(entry, report_of("target openvino: OpenVINO's native LSTM op compiles only ..."))
    with pytest.raises(check.CorpusFailure, match="layers left as a Loop: loop_0: left as a Loop: the weights"):
        convert.check_report(entry, report_of("the weights are not constants"))
    with pytest.raises(check.CorpusFailure, match=r"no layer was left as a Loop for the reason\(s\) \['target openvino'\]"):
        convert.check_report(entry, report_of(rewritten=2))
    with pytest.raises(check.CorpusFailure, match="layers left as a Loop"):
        convert.check_report({"masked_layers": 2}, report_of("target openvino: ..."))


def test_an_entry_expects_one_loop_per_refused_layer():
    entry = {"expected_ops": {"native": {"GRU": ["forward"]}, "Loop": 1}, "left_as_loop": ["float64 layer"]}
    assert manifest.expected_ops_problems(entry) == []
    assert manifest.expected_ops_problems(dict(entry, left_as_loop=[]))
    assert manifest.expected_ops_problems(dict(entry, expected_ops={"native": {}, "Loop": 0}))


def test_the_signature_must_match_the_model_inputs():
    entry = copy.deepcopy(ENTRY)
    assert check.signature_problems(entry, model_with([])) == []
    entry["inputs"][0]["shape"] = [1, None]
    assert check.signature_problems(entry, model_with([])) == [
        "input tokens has shape [None, None] in the model, the signature [1, None] in the manifest (None: dynamic)"]


def test_a_batch_that_does_not_fit_the_signature_is_a_manifest_problem():
    entry = copy.deepcopy(ENTRY)
    assert manifest.entry_problems(entry) == []
    entry["inputs"][0]["shape"] = [1, None]
    problems = manifest.entry_problems(entry)
    assert any("batch 0: input 'tokens' has shape [5, 7], which does not fit the signature [1, None]" in p
               for p in problems), problems


def test_a_nan_never_passes():
    import numpy as np  # pylint: disable=import-outside-toplevel
    error, problem = check.compare(np.array([0.0, np.nan]), np.array([0.0, 0.0]), 1e-5)
    assert error == float("inf") and "at index (1,)" in problem


@pytest.mark.parametrize("argv, message", [
    (["--opsets", "10"], "opsets must be within 11-18"),
    (["--opsets", "x"], "opsets are numbers or ranges"),
    (["--path", "library,foo"], "paths are among library, cli, tf2onnx"),
    (["--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        command.parse_args(argv)
    assert done.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_corpus_is_one_error_and_a_failed_count(tmp_path, capsys):
    assert command.main(["--corpus", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "cannot read the corpus manifest" in err and out.strip().splitlines()[-1] == "0 passed, 1 failed, 0 skipped"


# --- entries without a mask ---------------------------------------------------------------------

UNMASKED = manifest.entries_for(manifest.load_manifest(), "keras3", "keras3/unmasked_gru/saved_model")[0]


def gru(name, lengths=""):
    return helper.make_node("GRU", ["x", "w", "r", "", lengths], [name], name=name, hidden_size=4)


def test_the_corpus_has_the_unmasked_layers_stock_leaves_as_loops():
    """Keras 3: GRU (both reset_after, go_backwards), SimpleRNN, Bidirectional(GRU), hard_sigmoid LSTM;
    tf_keras: GRU(reset_after=False), SimpleRNN (its other layers are stock's native ops)."""
    cases = {flavour: {e["case"] for e in manifest.load_manifest()["entries"]  # (cudnn_* entries: other tests)
                       if e["flavour"] == flavour and e.get("unmasked") and e["case"].startswith("unmasked_")}
             for flavour in manifest.FLAVOURS}
    assert cases["keras3"] == {"unmasked_gru", "unmasked_gru_reset_before_state", "unmasked_gru_go_backwards",
                               "unmasked_simple_rnn", "unmasked_bidirectional_gru", "unmasked_hard_sigmoid"}
    assert cases["tf_keras"] == {"unmasked_gru_reset_before_state", "unmasked_simple_rnn"}


def test_an_unmasked_entry_has_no_guard_batch():
    assert UNMASKED["mask_mode"] == "post" and UNMASKED["must_fail"] is None
    assert manifest.entry_problems(UNMASKED) == []
    problems = manifest.entry_problems(dict(UNMASKED, must_fail=ENTRY["must_fail"]))
    assert any("exactly the 'post' entries with a mask" in p and "(no mask)" in p for p in problems), problems


def test_an_unmasked_model_has_no_guard_and_no_lengths():
    features = (("features", [None, None, 3]),)
    assert check.unmasked_problems(UNMASKED, model_with([gru("y")], features)) == []
    guard = helper.make_node("Split", ["x"], ["s"], name="masked_lstm_rewriter: the mask is not post-padded__3")
    problems = check.unmasked_problems(UNMASKED, model_with([guard, gru("y", "lengths")], features))
    assert len(problems) == 2, problems
    assert "a guard node" in problems[0] and "GRU node y is given lengths (lengths)" in problems[1]
    assert check.unmasked_problems(ENTRY, model_with([guard, gru("y", "lengths")])) == []  # a masked entry may


def test_an_unmasked_entry_reports_its_layers_as_unmasked():
    unmasked = ConversionReport((LayerReport("gru", True, "GRU, forward", "post", masked=False),))
    convert.check_report(UNMASKED, unmasked)
    with pytest.raises(check.CorpusFailure, match="marks a layer of a model without a mask as masked"):
        convert.check_report(UNMASKED, report_of())


# --- ONNX-file entries ------------------------------------------------------------------------------

ONNX_FILES = [e for e in manifest.load_manifest()["entries"] if manifest.is_onnx_file(e)]
ONNX_ENTRY = next(e for e in ONNX_FILES if e["name"] == "onnx/tf2onnx/keras3_emb_lstm_seq_op15/post")


def test_the_corpus_has_onnx_files_of_both_producers_in_both_modes():
    cases = {e["case"]: {f["mask_mode"] for f in ONNX_FILES if f["case"] == e["case"]} for e in ONNX_FILES}
    assert {case.split("/")[0] for case in cases} == {"tf2onnx", "jax"}
    assert {"post", "any"} in cases.values() and any(e["unmasked"] for e in ONNX_FILES)
    for entry in ONNX_FILES:
        assert entry["format"] == "onnx" and entry["flavour"] is None and entry["path"].endswith(".onnx")
        assert entry["expected_ops"]["Loop"] == 0 and entry["expected_ops"]["native"], entry["name"]
        assert manifest.entry_problems(entry) == [], entry["name"]
        assert manifest.reference(entry) == ("keras" if entry["case"].startswith("jax/") else "original")
        assert (entry["must_fail"] is not None) == (entry["mask_mode"] == "post" and not entry["unmasked"])


def test_onnx_files_run_once_with_the_first_flavour():
    """They need no Keras: the keras3 process checks them (the command's and the default pytest run's)."""
    document = manifest.load_manifest()
    assert all(e in manifest.entries_for(document, "keras3") for e in ONNX_FILES)
    assert not [e for e in manifest.entries_for(document, "tf_keras") if manifest.is_onnx_file(e)]
    jax_files = [e for e in ONNX_FILES if e["case"].startswith("jax/")]
    assert manifest.entries_for(document, "keras3", "onnx/jax/") == jax_files


def test_an_onnx_file_keeps_its_own_opset():
    keras_entry = ENTRY
    swept = manifest.at_opsets([keras_entry, ONNX_ENTRY], (13, 18))
    assert [(e["name"], e["opset"]) for e in swept] == [
        (keras_entry["name"], 13), (keras_entry["name"], 18), (ONNX_ENTRY["name"], ONNX_ENTRY["opset"])]


def test_an_onnx_file_is_rewritten_by_the_library_and_the_command_line():
    argv, env = convert.command_for("cli", ONNX_ENTRY, "/corpus", "/out.onnx", python="py")
    assert argv == ["py", "-m", "masked_lstm_rewriter", "rewrite", f"/corpus/{ONNX_ENTRY['path']}", "--output",
                    "/out.onnx", "--mask-mode", "post"] and env == {}
    assert convert.path_applies("library", ONNX_ENTRY) == (True, "")
    applies, why = convert.path_applies("tf2onnx", ONNX_ENTRY)
    assert not applies and "rewrite" in why
    with pytest.raises(ValueError, match="converts Keras models"):
        convert.command_for("tf2onnx", ONNX_ENTRY, "/corpus", "/out.onnx")
    assert convert.path_applies("tf2onnx", ENTRY) == (True, "")


def test_a_loop_left_in_an_onnx_file_says_how_to_record_its_ops_again():
    loop = helper.make_node("Loop", ["m", "c"], ["y"], body=helper.make_graph([], "body", [], []))
    problems = check.op_problems(ONNX_ENTRY, model_with([loop], (("ids", [None, None]),)))
    assert "1 Loop node(s) where the manifest expects 0" in problems[0]
    assert "LSTM: 0 nodes here, 1 node (forward) in the manifest" in problems[1]
    assert "tools/make_corpus.py --onnx --ops-only" in problems[1]


def test_other_numbers_than_the_original_files_name_it():
    import numpy as np  # pylint: disable=import-outside-toplevel
    _, problem = check.compare(np.array([0.0, 1.0]), np.array([0.0, 0.5]), 1e-5, manifest.reference(ONNX_ENTRY))
    assert problem == "max |onnx - original| = 0.5 > 1e-05 at index (1,)"


@pytest.mark.parametrize("version, readable", [(1, False), (2, True), (3, True), (4, False)])
def test_the_manifest_format_is_versioned(version, readable, tmp_path):
    (tmp_path / manifest.MANIFEST).write_text(f'{{"format_version": {version}, "entries": []}}')
    if readable:
        assert manifest.load_manifest(str(tmp_path))["format_version"] == version
    else:
        with pytest.raises(manifest.CorpusError, match=f"format_version {version}; this package reads 2 and 3"):
            manifest.load_manifest(str(tmp_path))
