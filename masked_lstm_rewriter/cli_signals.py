# SPDX-License-Identifier: Apache-2.0
"""How the command line stops on Ctrl-C or SIGTERM: the run ends as for an error (exit 130 or 143),
its partial output removed, until the output is being renamed into place (then the run is done,
and ends with 0); once the run is over, as the process exits, they are ignored.

The signal handler raises :class:`Interrupted`. TensorFlow may wrap that exception into one of its
own, or drop it, so the last signal is also kept in :data:`STOPPED`, which the conversion checks
before it keeps its output. Python ignores an exception raised in a garbage collector's callback
(JAX installs one): there the signal is sent again, to stop the run where it can.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

STOPPED: list = []  # the Interrupted of the signal that stopped this run, if any
WRITTEN: list = []  # not empty once the output is being renamed into place: the run is done, signals wait
RUNNING: list = []  # not empty while a run handles the signals (a signal sent again must not outlive it)
SIGNALS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: the run stops, cleaning up as for an error (exit ``code``)."""

    def __init__(self, code: int, what: str):
        super().__init__(what)
        self.code = code


@contextlib.contextmanager
def stopped_by_signals():
    """During the block, SIGINT and SIGTERM raise :class:`Interrupted` (see the module)."""
    STOPPED.clear()
    WRITTEN.clear()
    previous = {number: signal.signal(number, _stop) for number in SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: _stop_again(hook, unraisable)
    RUNNING.append(True)
    try:
        yield
    finally:
        RUNNING.clear()
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = hook


def output_written() -> None:
    """Called just before the output is renamed into place: from now on, signals no longer stop the run."""
    WRITTEN.append(True)


def ignored_from_now() -> None:
    """SIGINT and SIGTERM ignored for the rest of the process: the run is over and its exit status
    decided (TensorFlow's teardown as Python exits can take seconds, where a signal's default action
    would end the process with 130 or 143 after the output was written)."""
    for number in SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def _stop(signum, frame):  # pylint: disable=unused-argument
    STOPPED.append(Interrupted(*SIGNALS[signum]))
    if not WRITTEN:  # else the output is (being) renamed into place: the run is done, and ends with 0
        raise STOPPED[-1]


def _stop_again(hook, unraisable) -> None:
    """``sys.unraisablehook`` during a run: the handler's exception, raised where Python ignores
    exceptions, has the signal sent again; anything else goes to ``hook``."""
    if not isinstance(unraisable.exc_value, Interrupted):
        hook(unraisable)
    elif not WRITTEN:
        number = next(number for number, (code, _) in SIGNALS.items() if code == unraisable.exc_value.code)
        threading.Timer(0.01, _send_again, (number,)).start()


def _send_again(number) -> None:
    if RUNNING and not WRITTEN:  # the run may have ended meanwhile: then the signal is not sent again
        os.kill(os.getpid(), number)
