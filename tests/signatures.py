# SPDX-License-Identifier: Apache-2.0
"""The input signatures users convert with: dynamic as declared, or some dimensions fixed.

People fix the batch to 1 for mobile and TensorRT, or every dimension for OpenVINO, and tf2onnx
builds a different graph then (a static batch makes it fuse ``MatMul`` + ``Add`` into ``Gemm``).
A numeric test names its model's declared (dynamic) spec and a batch; :func:`signature` gives
the spec of another form and the batches to feed it (a batch-1 form feeds the rows one by one).

Which forms a test runs: always ``dynamic``, plus, for a share of the tests (``MLR_SIGNATURE_SHARE``,
a quarter by default), a sample of the static ones (``MLR_SIGNATURE_SAMPLES``, one by default), both
picked by a stable hash of the test's id (derandomized, so CI is repeatable; every static form is
run by many tests); ``MLR_SIGNATURES=all`` runs every form in every test, ``MLR_SIGNATURES=dynamic``
none but the declared one, and a comma-separated list of form names exactly those.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf

# form -> (batch axis, time axis): None keeps the declared dimension, "rows" / "steps" fix it to the
# batch's, 1 fixes the batch to one row (the batch is then fed row by row)
FORMS = {
    "dynamic": (None, None),
    "batch 1": (1, None),
    "static batch": ("rows", None),
    "static time": (None, "steps"),
    "static": ("rows", "steps"),
    "static batch 1": (1, "steps"),
}
STATIC_FORMS = tuple(form for form in FORMS if form != "dynamic")
SAMPLED = int(os.environ.get("MLR_SIGNATURE_SAMPLES", "1"))
SHARE = float(os.environ.get("MLR_SIGNATURE_SHARE", "0.25"))  # of the tests that add static forms
# the declared form and one static form per test (MLR_SIGNATURES=all passes for every numeric test)
DEFAULT = "sample"


def forms_for(test_id: str = None) -> tuple:
    """The signature forms the current test runs (see the module's docstring)."""
    chosen = os.environ.get("MLR_SIGNATURES", DEFAULT).strip()
    if chosen == "all":
        return tuple(FORMS)
    if chosen == "dynamic":
        return ("dynamic",)
    if chosen != "sample":
        forms = tuple(form.strip() for form in chosen.split(","))
        unknown = [form for form in forms if form not in FORMS]
        if unknown:
            raise ValueError(f"MLR_SIGNATURES: unknown forms {unknown}; known: {list(FORMS)}")
        return forms
    test_id = test_id or os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    digest = int(hashlib.sha256(test_id.encode()).hexdigest(), 16)
    if (digest >> 128) % 1000 >= SHARE * 1000:
        return ("dynamic",)
    start = digest % len(STATIC_FORMS)
    return ("dynamic",) + tuple(STATIC_FORMS[(start + i) % len(STATIC_FORMS)] for i in range(SAMPLED))


def signature(spec, inputs, form: str) -> tuple:
    """(spec of ``form``, the list of batches to feed it) for a declared ``spec`` and a batch.

    Only dimensions the declared spec leaves open (None) are fixed: a state input declared
    ``(None, units)`` gets the batch size, a sequence input ``(None, None, features)`` both."""
    batch_axis, time_axis = FORMS[form]
    rows = np.asarray(inputs[0]).shape[0]
    if batch_axis == 1:
        batches = [[np.asarray(x)[row:row + 1] for x in inputs] for row in range(rows)]
    else:
        batches = [list(inputs)]
    sizes = {"rows": rows, 1: 1}
    specs = []
    for s, x in zip(spec, inputs):
        shape = list(s.shape)
        if batch_axis is not None and shape and shape[0] is None:
            shape[0] = sizes[batch_axis]
        if time_axis is not None and len(shape) > 1 and shape[1] is None:
            shape[1] = np.asarray(x).shape[1]
        specs.append(tf.TensorSpec(shape, s.dtype, name=s.name))
    return tuple(specs), batches
