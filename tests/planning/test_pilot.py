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


def _plan_lines(folder: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    code = main(["plan", str(folder), *flags])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err


def test_a_pilot_without_a_finished_end_evaluation_is_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=2)
    results = pd.read_parquet(folder / "results.parquet")
    results.assign(status="diverged").to_parquet(folder / "results.parquet")  # was: KeyError 'seeds'
    code, _, err = _plan_lines(folder, capsys)
    assert code == 2 and "holds no end evaluation of a run that did not diverge" in err and "Traceback" not in err
    assert err.strip().count("\n") == 0


def test_a_pilot_without_per_prompt_counts_plans_from_its_seeds(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=3)
    pd.read_parquet(folder / "results.parquet").drop(columns="successes").to_parquet(folder / "results.parquet")
    code, out, _ = _plan_lines(folder, capsys)  # was: KeyError 'successes'
    assert code == 0 and "seeds per arm detect" in out and "from the per-seed differences" in out


def test_a_pilot_with_no_compared_pair_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, _, _ = synthetic_sweep(("sign",), seeds=3, sizes=(2,))
    folder = tmp_path / "pilot"
    folder.mkdir()
    results.to_parquet(folder / "results.parquet")
    code, out, _ = _plan_lines(folder, capsys)  # was: the arm table alone, and exit 0
    assert code == 0 and "no compared pair" in out and "seeds per arm" not in out


def test_a_pilot_pair_with_a_tiny_effect_is_not_called_an_effect_of_0(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=3)
    code, out, _ = _plan_lines(folder, capsys, "--effect", "1e-9")
    assert code == 0 and "more than 1,000,000 seeds per arm would be needed to detect a difference of 1e-09" in out
    assert "an effect of 0" not in out


def _one_seed_pilot(folder: Path, n: int, other_seeds: int = 1) -> Path:
    """sign with one seed and dr_grpo with ``other_seeds``, scored with n samples per prompt (0: greedy)."""
    sign, _, _ = synthetic_sweep(("sign",), seeds=1, sizes=(2,))
    other, _, _ = synthetic_sweep(("dr_grpo",), seeds=other_seeds, sizes=(2,))
    results = pd.concat([sign, other], ignore_index=True)
    if n < 2:
        results["n"] = n
        results["successes"] = [list(np.minimum(s, n)) for s in results["successes"]]
    folder.mkdir()
    results.to_parquet(folder / "results.parquet")
    (folder / "compare.yaml").write_text(yaml.safe_dump({"compare": {"primary": "sign,dr_grpo"}}))
    return folder


@pytest.mark.parametrize("n", [0, 1])
def test_one_seed_without_sampling_variance_gives_no_plan(n: int, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Greedy scores (no sampling variance: was an SD of 0 and "6 seeds") or one sample per prompt (was a refusal
    of an SD of nan) leave one seed nothing to estimate from: the pair has no plan, and the line says what to do."""
    folder = _one_seed_pilot(tmp_path / "pilot", n)
    code, out, err = _plan_lines(folder, capsys)
    assert code == 0 and "no plan: no SD of the paired difference" in out and "pass --sd" in out, err
    assert "seeds per arm detect" not in out
    code, out, _ = _plan_lines(folder, capsys, "--sd", "0.05", "--effect", "0.05")
    assert code == 0 and f"{seeds_needed(0.05, 0.05)} seeds per arm detect +0.05" in out


def test_one_seed_against_three_uses_the_measured_arms_variance(tmp_path: Path) -> None:
    folder = _one_seed_pilot(tmp_path / "pilot", 8, other_seeds=3)
    results = pd.read_parquet(folder / "results.parquet")
    arms = variance_components(results).set_index("estimator")
    (plan,) = pair_plans(results, {"compare": {"primary": "sign,dr_grpo"}})
    assert plan["sd"] == pytest.approx(math.sqrt(arms.loc["sign", "sampling"] + arms.loc["dr_grpo", "total"]))
    assert "sign (one seed)" in plan["sd_source"] and arms.loc["dr_grpo", "total"] > arms.loc["dr_grpo", "sampling"]


def test_family_is_refused_with_a_pilot_and_sd_must_be_finite(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = _pilot(tmp_path / "pilot", seeds=3)
    code, _, err = _plan_lines(folder, capsys, "--family", "5")  # was: ignored, "Holm over 1"
    assert code == 2 and "--family applies without a pilot" in err
    assert main(["plan", "--sd", "inf", "--effect", "0.05"]) == 2
    assert "must be a finite number >= 0, got inf" in capsys.readouterr().err
