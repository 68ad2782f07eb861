# SPDX-License-Identifier: Apache-2.0
"""What the last conversion did with each recurrent layer it saw, for scripts to assert on: the
masked ones, and those without a mask that stock tf2onnx would leave as Loops.

    onnx_model, _ = tf2onnx.convert.from_keras(model, ..., custom_rewriter=[mlr.rewrite_masked_lstm])
    report = mlr.last_report()
    assert not report.left_as_loop, report

A conversion's report is complete when the rewriter has seen the main graph (tf2onnx hands it
the loop bodies first and the main graph last).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional


@dataclasses.dataclass(frozen=True)
class LayerReport:
    """One recurrent layer: rewritten (into what) or left as a Loop (why)."""

    layer: str
    rewritten: bool
    # rewritten: the cell kinds and what was emitted ("LSTM, forward", or for a backward layer "LSTM,
    # backward: a forward node over each row reversed within its length"); else why it stayed a Loop
    detail: str
    mask_mode: str
    not_for: tuple = ()  # rewritten: runtimes that cannot run it exactly (detail says how to convert for them)
    masked: bool = True  # False: a layer without a mask, which stock tf2onnx leaves a Loop
    left_as: str = "a Loop"  # not rewritten: what tf2onnx has instead (a cuDNN op, which it cannot convert)

    def __str__(self):
        verdict = "native ONNX" if self.rewritten else f"left as {self.left_as}:"
        mode = f" (mask_mode={self.mask_mode})" if self.masked else " (no mask)"
        return f"{self.layer}: {verdict} {self.detail}" + (mode if self.rewritten else "")


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    layers: tuple = ()
    known_wrong: tuple = ()  # what makes the model compute other values than its source
    quantized: str = ""  # for a quantized model: what is int8, what stays float32 (quantize.summary)
    streams: tuple = ()  # a streaming model: "<layer>: <state inputs> -> <state outputs>" per layer

    @property
    def rewritten(self) -> tuple:
        return tuple(layer for layer in self.layers if layer.rewritten)

    @property
    def left_as_loop(self) -> tuple:
        return tuple(layer for layer in self.layers if not layer.rewritten)

    @property
    def masked(self) -> tuple:
        return tuple(layer for layer in self.layers if layer.masked)

    def __str__(self):
        return "\n".join([self.headline()] + [f"  {layer}" for layer in self.layers]
                         + [f"  streams: {stream}" for stream in self.streams]
                         + [f"  KNOWN WRONG: {wrong}" for wrong in self.known_wrong]
                         + ([f"  quantized: {self.quantized}"] if self.quantized else []))

    def headline(self) -> str:
        """"masked_lstm_rewriter: 3 recurrent layer(s) (2 masked, 1 without a mask): 3 native, 0 left as Loop"."""
        if not self.layers and not self.known_wrong:
            streams = f"; {len(self.streams)} native layer(s) tf2onnx made stream" if self.streams else ""
            return ("masked_lstm_rewriter: no LSTM, GRU or SimpleRNN layer to rewrite (none masked, none left "
                    f"as a Loop without a mask){streams}")
        kept = {layer.left_as for layer in self.left_as_loop}
        left = "left as Loop" if kept <= {"a Loop"} else "left as tf2onnx made them"
        unmasked = len(self.layers) - len(self.masked)
        wrong = f"; the model is KNOWN WRONG ({len(self.known_wrong)} problem(s))" if self.known_wrong else ""
        return (f"masked_lstm_rewriter: {len(self.layers)} recurrent layer(s) ({len(self.masked)} masked, {unmasked} "
                f"without a mask): {len(self.rewritten)} native, {len(self.left_as_loop)} {left}{wrong}")


class _Recorder(threading.local):
    """Per-thread: entries of the conversion under way, and the last finished report."""

    def __init__(self):
        super().__init__()
        self.pending = []
        self.pending_wrong = []
        self.pending_streams = []
        self.last: Optional[ConversionReport] = None


_RECORDER = _Recorder()


def record(layer: str, rewritten: bool, detail: str, mask_mode: str, not_for: tuple = (), masked: bool = True,
           left_as: str = "a Loop") -> None:
    _RECORDER.pending.append(LayerReport(layer, rewritten, detail, mask_mode, not_for, masked, left_as))


def record_stream(layer: str, inputs: list, outputs: list) -> None:
    """A layer of a streaming model takes its states as ``inputs`` and returns them as ``outputs``."""
    _RECORDER.pending_streams.append(f"{layer}: {', '.join(inputs)} -> {', '.join(outputs)}")


def record_known_wrong(problem: str) -> None:
    """A problem that makes the model compute other values than its source."""
    _RECORDER.pending_wrong.append(problem)


def finish_conversion() -> ConversionReport:
    """Close the conversion under way (called when the rewriter has seen the main graph)."""
    _RECORDER.last = ConversionReport(tuple(_RECORDER.pending), tuple(_RECORDER.pending_wrong),
                                      streams=tuple(_RECORDER.pending_streams))
    _forget_pending()
    return _RECORDER.last


def note_quantized(report: Optional[ConversionReport], quantized: str) -> ConversionReport:
    """``report`` (None: an empty one) saying the model was quantized, also as the thread's last report."""
    _RECORDER.last = dataclasses.replace(report or ConversionReport(), quantized=quantized)
    return _RECORDER.last


def note_known_wrong(problem: str) -> ConversionReport:
    """The thread's last report (None: an empty one), with ``problem`` found after the rewriter closed it."""
    last = _RECORDER.last or ConversionReport()
    _RECORDER.last = dataclasses.replace(last, known_wrong=last.known_wrong + (problem,))
    return _RECORDER.last


def adopt(report: ConversionReport) -> ConversionReport:
    """``report`` (of a conversion another process ran for this thread) made the thread's last one."""
    _RECORDER.last = report
    return report


def last_report() -> Optional[ConversionReport]:
    """The report of the last conversion this thread ran with the rewriter, or None."""
    return _RECORDER.last


def start_conversion() -> None:
    """Forget the last report and any entries left by a conversion that failed half-way."""
    _forget_pending()
    _RECORDER.last = None


def _forget_pending() -> None:
    _RECORDER.pending, _RECORDER.pending_wrong, _RECORDER.pending_streams = [], [], []


def pending_layers() -> tuple:
    """The entries of the conversion under way (before :func:`finish_conversion` closes it)."""
    return tuple(_RECORDER.pending)
