# SPDX-License-Identifier: Apache-2.0
"""The command line's logging (cli_logging.command_logging): the plugin's records in its format,
and a warning already shown in the run not shown again; TensorFlow's deprecation of the LiteRT
interpreter tf2onnx reads a .tflite file with, and tf2onnx's warnings as it drops a stateful layer's state
writes, shown only with -v; under --quiet, nothing shown as the program exits,
and without --debug, not TensorFlow's complaint then that a function it frees is gone already."""

import logging
import subprocess
import sys
import warnings

import pytest

from masked_lstm_rewriter.cli_logging import command_logging

logger = logging.getLogger("masked_lstm_rewriter")


def test_a_warning_is_shown_once_per_run_and_other_records_as_they_come(capsys):
    with command_logging(verbose=1, quiet=False, renames={}):
        for _ in range(2):
            logger.warning("mask_mode='post' for %s: dropped", "OpenVINO")
            logger.info("rewritten")
        logger.warning("another")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["masked_lstm_rewriter: WARNING: mask_mode='post' for OpenVINO: dropped",
                     "masked_lstm_rewriter: INFO: rewritten", "masked_lstm_rewriter: INFO: rewritten",
                     "masked_lstm_rewriter: WARNING: another"], lines
    with command_logging(verbose=0, quiet=False, renames={}):  # a new run shows it again
        logger.warning("another")
    assert capsys.readouterr().err.splitlines() == ["masked_lstm_rewriter: WARNING: another"]


LITERT_DEPRECATION = ("    Warning: tf.lite.Interpreter is deprecated and is scheduled for deletion in\n"
                      "    TF 2.20. Please use the LiteRT interpreter from the ai_edge_litert package.")


@pytest.mark.parametrize("verbose, shown", [(0, ["another"]), (1, [LITERT_DEPRECATION, "another"])])
def test_the_litert_interpreter_deprecation_shows_only_when_verbose(verbose, shown, recwarn):
    with command_logging(verbose=verbose, quiet=False, renames={}):
        warnings.warn(LITERT_DEPRECATION, UserWarning)
        warnings.warn("another", UserWarning)
    assert [str(warning.message) for warning in recwarn] == shown


@pytest.mark.parametrize("verbose", [0, 1])
def test_tf2onnx_dropping_a_stateful_layers_state_writes_shows_only_when_verbose(verbose, capsys):
    """tf2onnx warns as it drops a stateful layer's state writes (naming another node's op); the plugin
    says what becomes of the states instead."""
    tf2onnx = logging.getLogger("tf2onnx.tf_loader")
    with command_logging(verbose=verbose, quiet=False, renames={}):
        tf2onnx.warning("TF freezing failed. Attempting to fix freezing errors.")
        tf2onnx.warning("Removed %s %s", "Sigmoid", "sequential/lstm/AssignVariableOp_1")
        tf2onnx.warning("Could not initialize table with shared_name = %r", "vocab")
    said = capsys.readouterr().err
    assert ("freezing failed" in said) == ("AssignVariableOp_1" in said) == bool(verbose), said
    assert "Could not initialize table with shared_name = 'vocab'" in said


_EXIT_NOISE = """
import sys
from masked_lstm_rewriter import cli
class Noisy:
    def __init__(self, message):
        self.message = message
    def __del__(self):
        raise RuntimeError(self.message)
KEEP = Noisy("freed at exit")  # freed as the process exits, as TensorFlow's functions are
GONE = Noisy("Tried to remove non-existent function 'while_cond_317'.")  # TensorFlow's, after tf2onnx froze it
cli.main = lambda: 0
sys.argv = ["masked-lstm-rewriter"] + sys.argv[1:]
sys.exit(cli.program())
"""


@pytest.mark.parametrize("flags, shown", [(["-q"], False), ([], True), (["-q", "--debug"], True)])
def test_quiet_program_shows_nothing_as_it_exits(flags, shown):
    """Under --quiet the program prints nothing more once its work is done: not the tracebacks
    TensorFlow prints of functions it fails to free at exit (--debug shows them)."""
    done = subprocess.run([sys.executable, "-c", _EXIT_NOISE, *flags], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0
    assert ("freed at exit" in done.stderr) == shown, done.stderr
    assert ("non-existent function" in done.stderr) == ("--debug" in flags), done.stderr
