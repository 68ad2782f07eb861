# SPDX-License-Identifier: Apache-2.0
"""The fast tier: golden-graph tests of the rewriter that need no Keras.

    .venv/bin/python -m pytest tests/unit -q        # about three minutes

The rest of the suite converts Keras models end to end (35-40 minutes). This tier builds the
loops Keras writes for masked recurrent layers directly in TensorFlow (``_graphs.py``), converts
each with tf2onnx in well under a second, and checks, as onnxscript's rewriter tests and
OpenVINO's transformation tests do, either the rewritten graph (its nodes, and its outputs
against a numpy oracle and against the Loop tf2onnx makes without the plugin) or the reason the
loop was left alone. Every source of layers (TensorFlow While loops, Keras 3's cuDNN op, ONNX
Loops in a file) is checked with the same two verbs of ``_harness.py``, beside its own rules:

========================== ===================================================================
``_harness.py``            ``check_rewrites(case, mode, natives)``: rewrites, and the numbers match
                           (nothing the source read left, the native nodes, every output against
                           the case's references at every position on every runtime and mask
                           layout the mode takes, the guard failing in "post");
                           ``check_refuses(case, reason, mode)``: left as it was, with the reason.
                           The cases: ``_graphs.WhileLoop``, ``test_read_cudnn.CudnnOp``,
                           ``_onnx_files.OnnxFile``
``test_read_cells.py``     the body reader on each cell kind: LSTM, GRU (both reset_after), SimpleRNN
``test_read_refusals.py``  one refusal per kind of failure, asserted by its stable text
``test_emit_post.py``      mask_mode="post": guard Split, one native node, weights, numbers, guard error
``test_emit_any.py``       mask_mode="any": no guard, the reordering, numbers on pre-padded batches
``test_emit_bidirectional.py`` a forward and a backward loop over one input: one bidirectional node
                           where exact, else two forward nodes; rolled back to two on a failure
``test_read_cudnn.py``     Keras 3's cuDNN op: native and exact, or refused with its reason and the fix
``test_plan_masks.py``     per-mask plans: sequence_mask (no guard, no reordering), Masking, a [1, T] mask
``test_plugin_entry.py``   graphs without a masked loop are left alone; enable()/disable()
``test_no_keras.py``       the tier never imports Keras
``test_fallback_reasons.py`` every reason a layer can stay a Loop for is in docs/why-a-loop.md
``test_source_onnx_loop.py`` ONNX files in: stock tf2onnx, onnx-simplifier and Keras JAX-export files
                           rewritten, against the file (and Keras) at every position; refusals
``test_read_select.py``, ``test_read_onnx_trip.py``, ``test_read_linear_onnx.py``, ``test_graph_onnx.py``
                           the ONNX Loop's readers on hand-built Loops (``_onnx_graphs.py``)
``test_cli_rewrite.py``    the rewrite command; ``test_verify_onnx.py``: verify against an ONNX file
``test_grid.py``           the sampler of the slow grids keeps every value of every parameter
``test_docs_links.py``     every relative link and anchor in the README and docs/ resolves
``test_backend_process.py`` which Keras models convert in a TensorFlow process (another backend)
``test_keras_source.py``   a subclassed model's ``call(tokens, states)``: one argument per input, named after them
========================== ===================================================================

**No Keras.** TensorFlow 2.21 imports all of Keras (or tf_keras) when it is imported itself, so
"keras is not in sys.modules" cannot be asserted after ``import tensorflow``. Instead, when
pytest runs this tier alone (every path it was given lies in this folder) and TensorFlow is not
loaded yet, :func:`pytest_configure` makes ``keras`` and ``tf_keras`` unimportable (``None`` in
``sys.modules``) before any test module imports TensorFlow: TensorFlow then comes up without
``tf.keras``, and any use of Keras by a test, a helper or the library fails with an ImportError.
``test_no_keras.py`` asserts that this is so, and also checks the tier's sources for Keras
imports (which is all it can do when the tier runs in one process with the Keras tests).
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KERAS_MODULES = ("keras", "tf_keras")
KERAS_BLOCKED = False  # set by pytest_configure when this process runs the tier alone


def _tier_only(config) -> bool:
    """Are all the paths pytest was given inside this folder?"""
    root = config.invocation_params.dir
    paths = [str(arg).split("::")[0] for arg in config.args] or [str(root)]
    full = [os.path.abspath(os.path.join(root, p)) for p in paths]
    return all(f == HERE or f.startswith(HERE + os.sep) for f in full)


def pytest_configure(config):
    global KERAS_BLOCKED  # pylint: disable=global-statement
    loaded = [m for m in sys.modules if m.split(".")[0] in KERAS_MODULES + ("tensorflow",)]
    if _tier_only(config) and not loaded:
        for name in KERAS_MODULES:
            sys.modules[name] = None  # "import keras" raises ImportError; TensorFlow loads without it
        KERAS_BLOCKED = True


@pytest.fixture(autouse=True)
def _keras_stays_out():
    """In a tier-only process, no test may have brought Keras in (or lifted the block)."""
    yield
    if KERAS_BLOCKED:
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in KERAS_MODULES and sys.modules[m] is not None)
        assert not loaded, f"the fast tier loaded Keras modules: {loaded[:5]}"


@pytest.fixture
def keras_isolation(request):
    """(this process runs the tier alone, Keras was made unimportable for it)."""
    return _tier_only(request.config), KERAS_BLOCKED
