"""The report's numbers (grpolab.report.tables): the summary, the Jensen gap and the equal-cost table, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from grpolab.diagnostics import iid_degeneracy
from grpolab.report.tables import equal_cost_table, jensen_table, summary_table, variance_table
from report_sweeps import N_SAMPLES, PROMPTS_PER_STEP, STEPS, shifted, synthetic_sweep

pytestmark = pytest.mark.fast


def test_summary_table_matches_hand_computation() -> None:
    results, _, _ = synthetic_sweep()
    table = summary_table(results).set_index(["estimator", "group_size"])
    assert list(table.index.get_level_values(0)[:3]) == ["sign", "dr_grpo", "grpo"]  # paper order
    sign2 = table.loc[("sign", 2)]
    assert sign2["n_seeds"] == 3
    assert sign2["final_accuracy"] == pytest.approx((0.70 + 0.74 + 0.78) / 3)
    assert sign2["start_accuracy"] == pytest.approx(0.25)
    assert sign2["change"] == pytest.approx(0.74 - 0.25)
    # Student t: s = 0.04, t_{2, 0.975} = 4.3027, half width 4.3027 * 0.04 / sqrt(3) = 0.0994
    assert sign2["ci_low"] == pytest.approx(0.74 - 0.0994, abs=1e-4)
    assert sign2["ci_high"] == pytest.approx(0.74 + 0.0994, abs=1e-4)
    assert sign2["n_diverged"] == 0 and sign2["variant"] == ""  # an old results table: one variant, no status
    assert table.loc[("dr_grpo", 4), "final_accuracy"] == pytest.approx((0.30 + 0.26 + 0.31) / 3)
    ends = results[(results["phase"] == "end") & (results["estimator"] == "grpo") & (results["group_size"] == 4)]
    assert table.loc[("grpo", 4), "pass@1"] == pytest.approx(np.mean([p[0] for p in ends["pass_at_k"]]))
    assert table.loc[("grpo", 4), "pass@n"] == pytest.approx(np.mean([p[-1] for p in ends["pass_at_k"]]))
    assert table.loc[("grpo", 4), "completions"] == STEPS * PROMPTS_PER_STEP * 4


def test_jensen_table_hand_computed() -> None:
    # One prompt always right, one never: D_real = 1 at every G, pbar = 1/2 so D_iid = 2 * 2^-G.
    results, _, _ = synthetic_sweep(estimators=("sign",), seeds=1, sizes=(2,))
    starts = results["phase"] == "start"
    results.loc[starts, "successes"] = pd.Series([[N_SAMPLES, 0]] * int(starts.sum()), index=results.index[starts])
    table = jensen_table(results, pd.DataFrame())
    assert table.loc[0, "d_real_eval"] == pytest.approx(1.0)
    assert table.loc[0, "d_iid_eval"] == pytest.approx(0.5)
    assert np.isnan(table.loc[0, "d_real_train"])


def test_jensen_table_training_d_iid_pools_p_mean_over_the_first_steps() -> None:
    # one prompt per step, alternately always right and never: per-step D_iid would be 1, pooled pbar = 1/2
    results, _, _ = synthetic_sweep(estimators=("sign",), seeds=1, sizes=(2,))
    metrics = pd.DataFrame(
        {
            "run_id": "r", "estimator": "sign", "group_size": 2, "step": [1, 2, 3, 4, 5, 6],
            "starvation/p_mean": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0], "starvation/uniform": 1.0,
            "starvation/degenerate": 0.0, "starvation/d_iid": 1.0,
        }
    )
    table = jensen_table(results, metrics)
    assert table.loc[0, "d_real_train"] == 1.0  # the uniform share, not sign's zero degenerate share
    assert table.loc[0, "d_iid_train"] == pytest.approx(iid_degeneracy(3 / 5, 2))  # pbar of steps 1-5


def test_equal_cost_table_with_only_end_evaluations() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo+dynamic"), seeds=2, sizes=(2,))
    table = equal_cost_table(results[results["phase"] != "step"]).set_index("estimator")
    assert table.loc["sign", "budget"] == STEPS * PROMPTS_PER_STEP * 2  # what the plain runs used
    assert table.loc["sign", "accuracy_at_budget"] == pytest.approx(0.72)  # its end evaluation fits
    assert np.isnan(table.loc["dr_grpo+dynamic", "accuracy_at_budget"])  # only its start fits: no claim
    assert table.loc["dr_grpo+dynamic", "completions_end"] == int(STEPS * PROMPTS_PER_STEP * 2 * 1.6)



def test_the_summary_interval_stays_within_the_range_of_a_score() -> None:
    results, _, _ = synthetic_sweep(("sign",), seeds=2, sizes=(2,))
    row = summary_table(shifted(results, "sign", 0.2)).iloc[0]  # 0.90 and 0.94: se 0.02, t_{1, 0.975} = 12.706
    assert row["ci_low"] == pytest.approx(0.92 - 12.706 * 0.02, abs=1e-3)
    assert row["ci_high"] == 1.0  # 0.92 + 0.254 cut to the largest possible score


def test_variance_table_uses_the_unbiased_mean_of_p_1_minus_p_per_g() -> None:
    # one start evaluation: prompts at 0, 8, 4 and 4 successes of 8; E[p(1-p)] = (0 + 0 + 2 * 16 / 56) / 4 = 1/7
    start = {"phase": "start", "step": 0, "successes": [0, 8, 4, 4], "n": 8}
    results = pd.DataFrame([{"run_id": f"sign-G{g}", "group_size": g, **start} for g in (2, 4)])
    table = variance_table(results).set_index("group_size")
    assert table["p_bar"].tolist() == pytest.approx([0.5, 0.5])
    assert table["mean_p_variance"].tolist() == pytest.approx([1 / 7, 1 / 7])
    assert table["snr_ratio"].tolist() == pytest.approx([4 / 7 / 0.5, 4 / 7 / 0.75])  # 4 E / (1 - 1/G)
    assert table["snr_ratio_pbar"].tolist() == pytest.approx([2.0, 4 / 3])  # the pbar formula: 4 * 0.25 / ...
