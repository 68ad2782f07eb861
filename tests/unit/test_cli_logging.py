# SPDX-License-Identifier: Apache-2.0
"""The command line's logging (cli_logging.command_logging): the plugin's records in its format,
and a warning already shown in the run not shown again."""

import logging

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
