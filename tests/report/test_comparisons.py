"""Which pairs the report tests (grpolab.report.comparisons): the primary pair alone, the secondary pairs
Holm-adjusted among themselves, the pairs that are one update under Adam named and never tested."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from grpolab.report.comparisons import comparisons, primary_pair
from grpolab.report.tables import run_table
from grpolab.stats import holm_correction
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


def test_the_primary_p_is_raw_and_the_secondary_ones_are_holm_adjusted_among_themselves() -> None:
    results, _, config = synthetic_sweep(ALL, seeds=3, sizes=(4,))
    rows, _ = comparisons(run_table(results), config)
    primary = next(r for r in rows if r["role"] == "primary")
    raw = scipy_stats.ttest_ind(FINALS[("sign", 4)], FINALS[("dr_grpo", 4)], equal_var=False).pvalue
    assert primary["welch_p"] == pytest.approx(raw) and primary["welch_p_holm"] == pytest.approx(raw)
    secondary = [r for r in rows if r["role"] == "secondary"]
    np.testing.assert_allclose([r["welch_p_holm"] for r in secondary],
                               holm_correction([r["welch_p"] for r in secondary]))
    assert primary["difference_low"] < primary["mean_difference"] < primary["difference_high"]
    assert primary["prob_improvement"] == 1.0 and primary["iqm_a"] == pytest.approx(0.78)


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
