# SPDX-License-Identifier: Apache-2.0
"""A wheel built from this checkout installs in a fresh venv and runs the corpus with no checkout.

This is how a converter's CI uses the package. The wheel is ``$MLR_WHEEL`` (``.ci/run`` builds it
with ``pip wheel --no-deps .``), else built here the same way. A fresh venv gets the wheel with
its ``test`` extra, the tested stack, pinned by ``constraints.txt``: resolved by pip (from the
package registry or pip's cache), and taken from the environment running the suite, which was
installed from the same requirements (see :func:`installed`). Then, from an empty directory:

* the wheel holds the package, the whole corpus and the start-up hook ``masked_lstm_rewriter.pth``
  at the root of site-packages, and no tests or tools;
* ``python -m masked_lstm_rewriter.corpus --path library`` checks the Bidirectional entries of both flavours;
* the subprocess paths, ``cli`` (``python -m masked_lstm_rewriter``) and ``tf2onnx`` (stock
  ``python -m tf2onnx.convert`` with ``TF2ONNX_MASKED_LSTM``, the start-up hook), on one model
  per flavour;
* ``python -m pytest --pyargs masked_lstm_rewriter.corpus`` collects every entry of the flavour
  and passes (the library tests of the GRU entries, to keep it short).

It checks both flavours itself, so it runs once per suite: in the keras3 run of
``tools/run_tests.py``. About three minutes on two cores.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zipfile

import pytest

from kerasutil import FLAVOUR
from masked_lstm_rewriter.corpus import manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_TIMEOUT = 1800
RUN_TIMEOUT = 1800
SUMMARY_WORDS = ("passed,", "failed,", "skipped")

pytestmark = pytest.mark.skipif(FLAVOUR != "keras3", reason="runs once per suite, in the keras3 run: "
                                "it checks both Keras flavours itself (MLR_KERAS=keras3 to run it)")


def run(command: list, cwd: str, timeout: int = RUN_TIMEOUT, env=None) -> subprocess.CompletedProcess:
    """Run ``command``; fail the test with the last lines of its output when it exits non-zero."""
    done = subprocess.run(command, cwd=cwd, env=env or clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
        pytest.fail(f"{' '.join(command)} exited with {done.returncode}:\n{tail}")
    return done


def clean_env(**extra) -> dict:
    """This process's environment without anything that points at the checkout or picks a flavour."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MLR_KERAS", "TF_USE_LEGACY_KERAS", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


def summary(stdout: str) -> dict:
    """The counts of the closing ``N passed, N failed, N skipped`` line."""
    last = stdout.strip().splitlines()[-1]
    words = last.split()
    assert len(words) == 6 and tuple(words[1::2]) == SUMMARY_WORDS, f"not a summary line: {last!r}"
    return dict(zip(("passed", "failed", "skipped"), map(int, words[0::2])))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """``$MLR_WHEEL``, else a wheel built from this checkout."""
    if os.environ.get("MLR_WHEEL"):
        assert os.path.isfile(os.environ["MLR_WHEEL"]), f"MLR_WHEEL={os.environ['MLR_WHEEL']} is not a file"
        return os.environ["MLR_WHEEL"]
    out = str(tmp_path_factory.mktemp("wheel"))
    shutil.rmtree(os.path.join(ROOT, "build", "lib"), ignore_errors=True)  # setuptools would ship stale files
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", ROOT, "-w", out], cwd=out, timeout=INSTALL_TIMEOUT)
    (path,) = glob.glob(os.path.join(out, "masked_lstm_rewriter-*.whl"))
    return path


@pytest.fixture(scope="module")
def installed(wheel):
    """(python of a fresh venv holding the wheel, an empty working directory).

    The wheel's requirements with its ``test`` extra, pinned by ``constraints.txt``, must resolve
    (pip's dry run, from the registry or pip's cache). The venv then takes them from this
    environment, which was installed from the same requirements (a ``.pth`` file naming its
    site-packages: unpacking the 2 GB stack again, and removing it, cost about three minutes), and
    ``pip check`` says they satisfy the wheel. The package itself and its start-up hook come from
    the wheel alone: that directory is not a site directory of the venv, so its hooks (the
    checkout's editable install among them) are not run."""
    try:
        import ensurepip  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        pytest.skip("this Python has no ensurepip, so python -m venv cannot make a venv with pip")
    with tempfile.TemporaryDirectory(prefix="mlr-wheel-venv-") as tmp:
        home, work = os.path.join(tmp, "venv"), os.path.join(tmp, "work")
        os.makedirs(work)
        venv.EnvBuilder(with_pip=True).create(home)
        python = os.path.join(home, "bin", "python")
        constraints = os.path.join(ROOT, "constraints.txt")
        run([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", f"{wheel}[test]",
             "-c", constraints], cwd=work, timeout=INSTALL_TIMEOUT)
        borrow_site_packages(python)
        run([python, "-m", "pip", "install", "--no-deps", "--quiet", wheel], cwd=work, timeout=INSTALL_TIMEOUT)
        run([python, "-m", "pip", "check"], cwd=work)
        yield python, work


