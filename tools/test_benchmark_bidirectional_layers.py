# SPDX-License-Identifier: Apache-2.0
"""tools/benchmark_bidirectional_layers.py: its forms come from the runtime entries, which it restores."""

import benchmark_bidirectional_layers as tool

from masked_lstm_rewriter import targets


def test_the_entries_say_what_the_form_needs_and_come_back():
    before = targets.RUNTIMES
    with tool.bidirectional_nodes(targets, ()):
        assert targets.bidirectional_slow("GRU", None) is None and targets.bidirectional_slow("GRU", "openvino") is None
    with tool.bidirectional_nodes(targets, tool.NATIVE):
        assert targets.bidirectional_slow("RNN", "onnxruntime") == "onnxruntime"
    assert targets.RUNTIMES is before and targets.bidirectional_slow("RNN", "onnxruntime") is None
