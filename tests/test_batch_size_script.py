"""scripts/batch_size.py's statistics and tables on synthetic sweeps: the per-seed slope of the paired gap on
log2 P (the pre-registered primary), its t interval, Holm over the two levels, the unbiased E[p(1 - p)] behind
the predicted SNR^2 ratio, and the cells' clipped share and half-batch cosine."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.diagnostics.variance import snr_ratio_fixed_vs_centred

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("batch_size", ROOT / "scripts" / "batch_size.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


def test_the_slope_per_seed_is_least_squares_on_log2_p() -> None:
    gaps = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "prompts": [16, 64, 256] * 2, "gap": [0.3, 0.2, 0.1, 4, 4, 4]})
    np.testing.assert_allclose(script.seed_slopes(gaps), [-0.05, 0.0], atol=1e-12)  # log2 P = 4, 6, 8


def test_the_t_summary_is_the_one_sample_t_test() -> None:
    values = np.array([1.0, 2.0, 4.0, 3.0, 5.0])
    found = script.t_summary(values)
    test = scipy_stats.ttest_1samp(values, 0.0)
    interval = test.confidence_interval(0.95)
    assert found["mean"] == pytest.approx(3.0)
    assert found["p"] == pytest.approx(test.pvalue, rel=1e-9)
    assert (found["low"], found["high"]) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert script.t_summary(np.array([2.0, 2.0]))["p"] == 0.0 and script.t_summary(np.zeros(3))["p"] == 1.0


def test_start_moments_are_unbiased_on_simulated_counts() -> None:
    generator = np.random.default_rng(0)
    p = generator.choice([0.0, 0.1, 0.5, 0.9, 1.0], size=400)
    truth = float(np.mean(p * (1 - p)))
    estimates = [script.start_moments(generator.binomial(8, p).tolist(), 8)[1] for _ in range(400)]
    assert np.mean(estimates) == pytest.approx(truth, abs=0.004)  # standard error ~ 0.0004
    plug_in = [np.mean((k := generator.binomial(8, p)) / 8 * (1 - k / 8)) for _ in range(400)]
    assert np.mean(plug_in) < truth - 0.01  # the plug-in k/n (1 - k/n) is biased low by (n - 1)/n


@pytest.mark.parametrize(("baseline", "group_size"), [(0.5, 2), (0.0, 2), (0.5, 4), (1.0, 4)])
def test_the_predicted_ratio_reduces_to_the_mean_p_formula_when_every_prompt_has_the_same_p(baseline, group_size):
    p = 0.3
    assert script.predicted_ratio(p, p * (1 - p), group_size, baseline) == pytest.approx(
        float(snr_ratio_fixed_vs_centred(p, group_size, baseline)), rel=1e-12)
    assert script.predicted_ratio(0.5, 0.0, 2, 0.5) == 0.0  # all prompts at p = 0 or 1: no signal for anyone


def _sweep(folder: Path, level_gap: float, slope: float) -> None:
    """A grid folder: 3 seeds x P in {16, 64, 256} x sign, dr_grpo, reinforce, with sign - dr_grpo =
    level_gap + slope * (log2 P - 6) + a per-seed offset."""
    runs, steps = [], []
    for seed in range(3):
        for prompts in (16, 64, 256):
            for estimator in ("sign", "dr_grpo", "reinforce"):
                run_id = f"{estimator}-G2-seed{seed}-prompts_per_step={prompts}"
                end = 0.5 + 0.01 * seed
                if estimator == "sign":
                    end += level_gap + slope * (np.log2(prompts) - 6) + 0.01 * seed * seed
                runs.append({"role": "result", "run_id": run_id, "variant": f"prompts_per_step={prompts}",
                             "estimator": estimator, "seed": seed, "group_size": 2, "lr": 1e-3,
                             "start_pass_at_1": 0.5, "start_greedy": 0.5, "end_pass_at_1": end, "end_greedy": end})
                for step in range(1, 7):
                    steps.append({"run_id": run_id, "step": step, "loss/clipped": float(step % 2),
                                  "grad/half_batch_cosine": 0.2 if step <= 5 else np.nan})
                run_dir = folder / "runs" / run_id
                run_dir.mkdir(parents=True)
                rows = [{"step": 0, "n": 4, "successes": [0, 4, 2, 2], "greedy_accuracy": 0.5, "pass_at_k": {"1": 0.5}},
                        {"step": 5, "n": 4, "successes": [], "greedy_accuracy": end, "pass_at_k": {"1": end}}]
                (run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pd.DataFrame(runs).to_csv(folder / "runs.csv", index=False)
    pd.DataFrame(steps).to_parquet(folder / "metrics.parquet")


def test_the_tables_recover_the_planted_interaction(tmp_path: Path) -> None:
    _sweep(tmp_path / "grid-star-len6-lr0.001", level_gap=0.10, slope=-0.02)
    _sweep(tmp_path / "grid-mixed-lr0.001", level_gap=0.05, slope=0.0)
    args = argparse.Namespace(out=tmp_path, dest=tmp_path / "dest", levels="star-len6,mixed")
    runs = script.read_runs(args)
    assert len(runs) == 2 * 3 * 3 * 3
    interaction = script.interaction_table(runs, ["star-len6", "mixed"])
    primary = interaction[(interaction["estimator"] == "sign") & (interaction["metric"] == "end_pass_at_1")]
    slopes = primary.set_index("level")["mean"]
    assert slopes["star-len6"] == pytest.approx(-0.02, abs=1e-9) and slopes["mixed"] == pytest.approx(0, abs=1e-9)
    assert primary["p_holm"].notna().all() and interaction["p_holm"].notna().sum() == 2
    cells = script.cell_table(runs)
    assert cells["clipped_share"].to_numpy() == pytest.approx(0.5)  # steps 1, 3, 5 of 6 clipped
    assert cells["cosine_early"].to_numpy() == pytest.approx(0.2)  # steps 1-5
    assert cells["cosine_all"].to_numpy() == pytest.approx(0.2)  # over the steps where it is defined
    assert cells["cosine_undefined"].to_numpy() == pytest.approx(1 / 6)  # step 6: a half without gradient
    assert cells["start_p_var"].to_numpy() == pytest.approx(2 * (2 * 2 / 12) / 4)  # k = 2 of n = 4 twice
    gaps = script.gap_table(runs, ["star-len6", "mixed"])
    sign_16 = gaps[(gaps["estimator"] == "sign") & (gaps["level"] == "star-len6") & (gaps["prompts"] == 16)
                   & (gaps["metric"] == "end_pass_at_1")].iloc[0]
    assert sign_16["mean"] == pytest.approx(0.10 + 0.04 + np.mean([0, 0.01, 0.04]))
    errors = gaps[(gaps["estimator"] == "sign") & (gaps["level"] == "star-len6") & (gaps["prompts"] == 16)
                  & (gaps["metric"] == "end_log_error")].iloc[0]
    dr = 0.5 + 0.01 * np.arange(3)
    sign = dr + 0.14 + 0.01 * np.arange(3) ** 2
    assert errors["mean"] == pytest.approx(np.mean(np.log(1 - sign) - np.log(1 - dr)))