def borrow_site_packages(python: str) -> None:
    """Put this environment's site-packages on the path of the venv of ``python``, after its own."""
    own = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=ROOT).stdout.strip()
    paths = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    with open(os.path.join(own, "_mlr_test_stack.pth"), "w", encoding="utf-8") as handle:
        handle.write("".join(f"{path}\n" for path in paths))


def test_wheel_contents(wheel):
    """The package, every corpus file, the start-up hook at the root; no tests, no tools."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    data = manifest.DATA_DIR
    corpus = {os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
              for folder, _, files in os.walk(data) for name in files}
    assert corpus and not corpus - names, f"corpus files missing from the wheel: {sorted(corpus - names)[:5]}"
    for name in ("masked_lstm_rewriter.pth", "masked_lstm_rewriter_autoenable.py",
                 "masked_lstm_rewriter/corpus/__main__.py", "masked_lstm_rewriter/corpus/test_corpus.py"):
        assert name in names, f"{name} is not in {wheel}"
    assert not [n for n in names if n.startswith(("tests/", "tools/"))], "the wheel ships tests/ or tools/"


LIBRARY_SAMPLE = "bidirectional"  # the Bidirectional entries of both flavours, SavedModels, Keras files, ONNX files


def test_corpus_command_library_path(installed):
    """The corpus's Bidirectional entries of both flavours, converted in-process from the installed
    package's own corpus (tests/test_corpus.py checks every entry, in each flavour, from the checkout)."""
    python, work = installed
    done = run([python, "-m", "masked_lstm_rewriter.corpus", "--path", "library", "-k", LIBRARY_SAMPLE], cwd=work)
    site = os.path.dirname(os.path.dirname(python))
    assert f"masked-lstm-rewriter 0.1.0 at {site}" in done.stdout.splitlines()[0], done.stdout.splitlines()[0]
    entries = sum(len(manifest.entries_for(manifest.load_manifest(), flavour, LIBRARY_SAMPLE))
                  for flavour in manifest.FLAVOURS)
    assert entries >= 10, entries
    assert summary(done.stdout) == {"passed": entries, "failed": 0, "skipped": 0}, done.stdout[-3000:]


def test_corpus_command_subprocess_paths(installed):
    """python -m masked_lstm_rewriter and the start-up hook with python -m tf2onnx.convert."""
    python, work = installed
    keyword = "simple_rnn/"  # one model per flavour: a Keras 3 SavedModel, a tf_keras .h5
    entries = sum(len(manifest.entries_for(manifest.load_manifest(), flavour, keyword)) for flavour in manifest.FLAVOURS)
    done = run([python, "-m", "masked_lstm_rewriter.corpus", "--path", "cli,tf2onnx", "-k", keyword], cwd=work)
    assert summary(done.stdout) == {"passed": 2 * entries, "failed": 0, "skipped": 0}, done.stdout[-3000:]


def test_pytest_form(installed):
    """python -m pytest --pyargs masked_lstm_rewriter.corpus: every entry collected, the GRU ones pass."""
    python, work = installed
    entries = len(manifest.entries_for(manifest.load_manifest(), "keras3"))
    collected = run([python, "-m", "pytest", "--pyargs", "masked_lstm_rewriter.corpus", "--collect-only", "-q",
                     "-p", "no:cacheprovider"], cwd=work)
    assert f"{3 * entries + 2} tests collected" in collected.stdout, collected.stdout[-2000:]
    done = run([python, "-m", "pytest", "--pyargs", "masked_lstm_rewriter.corpus", "-q", "-p", "no:cacheprovider",
                "-k", "test_library and gru"], cwd=work)
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]
