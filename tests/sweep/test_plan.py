"""The runs a sweep plans (ids, folders, configs, variants) and what a run directory says about its run.
No training here: ended runs are written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.sweep.plan import Cell, plan_cells, plan_lr_grid, plan_runs
from grpolab.sweep.variants import NO_VARIANT, parse_vary
from grpolab.train.lifecycle import start_evaluation_key
from sweep_runs import diverge, finish

pytestmark = pytest.mark.fast

BASE = TrainConfig(steps=4, lr=1e-4)


def test_runs_are_planned_seed_major_with_the_estimators_settings(tmp_path: Path) -> None:
    specs = plan_runs(BASE, ["sign", "dr_grpo+dynamic"], [0, 1], [2, 4], tmp_path)
    assert [s.run_id for s in specs[:4]] == ["sign-G2-seed0", "dr_grpo+dynamic-G2-seed0", "sign-G4-seed0",
                                             "dr_grpo+dynamic-G4-seed0"]
    assert len(specs) == 8 and {s.seed for s in specs[4:]} == {1}
    dynamic = specs[1]
    assert dynamic.config.advantage == "dr_grpo" and dynamic.config.dynamic_sampling
    assert not specs[0].config.dynamic_sampling and specs[0].config.advantage == "sign"
    assert all(not s.config.progress and s.config.seed == s.seed and s.config.group_size == s.group_size
               for s in specs)
    assert dynamic.run_dir == tmp_path / "runs" / "dr_grpo+dynamic-G2-seed0" and dynamic.lr == 1e-4
    assert not any(s.ended or s.started for s in specs) and {s.variant for s in specs} == {NO_VARIANT}


def test_remedy_suffixes_switch_their_settings_on_and_combine(tmp_path: Path) -> None:
    specs = plan_runs(BASE, ["dr_grpo+mask", "dr_grpo+dynamic+mask", "dr_grpo", "sign+curriculum"], [0], [2],
                      tmp_path)
    settings = [(s.config.advantage, s.config.dynamic_sampling, s.config.mask_degenerate_groups, s.config.curriculum)
                for s in specs]
    assert settings == [("dr_grpo", False, True, False), ("dr_grpo", True, True, False),
                        ("dr_grpo", False, False, False), ("sign", False, False, True)]
    assert specs[0].run_dir == tmp_path / "runs" / "dr_grpo+mask-G2-seed0"
    assert plan_runs(BASE, ["dr_grpo+replay"], [0], [2], tmp_path)[0].config.replay
    with pytest.raises(UserError, match=r"unknown estimator 'dr_grpo\+masks'.*\+mask"):
        plan_runs(BASE, ["dr_grpo+masks"], [0], [2], tmp_path)


def test_a_group_estimator_at_g1_and_an_unknown_estimator_are_refused(tmp_path: Path) -> None:
    assert len(plan_runs(BASE, ["sign"], [0], [1], tmp_path)) == 1  # sign needs no group
    with pytest.raises(UserError, match=r"estimator 'grpo' needs group sizes >= 2"):
        plan_runs(BASE, ["grpo"], [0], [1], tmp_path)
    with pytest.raises(UserError, match="in --estimators"):
        plan_runs(BASE, ["nonsense"], [0], [2], tmp_path)


def test_the_lr_grid_runs_on_the_validation_split_in_their_own_folder(tmp_path: Path) -> None:
    cells = plan_cells(["sign", "rloo"], [2])
    grid = plan_lr_grid(BASE, {cell: [1e-4, 3e-4] for cell in cells}, [1000, 1001], tmp_path)
    assert len(grid) == 2 * 2 * 2
    assert {s.lr for s in grid} == {1e-4, 3e-4} and {s.seed for s in grid} == {1000, 1001}
    assert all(s.config.eval_split == "validation" and not s.config.eval_start for s in grid)
    assert all(s.run_dir.parent == tmp_path / "selection" and f"-lr{s.lr:g}-" in s.run_id for s in grid)
    assert "sign-G2-lr0.0001-seed1000" in {s.run_id for s in grid}  # the ids of sweeps made before variants


def test_variants_carry_their_settings_ids_and_start_evaluations(tmp_path: Path) -> None:
    variants = parse_vary('max_grad_norm=0,1;task_options={"digits": [1, 2]}')
    specs = plan_runs(BASE.replace(task="arith", model="embedded-arith"), ["sign"], [0], [2], tmp_path,
                      variants=variants)
    assert [s.variant.name for s in specs] == ['max_grad_norm=0,task_options={"digits":[1,2]}',
                                               'max_grad_norm=1,task_options={"digits":[1,2]}']
    assert [s.config.max_grad_norm for s in specs] == [0.0, 1.0]
    assert all(s.config.task_options == {"digits": [1, 2]} for s in specs)
    assert len({s.run_dir for s in specs}) == 2 and all(s.run_dir.parent == tmp_path / "runs" for s in specs)
    assert all(s.run_id.startswith("sign-G2-seed0-max_grad_norm=") and "{" not in s.run_id for s in specs)
    # a training setting varied: the runs share one start evaluation; a start setting varied: they do not
    assert start_evaluation_key(specs[0].config) == start_evaluation_key(specs[1].config)
    tasks = plan_runs(BASE, ["sign"], [0], [2], tmp_path, variants=parse_vary("temperature=0.5,1"))
    assert start_evaluation_key(tasks[0].config) != start_evaluation_key(tasks[1].config)
    cells = plan_cells(["sign"], [2], variants)
    assert cells[0] == Cell(variants[0], "sign", 2) and str(cells[0]).startswith('sign G=2 (max_grad_norm=0,')


def test_a_run_directory_says_whether_its_run_finished_or_diverged(tmp_path: Path) -> None:
    specs = plan_runs(BASE, ["sign", "rloo", "grpo", "dr_grpo"], [0], [2], tmp_path)
    finish(specs[0], 0.5)
    finish(specs[1], 0.5, status=None)  # an old finished run: no status in its summary
    diverge(specs[2])
    finish(specs[3], 0.5, config=specs[3].config.replace(steps=9))  # saved with other settings
    assert [s.status for s in specs] == ["finished", "finished", "diverged", None]
    assert [s.ended for s in specs] == [True, True, True, False]
    assert specs[2].diverged and not specs[2].finished
