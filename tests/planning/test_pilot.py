"""``grpolab.planning.pilot``: the variance split of a simulated pilot with known parts, the pairs' plans on a
synthetic sweep (hand-checked SD and seeds), the one-seed assumption, and ``grpolab plan`` on both."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from grpolab.cli import main
from grpolab.planning import seeds_needed
from grpolab.planning.pilot import pair_plans, variance_components
from report_sweeps import FINALS, synthetic_sweep

pytestmark = pytest.mark.fast

PROMPTS, SAMPLES = 50, 8


def _simulated_arm(seeds: int, seed_sd: float, rng: np.random.Generator, rates: np.ndarray) -> pd.DataFrame:
    """End rows of one arm: seed s shifts every prompt's pass rate by T_s ~ N(0, seed_sd^2); k_i ~ Bin(n, p_i + T_s)."""
    rows = []
    for s in range(seeds):
        successes = rng.binomial(SAMPLES, np.clip(rates + rng.normal(0, seed_sd), 0, 1))
        rows.append({"variant": "", "estimator": "sign", "group_size": 4, "seed": s, "phase": "end",
                     "status": "finished", "n": SAMPLES, "successes": successes.tolist(),
                     "pass_at_k": [float(np.mean(successes / SAMPLES))], "greedy_accuracy": 0.0})
    return pd.DataFrame(rows)


def test_the_split_recovers_known_parts() -> None:
    """1,000 seeds with a training-seed SD of 0.03 (variance 9e-4) on 50 prompts of pass rates in [0.2, 0.8]:
    the sample variance of 1,000 scores has a relative SD of sqrt(2 / 999) = 4.5%, so the training-seed part,
    total minus sampling, lies within 4 of those of 9e-4 plus the sampling part's own error; the sampling part
    is the mean of p(1 - p) / (n P) over the shifted rates; the prompt part Var_i(p_i) / P."""
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.2, 0.8, PROMPTS)
    arm = variance_components(_simulated_arm(1000, 0.03, rng, rates)).iloc[0]
    sampling = np.mean(rates * (1 - rates)) / (SAMPLES * PROMPTS) - 0.03**2 / (SAMPLES * PROMPTS)
    assert arm["sampling"] == pytest.approx(sampling, rel=0.05)
    assert arm["total"] == pytest.approx(0.03**2 + sampling, rel=4 * math.sqrt(2 / 999))
    assert arm["training_seed"] == pytest.approx(0.03**2, abs=4 * math.sqrt(2 / 999) * arm["total"])
    assert arm["prompt"] == pytest.approx(np.var(rates, ddof=1) / PROMPTS, rel=0.1)
    no_seed_effect = variance_components(_simulated_arm(1000, 0.0, rng, rates)).iloc[0]
    assert no_seed_effect["training_seed"] < 0.1 * 0.03**2


def test_the_pairs_plan_from_their_per_seed_differences() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2, 4))
    plans = {plan["group_size"]: plan for plan in pair_plans(results, {"compare": {"primary": "sign,dr_grpo"}})}
    for size in (2, 4):
        differences = np.subtract(FINALS[("sign", size)], FINALS[("dr_grpo", size)])
        plan = plans[size]
        assert plan["role"] == "primary" and plan["family_size"] == 2 and plan["seeds_now"] == 3
        assert plan["sd"] == pytest.approx(np.std(differences, ddof=1))
        assert plan["observed"] == pytest.approx(differences.mean())
        assert plan["seeds"] == seeds_needed(differences.mean(), np.std(differences, ddof=1), family=2)
    wanted = pair_plans(results, {}, effect=0.01)
    assert all(p["effect"] == 0.01 and p["seeds"] > plans[p["group_size"]]["seeds"] for p in wanted)


def _pilot(folder: Path, seeds: int) -> Path:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=seeds, sizes=(2,))
    folder.mkdir()
    results.to_parquet(folder / "results.parquet")
    (folder / "compare.yaml").write_text(yaml.safe_dump({"compare": {"primary": "sign,dr_grpo"}}))
    return folder


def test_one_seed_per_arm_says_what_it_assumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=1)
    assert main(["plan", str(folder), "--effect", "0.05", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "training-seed variance cannot be estimated" in data["notes"][0] and "assumed 0" in data["notes"][0]
    arms = {arm["estimator"]: arm for arm in data["arms"]}
    assert arms["sign"]["training_seed"] is None and arms["sign"]["sampling"] > 0
    pair = data["pairs"][0]
    assert pair["sd"] == pytest.approx(math.sqrt(arms["sign"]["sampling"] + arms["dr_grpo"]["sampling"]))
    assert pair["seeds"] == seeds_needed(0.05, pair["sd"]) and "assumed" in pair["sd_source"]


def test_plan_from_a_pilot_prints_each_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=3)
    assert main(["plan", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "training_seed" in out and "G = 2, primary: sign vs dr_grpo:" in out and "seeds per arm" in out


def test_plan_from_numbers_names_the_count_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--sd", "0.05", "--effect", "0.05", "--family", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seeds"] == seeds_needed(0.05, 0.05, family=2) and data["achieved_power"] >= 0.8
    assert main(["plan", "--sd", "0.05"]) == 2
    assert "give --sd" in capsys.readouterr().err
    assert main(["plan", "--sd", "0.05", "--effect", "0.05", "--power", "1.5"]) == 2
