# SPDX-License-Identifier: Apache-2.0
"""Streaming through the command line's switch and through ``verify``, without Keras.

* ``--streaming`` / ``--no-streaming``: one of them, else the model decides (a Keras file's stateful
  layers, tests/test_streaming_front_doors.py); what the library says of stateful layers is shown
  as progress lines in the command line's terms.
* ``verify`` on a streaming file (``rewrite_onnx(streaming=True)`` of a stock tf2onnx file): its
  state inputs are fed zeros, its own outputs are compared with the file it was rewritten from at
  every position (verify's batches: rows of different lengths, a full and an empty row), its state
  outputs are left out and named in the notes and the verdict. A streaming reference is fed zeros
  too.
"""

from __future__ import annotations

import logging
import os

import onnx
import pytest

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter import cli, cli_streaming
from _onnx_files import DATA

STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_lstm_seq_op15.onnx")  # ids -> Embedding(10) -> LSTM


@pytest.mark.parametrize("args, streaming", [([], None), (["--streaming"], True), (["--no-streaming"], False),
                                             (["--streaming", "--streaming"], True)])
def test_the_switch_has_three_positions(args, streaming):
    assert cli_streaming.pop_streaming(["model.keras", *args, "-o", "m.onnx"]) == (streaming, ["model.keras", "-o",
                                                                                               "m.onnx"])


def test_both_flags_are_one_line_of_bad_input(tmp_path, capsys):
    assert cli.main(["model.keras", "-o", str(tmp_path / "m.onnx"), "--streaming", "--no-streaming"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "masked_lstm_rewriter: error: --streaming and --no-streaming contradict each other: give one"


def test_stateful_records_are_progress_lines_naming_the_flags():
    record = logging.LogRecord("masked_lstm_rewriter", logging.INFO, __file__, 1,
                               "stateful layer '%s': frozen; convert with streaming=True to stream it", ("gru",), None)
    assert cli_streaming.stateful_as_progress(record) and record.progress
    assert record.getMessage() == "stateful layer 'gru': frozen; convert with --streaming to stream it"
    other = logging.LogRecord("masked_lstm_rewriter", logging.INFO, __file__, 1, "layer 'gru' streams", (), None)
    assert cli_streaming.stateful_as_progress(other) and not hasattr(other, "progress")


@pytest.fixture(scope="module")
def streamed():
    """The stock file, and its streaming rewrite ("any": no guard, so that it can be a reference too)."""
    original = onnx.load(STOCK)
    return original, mlr.rewrite_onnx(original, mask_mode="any", streaming=True).onnx_model


def test_verify_feeds_zero_states_and_leaves_the_state_outputs_out(streamed):
    original, model = streamed
    states = [i.name for i in model.graph.input][len(original.graph.input):]
    returned = [o.name for o in model.graph.output][len(original.graph.output):]
    assert states and all(name.endswith(("/h_in", "/c_in")) for name in states)
    result = mlr.verify(original, model, runtime="all")
    assert result.ok, result
    compared = {out.name for check in result.checks for out in check.outputs}
    assert compared == {o.name for o in original.graph.output}, result
    assert any(f"state inputs {', '.join(states)} are fed zeros" in note for note in result.notes), result.notes
    assert result.ignored == returned
    assert f"not compared: the state outputs {', '.join(returned)}" in result.verdict()


def test_a_streaming_reference_is_fed_zero_states_too(streamed):
    _, model = streamed
    result = mlr.verify(model, model)
    assert result.ok and result.ignored, result


def test_verify_still_finds_a_difference_in_a_streaming_model(streamed):
    """Zero states are the model without streaming: a model that does not start from them differs."""
    original, model = streamed
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    state = next(i.name for i in broken.graph.input if i.name.endswith("/h_in"))
    shifted = onnx.helper.make_node("Add", [state, "one"], [state + "_plus_one"])
    one = onnx.helper.make_tensor("one", onnx.TensorProto.FLOAT, [], [1.0])
    for node in broken.graph.node:
        node.input[:] = [state + "_plus_one" if name == state else name for name in node.input]
    broken.graph.node.insert(0, shifted)
    broken.graph.initializer.append(one)
    result = mlr.verify(original, broken)
    assert not result.ok and "silent mismatch" in result.verdict(), result
