# SPDX-License-Identifier: Apache-2.0
"""Adversarial differential fuzzing (tests/fuzz_adversarial.py): near-miss cells and Keras-like loops.

CI runs a fixed sample of ADVERSARIAL_CASES cases per Keras flavour (case i drawn from seed i, so
the sample is the same on every run); each must be refused (every masked recurrent loop stays a
Loop, with its reason) or exact (every output, every position, every batch; "post" fails with the
guard's message on batches that are not post-padded). MLR_ADVERSARIAL_CASES=N changes the count;
``tests/fuzz.py --adversarial --cases N`` runs thousands and counts. A smaller sample (and the cases
it found) takes the ONNX-file route: stock tf2onnx's file rewritten by ``rewrite_onnx``.
"""

import dataclasses
import os

import numpy as np
import pytest

import fuzz_adversarial as fa
import fuzzgen
import signatures
from kerasutil import keras_outputs

pytestmark = pytest.mark.grid  # a sample of each parametrized grid (tests/grid.py)

ADVERSARIAL_CASES = int(os.environ.get("MLR_ADVERSARIAL_CASES", "100"))
CASES = fa.draw_cases(ADVERSARIAL_CASES, seed=0)
# the same through the ONNX-file route (stock tf2onnx's file rewritten by rewrite_onnx), another seed
FILE_CASES = fa.draw_cases(int(os.environ.get("MLR_ADVERSARIAL_FILE_CASES", "30")), seed=1, route=fuzzgen.ONNX_FILE)
# found by it: a loop whose output variable starts at ones (refused), and one that sets it to zeros
# at masked steps and returns its last value (the last output is zeros where the last step is masked)
FILE_REGRESSIONS = [dataclasses.replace(case, route=fuzzgen.ONNX_FILE) for case in (
    fa.AdversarialCase(family="loop", kind="LSTM", mutation="initial_output_ones", units=4, activation="tanh",
                       recurrent_activation="hard_sigmoid", use_bias=False, reset_after=False,
                       return_sequences=True, return_state=True, mask_source="masking", signature="static",
                       mode="post", rows=4, steps=8, seed=59257),
    fa.AdversarialCase(family="loop", kind="SimpleRNN", mutation="zero_output_for_mask", units=4,
                       activation="softsign", recurrent_activation="tanh", use_bias=False, reset_after=True,
                       return_sequences=False, return_state=True, mask_source="embedding", signature="static time",
                       mode="post", rows=5, steps=6, seed=59248),
    fa.AdversarialCase(family="loop", kind="SimpleRNN", mutation="zero_output_for_mask", units=2,
                       activation="hard_sigmoid", recurrent_activation="linear", use_bias=True,
                       return_sequences=False, return_state=False, mask_source="explicit", mode="any",
                       rows=3, steps=4, seed=59318))]


def _ids(cases):
    return [f"{i}-{c.family}-{c.kind}-{c.mutation}" for i, c in enumerate(cases)]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_adversarial_case_is_refused_or_exact(case):
    verdict = fa.check_case(case)
    fa.TALLY[verdict.verdict] += 1
    assert verdict.ok, fa.describe(case, verdict)


@pytest.mark.parametrize("case", FILE_CASES + FILE_REGRESSIONS, ids=_ids(FILE_CASES + FILE_REGRESSIONS))
def test_adversarial_case_from_an_onnx_file_is_refused_or_exact(case):
    """Refused, or exact; where stock tf2onnx's file itself differs from Keras, equal to the file."""
    verdict = fa.check_case(case)
    fa.TALLY[verdict.verdict] += 1
    assert verdict.ok, fa.describe(case, verdict)


# --- the generator itself ----------------------------------------------------------------------

def test_the_sample_is_large_and_covers_the_space():
    """At least 100 mutants per flavour, of both families, every kind, both modes, every mask
    source, dynamic and static signatures."""
    assert len(CASES) >= 100 or "MLR_ADVERSARIAL_CASES" in os.environ
    if len(CASES) < 100:
        return
    assert {c.family for c in CASES} == {"cell", "loop"}
    assert {c.kind for c in CASES} == set(fa.GATES)
    assert {c.mode for c in CASES} == set(fa.MODES)
    assert {c.mask_source for c in CASES} == set(fa.MASK_SOURCES)
    assert "dynamic" in {c.signature for c in CASES} and {c.signature for c in CASES} & set(signatures.STATIC_FORMS)
    assert len({(c.family, c.mutation) for c in CASES}) >= 40


def test_cases_are_a_function_of_their_seed():
    assert fa.draw_cases(5, seed=3) == fa.draw_cases(5, seed=3) != fa.draw_cases(5, seed=4)


MUTANTS = [(family, kind, mutation) for kind in fa.GATES
           for family, mutations in (("cell", fa.CELL_MUTATIONS[kind]), ("loop", fa.LOOP_MUTATIONS))
           for mutation in mutations if family == "cell" or kind == "LSTM"]


@pytest.mark.parametrize("family,kind,mutation", MUTANTS, ids=["-".join(m) for m in MUTANTS])
def test_every_mutant_runs_in_keras(family, kind, mutation):
    """Each mutant builds and runs (a builder bug would otherwise pass as "refused")."""
    case = fa.AdversarialCase(family=family, kind=kind, mutation=mutation, return_state=True)
    model, _ = fa.build_model(case)
    mask = fa.batches_for(case)[0]
    outputs = keras_outputs(model, fa.batch_inputs(case, mask))
    rows, steps = mask.shape
    expected_steps = steps + 2 if mutation == "output_list_longer" else steps  # its stacked list is longer
    assert outputs[0].shape[:2] == (rows, expected_steps) and all(np.isfinite(o).all() for o in outputs)
