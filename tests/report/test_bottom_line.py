"""The bottom line (grpolab.report.bottom_line): one plain sentence per primary comparison, resolved, equivalent,
not resolved with the seeds that would resolve it, or not tested and why."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from grpolab.planning import seeds_needed
from grpolab.report.bottom_line import bottom_line
from grpolab.report.comparisons import comparisons
from grpolab.report.tables import run_table
from report_sweeps import shifted, synthetic_sweep, with_variants

pytestmark = pytest.mark.fast


def _lines(results: pd.DataFrame, config: dict[str, Any]) -> list[str]:
    runs = run_table(results)
    return bottom_line(runs, comparisons(runs, config)[0], config)


def test_an_unresolved_difference_says_how_many_seeds_would_resolve_it() -> None:
    """sign - dr_grpo per seed at G = 2: 0.42, 0.44, 0.46 (SD 0.02); 3 seeds floor the paired p at 2 / 2^3."""
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2, 4))
    lines = _lines(results, config)
    assert len(lines) == 2  # one per group size
    needed = seeds_needed(0.44, 0.02, family=2)
    # the interval excludes 0 and the family's p does not resolve it: the line says the interval is unadjusted
    assert lines[0] == ("On pass@1, sign vs dr_grpo at G = 2: +44.0 points [+39.0, +49.0] (95% CI, not adjusted for "
                        "the family); not resolved at 3 seeds (Holm-adjusted p = 0.5); about "
                        f"{needed} seeds per arm would resolve a difference this size.")
    assert lines[1].startswith("On pass@1, sign vs dr_grpo at G = 4: +49.0 points [")


def test_a_resolved_difference_names_the_arm_ahead_and_its_lead() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=8, sizes=(2,))  # 8 seeds: p can reach 1/128
    [line] = _lines(results, config)
    assert line.startswith("On pass@1, sign vs dr_grpo at G = 2: sign is ahead by 44.1 points [+")
    assert line.endswith("(resolved: Holm-adjusted p = 0.0078).")
    [flipped] = _lines(results, {**config, "compare": {"primary": "dr_grpo,sign"}})
    assert flipped.startswith("On pass@1, dr_grpo vs sign at G = 2: sign is ahead by 44.1 points [+")
    assert flipped.split("[")[1].split("]")[0] == line.split("[")[1].split("]")[0]  # the lead's interval, not A - B


def test_an_equivalent_pair_says_within_which_margin() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=8, sizes=(2,))
    varied = with_variants({"max_grad_norm=1": results, "max_grad_norm=0": shifted(results, "dr_grpo", 0.44)})
    lines = _lines(varied, config)
    assert lines[0].startswith("On pass@1, sign vs dr_grpo at G = 2 (max_grad_norm=0): ")
    assert ", equivalent within ±5.0 points (Holm-adjusted TOST p = " in lines[0]
    assert "sign is ahead by 44.1 points" in lines[1]


def test_a_primary_pair_without_a_test_says_why() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=3, sizes=(2,))
    same = _lines(results, {**config, "compare": {"primary": "grpo,dr_grpo"}})
    assert same == ["The primary pair grpo vs dr_grpo at G = 2: not tested: the two are the same update under Adam "
                    "(see Pairs not tested)."]
    missing = _lines(results, {**config, "compare": {"primary": "sign,rloo"}})
    assert missing == ["The primary pair sign vs rloo at G = 2: not tested: rloo has no finished run here."]
    one_seed, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=1, sizes=(2,))
    assert _lines(one_seed, config) == ["The primary pair sign vs dr_grpo at G = 2: not tested: a test needs at least "
                                        "2 finished runs per arm (n = 1 vs 1)."]


def test_differences_without_spread_give_no_interval_rather_than_nan() -> None:
    """Every seed's difference the same: was "+0.0 points [+nan, +nan]"."""
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    sign = results[results["estimator"] == "sign"]
    copy = sign.assign(estimator="dr_grpo", run_id=sign["run_id"].str.replace("sign", "dr_grpo"))
    [line] = _lines(pd.concat([sign, shifted(copy, "dr_grpo", 0.1)], ignore_index=True), config)
    assert line.startswith("On pass@1, sign vs dr_grpo at G = 2: -10.0 points (no interval: the seeds' differences "
                           "have no spread)"), line


def test_a_primary_pair_declared_after_results_is_called_exploratory_in_the_opening_line() -> None:
    """Was: the caveat only in the detail section, the opening sentence read as a confirmatory test."""
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    record = {"primary_declared": "2026-11-26T13:00:00Z", "primary_declared_after_results": True,
              "primary_replaced": "sign,grpo"}
    [line] = _lines(results, {**config, "primary_declaration": record})
    assert line.endswith("(exploratory: this pair was declared after results were seen).")
    [plain] = _lines(results, {**config, "primary_declaration": {**record, "primary_declared_after_results": False}})
    assert "exploratory" not in plain
