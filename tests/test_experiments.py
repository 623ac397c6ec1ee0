"""Sweeps (grpolab.experiments): the runs planned, the lr chosen on validation runs, and the tables gathered
from finished runs only. No training here: finished runs are written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpolab import experiments
from grpolab.config import TrainConfig, save_config
from grpolab.errors import UserError

BASE = TrainConfig(steps=4, lr=1e-4)


def test_runs_are_planned_seed_major_with_the_estimators_settings(tmp_path: Path) -> None:
    specs = experiments.plan_runs(BASE, ["sign", "dr_grpo+dynamic"], [0, 1], [2, 4], tmp_path)
    assert [s.run_id for s in specs[:4]] == ["sign-G2-seed0", "dr_grpo+dynamic-G2-seed0", "sign-G4-seed0",
                                             "dr_grpo+dynamic-G4-seed0"]
    assert len(specs) == 8 and {s.seed for s in specs[4:]} == {1}
    dynamic = specs[1]
    assert dynamic.config.advantage == "dr_grpo" and dynamic.config.dynamic_sampling
    assert not specs[0].config.dynamic_sampling and specs[0].config.advantage == "sign"
    assert all(not s.config.progress and s.config.seed == s.seed and s.config.group_size == s.group_size
               for s in specs)
    assert dynamic.run_dir == tmp_path / "runs" / "dr_grpo+dynamic-G2-seed0" and dynamic.lr == 1e-4
    assert not any(s.finished or s.started for s in specs)


def test_a_group_estimator_at_g1_and_an_unknown_estimator_are_refused(tmp_path: Path) -> None:
    assert len(experiments.plan_runs(BASE, ["sign"], [0], [1], tmp_path)) == 1  # sign needs no group
    with pytest.raises(UserError, match=r"estimator 'grpo' needs group sizes >= 2"):
        experiments.plan_runs(BASE, ["grpo"], [0], [1], tmp_path)
    with pytest.raises(UserError, match="in --estimators"):
        experiments.plan_runs(BASE, ["nonsense"], [0], [2], tmp_path)


def test_the_lr_grid_runs_on_the_validation_split_in_their_own_folder(tmp_path: Path) -> None:
    grid = experiments.plan_lr_grid(BASE, ["sign", "rloo"], [2], [1e-4, 3e-4], [1000, 1001], tmp_path)
    assert len(grid) == 2 * 2 * 2
    assert {s.lr for s in grid} == {1e-4, 3e-4} and {s.seed for s in grid} == {1000, 1001}
    assert all(s.config.eval_split == "validation" and not s.config.eval_start for s in grid)
    assert all(s.run_dir.parent == tmp_path / "selection" and f"-lr{s.lr:g}-" in s.run_id for s in grid)


def _finish(spec: experiments.RunSpec, score: float, *, passk: dict | None = None, split: str = "test") -> None:
    spec.run_dir.mkdir(parents=True)
    save_config(spec.config, spec.run_dir / "config.yaml")
    (spec.run_dir / "summary.json").write_text('{"status": "complete"}')
    rows = [{"step": 0, "phase": "start", "split": split, "greedy_accuracy": 0.0},
            {"step": spec.config.steps, "phase": "end", "split": split, "greedy_accuracy": score,
             "pass_at_k": passk or {}, "n": len(passk or {})}]
    (spec.run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1, "loss/policy": 0.1}\n')


def test_the_best_mean_validation_score_chooses_the_lr_and_ties_go_to_the_smaller(tmp_path: Path) -> None:
    grid = experiments.plan_lr_grid(BASE, ["sign", "rloo"], [2], [1e-4, 3e-4], [1000, 1001], tmp_path)
    scores = {("sign", 1e-4): (0.2, 0.4), ("sign", 3e-4): (0.5, 0.3), ("rloo", 1e-4): (0.5, 0.5),
              ("rloo", 3e-4): (0.5, 0.5)}
    for spec in grid:
        score = scores[(spec.estimator, spec.lr)][spec.seed - 1000]
        _finish(spec, 0.0, passk={"1": score, "2": 0.9}, split="validation")  # pass@1 is the criterion
    choice, table = experiments.select_lrs(grid)
    assert choice == {("sign", 2): 3e-4, ("rloo", 2): 1e-4}
    assert len(table) == 8 and table.loc[table["selected"], "lr"].tolist().count(3e-4) == 2
    assert experiments.validation_score({"greedy_accuracy": 0.25}) == 0.25


def test_no_finished_selection_run_is_an_error(tmp_path: Path) -> None:
    grid = experiments.plan_lr_grid(BASE, ["sign"], [2], [1e-4], [1000], tmp_path)
    with pytest.raises(UserError, match="no lr-selection run finished"):
        experiments.select_lrs(grid)


def test_results_come_from_finished_runs_only(tmp_path: Path) -> None:
    specs = experiments.plan_runs(BASE, ["sign", "rloo"], [0], [2], tmp_path)
    _finish(specs[0], 0.75, passk={"1": 0.5, "10": 0.9, "2": 0.6})
    specs[1].run_dir.mkdir(parents=True)  # started, never finished
    results, metrics = experiments.collect_results(specs)
    assert results["run_id"].unique().tolist() == ["sign-G2-seed0"] and results["phase"].tolist() == ["start", "end"]
    end = results.iloc[1]
    assert end["greedy_accuracy"] == 0.75 and end["pass_at_k"] == [0.5, 0.6, 0.9]  # k in numeric order
    assert end["lr"] == 1e-4 and end["steps"] == 4
    assert metrics[["run_id", "step"]].values.tolist() == [["sign-G2-seed0", 1]]
    assert experiments.run_sweep(specs[:1]) == []  # nothing left to run
    with pytest.raises(UserError, match="unknown backend"):
        experiments.run_sweep(specs[1:], backend="slurm")
