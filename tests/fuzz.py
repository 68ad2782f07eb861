#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Differential fuzzing on demand: N random masked Keras models, each on several random batches,
converted in both mask modes and compared with Keras at every position, on onnxruntime and on
OpenVINO (the same conversion where it runs there, else converted for it: ``runtime="openvino"``;
see fuzzgen.py, beside this script).

Each Keras flavour runs in its own process (TensorFlow picks its Keras once, at import). Prints,
per flavour: cases, model/batch comparisons, passed, mismatches, how often the "post" guard
fired on batches that are not post-padded, the worst |keras - onnx|, the signature forms the
models were converted with (half dynamic, half static), their wirings, how many had no mask (one in
fuzzgen.UNMASKED_SHARE; ``--unmasked``: all), and the layers left as a Loop and why;
then every failing case as a pasteable ``ModelCase``/``BatchCase`` (keep it in
tests/test_fuzz_regressions.py: the pytest fuzz test shrinks it). Exits non-zero on any
mismatch, missed guard, Loop left or crash.

    .venv/bin/python tests/fuzz.py --cases 1000 [--keras keras3] [--seed 0] [--batches 4] [--unmasked]

``--onnx-files`` takes the ONNX-file route instead: each model converted by stock tf2onnx, and the
file rewritten by ``rewrite_onnx`` (its Loops read as ONNX), compared with Keras as above.

``--adversarial`` fuzzes the matcher instead (fuzz_adversarial.py): N near-miss cells and
Keras-like loops per flavour, each refused (stays a Loop, with its reason) or exact, else a
failure; prints the verdicts by family and mask mode, the reasons given, and every failure. With
``--onnx-files`` too, each is converted by stock tf2onnx and its file rewritten (the ONNX reader's
refusals): where the file itself differs from Keras, the rewrite must equal the file.

    .venv/bin/python tests/fuzz.py --adversarial --cases 2000 [--keras tf_keras] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import time

from masked_lstm_rewriter.flavours import FLAVOURS, flavour_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_MARK = "FUZZ-RESULT "


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300, help="model cases per flavour (default 300)")
    parser.add_argument("--batches", type=int, default=4, help="batches per model case (default 4)")
    parser.add_argument("--keras", choices=FLAVOURS, action="append", help="only this flavour (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--unmasked", action="store_true",
                        help="every model without a mask (default: one in fuzzgen.UNMASKED_SHARE)")
    parser.add_argument("--onnx-files", action="store_true",
                        help="every model converted by stock tf2onnx, then its file rewritten by rewrite_onnx")
    parser.add_argument("--adversarial", action="store_true",
                        help="near-miss cells and Keras-like loops: refused or exact (fuzz_adversarial.py)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- the worker: one flavour, in this process ---------------------------------------------------

def run_worker(args) -> dict:
    logging.getLogger("masked_lstm_rewriter").setLevel(logging.ERROR)  # last_report() has the reasons
    import fuzzgen  # pylint: disable=import-outside-toplevel  (after the flavour is chosen)
    from hypothesis import HealthCheck, Phase, given, seed, settings  # pylint: disable=import-outside-toplevel

    totals = collections.Counter()
    loops = collections.Counter()
    batch_kinds = collections.Counter()
    forms = collections.Counter()  # signature forms converted with
    wirings = collections.Counter()
    opsets = collections.Counter()
    failures = []
    worst = [0.0]
    worst_ill = [0.0]  # largest (ONNX vs float64) / (the error allowed for) among ill-conditioned passes
    start = time.monotonic()
    route = fuzzgen.ONNX_FILE if args.onnx_files else fuzzgen.CONVERSION

    @seed(args.seed)
    @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=fuzzgen.model_cases(unmasked=True if args.unmasked else None, route=route),
           batches=fuzzgen.batch_lists(args.batches))
    def fuzz(case, batches):
        totals["cases"] += 1
        totals["unmasked"] += case.unmasked
        batch_kinds.update(batch.kind for batch in batches)
        forms[case.signature] += 1
        wirings[case.wiring] += 1
        opsets[fuzzgen.opset_for(case)] += 1
        try:
            result = fuzzgen.check_case(case, batches)
        except Exception as error:  # pylint: disable=broad-except  (a crash is a finding, keep going)
            totals["crashes"] += 1
            failures.append(f"case = {case!r}\nbatches = {tuple(batches)!r}\n  crashed: {error!r}")
            print("FAILING:\n" + failures[-1], file=sys.stderr, flush=True)
            return
        totals["model/batch cases"] += len(batches)
        totals["comparisons"] += result.comparisons
        totals["on openvino"] += result.openvino
        totals["passed"] += result.passed
        totals["non-finite"] += result.non_finite
        totals["stock overflow"] += result.stock_overflow
        totals["stock differs"] += result.stock_differs
        totals["openvino softplus"] += result.openvino_softplus
        totals["row rounding"] += result.row_rounding
        totals["ill-conditioned"] += len(result.ill_conditioned)
        if result.ill_conditioned:
            worst_ill[0] = max([worst_ill[0]] + [onnx / max(keras, 1e-30)
                                                 for _, _, keras, onnx in result.ill_conditioned])
        totals["mismatches"] += len(result.mismatches)
        totals["non-post batches"] += result.non_post
        totals["guard fired"] += result.guard_fired
        totals["guard missed"] += len(result.guard_missed)
        loops.update(result.loops)
        worst[0] = max(worst[0], result.worst)
        if not result.ok:
            failures.append(fuzzgen.describe(case, batches, result))
            print("FAILING:\n" + failures[-1], file=sys.stderr, flush=True)
        if totals["cases"] % 25 == 0:
            print(f"  {fuzzgen.FLAVOUR}: {totals['cases']} cases, {len(failures)} failing, "
                  f"{time.monotonic() - start:.0f}s", file=sys.stderr, flush=True)

    fuzz()  # pylint: disable=no-value-for-parameter
    return {"flavour": fuzzgen.FLAVOUR, "totals": dict(totals), "worst": worst[0], "worst_ill": worst_ill[0],
            "loops": dict(loops), "batch_kinds": dict(batch_kinds), "signatures": dict(forms),
            "wirings": dict(wirings), "opsets": dict(opsets), "failures": failures,
            "seconds": time.monotonic() - start}


