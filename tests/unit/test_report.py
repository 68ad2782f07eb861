# SPDX-License-Identifier: Apache-2.0
"""The conversion report says what it counts (every recurrent layer the plugin saw, masked or not)
and, for a backward layer, what was emitted: a forward node over the rows reversed, not ONNX's
``direction="reverse"``; for a streaming model, each layer's state inputs and outputs. No Keras."""

from __future__ import annotations

import types

import pytest

import _graphs as G
from masked_lstm_rewriter.pipeline import emitted
from masked_lstm_rewriter.report import ConversionReport, LayerReport

BACKWARD = "backward: a forward node over each row reversed within its length"
CUDNN = "Keras's cuDNN op, which tf2onnx cannot convert"


def test_the_headline_counts_masked_and_unmasked_layers():
    report = ConversionReport((LayerReport("bidirectional/backward_lstm", True, f"LSTM, {BACKWARD}", "post"),
                               LayerReport("bidirectional/forward_lstm", True, "LSTM, forward", "post"),
                               LayerReport("gru", True, "GRU, forward", "post", masked=False)))
    assert str(report).splitlines() == [
        "masked_lstm_rewriter: 3 recurrent layer(s) (2 masked, 1 without a mask): 3 native, 0 left as Loop",
        f"  bidirectional/backward_lstm: native ONNX LSTM, {BACKWARD} (mask_mode=post)",
        "  bidirectional/forward_lstm: native ONNX LSTM, forward (mask_mode=post)",
        "  gru: native ONNX GRU, forward (no mask)"]
    assert len(report.masked) == 2


def test_the_headline_counts_the_layers_left_as_tf2onnx_made_them():
    loop = LayerReport("lstm", False, "a reason", "post")
    assert str(ConversionReport((loop,))).splitlines()[0] == \
        "masked_lstm_rewriter: 1 recurrent layer(s) (1 masked, 0 without a mask): 0 native, 1 left as Loop"
    cudnn = LayerReport("gru", False, "another reason", "post", masked=False, left_as=CUDNN)
    assert str(ConversionReport((loop, cudnn))).splitlines() == [
        "masked_lstm_rewriter: 2 recurrent layer(s) (1 masked, 1 without a mask): 0 native, "
        "2 left as tf2onnx made them",
        "  lstm: left as a Loop: a reason",
        f"  gru: left as {CUDNN}: another reason"]


def test_no_layer():
    assert str(ConversionReport()) == \
        "masked_lstm_rewriter: no LSTM, GRU or SimpleRNN layer to rewrite (none masked, none left as a Loop " \
        "without a mask)"


def test_a_streaming_model_lists_each_layers_state_inputs_and_outputs():
    stream = "lstm: lstm/h_in, lstm/c_in -> lstm/h_out, lstm/c_out"
    assert str(ConversionReport(streams=(stream,))).splitlines() == [
        "masked_lstm_rewriter: no LSTM, GRU or SimpleRNN layer to rewrite (none masked, none left as a Loop "
        "without a mask); 1 native layer(s) tf2onnx made stream", f"  streams: {stream}"]
    rewritten = ConversionReport((LayerReport("gru", True, "GRU, forward", "post"),),
                                 streams=("gru: gru/h_in -> gru/h_out",))
    assert str(rewritten).splitlines()[1:] == ["  gru: native ONNX GRU, forward (mask_mode=post)",
                                               "  streams: gru: gru/h_in -> gru/h_out"]


@pytest.mark.parametrize("direction, cells, masked, expected", [
    ("forward", 1, True, "forward"),
    ("reverse", 1, True, BACKWARD),
    ("reverse", 2, True, "backward: forward nodes over each row reversed within its length"),
    ("reverse", 1, False, "backward: a forward node over the sequence reversed in time"),
])
def test_what_was_emitted(direction, cells, masked, expected):
    layer = types.SimpleNamespace(direction=direction, cells=(None,) * cells)
    assert emitted(layer, masked) == expected


@pytest.mark.parametrize("mask", ["input", "none"])
def test_a_backward_layer_is_reported_as_emitted(mask):
    """go_backwards: the report describes the forward node over reversed steps that was emitted."""
    converted, _ = G.convert_loop(G.Loop("GRU", backward=True, mask=mask))
    (node,) = converted.native_nodes()
    assert G.attributes(node)["direction"] == "forward"
    (layer,) = converted.report.layers
    over = "each row reversed within its length" if mask != "none" else "the sequence reversed in time"
    assert layer.detail == f"GRU, backward: a forward node over {over}"
    assert "direction=reverse" not in str(converted.report)
