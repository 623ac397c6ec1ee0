"""Which pairs the report tests (grpolab.report.comparisons): the primary pair at every G as one Holm family,
the other pairs as a second, paired by seed where the seeds pair, the pairs that are one update under Adam named
and never tested."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.report.comparisons import comparisons, finding, primary_pair, reading, resolve_phrase
from grpolab.report.tables import run_table
from grpolab.stats import WELCH_TESTS, compare_pair, holm_correction, permutation_floor
from report_sweeps import FINALS, synthetic_sweep, with_lrs, with_variants

ALL = ("sign", "dr_grpo", "grpo", "rloo")


def _roles(rows: list[dict], size: int) -> dict[frozenset, str]:
    return {frozenset((r["name_a"], r["name_b"])): r["role"] for r in rows if r["group_size"] == size}


def test_primary_pair_declared_default_and_fallback() -> None:
    assert primary_pair({"compare": {"primary": "grpo,sign"}}, ["sign", "grpo"]) == ("grpo", "sign")
    assert primary_pair({"compare": {"estimators": "grpo,dr_grpo,rloo,sign"}}, []) == ("sign", "dr_grpo")
    assert primary_pair({"compare": {"estimators": "grpo,rloo,sign"}}, []) == ("grpo", "rloo")
    assert primary_pair({"estimators": ["rloo", "grpo"]}, []) == ("rloo", "grpo")  # the report tests' config
    assert primary_pair({}, ["sign", "dr_grpo", "grpo"]) == ("sign", "dr_grpo")  # no config: what ran
    assert primary_pair({}, ["sign"]) is None


def test_roles_at_g_2_and_4() -> None:
    results, _, config = synthetic_sweep(ALL, seeds=3, sizes=(2, 4))
    rows, _ = comparisons(run_table(results), config)
    same = {frozenset(p) for p in (("dr_grpo", "grpo"), ("dr_grpo", "rloo"), ("grpo", "rloo"))}
    at2 = _roles(rows, 2)
    assert at2[frozenset(("sign", "dr_grpo"))] == "primary"
    assert {pair for pair, role in at2.items() if role == "same_update"} == same  # one update under Adam at G = 2
    # dr_grpo stands in for grpo and rloo (same update, same lr): sign vs either repeats the primary pair
    assert {pair for pair, role in at2.items() if role == "repeat"} == {frozenset(("sign", "grpo")),
                                                                         frozenset(("sign", "rloo"))}
    assert {r["repeats"] for r in rows if r["role"] == "repeat" and r["group_size"] == 2} == {"sign vs dr_grpo"}
    at4 = _roles(rows, 4)  # grpo's std differs between 1 and 2 successes of 4: only rloo stays dr_grpo rescaled
    assert {pair for pair, role in at4.items() if role == "same_update"} == {frozenset(("dr_grpo", "rloo"))}
    assert {pair for pair, role in at4.items() if role == "secondary"} == {frozenset(("sign", "grpo")),
                                                                            frozenset(("dr_grpo", "grpo"))}
    assert {r["repeats"] for r in rows if r["role"] == "repeat" and r["group_size"] == 4} == {
        "sign vs dr_grpo", "grpo vs dr_grpo"}
    assert not any(r["tested"] for r in rows if r["role"] in ("same_update", "repeat"))
    assert next(r["role"] for r in rows if r["group_size"] == 2) == "primary"  # the primary row comes first


def test_a_same_update_pair_at_different_lrs_stands_for_nobody() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=3, sizes=(2,))
    rows, _ = comparisons(run_table(with_lrs(results, {"sign": 1e-3, "dr_grpo": 1e-3, "grpo": 3e-4})), config)
    assert _roles(rows, 2) == {frozenset(("sign", "dr_grpo")): "primary", frozenset(("sign", "grpo")): "secondary",
                               frozenset(("dr_grpo", "grpo")): "same_update"}


def _reported_p(a, b) -> tuple[float, str]:
    """The paired t p, raised to 2 / 2^3 where it falls below what 3 seeds can carry."""
    from grpolab.stats import sign_flip_floor

    p = scipy_stats.ttest_rel(a, b).pvalue
    return (p, "paired t") if p >= sign_flip_floor(len(a)) else (sign_flip_floor(len(a)), "paired t (floored)")


def test_the_primary_family_is_holm_corrected_across_g_and_the_secondary_family_across_cells() -> None:
    results, _, config = synthetic_sweep(ALL, seeds=3, sizes=(2, 4))
    rows, _ = comparisons(run_table(results), config)
    primary = [r for r in rows if r["role"] == "primary"]
    assert [r["group_size"] for r in primary] == [2, 4] and {r["family_size"] for r in primary} == {2}
    raw = [_reported_p(FINALS[("sign", g)], FINALS[("dr_grpo", g)]) for g in (2, 4)]
    assert [r["p"] for r in primary] == pytest.approx([p for p, _ in raw])
    assert [r["test"] for r in primary] == [test for _, test in raw]
    raw = [p for p, _ in raw]
    assert [r["p_holm"] for r in primary] == pytest.approx(holm_correction(raw))  # one family over G = 2 and 4
    assert [r["p_holm"] for r in primary] != pytest.approx(raw)  # the correction changed something
    secondary = [r for r in rows if r["role"] == "secondary"]  # sign vs grpo and dr_grpo vs grpo, at G = 4
    assert {r["family_size"] for r in secondary} == {len(secondary)} == {2}
    np.testing.assert_allclose([r["p_holm"] for r in secondary], holm_correction([r["p"] for r in secondary]))
    np.testing.assert_allclose([r["tost_p_holm"] for r in secondary],
                               holm_correction([r["tost_p"] for r in secondary]))
    first = primary[0]
    assert first["difference_low"] < first["mean_difference"] < first["difference_high"]
    assert first["prob_improvement"] == 1.0 and first["iqm_a"] == pytest.approx(0.74)
    assert first["greedy_p_holm"] == pytest.approx(first["p_holm"])  # pass@1 = greedy accuracy in this sweep


def test_arms_whose_seeds_do_not_pair_fall_back_to_welch() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    keep = ~(results["estimator"].eq("sign") & results["seed"].eq(2))  # sign lost seed 2: 2 vs 3 seeds
    rows, _ = comparisons(run_table(results[keep]), config)
    raw = scipy_stats.ttest_ind(FINALS[("sign", 4)][:2], FINALS[("dr_grpo", 4)], equal_var=False).pvalue
    assert rows[0]["test"] in WELCH_TESTS and rows[0]["family_size"] == 1
    assert rows[0]["p"] == pytest.approx(max(raw, permutation_floor(2, 3)))  # no p below what 5 runs can carry


def test_unpaired_arms_without_spread_claim_nothing_beyond_their_runs() -> None:
    """Constant scores and unequal seeds (one run diverged): was Welch p = 0, a zero-width interval, "resolved",
    and TOST p = 0 ("equivalent")."""
    row = compare_pair([0.25] * 3, [0.125] * 2)
    assert row["test"] == "Welch (floored)" and row["p"] == pytest.approx(0.1)  # 1 / C(5, 2)
    assert math.isnan(row["difference_low"]) and math.isnan(row["difference_high"])
    tie = compare_pair([0.25] * 3, [0.25] * 2)
    assert tie["tost_p"] == pytest.approx(0.1) and math.isnan(tie["difference_low"])


def test_no_same_update_claim_with_a_kl_term_or_hyper_parameters() -> None:
    results, _, config = synthetic_sweep(("dr_grpo", "grpo"), seeds=2, sizes=(2,))
    for train in ({"beta": 0.04}, {"advantage_kwargs": {"eps": 0.0}}):
        rows, _ = comparisons(run_table(results), {**config, "train": train})
        assert [r["role"] for r in rows] == ["primary"] and rows[0]["tested"]  # the first two estimators
    rows, _ = comparisons(run_table(results), {**config, "train": {"beta": 0.0, "advantage_kwargs": {}}})
    assert [r["role"] for r in rows] == ["same_update"]


def test_a_variant_with_a_kl_term_gets_no_same_update_claim() -> None:
    results, _, config = synthetic_sweep(("dr_grpo", "grpo"), seeds=2, sizes=(2,))
    runs = run_table(with_variants({"beta=0": results, "beta=0.04": results, "max_grad_norm=0": results}))
    rows, _ = comparisons(runs, config)
    assert {r["variant"]: r["role"] for r in rows} == {"beta=0": "same_update", "beta=0.04": "primary",
                                                       "max_grad_norm=0": "same_update"}


def test_the_equivalence_margin_comes_from_the_sweep_settings() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    default, = [r for r in comparisons(run_table(results), config)[0] if r["tested"]]
    wide, = [r for r in comparisons(run_table(results), {**config, "compare": {"equivalence_margin": 0.6}})[0]
             if r["tested"]]
    runs = run_table(results)
    start = float(runs["start_accuracy"].mean())
    assert 0.25 * (1 - start) < 0.6  # this start leaves too little headroom for a 60-point margin
    assert default["margin"] == 0.05 and wide["margin"] == pytest.approx(0.25 * (1 - start))
    assert wide["tost_p"] < default["tost_p"]  # a wider margin is easier to be within


def test_the_margin_of_each_metric_is_cut_to_a_quarter_of_its_headroom() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    results = results.copy()
    start = results["phase"].eq("start")
    results.loc[start, "greedy_accuracy"] = 0.9  # greedy starts 10 points under the ceiling, pass@1 lower
    row, = [r for r in comparisons(run_table(results), config)[0] if r["tested"]]
    assert row["margin"] == 0.05  # pass@1 has the headroom for the fixed margin
    assert row["greedy_margin"] == pytest.approx(0.25 * 0.1)  # greedy accuracy has a quarter of its 10 points


def _near_equal_sweep():
    """6 seeds of sign and dr_grpo whose end scores differ by +-0.3 points, alternating with the seed (mean
    difference 0): (results, the end rows' mask, the end offsets to add to a level, config)."""
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=6, sizes=(4,))
    results = results.copy()
    ends = results["phase"].eq("end")
    seeds, is_sign = results.loc[ends, "seed"].to_numpy(), (results.loc[ends, "estimator"] == "sign").to_numpy()
    offsets = 0.002 * seeds + np.where(is_sign, 0.003 * (-1.0) ** seeds, 0.0)
    return results, ends, offsets, config


