# SPDX-License-Identifier: Apache-2.0
"""Selects the Keras flavour for this process before TensorFlow is imported.

``MLR_KERAS=tf_keras`` runs the suite against tf_keras (``TF_USE_LEGACY_KERAS=1``); anything
else against Keras 3. ``tools/run_tests.py`` runs the suite once per flavour, each in its own
process, since the choice cannot change once TensorFlow is loaded.
"""

import os
import signal
import sys

# imported before any test runs: hypothesis's pytest plugin imports it at the end of the session
# otherwise, and after tf_keras tests Python 3.11.7's parser fails there ("AST constructor recursion
# depth mismatch"), which fails a session of a few selected tests that all passed
import hypothesis  # noqa: F401  pylint: disable=unused-import
import pytest

import grid
from masked_lstm_rewriter.flavours import select

FLAVOUR = "tf_keras" if os.environ.get("MLR_KERAS") == "tf_keras" else "keras3"
select(FLAVOUR)  # TensorFlow reads it once, when first imported


@pytest.fixture(autouse=True)
def optimize_without_backups():
    """tf2onnx's optimizer, once loaded, runs each pass on the graph itself rather than on a deep
    copy kept as a backup in case the pass fails (catch_errors=False).

    Why: that copy, made before each of its passes, was about a fifth of a numeric test's time
    (profiled: 20 s of 93 s). Where no pass fails, both ways run the same passes on equal graphs;
    where one fails, a test now fails on it instead of tf2onnx skipping the pass with a WARNING,
    which is what the suite should say of a graph the plugin emitted. Patched in this process only,
    never in tf2onnx's files (the command-line tests' processes run tf2onnx as users do), and only
    once a test module has loaded TensorFlow (the fast tier checks that it runs without Keras).
    Patched before the test rather than once tf2onnx is loaded: a hypothesis test is one call of
    this fixture for all its examples, and it may be the first to convert in its process."""
    optimizer = sys.modules.get("tf2onnx.optimizer")
    if optimizer is None and "tensorflow" in sys.modules:
        import tf2onnx.optimizer as optimizer  # pylint: disable=import-outside-toplevel
    if optimizer is not None and not getattr(optimizer.optimize_graph, "without_backups", False):
        original = optimizer.optimize_graph

        def optimize_graph(graph, catch_errors=True, optimizers=None):  # pylint: disable=unused-argument
            return original(graph, catch_errors=False, optimizers=optimizers)

        optimize_graph.without_backups = True
        optimizer.optimize_graph = optimize_graph
    yield


@pytest.fixture(autouse=True)
def no_cudnn_twin_registration(request):
    """tf_keras, once loaded, does not register the cuDNN twin of each LSTM and GRU it traces, in
    every conversion of the suite (``custom_rewriter=`` alone included), as it does not inside the
    plugin's conversions (:mod:`masked_lstm_rewriter.patches.generic_path`).

    Why: tf2onnx drops that function, and registering it (tracing it and building its gradient)
    was two fifths of a static-shape test's time (profiled: 244 s of 614 s).
    ``tests/test_gpu_tracing.py`` checks that the converted graph is the same either way (a test
    marked ``registers_cudnn_twin`` runs with tf_keras's own registration)."""
    utils = sys.modules.get("tf_keras.src.layers.rnn.gru_lstm_utils")  # never loaded in the fast tier
    if utils is None or request.node.get_closest_marker("registers_cudnn_twin") is not None:
        yield
        return
    from masked_lstm_rewriter.patches import generic_path  # pylint: disable=import-outside-toplevel
    module, name = generic_path.TF_KERAS_REGISTER
    assert module == utils.__name__
    original = getattr(utils, name)
    setattr(utils, name, generic_path.skip_registration)
    try:
        yield
    finally:
        setattr(utils, name, original)


@pytest.fixture
def plugin_off():
    """The test starts and ends with the plugin disabled, whatever ran before it (a module opts in with
    ``pytestmark = pytest.mark.usefixtures("plugin_off")``)."""
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel  (after the flavour is chosen)
    mlr.disable()
    yield
    mlr.disable()


# seconds: a whole-model test converts in a few; past this (plus a minute for its checks) it fails
CONVERSION_BUDGET = int(os.environ.get("MLR_CONVERSION_BUDGET", "120"))


class OverBudget(BaseException):
    """A test ran over its budget (a BaseException: tf2onnx's optimizer swallows Exceptions)."""


@pytest.fixture
def conversion_budget():
    """The test fails, rather than hangs, past ``CONVERSION_BUDGET`` + 60 s: a conversion that never
    ends (tf2onnx's optimizer has looped forever on a graph it kept growing) must not stall the suite."""
    def over(*_):
        raise OverBudget(f"over {CONVERSION_BUDGET + 60} s: a conversion did not end")

    previous = signal.signal(signal.SIGALRM, over)
    signal.alarm(CONVERSION_BUDGET + 60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def pytest_report_header(config):
    how = f"a sample (share {grid.SHARE}; MLR_GRID=all runs all)" if grid.sampling() else "all"
    return [f"keras flavour: {FLAVOUR}", f"grid-marked combinations: {how}"]


def pytest_configure(config):
    config.addinivalue_line("markers", f"{grid.MARKER}: run a derandomized sample of this module's "
                            "parametrized combinations (tests/grid.py)")
    config.addinivalue_line("markers", "registers_cudnn_twin: tf_keras registers the cuDNN twin of each "
                            "LSTM and GRU it traces, as it does outside a conversion")


CORPUS_COMMAND_SHARE = 0.3  # of the corpus's entries, beyond one of each format, also run through the command line


def _corpus_entry_format(item):
    """The format of the corpus entry a test takes (None for any other test)."""
    entry = getattr(item, "callspec", None) and item.callspec.params.get("entry")
    return entry.get("format") if isinstance(entry, dict) else None


def pytest_collection_modifyitems(config, items):
    """The samples of tests/grid.py; and the corpus's command-line path for one entry of each format
    (SavedModel, .keras, .h5, ONNX file) plus a share of the others (every entry is converted
    in-process and on OpenVINO; each command-line run is a process of its own)."""
    if not grid.sampling():
        return
    kept, dropped = grid.select(items, salt=FLAVOUR)
    kept, more = grid.select_by(kept, "test_command_line", _corpus_entry_format, CORPUS_COMMAND_SHARE, salt=FLAVOUR)
    if dropped + more:
        config.hook.pytest_deselected(items=dropped + more)
        items[:] = kept


def pytest_terminal_summary(terminalreporter):
    adversarial = sys.modules.get("fuzz_adversarial")
    if adversarial is not None and adversarial.TALLY:
        terminalreporter.write_line(f"{FLAVOUR}: adversarial cases: " + ", ".join(
            f"{verdict} {count}" for verdict, count in sorted(adversarial.TALLY.items())))
    errors = []
    for module in ("kerasutil", "masked_lstm_rewriter.corpus.test_corpus"):  # the corpus keeps its own list
        errors += getattr(sys.modules.get(module), "MAX_ERRORS", [])
    if errors:
        terminalreporter.write_line(
            f"{FLAVOUR}: {len(errors)} comparisons with Keras, max |keras - onnx| = {max(errors):.3g}")
