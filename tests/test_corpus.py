# SPDX-License-Identifier: Apache-2.0
"""The regression corpus (``testdata/corpus``, made by ``tools/make_corpus.py``), this run's flavour.

Every manifest entry of the flavour that this process runs (``MLR_KERAS``; the other flavour's
entries are not collected, ``tools/run_tests.py`` runs them in its own process) is converted
twice, each time with the entry's ``mask_mode``:

* library: ``tf2onnx.convert.main()`` with ``sys.argv`` set to ``--saved-model DIR`` or
  ``--keras FILE``, inside ``mlr.enable(mask_mode)``; ``mlr.last_report()`` must list the
  expected masked layers, none left as a Loop;
* command line: ``python -m masked_lstm_rewriter ... --mask-mode MODE`` in a subprocess (skipped
  while ``python -m masked_lstm_rewriter --help`` fails).

Each model made by the library path also runs on OpenVINO when it is installed (skipped
otherwise), with static input shapes; the guard is not checked there (OpenVINO does not enforce
Reshape sizes), and the models it is known to refuse must fail loudly.

The ONNX model must have the expected ops (native LSTM nodes with the expected directions, no
Loop), reproduce the stored Keras outputs of every batch at every position (onnxruntime, one
thread) within the manifest's tolerance, and, for ``"post"`` entries, refuse the non-post-padded
batch with "not post-padded". The checks themselves live in ``tools/check_corpus.py``, which
also runs them without pytest.
"""

import concurrent.futures
import os
import sys

import pytest

import kerasutil
from kerasutil import FLAVOUR

import masked_lstm_rewriter as mlr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import check_corpus  # pylint: disable=wrong-import-position

CORPUS = check_corpus.DEFAULT_CORPUS
try:
    MANIFEST = check_corpus.load_manifest(CORPUS)
    MANIFEST_ERROR = None
except (OSError, ValueError) as error:  # reported by test_manifest, not as a collection error
    MANIFEST, MANIFEST_ERROR = {"entries": []}, error
ENTRIES = check_corpus.entries_for(MANIFEST, FLAVOUR)
IDS = [entry["name"].split("/", 1)[1] for entry in ENTRIES]
CLI_JOBS = int(os.environ.get("MLR_CORPUS_JOBS", "2"))  # command-line conversions at once
CONVERTED = {}  # entry name -> the ONNX file test_library made, reused by test_openvino


@pytest.fixture(autouse=True)
def plugin_off():
    mlr.disable()
    yield
    mlr.disable()


def test_manifest():
    """The corpus is there, has entries for this flavour, and every file it names exists."""
    assert MANIFEST_ERROR is None, f"cannot read {CORPUS}/manifest.json (run tools/make_corpus.py): {MANIFEST_ERROR}"
    assert ENTRIES, f"no {FLAVOUR} entry in {CORPUS}/manifest.json"
    for entry in ENTRIES:
        assert "generation_check_failed" not in entry, entry["generation_check_failed"]
        assert os.path.exists(check_corpus.model_path(entry, CORPUS)), entry["path"]
        assert entry["expected_ops"]["Loop"] == 0 and entry["expected_ops"]["LSTM"] >= 1
        assert entry["mask_mode"] in mlr.MASK_MODES
        assert (entry["must_fail"] is not None) == (entry["mask_mode"] == "post"), entry["name"]
        files = [b["inputs"] for b in entry["batches"]] + [b["expected"] for b in entry["batches"]]
        files += [entry["must_fail"]["inputs"]] if entry["must_fail"] else []
        for relative in files:
            assert os.path.isfile(os.path.join(CORPUS, relative)), relative


def convert_library(entry, output, monkeypatch):
    """tf2onnx.convert.main() with the plugin enabled; checks last_report()."""
    from tf2onnx import convert as tf2onnx_convert  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(sys, "argv", ["tf2onnx.convert"] + check_corpus.convert_args(entry, CORPUS, output))
    before = mlr.last_report()
    with mlr.enable(entry["mask_mode"]):
        tf2onnx_convert.main()
    report = mlr.last_report()
    check_corpus.check_report(entry, None if report is before else report)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_library(entry, tmp_path, monkeypatch):
    """tf2onnx.convert.main() in this process with the plugin enabled: native LSTMs, Keras's numbers."""
    output = str(tmp_path / "model.onnx")
    convert_library(entry, output, monkeypatch)
    kerasutil.MAX_ERRORS.append(check_corpus.check_onnx(entry, CORPUS, output))
    CONVERTED[entry["name"]] = output


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_openvino(entry, tmp_path, monkeypatch):
    """The same model on OpenVINO (static shapes): Keras's numbers, or a loud known refusal."""
    pytest.importorskip("openvino")
    output = CONVERTED.get(entry["name"])
    if output is None or not os.path.isfile(output):
        output = str(tmp_path / "model.onnx")
        convert_library(entry, output, monkeypatch)
    refusal = check_corpus.known_refusal(entry, "openvino")
    if refusal:
        with pytest.raises(check_corpus.CorpusFailure, match=refusal[0]):
            check_corpus.check_onnx(entry, CORPUS, output, "openvino")
        return
    kerasutil.MAX_ERRORS.append(check_corpus.check_onnx(entry, CORPUS, output, "openvino"))


class CliRuns:
    """Command-line conversions; without xdist, those of every selected test start at once (CLI_JOBS
    at a time) so that a test waits only for its own."""

    def __init__(self, directory, entries):
        self.directory = directory
        self.futures = {}
        if entries and not os.environ.get("PYTEST_XDIST_WORKER"):
            self.pool = concurrent.futures.ThreadPoolExecutor(max(1, CLI_JOBS))
            self.futures = {e["name"]: self.pool.submit(self.convert, e) for e in entries}
        else:
            self.pool = None

    def convert(self, entry):
        output = os.path.join(self.directory, entry["name"].replace("/", "__") + ".onnx")
        done, seconds = check_corpus.run_cli(entry, CORPUS, output, env=os.environ)
        return done, output, seconds

    def get(self, entry):
        future = self.futures.get(entry["name"])
        return future.result() if future is not None else self.convert(entry)

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def cli_runs(request, tmp_path_factory):
    available, why = check_corpus.cli_available(env=os.environ)
    if not available:
        pytest.skip(f"the command line is not there yet ({why})")
    wanted = {item.callspec.params["entry"]["name"] for item in request.session.items
              if item.nodeid.split("[")[0].endswith("test_corpus.py::test_command_line")}
    runs = CliRuns(str(tmp_path_factory.mktemp("corpus-cli")), [e for e in ENTRIES if e["name"] in wanted])
    yield runs
    runs.close()


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_command_line(entry, cli_runs):
    """python -m masked_lstm_rewriter --saved-model/--keras ... --mask-mode MODE: the same checks."""
    done, output, _ = cli_runs.get(entry)
    check_corpus.check_cli_result(done, output)
    kerasutil.MAX_ERRORS.append(check_corpus.check_onnx(entry, CORPUS, output))
