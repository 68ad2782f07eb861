# SPDX-License-Identifier: Apache-2.0
"""The corpus as pytest tests, for a converter's own pytest run:

    python -m pytest --pyargs masked_lstm_rewriter.corpus
    TF_USE_LEGACY_KERAS=1 python -m pytest --pyargs masked_lstm_rewriter.corpus   # the tf_keras entries

A process runs one Keras flavour (TensorFlow picks it when first imported, from
``TF_USE_LEGACY_KERAS``), so the entries of this process's flavour are collected, and the other
flavour's are one skipped test that says how to run them. For each entry, the same checks as
``python -m masked_lstm_rewriter.corpus`` (see :mod:`.check`):

* ``test_library``: ``tf2onnx.convert.main()`` in this process with the plugin enabled;
* ``test_openvino``: that model on OpenVINO with static shapes (skipped without openvino);
* ``test_command_line``: ``python -m masked_lstm_rewriter`` in a subprocess (several at once,
  ``MLR_CORPUS_JOBS``, default 2).

The ONNX-file entries (Loops written by stock tf2onnx or Keras 3's JAX export) need no Keras and
are collected once, in the Keras 3 process (the default): ``test_library`` rewrites the file with
``rewrite_onnx``, ``test_command_line`` with ``python -m masked_lstm_rewriter rewrite``.

``MLR_CORPUS_OPSETS=11-18`` converts at each of those opsets instead of each entry's own (an ONNX
file keeps its own).
Hide the GPU (``CUDA_VISIBLE_DEVICES=""``) where there is one: Keras's cuDNN kernels cannot be
converted.
"""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from masked_lstm_rewriter.corpus import check, convert, manifest
from masked_lstm_rewriter.flavours import current_flavour

FLAVOUR = current_flavour()
OTHER_FLAVOUR = "keras3" if FLAVOUR == "tf_keras" else "tf_keras"
CORPUS = manifest.DATA_DIR
OPSETS = manifest.parse_opsets(os.environ["MLR_CORPUS_OPSETS"]) if os.environ.get("MLR_CORPUS_OPSETS") else (None,)
CLI_JOBS = max(1, int(os.environ.get("MLR_CORPUS_JOBS", "2")))
try:
    MANIFEST, MANIFEST_ERROR = manifest.load_manifest(CORPUS), None
except manifest.CorpusError as error:  # reported by test_manifest, not as a collection error
    MANIFEST, MANIFEST_ERROR = {"entries": []}, error
ALL_ENTRIES = manifest.at_opsets(manifest.entries_for(MANIFEST, FLAVOUR), OPSETS)
ENTRIES = [entry for entry in ALL_ENTRIES if not manifest.is_onnx_file(entry)]  # the saved Keras models
ONNX_FILE_ENTRIES = [entry for entry in ALL_ENTRIES if manifest.is_onnx_file(entry)]


def id_of(entry: dict) -> str:
    """``embedding_forward/saved_model`` (``@13`` at another opset), ``onnx/tf2onnx/...`` for an ONNX file."""
    if manifest.is_onnx_file(entry):
        return entry["name"]
    return entry["name"].split("/", 1)[1] + ("" if OPSETS == (None,) else f"@{entry['opset']}")


IDS = [id_of(entry) for entry in ALL_ENTRIES]
MAX_ERRORS = []  # every comparison's largest |ONNX - Keras|, for a caller's summary
CONVERTED = {}  # entry id -> the ONNX file test_library made, reused by test_openvino


def entry_id(entry: dict) -> str:
    return f"{entry['name']}@{entry['opset']}"


@pytest.fixture(autouse=True)
def plugin_off():
    """Each test starts and ends with the plugin disabled, whatever the test before did."""
    import masked_lstm_rewriter as mlr  # pylint: disable=import-outside-toplevel
    mlr.disable()
    yield
    mlr.disable()


def test_manifest():
    """The corpus is there, has entries for this flavour, and every entry is sound."""
    assert MANIFEST_ERROR is None, str(MANIFEST_ERROR)
    assert ENTRIES, f"no {FLAVOUR} entry in {CORPUS}/{manifest.MANIFEST}"
    problems = [f"{entry['name']}: {problem}" for entry in ALL_ENTRIES
                for problem in manifest.entry_problems(entry, CORPUS)]
    assert not problems, "\n".join(problems)


