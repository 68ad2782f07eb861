# SPDX-License-Identifier: Apache-2.0
"""The regression corpus, shipped with the package, and the checks that run it.

Small saved masked Keras models (LSTM, GRU, SimpleRNN; Keras 3 and tf_keras) in ``data/``, each
with input batches, Keras's outputs on them and the native ops the plugin made of it, listed in
``data/manifest.json``; and ONNX files whose recurrent layers are Loops, as stock tf2onnx and Keras 3's
JAX-backend export wrote them, with the outputs they must keep once ``rewrite_onnx`` has made them
native (the ONNX-file entries, checked once, with the Keras 3 entries). Two ways to run it against
the tf2onnx installed in this environment:

    python -m masked_lstm_rewriter.corpus                     # both Keras flavours; see .command
    python -m pytest --pyargs masked_lstm_rewriter.corpus     # the same checks as pytest tests

:mod:`.manifest` reads the entries, :mod:`.convert` converts one with the plugin, :mod:`.check`
checks the ONNX model, :mod:`.runner` runs every check of a flavour, :mod:`.command` is the
command line and ``test_corpus`` the pytest form; :mod:`.writer` writes a corpus and
:mod:`.onnx_writer` its ONNX-file entries (for ``tools/make_corpus.py``). Importing this package
does not import TensorFlow.
"""

from .check import CorpusFailure, check_onnx
from .manifest import DATA_DIR, CorpusError, entries_for, load_manifest

__all__ = ["DATA_DIR", "CorpusError", "CorpusFailure", "check_onnx", "entries_for", "load_manifest"]
