"""``grpolab.compare`` on sweep folders whose runs are written by hand: the order select-then-run, the
events, and the refusals, without training anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpolab.config import CompareConfig, TrainConfig
from grpolab.errors import UserError
from grpolab.sweep import Cell, compare
from grpolab.sweep.plan import plan_cells, plan_lr_grid, plan_runs
from sweep_runs import diverge, finish

pytestmark = pytest.mark.fast

SWEEP = CompareConfig(estimators="sign,rloo", seeds=2, group_sizes="2", lrs="1e-4,3e-4,1e-3", selection_seeds=1,
                      workers=1)
BASE = TrainConfig(steps=2)


def test_a_finished_sweep_is_gathered_without_training(tmp_path: Path) -> None:
    cells = plan_cells(SWEEP.estimator_list, SWEEP.group_size_list)
    for spec in plan_lr_grid(BASE, {cell: SWEEP.lr_list for cell in cells}, [1000], tmp_path):
        finish(spec, 0.0, passk={"1": {1e-4: 0.3, 3e-4: 0.6, 1e-3: 0.4}[spec.lr]}, split="validation")
    choice = dict.fromkeys(cells, 3e-4)
    for spec in plan_runs(BASE, SWEEP.estimator_list, SWEEP.seed_list, SWEEP.group_size_list, tmp_path, lrs=choice):
        finish(spec, 0.7)
    events: list[dict] = []
    result = compare(SWEEP, BASE, tmp_path, report=False, on_event=events.append)
    assert result.outcomes == [] and not result.failed  # nothing trained
    assert result.choice == choice and all(result.bracketed.values()) and result.unbracketed == []
    assert [e["phase"] for e in events if "phase" in e] == ["lr selection", "runs"]
    assert all(e["already"] == e["total"] for e in events if "phase" in e)
    assert [(e["selected"], e["lr"], e["bracketed"]) for e in events if "selected" in e] == \
        [(cell, 3e-4, True) for cell in sorted(cells)]
    assert set(result.results["lr"]) == {3e-4} and result.results["bracketed"].all()
    assert len(result.runs) == 6 + 4 and result.settings["compare"]["primary"] == "sign,rloo"
    assert result.settings["selection"]["unbracketed"] == []
    assert (tmp_path / "results.parquet").is_file() and (tmp_path / "selection.parquet").is_file()


def test_a_grid_whose_every_run_diverged_is_refused_without_training(tmp_path: Path) -> None:
    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4,3e-4", selection_seeds=1,
                          workers=1)
    (cell,) = plan_cells(["sign"], [2])
    for spec in plan_lr_grid(BASE, {cell: sweep.lr_list}, [1000], tmp_path):
        diverge(spec, split="validation")
    with pytest.raises(UserError, match="no lr-selection run of sign G=2 finished without diverging"):
        compare(sweep, BASE, tmp_path, report=False)
    assert not (tmp_path / "runs").exists()  # no reported run was started at an lr nobody chose
    assert isinstance(cell, Cell)


def test_a_curriculum_arm_on_a_streamed_task_is_refused_before_any_run(tmp_path: Path) -> None:
    sweep = CompareConfig(estimators="sign,dr_grpo+curriculum", seeds=1, group_sizes="2", lrs="", workers=1)
    with pytest.raises(UserError, match=r"^the curriculum needs a task with a fixed train split, but task 'reverse'"):
        compare(sweep, BASE, tmp_path / "out", report=False)
    assert not (tmp_path / "out" / "runs").exists()
