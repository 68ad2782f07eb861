# SPDX-License-Identifier: Apache-2.0
"""cli_args.py: the command and MODEL are found whatever options come before them."""

from __future__ import annotations

import pytest

from masked_lstm_rewriter.cli_args import model_position, split_command


@pytest.mark.parametrize("args, command, rest", [
    (["verify", "a.keras", "b.onnx"], "verify", ["a.keras", "b.onnx"]),
    (["-q", "verify", "a.keras", "b.onnx"], "verify", ["-q", "a.keras", "b.onnx"]),
    (["--debug", "-vv", "rewrite", "a.onnx"], "rewrite", ["--debug", "-vv", "a.onnx"]),
    (["convert", "m.keras"], "convert", ["m.keras"]),
    (["m.keras", "-o", "verify"], None, ["m.keras", "-o", "verify"]),        # an output named verify
    (["--opset", "verify", "m.keras"], None, ["--opset", "verify", "m.keras"]),  # an option's value
])
def test_the_command_after_flags_only(args, command, rest):
    assert split_command(args) == (command, rest)


@pytest.mark.parametrize("args, position", [
    (["m.keras", "-o", "out.onnx"], 0),
    (["--debug", "m.keras", "-o", "out.onnx"], 1),
    (["-v", "--large_model", "m.keras"], 2),
    (["--opset", "17", "m.keras", "-o", "x.onnx"], 2),
    (["--opset=17", "saved_dir"], 1),
    (["-o", "x.onnx", "--saved-model", "dir"], None),
    ([], None),
])
def test_model_is_the_first_argument_no_option_takes(args, position):
    assert model_position(args) == position