def test_other_flavour():
    """The other flavour's entries need a process of their own."""
    others = manifest.entries_for(MANIFEST, OTHER_FLAVOUR)
    files = sum(1 for entry in others if manifest.is_onnx_file(entry))
    variable = "TF_USE_LEGACY_KERAS=1" if OTHER_FLAVOUR == "tf_keras" else "TF_USE_LEGACY_KERAS unset"
    pytest.skip(f"{len(others)} {OTHER_FLAVOUR} entries{f' ({files} ONNX files)' if files else ''}: this process "
                f"runs {FLAVOUR} (TensorFlow picks its Keras when "
                f"imported); run pytest again with {variable}, or python -m masked_lstm_rewriter.corpus (both)")


def convert_in_process(entry: dict, output: str) -> None:
    """Convert with tf2onnx.convert.main() and the plugin enabled (an ONNX file: rewrite_onnx); check the report."""
    convert.check_report(entry, convert.convert_library(entry, CORPUS, output))


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=IDS)
def test_library(entry, tmp_path):
    """tf2onnx.convert.main() in this process with the plugin enabled (an ONNX file: rewrite_onnx): the
    recorded native ops, Keras's numbers (or the original file's)."""
    output = str(tmp_path / "model.onnx")
    convert_in_process(entry, output)
    MAX_ERRORS.append(check.check_onnx(entry, CORPUS, output))
    CONVERTED[entry_id(entry)] = output


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=IDS)
def test_openvino(entry, tmp_path):
    """The same model on OpenVINO (static shapes): Keras's numbers, or a loud known refusal."""
    pytest.importorskip("openvino")
    output = CONVERTED.get(entry_id(entry))
    if output is None or not os.path.isfile(output):
        output = str(tmp_path / "model.onnx")
        convert_in_process(entry, output)
    refusal = check.known_refusal(entry, "openvino", output)
    if refusal:
        with pytest.raises(check.CorpusFailure, match=refusal[0]):
            check.check_onnx(entry, CORPUS, output, "openvino")
        return
    MAX_ERRORS.append(check.check_onnx(entry, CORPUS, output, "openvino"))


class CommandRuns:
    """Command-line conversions; those of every selected test start at once (CLI_JOBS at a time,
    not under xdist) so that a test waits only for its own."""

    def __init__(self, directory: str, entries: list):
        self.directory = directory
        self.pool = None
        self.futures = {}
        if entries and not os.environ.get("PYTEST_XDIST_WORKER"):
            self.pool = concurrent.futures.ThreadPoolExecutor(CLI_JOBS)
            self.futures = {entry_id(e): self.pool.submit(self.convert, e) for e in entries}

    def convert(self, entry: dict) -> tuple:
        output = os.path.join(self.directory, entry_id(entry).replace("/", "__") + ".onnx")
        done, _ = convert.run_command("cli", entry, CORPUS, output)
        return done, output

    def get(self, entry: dict) -> tuple:
        future = self.futures.get(entry_id(entry))
        return future.result() if future is not None else self.convert(entry)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def command_runs(request, tmp_path_factory):
    available, why = convert.path_available("cli")
    if not available:
        pytest.skip(f"the command line does not run here ({why})")
    wanted = {entry_id(item.callspec.params["entry"]) for item in request.session.items
              if getattr(item, "originalname", "") == "test_command_line" and hasattr(item, "callspec")}
    runs = CommandRuns(str(tmp_path_factory.mktemp("corpus-cli")), [e for e in ALL_ENTRIES if entry_id(e) in wanted])
    yield runs
    runs.close()


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=IDS)
def test_command_line(entry, command_runs):
    """python -m masked_lstm_rewriter --saved-model/--keras ... --mask-mode MODE (an ONNX file:
    python -m masked_lstm_rewriter rewrite FILE ... --mask-mode MODE): the same checks."""
    done, output = command_runs.get(entry)
    convert.check_command_result(done, output)
    MAX_ERRORS.append(check.check_onnx(entry, CORPUS, output, path="cli"))