def test_two_arms_at_the_ceiling_are_not_called_equivalent() -> None:
    results, ends, offsets, config = _near_equal_sweep()
    results.loc[ends, "greedy_accuracy"] = 0.97 + offsets  # every run ends within 3 points of 100%
    results.loc[ends, "pass_at_k"] = pd.Series([[0.97 + o] for o in offsets], index=results.index[ends])
    row, = [r for r in comparisons(run_table(results), config)[0] if r["tested"]]
    assert row["p_holm"] >= 0.05 and row["tost_p_holm"] < 0.05  # TOST alone would say "equivalent"
    assert finding(row) == "ceiling" and finding(row, "greedy_") == "ceiling"
    said = reading(row)
    assert "both end at the ceiling" in said and "cannot be resolved" in said and "are equivalent" not in said


def test_the_same_difference_below_the_ceiling_is_equivalent() -> None:
    results, ends, offsets, config = _near_equal_sweep()
    results.loc[ends, "pass_at_k"] = pd.Series([[0.60 + o] for o in offsets], index=results.index[ends])
    row, = [r for r in comparisons(run_table(results), config)[0] if r["tested"]]
    assert finding(row) == "equivalent"


def test_a_tiny_observed_difference_is_neither_rounded_to_0_nor_called_0() -> None:
    from grpolab.planning.power import MOST_SEEDS
    from grpolab.report.comparisons import points, resolve_phrase

    assert points(0.0003) == "+0.03 points" and points(-0.00002) == "-0.002 points" and points(0.0) == "+0.0 points"
    assert points(0.032) == "+3.2 points"
    row = {"mean_difference": 0.00002, "difference_sd": 0.05, "family": "primary", "family_size": 1}
    assert resolve_phrase(row) == f"more than {MOST_SEEDS:,} seeds per arm would be needed to detect a difference " \
                                  "of +0.002 points"
    assert resolve_phrase({**row, "mean_difference": 0.0}) == "no number of seeds resolves an observed difference of 0"


def test_seeds_to_resolve_an_unpaired_row_say_what_they_plan_from() -> None:
    """A Welch row's seeds are planned for a paired design from the unpaired SD: was labelled "(paired t, ...)" as
    if its own pairing had been measured."""
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    keep = ~(results["estimator"].eq("sign") & results["seed"].eq(2))
    rows, _ = comparisons(run_table(results[keep]), config)
    said = resolve_phrase(rows[0])
    assert rows[0]["test"] in WELCH_TESTS and "planned from these unpaired runs' SD" in said, said
    paired, _ = comparisons(run_table(results), config)
    assert "(paired t, " in resolve_phrase(paired[0])
