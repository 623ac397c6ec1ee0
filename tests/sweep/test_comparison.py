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


def _finishing_backend(specs, **_):
    """A backend that ends each run at once, the higher its lr the better (so every grid is extended upwards)."""
    for spec in specs:
        if not spec.ended:
            split = "validation" if spec.seed >= 1000 else "test"
            finish(spec, 0.5, passk={"1": min(spec.lr * 100, 1.0)}, split=split)
    return [{"run_id": spec.run_id, "ok": True, "error": "", "seconds": 0} for spec in specs]


def test_only_runs_of_an_earlier_compare_count_as_resumed(tmp_path: Path, monkeypatch, capsys) -> None:
    import grpolab.sweep.comparison as comparison
    from grpolab.commands.compare import _Progress

    monkeypatch.setattr(comparison, "run_sweep", _finishing_backend)
    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4,3e-4", selection_seeds=1,
                          lr_bracket_rounds=2, workers=1)
    events: list[dict] = []
    compare(sweep, BASE, tmp_path, report=False, on_event=events.append)
    groups = [e for e in events if "phase" in e]
    assert [e["phase"] for e in groups] == ["lr selection", "lr selection, round 1", "lr selection, round 2", "runs"]
    assert [e["already"] for e in groups] == [0, 2, 3, 0]  # the earlier rounds' runs are skipped ...
    assert [e["resumed"] for e in groups] == [0, 0, 0, 0]  # ... but were not resumed: this call trained them
    progress = _Progress()
    for event in groups:
        progress.on_event(event)
    progress.close()
    assert "resuming" not in capsys.readouterr().err  # before: "resuming: 2 of 3 runs already finished"
    events.clear()
    compare(sweep, BASE, tmp_path, report=False, on_event=events.append)
    # a second call: each group's runs that the first call finished, not counted again in a later round
    assert [(e["already"], e["resumed"]) for e in events if "phase" in e] == [(2, 2), (3, 1), (4, 1), (1, 1)]


def test_a_run_extended_by_hand_is_named_with_the_fix(tmp_path: Path) -> None:
    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4", workers=1)
    spec = plan_runs(BASE, ["sign"], [0], [2], tmp_path)[0]
    finish(spec, 0.5, config=spec.config.replace(steps=5))  # grpolab train --out RUN --resume --steps 5
    with pytest.raises(UserError) as caught:  # before: "run ... failed: ... --steps must be more than that"
        compare(sweep, BASE, tmp_path, report=False)
    message = str(caught.value)
    assert f"run {spec.run_id} was extended by hand to 5 steps" in message and "past this sweep's 2" in message
    assert f"move {spec.run_dir} out of" in message and "\n" not in message