def run_adversarial_worker(args) -> dict:
    logging.getLogger("masked_lstm_rewriter").setLevel(logging.ERROR)  # last_report() has the reasons
    import fuzz_adversarial as fa  # pylint: disable=import-outside-toplevel  (after the flavour is chosen)

    verdicts, reasons, totals = collections.Counter(), collections.Counter(), collections.Counter()
    failures, worst, start = [], 0.0, time.monotonic()
    route = fa.fuzzgen.ONNX_FILE if args.onnx_files else fa.fuzzgen.CONVERSION
    for number, case in enumerate(fa.draw_cases(args.cases, args.seed, route), 1):
        try:
            verdict = fa.check_case(case)
        except Exception as error:  # pylint: disable=broad-except  (a crash is a finding, keep going)
            verdict = fa.Verdict(verdict="failure", problems=[f"crashed: {error!r}"])
        verdicts[f"{case.family} {case.mode} {'dynamic' if case.signature == 'dynamic' else 'static'}: "
                 f"{verdict.verdict}"] += 1
        reasons.update(verdict.reasons)
        totals.update(cases=1, comparisons=verdict.comparisons, **{"guard fired": verdict.guard_fired,
                                                                   "non-finite": verdict.non_finite,
                                                                   "ill-conditioned": verdict.ill_conditioned,
                                                                   "stock differs": verdict.stock_differs,
                                                                   "unrecognised loops": verdict.unrecognised})
        totals[verdict.verdict] += 1
        worst = max(worst, verdict.worst)
        if not verdict.ok:
            failures.append(fa.describe(case, verdict))
            print("FAILING:\n" + failures[-1], file=sys.stderr, flush=True)
        if number % 25 == 0:
            print(f"  {fa.FLAVOUR}: {number} cases, {len(failures)} failing, {time.monotonic() - start:.0f}s",
                  file=sys.stderr, flush=True)
    return {"flavour": fa.FLAVOUR, "adversarial": True, "totals": dict(totals), "verdicts": dict(verdicts),
            "reasons": dict(reasons), "worst": worst, "failures": failures, "seconds": time.monotonic() - start}


def print_adversarial_summary(result) -> bool:
    t = collections.Counter(result["totals"])
    print(f"{result['flavour']}: {t['cases']} adversarial cases in {result['seconds']:.0f}s: refused {t['refused']}, "
          f"exact {t['exact']}, failures {t['failure']}")
    print(f"  {t['comparisons']} comparisons with Keras, worst |keras - onnx| / max(1, |keras|) {result['worst']:.3g} "
          f"(limit 1e-05; {t['ill-conditioned']} beyond it passed by the float64 referee), not compared (Keras "
          f"overflowed) {t['non-finite']}; equal to an ONNX file that differs from Keras {t['stock differs']}; "
          f"\"post\" guard fired {t['guard fired']}; "
          f"loops not taken for masked recurrent loops {t['unrecognised loops']}")
    for key, count in sorted(result["verdicts"].items()):
        print(f"  {key}: {count}")
    print("  reasons given: " + ("none" if not result["reasons"] else
                                 "; ".join(f"{r} (x{n})" for r, n in sorted(result["reasons"].items()))))
    for failure in result["failures"]:
        print("  FAILING:\n    " + failure.replace("\n", "\n    "))
    return not (t["failure"] or result["failures"])


