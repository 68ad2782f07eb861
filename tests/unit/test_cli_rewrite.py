# SPDX-License-Identifier: Apache-2.0
"""``python -m masked_lstm_rewriter rewrite IN.onnx -o OUT.onnx``: the report, the exit codes, one-line
errors, and no file written on failure."""

from __future__ import annotations

import os

import onnx
import pytest

from masked_lstm_rewriter import cli
from masked_lstm_rewriter.corpus.ops import scheduled_layers
from _onnx_files import DATA, NATIVE_OPS, native_nodes, op_counts

STOCK = os.path.join(DATA, "tf2onnx", "keras3_emb_gru_seq_op15.onnx")


def test_rewrites_and_reports(tmp_path, capsys):
    output = tmp_path / "native.onnx"
    assert cli.main(["rewrite", STOCK, "-o", str(output), "--mask-mode", "any"]) == 0
    out = capsys.readouterr().out
    assert "1 recurrent layer(s) (1 masked, 0 without a mask): 1 native, 0 left as Loop" in out and "mask_mode=any" in out
    model = onnx.load(str(output))
    assert [n.op_type for n in native_nodes(model)] == ["GRU"] and op_counts(model)["Loop"] == 0
    assert scheduled_layers(model) == 1  # the length-aware schedule: on by default


def test_no_schedule_leaves_one_node_in_the_main_graph(tmp_path):
    output = tmp_path / "native.onnx"
    assert cli.main(["rewrite", STOCK, "-o", str(output), "--no-schedule", "-q"]) == 0
    model = onnx.load(str(output))
    assert [n.op_type for n in model.graph.node if n.op_type in NATIVE_OPS] == ["GRU"] and not scheduled_layers(model)


@pytest.mark.parametrize("args,message", [
    (["missing.onnx", "-o", "out.onnx"], "missing.onnx: no such file"),
    ([STOCK], "the following arguments are required: -o/--output"),
    ([STOCK, "-o", "out.onnx", "--mask-mode", "sometimes"], "argument --mask-mode: invalid choice"),
    ([STOCK, "-o", "no/such/folder/out.onnx"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["rewrite"] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("masked_lstm_rewriter: error:") and message in err[0], err


def test_an_unreadable_file_writes_nothing(tmp_path, capsys):
    bad, output = tmp_path / "bad.onnx", tmp_path / "out.onnx"
    bad.write_bytes(b"\x00garbage")
    assert cli.main(["rewrite", str(bad), "-o", str(output)]) == 2
    assert "not an ONNX model" in capsys.readouterr().err
    assert not output.exists() and not list(tmp_path.glob(".partial-*"))


def test_convert_given_an_onnx_file_points_at_rewrite(capsys):
    assert cli.main([STOCK, "-o", "out.onnx"]) == 2
    assert "rewrite" in capsys.readouterr().err


def test_help(capsys):
    assert cli.main(["rewrite", "--help"]) == 0
    assert "--mask-mode" in capsys.readouterr().out


def test_streaming_adds_the_state_inputs_and_outputs(tmp_path, capsys):
    output = tmp_path / "native.onnx"
    assert cli.main(["rewrite", STOCK, "-o", str(output), "--streaming", "-q"]) == 0
    model = onnx.load(str(output))
    assert [i.name for i in model.graph.input][1:] == ["gru_1/h_in"]
    assert [o.name for o in model.graph.output][1:] == ["gru_1/h_out"]
    assert capsys.readouterr().err == ""


def test_a_layer_that_cannot_stream_fails_in_one_line_unless_kept(tmp_path, capsys):
    backward = os.path.join(DATA, "tf2onnx", "keras3_unmasked_rnn_backwards_op15.onnx")
    output = tmp_path / "native.onnx"
    assert cli.main(["rewrite", backward, "-o", str(output), "--streaming"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("masked_lstm_rewriter: error")]
    assert len(lines) == 1 and "cannot stream: a backward direction" in lines[0] and "--keep-wrong" in lines[0]
    assert not output.exists()
    assert cli.main(["rewrite", backward, "-o", str(output), "--streaming", "--keep-wrong"]) == 0
    assert "KNOWN WRONG" in capsys.readouterr().out
