# SPDX-License-Identifier: Apache-2.0
"""tf2onnx's warnings about the variable writes it drops as it freezes a graph: left unsaid while the
plugin converts (``convert``'s Python call, as its command line does), shown where tf2onnx's INFO
lines are. No Keras."""

import logging

import pytest

from masked_lstm_rewriter.tf2onnx_logs import FREEZING_LOGGER, TF2ONNX_FREEZING_FAILED, state_writes_unsaid


def _freeze_warnings(caplog):
    freezing = logging.getLogger(FREEZING_LOGGER)
    caplog.clear()
    freezing.warning(TF2ONNX_FREEZING_FAILED)
    freezing.warning("Removed %s %s", "AddV2", "functional_1/lstm_1/AssignVariableOp_3")
    freezing.warning("Removed %s %s", "Const", "some/other_node")
    return [record.getMessage() for record in caplog.records]


@pytest.fixture(name="tf2onnx_level")
def _tf2onnx_level():
    tf2onnx = logging.getLogger("tf2onnx")
    saved = tf2onnx.level
    yield tf2onnx
    tf2onnx.setLevel(saved)


def test_state_writes_are_unsaid_while_converting(caplog, tf2onnx_level):
    tf2onnx_level.setLevel(logging.WARNING)
    with caplog.at_level(logging.WARNING, logger=FREEZING_LOGGER), state_writes_unsaid():
        shown = _freeze_warnings(caplog)
    assert shown == ["Removed Const some/other_node"], "only warnings about state writes are left out"
    with caplog.at_level(logging.WARNING, logger=FREEZING_LOGGER):
        assert len(_freeze_warnings(caplog)) == 3, "said again after the conversion"


def test_state_writes_are_said_where_tf2onnx_info_is_shown(caplog, tf2onnx_level):
    tf2onnx_level.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger=FREEZING_LOGGER), state_writes_unsaid():
        assert len(_freeze_warnings(caplog)) == 3
