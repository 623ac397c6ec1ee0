"""scripts/paper_regime.py: the pre-registered readings of paper 1's regime on SmolLM2 on synthetic runs (each
reading, the TOST p's against hand-computed t intervals), and the per-run rows read from a sweep folder laid out as
scripts/gpu_paper_regime.sh brings it back."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("paper_regime", ROOT / "scripts" / "paper_regime.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _runs(lr: float, sign: list[float], dr_grpo: list[float], start: float = 0.2) -> pd.DataFrame:
    """Runs of one lr whose pass@1 moves by the given changes from ``start`` (a seed's start shifts by 0.01 x seed,
    shared by the two estimators, as their step-0 evaluations of one seed are)."""
    rows = []
    for name, changes in (("sign", sign), ("dr_grpo", dr_grpo)):
        for seed, change in enumerate(changes):
            rows.append({"lr": lr, "estimator": name, "seed": seed, "pass_at_1_step0": start + 0.01 * seed,
                         "pass_at_1_step200": start + 0.01 * seed + change})
    return pd.DataFrame(rows)


def test_each_reading_from_its_facts(script) -> None:
    assert script.reading(0.10, False, True, False) == script.PAPER
    assert script.reading(0.099, False, True, False) == script.NO_READING  # a gain under 10 points
    assert script.reading(0.01, True, True, True) == script.FROZEN
    assert script.reading(0.08, False, False, True) == script.NO_ADVANTAGE
    assert script.reading(0.08, False, False, False) == script.NO_READING
    assert script.reading(-0.08, False, True, False) == script.NO_READING


@pytest.mark.parametrize(("sign", "dr_grpo", "expected"), [
    ([0.15, 0.12, 0.14], [0.001, -0.002, 0.0], "the paper's pattern reproduces"),
    ([0.001, 0.0, -0.001], [0.002, -0.001, 0.0], "the tiny lr freezes both"),
    ([0.20, 0.22, 0.21], [0.21, 0.20, 0.225], "no sign advantage"),
    ([0.20, -0.10, 0.05], [0.30, 0.0, -0.2], "described, no reading"),
])
def test_the_readings_on_synthetic_runs(script, sign, dr_grpo, expected) -> None:
    row = script.lr_result(_runs(1e-6, sign, dr_grpo))
    assert row["reading"] == expected
    assert row["seeds"] == 3 and row["runs_left_out"] == 0
    assert math.isclose(row["sign_change"], float(np.mean(sign)), abs_tol=1e-12)
    assert math.isclose(row["difference"], float(np.mean(np.subtract(sign, dr_grpo))), abs_tol=1e-12)


def test_the_tost_p_is_the_t_interval_inside_the_margin(script) -> None:
    """TOST p < 0.05 exactly when the 90% t interval of the mean change lies inside +-3 points (2 dof)."""
    changes = np.array([0.012, -0.004, 0.02])
    row = script.lr_result(_runs(1e-5, list(changes), [0.0, 0.001, -0.001]))
    half = scipy_stats.t.ppf(0.95, 2) * changes.std(ddof=1) / math.sqrt(3)
    inside = -0.03 < changes.mean() - half and changes.mean() + half < 0.03
    assert (row["sign_still_p"] < 0.05) == inside
    low = scipy_stats.t.sf((changes.mean() + 0.03) / (changes.std(ddof=1) / math.sqrt(3)), 2)
    high = scipy_stats.t.cdf((changes.mean() - 0.03) / (changes.std(ddof=1) / math.sqrt(3)), 2)
    assert math.isclose(row["sign_still_p"], max(low, high), rel_tol=1e-9)


def test_a_run_without_its_end_score_is_left_out_and_counted(script) -> None:
    runs = _runs(1e-6, [0.15, 0.12, 0.14], [0.001, -0.002, 0.0])
    runs.loc[(runs["estimator"] == "dr_grpo") & (runs["seed"] == 2), "pass_at_1_step200"] = math.nan
    row = script.lr_result(runs)
    assert row["runs_left_out"] == 1 and row["seeds"] == 2  # seed 2 leaves both arms: the pairs stay by seed
    assert math.isclose(row["sign_change"], 0.135, abs_tol=1e-12)


def _sweep(folder: Path, lr: float) -> None:
    folder.mkdir(parents=True)
    runs = []
    for name in ("sign", "dr_grpo"):
        for seed in range(2):
            run_id = f"{name}-G4-seed{seed}"
            runs.append({"role": "result", "run_id": run_id, "estimator": name, "seed": seed, "lr": lr,
                         "status": "finished"})
            (folder / run_id).mkdir()
            lines = [{"step": step, "pass_at_k": {"1": 0.1 + step / 1000 + seed / 100},
                      "greedy_accuracy": 0.2 + step / 2000} for step in (0, 100, 200)]
            (folder / run_id / "eval.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    runs.append({"role": "selection", "run_id": "ignored", "estimator": "sign", "seed": 1000, "lr": lr,
                 "status": "finished"})
    pd.DataFrame(runs).to_csv(folder / "runs.csv", index=False)
    pd.DataFrame({"run_id": ["sign-G4-seed0"] * 2, "step": [1, 2], "starvation/all_wrong": [0.5, 0.25]}).to_parquet(
        folder / "metrics.parquet")


def test_rows_read_from_the_folders_the_gpu_call_brings_back(script, tmp_path: Path) -> None:
    _sweep(tmp_path / "lr1e-6", 1e-6)
    _sweep(tmp_path / "lr1e-5", 1e-5)
    runs = script.read_runs(tmp_path)
    assert len(runs) == 8 and set(runs["lr"]) == {1e-6, 1e-5}  # the selection row is not a result
    first = runs[(runs["lr"] == 1e-6) & (runs["estimator"] == "sign") & (runs["seed"] == 0)].iloc[0]
    assert [first[f"pass_at_1_step{s}"] for s in (0, 100, 200)] == pytest.approx([0.1, 0.2, 0.3])
    assert first["greedy_step200"] == pytest.approx(0.3) and first["all_wrong_mean"] == pytest.approx(0.375)
    assert math.isnan(runs[runs["seed"] == 1]["all_wrong_mean"].iloc[0])  # no metrics for that run


def test_the_command_writes_the_table(script, tmp_path: Path) -> None:
    out, dest = tmp_path / "out", tmp_path / "dest"
    _sweep(out / "lr1e-6", 1e-6)
    dest.mkdir()
    command = [sys.executable, str(ROOT / "scripts" / "paper_regime.py")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for what in ("rows", "table"):
        done = subprocess.run([*command, what, "--out", str(out), "--dest", str(dest)], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    table = (dest / "table.md").read_text()
    assert "| 1e-06 | 2 | +20.0 |" in table  # both arms gain 20 points at every seed
    # both moved 20 points and their difference is exactly 0 at every seed (zero standard error: TOST p = 0)
    assert pd.read_csv(dest / "results.csv")["reading"].iloc[0] == "no sign advantage"
    missing = subprocess.run([*command, "rows", "--out", str(tmp_path / "none"), "--dest", str(dest)],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode != 0 and "no sweep under" in missing.stderr


def test_the_committed_rows_and_table_regenerate_from_the_committed_gpu_sweeps(script, tmp_path: Path) -> None:
    """experiments/paper-regime-smollm2/{runs.csv, results.csv, table.md} from the sweeps one H100 brought back
    (gpu-2026-11-28/lr1e-6, lr1e-5), by the same two commands."""
    committed = ROOT / "experiments" / "paper-regime-smollm2"
    for what in ("rows", "table"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "paper_regime.py"), what,
             "--out", str(committed / "gpu-2026-11-28"), "--dest", str(tmp_path)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert done.returncode == 0, done.stderr
    for name in ("runs.csv", "results.csv", "table.md"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    runs = pd.read_csv(committed / "runs.csv")
    assert len(runs) == 12 and set(runs["status"]) == {"finished"}
    assert runs.groupby(["lr", "estimator"]).size().eq(3).all()


def test_the_docs_quote_the_committed_rows() -> None:
    """docs/when-sign-helps.md's SmolLM2 regime table: the greedy ranges at step 200 and the mean all-wrong shares,
    recomputed from experiments/paper-regime-smollm2/runs.csv."""
    runs = pd.read_csv(ROOT / "experiments" / "paper-regime-smollm2" / "runs.csv")
    doc = (ROOT / "docs" / "when-sign-helps.md").read_text()
    for lr, mine in runs.groupby("lr"):
        arms = {name: arm for name, arm in mine.groupby("estimator")}
        greedy = " / ".join(
            f"{100 * arms[n]['greedy_step200'].min():.1f}-{100 * arms[n]['greedy_step200'].max():.1f}%"
            for n in ("sign", "dr_grpo"))
        wrong = " / ".join(f"{arms[n]['all_wrong_mean'].mean():.2f}" for n in ("sign", "dr_grpo"))
        assert f"| {greedy} | {wrong} |" in doc, (lr, greedy, wrong)


def test_the_probe_estimate_of_a_full_run(script) -> None:
    """probe_timing: the medians per estimator, and a 200-step run as the probe's wall time with its 10 steps
    replaced by 200 at the median and a third evaluation costed as half of what is not stepping."""
    steps = pd.DataFrame({
        "run_id": ["sign-G4-seed0"] * 3 + ["dr_grpo-G4-seed0"] * 3,
        "estimator": ["sign"] * 3 + ["dr_grpo"] * 3,
        "step": [1, 2, 3] * 2,
        "perf/step_time": [0.4, 0.5, 0.9, 0.1, 0.2, 0.2],
        "perf/rollout_time": [0.1, 0.2, 0.3, 0.1, 0.1, 0.1],
        "perf/update_time": [0.3, 0.3, 0.6, 0.0, 0.1, 0.1],
    })
    timing = script.probe_timing(steps, wall_s=20.0, probe_steps=3).set_index("estimator")
    assert timing.loc["sign", "perf/step_time"] == pytest.approx(0.5)
    assert timing.loc["sign", "perf/update_time"] == pytest.approx(0.3)
    assert timing.loc["sign", "full_run_estimate_s"] == pytest.approx((20.0 - 3 * 0.5) * 1.5 + 200 * 0.5)
    assert timing.loc["dr_grpo", "full_run_estimate_s"] == pytest.approx((20.0 - 3 * 0.2) * 1.5 + 200 * 0.2)