# --- the parent: one worker process per flavour -----------------------------------------------

def run_flavour(flavour, args) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--cases", str(args.cases),
               "--batches", str(args.batches), "--seed", str(args.seed)]
    command += ["--adversarial"] if args.adversarial else []
    command += ["--unmasked"] if args.unmasked else []
    command += ["--onnx-files"] if args.onnx_files else []
    env = flavour_env(flavour)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    what = "adversarial cases" if args.adversarial else f"cases x {args.batches} batches" + (
        ", stock tf2onnx's files rewritten" if args.onnx_files else "")
    print(f"=== {flavour}: {args.cases} {what}, seed {args.seed}", flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return {"flavour": flavour, "totals": {"crashes": 1}, "worst": 0.0, "loops": {}, "batch_kinds": {},
            "failures": [f"the worker exited with code {done.returncode} and no result"], "seconds": 0.0}


def print_summary(result) -> bool:
    """Prints one flavour's counts; True when nothing failed."""
    t = collections.Counter(result["totals"])
    guard = f"{t['guard fired']}/{t['non-post batches']}" + (
        f" ({100 * t['guard fired'] / t['non-post batches']:.0f}%)" if t["non-post batches"] else "")
    print(f"{result['flavour']}: {t['cases']} cases, {t['model/batch cases']} model/batch cases, "
          f"{t['comparisons']} comparisons with Keras (both modes, both runtimes) in {result['seconds']:.0f}s")
    print(f"  passed {t['passed']}, mismatches {t['mismatches']}, crashes {t['crashes']}, "
          f"not compared (Keras's output overflowed) {t['non-finite']}, (a stock tf2onnx Loop, every "
          f"layer refused or kept for OpenVINO, overflowed) {t['stock overflow']}, (every layer refused, as far "
          f"from Keras as stock tf2onnx's own model) {t.get('stock differs', 0)}, (OpenVINO's imprecise "
          f"Softplus in a softplus layer's Loop, where onnxruntime matched) {t['openvino softplus']}")
    print(f"  worst |keras - onnx| / max(1, |keras|): {result['worst']:.3g} (limit 1e-05; "
          f"{t['ill-conditioned']} ill-conditioned comparisons above it passed as no more than "
          f"{result.get('worst_ill', 0.0):.2g}x as far from float64 Keras as float32 Keras is, or as float32 "
          f"rounding of the weights and inputs moves it, limit 10x)")
    print(f"  \"post\" on non-post-padded batches: guard fired {guard}, "
          f"returned numbers or another error {t['guard missed']}")
    print("  batch kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(result["batch_kinds"].items())))
    print("  signatures: " + ", ".join(f"{k} {n}" for k, n in sorted(result.get("signatures", {}).items())))
    print("  opsets: " + ", ".join(f"{k} {n}" for k, n in sorted(result.get("opsets", {}).items())))
    print("  wirings: " + ", ".join(f"{k} {n}" for k, n in sorted(result.get("wirings", {}).items()))
          + f"; cases also compared on OpenVINO: {t.get('on openvino', 0)}; without a mask: {t.get('unmasked', 0)}")
    loops = result["loops"]
    print("  layers left as Loop: " + ("none" if not loops else "; ".join(f"{r} (x{n})" for r, n in loops.items())))
    for failure in result["failures"]:
        print("  FAILING:\n    " + failure.replace("\n", "\n    "))
    return not (t["mismatches"] or t["crashes"] or t["guard missed"] or loops or result["failures"])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(RESULT_MARK + json.dumps(run_adversarial_worker(args) if args.adversarial else run_worker(args)),
              flush=True)
        return 0
    results = [run_flavour(f, args) for f in FLAVOURS if f in (args.keras or FLAVOURS)]
    print()
    ok = [print_adversarial_summary(result) if result.get("adversarial") else print_summary(result)
          for result in results]
    print("fuzz: " + ("OK" if all(ok) else "FAILED"))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
