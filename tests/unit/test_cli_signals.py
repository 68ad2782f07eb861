# SPDX-License-Identifier: Apache-2.0
"""The command line's signal handling (cli_signals): a signal stops the run with its exit status,
also when its exception is first raised where Python ignores it (a garbage collector's callback,
as JAX installs one), and no longer once the output is being renamed into place, nor as the process
exits after the run."""

import gc
import os
import signal
import subprocess
import sys
import time

import pytest

from masked_lstm_rewriter.cli_signals import STOPPED, Interrupted, output_written, stopped_by_signals


def _wait_for_the_signal(seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_with_its_status(number, code):
    with pytest.raises(Interrupted) as stopped, stopped_by_signals():
        os.kill(os.getpid(), number)
        _wait_for_the_signal()
    assert stopped.value.code == code and STOPPED[-1] is stopped.value


def test_a_signal_caught_in_a_garbage_collector_callback_still_stops_the_run(capfd):
    def collecting(phase, info):  # pylint: disable=unused-argument
        if phase == "start":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside the callback: its exception is ignored
    gc.callbacks.append(collecting)
    try:
        with pytest.raises(Interrupted) as stopped, stopped_by_signals():
            gc.collect()
            gc.callbacks.remove(collecting)
            _wait_for_the_signal()
    finally:
        if collecting in gc.callbacks:
            gc.callbacks.remove(collecting)
    assert stopped.value.code == 143
    assert "Exception ignored" not in capfd.readouterr().err


def test_once_the_output_is_written_a_signal_no_longer_stops_the_run():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a background job (nohup, &)
    with stopped_by_signals():
        output_written()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert STOPPED[-1].code == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_a_signal_to_send_again_is_not_sent_once_the_run_is_over(monkeypatch):
    from masked_lstm_rewriter import cli_signals  # pylint: disable=import-outside-toplevel
    sent = []
    monkeypatch.setattr(cli_signals.os, "kill", lambda *args: sent.append(args))
    with stopped_by_signals():
        pass
    cli_signals._send_again(signal.SIGINT)  # pylint: disable=protected-access
    assert not sent


_SLOW_EXIT = """
import atexit, sys, time
from masked_lstm_rewriter import cli
atexit.register(lambda: time.sleep(3))  # a teardown as slow as TensorFlow's
cli.main = lambda: (print("done", flush=True), 0)[1]
sys.exit(cli.program())
"""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_process_exits_leaves_the_status_of_the_run(number):
    process = subprocess.Popen([sys.executable, "-c", _SLOW_EXIT], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "done"
    time.sleep(0.5)
    process.send_signal(number)
    assert process.wait(timeout=60) == 0
