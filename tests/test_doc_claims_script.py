"""scripts/doc_claims.py: each check on a tiny table computed by hand, and on the committed tables the numbers the
docs quote (docs/when-sign-helps.md, docs/compare-report.md, docs/results.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


def _script():
    spec = importlib.util.spec_from_file_location("doc_claims", ROOT / "scripts" / "doc_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


def test_the_measured_snr2_is_two_c_over_one_minus_c() -> None:
    np.testing.assert_allclose(script.measured_snr2(pd.Series([0.0, 0.5, 1 / 3])), [0.0, 2.0, 1.0], atol=1e-12)


def test_the_snr_order_counts_batch_sizes_where_the_orders_agree() -> None:
    cells = pd.DataFrame(
        {
            "level": ["a"] * 4,
            "prompts": [16, 16, 64, 64],
            "estimator": ["x", "y", "x", "y"],
            "cosine_early": [0.1, 0.2, 0.3, 0.4],
            "step5_pass_at_1": [0.2, 0.1, 0.3, 0.4],
            "end_pass_at_1": [0.1, 0.2, 0.3, 0.4],
        }
    )
    row = script.snr_order(cells).iloc[0]
    assert row["same_order_within_p"] == 1 and row["batch_sizes"] == 2  # at P = 16 the order is reversed
    assert row["rho_end"] == pytest.approx(1.0) and row["rho_step5"] == pytest.approx(0.8)  # ranks 2,1,3,4


def test_the_snr_order_on_the_batch_size_grid() -> None:
    table = script.snr_order(pd.read_csv(EXPERIMENTS / "batch-size" / "cells.csv")).set_index("level")
    assert set(table["cells"]) == {9}
    assert table["rho_step5"].round(2).tolist() == [0.98, 0.98]
    assert table.loc["mixed", "rho_end"] == pytest.approx(0.95) and round(table.loc["star-len6", "rho_end"], 2) == 0.98
    assert set(table["same_order_within_p"]) == {2}


def test_the_replication_is_the_paired_test_on_seeds_5_to_9() -> None:
    runs = pd.read_csv(EXPERIMENTS / "sign-map" / "runs" / "mixed-clip1.csv")
    table = script.replication(runs)
    assert set(table["n"]) == {5}
    late = runs[(runs["role"] == "result") & (runs["seed"] >= 5) & (runs["group_size"] == 2)]
    sign, dr_grpo = (late[late["estimator"] == e].sort_values("seed")["end_pass_at_1"] for e in ("sign", "dr_grpo"))
    g2 = table[(table["metric"] == "end_pass_at_1") & (table["G"] == 2)].iloc[0]
    assert g2["paired_p"] == pytest.approx(scipy_stats.ttest_rel(sign, dr_grpo).pvalue)
    pass_at_1 = table[table["metric"] == "end_pass_at_1"].sort_values("G")
    assert (pass_at_1["difference"] * 100).round(1).tolist() == [11.5, 5.9]
    assert pass_at_1["holm_p"].round(3).tolist() == [0.046, 0.012]


def test_differing_runs_lists_only_changed_scores() -> None:
    base = {"role": "result", "group_size": 2}
    ours = pd.DataFrame(
        [
            {**base, "estimator": "sign", "seed": 0, "end_pass_at_1": 0.5},
            {**base, "estimator": "dr_grpo", "seed": 0, "end_pass_at_1": 0.4},
        ]
    )
    theirs = ours.assign(end_pass_at_1=[0.5, 0.45])
    found = script.differing_runs(ours, theirs)
    assert found["estimator"].tolist() == ["dr_grpo"] and found["shared"].tolist() == [2]
    assert found["difference"].iloc[0] == pytest.approx(-0.05)


def test_the_maps_seeds_0_to_4_against_the_committed_demo_runs() -> None:
    map_runs = pd.read_csv(EXPERIMENTS / "sign-map" / "runs" / "mixed-clip1.csv")
    found = script.differing_runs(map_runs, pd.read_csv(EXPERIMENTS / "demo" / "runs.csv"))
    points = 100 * found["difference"].abs()
    report = " ".join((ROOT / "docs" / "compare-report.md").read_text(encoding="utf-8").split())
    assert found["shared"].iloc[0] == 20
    assert (
        f"{len(found)} of their {found['shared'].iloc[0]} `sign` and `dr_grpo` runs end {points.min():.2f} to "
        f"{points.max():.2f} points of pass@1 away"
    ) in report


def test_the_lowp_arms_paired_and_holm() -> None:
    runs = pd.DataFrame(
        {
            "arm": ["dr_grpo"] * 3 + ["a"] * 3 + ["b"] * 3,
            "run": [f"x-seed{s}" for s in (2, 0, 1)] * 3,
            "end_pass_at_1": [0.5, 0.3, 0.4, 0.6, 0.4, 0.45, 0.1, 0.2, 0.1],
        }
    )
    table = script.lowp_paired(runs, arms=("a", "b")).set_index("arm")
    # seeds 0, 1, 2: dr_grpo 0.3, 0.4, 0.5; a 0.4, 0.45, 0.6 (differences 0.1, 0.05, 0.1)
    assert table.loc["a", "paired_p"] == pytest.approx(scipy_stats.ttest_rel([0.4, 0.45, 0.6], [0.3, 0.4, 0.5]).pvalue)
    smaller, larger = sorted(table["paired_p"])
    assert sorted(table["paired_holm"]) == pytest.approx([min(1.0, 2 * smaller), max(2 * smaller, larger)])


def test_the_lowp_numbers_the_docs_quote() -> None:
    table = script.lowp_paired(pd.read_csv(EXPERIMENTS / "smollm2" / "lowp_runs.csv")).set_index("arm")
    assert table.loc[["sign", "nsr"], "paired_holm"].round(3).tolist() == [0.107, 0.055]
    assert table.loc[["sign", "nsr"], "welch_holm"].round(3).tolist() == [0.030, 0.031]
    assert (table["paired_holm"] > 0.05).all()


def test_adam_steps_where_dr_grpo_is_above_sign() -> None:
    runs = pd.read_csv(EXPERIMENTS / "smollm2" / "updates" / "mask_truncated_completions=false" / "mechanism_runs.csv")
    table = script.adam_steps(runs)
    below = table[(table["paired_p"] < 0.05) & (table["welch_p"] < 0.05)]
    assert below["checkpoint"].tolist() == ["step 15", "step 20"]
    assert (below["dr_grpo"] > below["sign"]).all() and set(table["n"]) == {3}


def test_the_sign_map_wins_sit_in_four_conditions() -> None:
    wins = script.sign_map_wins(script.read_verdicts(EXPERIMENTS / "sign-map" / "verdicts.md"))
    assert len(wins) == 7 and len(wins[["level", "G"]].drop_duplicates()) == 4
    plus = wins[wins["level"] == "plus"]
    assert len(plus) == 4 and plus["difference"].between(1.6, 2.6).all()
    # on greedy accuracy the plus wins vanish: equivalent at G = 2, unresolved at G = 4 (its 1.1-point margin)
    assert plus.groupby("G")["verdict"].agg(set).to_dict() == {2: {"equivalent"}, 4: {"no evidence either way"}}
