"""Verifier latency: the time bounds the test suite checks by behaviour only (``tests/verifiers/test_verifiers.py``,
``tests/tasks/test_real_data.py``), measured here.

* the slowest call of each verifier over the pathological texts of ``tests/pathological_texts.py`` (each as
  completion against "18" and "\\frac{14}{3}", and as reference): goal < 2 s;
* the hard time limit of the ``math`` verifier: how long ``\\boxed{10^{10^{10}}}`` takes to come back (limit
  1 s plus the 0.4 s grace): goal < 2 s;
* MATH-500 self-consistency: every solution against its own answer, through the pre-check and through
  math-verify, on the 50-row fixture (quick) or on the full 500 rows of ``$GRPOLAB_SHARED_DATA`` /
  ``../shared/data`` when present: goal < 0.08 s per solution (40 s for the 500).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from _common import Row, bench_main, row

TESTS = Path(__file__).resolve().parents[1] / "tests"
VERIFIERS = ("gsm8k", "gsm8k_strict", "math", "exact")


def _pathological_rows() -> list[Row]:
    sys.path.insert(0, str(TESTS))
    from grpolab import verifiers
    from pathological_texts import PATHOLOGICAL

    results = []
    for name in VERIFIERS:
        worst, worst_label = 0.0, ""
        for label, text in PATHOLOGICAL.items():
            for completion, reference in ((text, "18"), (text, "\\frac{14}{3}"), ("\\boxed{18} #### 18", text[:4000])):
                started = time.perf_counter()
                verifiers.score(name, completion, reference)
                elapsed = time.perf_counter() - started
                if elapsed > worst:
                    worst, worst_label = elapsed, label
        results.append(row(f"verifier_{name}_slowest_pathological_call", value=worst, unit="s", goal="< 2",
                           met=worst < 2.0, detail=f"{len(PATHOLOGICAL)} texts x 3 uses; slowest: {worst_label}"))
    return results


def _time_limit_row() -> Row:
    from grpolab import verifiers

    started = time.perf_counter()
    _, parts = verifiers.score_with_details("math", "\\boxed{10^{10^{10}}}", "5")
    elapsed = time.perf_counter() - started
    return row("verifier_math_time_limit_return", value=elapsed, unit="s", goal="< 2", met=elapsed < 2.0,
               detail=f"\\boxed{{10^{{10^{{10}}}}}}, limit 1 s + 0.4 s grace; timed_out {parts['timed_out']}")


def _math500(quick: bool) -> Path:
    shared = os.environ.get("GRPOLAB_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
    full = Path(shared) / "math500" / "test.jsonl"
    return full if full.is_file() and not quick else TESTS / "fixtures" / "math500" / "test.jsonl"


def _math500_row(quick: bool) -> Row:
    from grpolab.verifiers import math_answer

    path = _math500(quick)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    started = time.perf_counter()
    wrong = sum(math_answer.score_details(r["solution"], r["answer"], precheck=precheck)[0] != 1.0
                for r in rows for precheck in (True, False))
    per_solution = (time.perf_counter() - started) / len(rows)
    return row("verifier_math500_self_check_per_solution", value=per_solution, unit="s", goal="< 0.08",
               met=per_solution < 0.08 and wrong == 0,
               detail=f"{len(rows)} rows ({'fixture' if TESTS in path.parents else 'full set'}), pre-check and "
                      "math-verify each; "
                      f"{wrong} not scored 1.0")


def run(quick: bool) -> list[Row]:
    from grpolab.verifiers import math_answer

    math_answer.warm_up()  # the one-time server start-up is not part of any per-call time
    return [*_pathological_rows(), _time_limit_row(), _math500_row(quick)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
