# SPDX-License-Identifier: Apache-2.0
"""Failure types: why a layer stays tf2onnx's Loop (:class:`Refusal`), and a conversion whose
model is known to be wrong (:class:`KnownWrong`).

Readers and checks raise a :class:`Refusal`; each stage boundary (:func:`.read.body.read_body`,
:func:`.read.loop.read_loop`, the condition reader) returns it as a value, and the plugin turns it
into the logged reason and the report's entry in one place (:mod:`.pipeline`).
"""

from __future__ import annotations

import logging
from typing import Optional

from .report import record_known_wrong


class Refusal(Exception):
    """Why a layer is left as tf2onnx made it: ``reason`` (the text users read) and ``node`` (the node
    of tf2onnx's graph it was met at, when one is known)."""

    def __init__(self, reason: str, node=None):
        super().__init__(reason)
        self.reason = reason
        self.node = node

    def __bool__(self):
        return False

    def __eq__(self, other):
        return isinstance(other, Refusal) and other.reason == self.reason

    def __hash__(self):
        return hash(self.reason)

    def __repr__(self):
        return f"Refusal({self.reason!r}{'' if self.node is None else f', at {self.where}'})"

    @property
    def where(self) -> Optional[str]:
        """The name of the node the refusal was met at, or None."""
        return None if self.node is None else getattr(self.node, "name", str(self.node))


class KnownWrong(RuntimeError):
    """The conversion would write a model known to compute other values than its source (a graph
    broken before tf2onnx saw it): raised unless the user asked to keep such a model. The message
    says what is wrong, where, and how to convert it right."""


def known_wrong(problems: list, keep_wrong: bool, record=record_known_wrong) -> Optional[KnownWrong]:
    """Put each problem that makes the model wrong in the conversion's report (``record``: in the one
    under way; :func:`.report.note_known_wrong`: in the one finished); the error to fail with, or None
    when there is none or the user asked to keep such a model (then each is logged)."""
    for problem in problems:
        record(problem)
    if problems and not keep_wrong:
        more = f" (and {len(problems) - 1} more such problem(s))" if len(problems) > 1 else ""
        return KnownWrong(f"{problems[0]}{more}; to write the model as it is anyway, convert with keep_wrong=True "
                          "(--keep-wrong)")
    for problem in problems:
        logging.getLogger("masked_lstm_rewriter").warning("%s; written as it is (keep_wrong)", problem)
    return None

