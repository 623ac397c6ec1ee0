"""Choosing each cell's lr on validation runs: the best mean wins, diverged lrs are out, and a choice at the
edge of the tried lrs extends the grid in the grid's ratio. Ended runs are written by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from grpolab.commands.compare import selection_notes
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.sweep.plan import plan_cells, plan_lr_grid
from grpolab.sweep.select import extend_grids, select_lrs, validation_score
from sweep_runs import diverge, finish

pytestmark = pytest.mark.fast

BASE = TrainConfig(steps=4, lr=1e-4)


def _grid(tmp_path: Path, estimators: list[str], lrs: list[float], seeds: list[int] = (1000,)):
    cells = plan_cells(estimators, [2])
    return cells, plan_lr_grid(BASE, {cell: lrs for cell in cells}, list(seeds), tmp_path)


def test_the_best_mean_validation_score_chooses_the_lr_and_ties_go_to_the_smaller(tmp_path: Path) -> None:
    (sign, rloo), grid = _grid(tmp_path, ["sign", "rloo"], [1e-4, 3e-4], [1000, 1001])
    scores = {("sign", 1e-4): (0.2, 0.4), ("sign", 3e-4): (0.5, 0.3), ("rloo", 1e-4): (0.5, 0.5),
              ("rloo", 3e-4): (0.5, 0.5)}
    for spec in grid:
        score = scores[(spec.estimator, spec.lr)][spec.seed - 1000]
        finish(spec, 0.0, passk={"1": score, "2": 0.9}, split="validation")  # pass@1 is the criterion
    selection = select_lrs(grid)
    assert selection.choice == {sign: 3e-4, rloo: 1e-4}
    table = selection.table
    assert len(table) == 8 and table.loc[table["selected"], "lr"].tolist().count(3e-4) == 2
    assert set(table["status"]) == {"finished"} and set(table["variant"]) == {""} and set(table["round"]) == {0}
    assert validation_score({"greedy_accuracy": 0.25}) == 0.25


def test_a_choice_at_the_edge_is_not_bracketed_and_the_grid_grows_in_its_ratio(tmp_path: Path) -> None:
    (sign, rloo, grpo), grid = _grid(tmp_path, ["sign", "rloo", "grpo"], [1e-5, 3e-5, 9e-5])
    best = {"sign": 9e-5, "rloo": 1e-5, "grpo": 3e-5}
    for spec in grid:
        finish(spec, 0.8 if spec.lr == best[spec.estimator] else 0.4, split="validation")
    selection = select_lrs(grid)
    assert selection.bracketed == {sign: False, rloo: False, grpo: True}
    assert selection.unbracketed == sorted([sign, rloo])
    assert extend_grids(selection, fallback_ratio=3.0) == {sign: [2.7e-4], rloo: [3.33e-6]}
    assert selection.table.groupby("estimator")["bracketed"].all().to_dict() == {"grpo": True, "rloo": False,
                                                                                "sign": False}


def test_a_tie_for_the_best_score_is_named_and_never_extended_toward_lr_zero(tmp_path: Path) -> None:
    # was: every lr scored 0, the tie went to the smallest lr, and each round added a smaller one (lr -> 0)
    (flat, edge, inside), grid = _grid(tmp_path, ["sign", "rloo", "grpo"], [1e-4, 3e-4, 1e-3], [1000, 1001])
    scores = {"sign": {1e-4: 0.0, 3e-4: 0.0, 1e-3: 0.0}, "rloo": {1e-4: 0.5, 3e-4: 0.5, 1e-3: 0.25},
              "grpo": {1e-4: 0.25, 3e-4: 0.5, 1e-3: 0.25}}
    for spec in grid:
        finish(spec, 0.0, passk={"1": scores[spec.estimator][spec.lr]}, split="validation")
    selection = select_lrs(grid)
    assert selection.choice == {flat: 1e-4, edge: 1e-4, inside: 3e-4}
    assert selection.tied == {flat: [1e-4, 3e-4, 1e-3], edge: [1e-4, 3e-4]}
    assert selection.unbracketed == sorted([flat, edge]) and extend_grids(selection, fallback_ratio=3.0) == {}
    result = SimpleNamespace(choice=selection.choice, tied=selection.tied, unbracketed=selection.unbracketed,
                             selection=selection.table)
    assert selection_notes(result, 2) == [  # by cell: the ties said, not "raise the rounds"
        f"the lrs 0.0001, 0.0003 tie for the best validation score of {edge}: the smallest (0.0001) was chosen and "
        "its grid not extended; widen --lrs or add --selection-seeds to tell them apart",
        f"the lrs 0.0001, 0.0003, 0.001 tie for the best validation score of {flat}: the smallest (0.0001) was "
        "chosen and its grid not extended; widen --lrs or add --selection-seeds to tell them apart"]


def test_a_diverged_lr_is_disqualified_and_brackets_from_above(tmp_path: Path) -> None:
    (sign,), grid = _grid(tmp_path, ["sign"], [1e-4, 3e-4, 1e-3], [1000, 1001])
    for spec in grid:
        if spec.lr == 1e-3 and spec.seed == 1001:
            diverge(spec, split="validation")  # one diverged seed disqualifies the lr
        else:
            finish(spec, {1e-4: 0.2, 3e-4: 0.5, 1e-3: 0.9}[spec.lr], split="validation")
    selection = select_lrs(grid)
    assert selection.choice == {sign: 3e-4} and selection.bracketed == {sign: True}
    diverged = selection.table[selection.table["status"] == "diverged"]
    assert diverged[["lr", "seed"]].values.tolist() == [[1e-3, 1001]] and diverged["validation_score"].isna().all()
    assert not selection.table.loc[selection.table["lr"] == 1e-3, "selected"].any()


def test_rounds_are_recorded_and_one_tried_lr_extends_both_ways(tmp_path: Path) -> None:
    (sign,), grid = _grid(tmp_path, ["sign"], [1e-4, 3e-4])
    finish(grid[0], 0.5, split="validation")  # the run at 3e-4 never ended (failed)
    selection = select_lrs(grid, {sign: {1e-4: 0, 3e-4: 1}})
    assert selection.table["round"].tolist() == [0] and selection.tried == {sign: [1e-4]}
    assert extend_grids(selection, fallback_ratio=10.0) == {sign: [1e-3, 1e-5]}


def test_no_ended_selection_run_is_an_error(tmp_path: Path) -> None:
    _, grid = _grid(tmp_path, ["sign"], [1e-4, 3e-4])
    with pytest.raises(UserError, match="no lr-selection run finished"):
        select_lrs(grid)


def _scored(tmp_path: Path, scores: dict[float, tuple[float, ...]]):
    (cell,), grid = _grid(tmp_path, ["sign"], sorted(scores), [1000, 1001, 1002])
    for spec in grid:
        finish(spec, 0.0, passk={"1": scores[spec.lr][spec.seed - 1000]}, split="validation")
    return cell, grid


def test_under_a_seed_floor_an_lr_with_a_collapsed_seed_is_not_chosen(tmp_path: Path) -> None:
    # the SmolLM2 batch-size experiment's selection (experiments/smollm2-batch/lr.csv), rounded
    cell, grid = _scored(tmp_path, {1e-4: (0.15, 0.09, 0.12), 2e-4: (0.22, 0.30, 0.11),
                                    4e-4: (0.37, 0.34, 0.25), 8e-4: (0.26, 0.0, 0.43)})
    assert select_lrs(grid, floor=0.10).choice == {cell: 4e-4}
    assert select_lrs(grid, floor=0.26).choice == {cell: 4e-4}  # none clears it: the best worst seed (0.25)
    assert select_lrs(grid, floor=0.26).below_floor == [cell] and select_lrs(grid, floor=0.10).below_floor == []
    spiky = {1e-4: (0.2, 0.2, 0.2), 3e-4: (0.9, 0.9, 0.05)}
    cell, grid = _scored(tmp_path / "spiky", spiky)
    assert select_lrs(grid).choice == {cell: 3e-4}  # the mean alone takes the lr that collapsed a seed
    assert select_lrs(grid, floor=0.05).choice == {cell: 1e-4}  # at the floor is not above it
    assert select_lrs(grid, floor=0.04).choice == {cell: 3e-4}


def test_the_selection_line_names_the_rule_that_chose() -> None:
    from grpolab.commands.compare import selection_rule

    assert selection_rule({"floor": None}) == "best mean validation pass@1"
    assert selection_rule({"floor": 0.1, "below_floor": False}) == (
        "best mean validation pass@1 among lrs with every selection seed above 0.1")
    assert selection_rule({"floor": 0.1, "below_floor": True}) == (
        "no lr had every selection seed above 0.1: the best worst seed")


def test_the_progress_note_shortens_run_ids_never_steps() -> None:
    from grpolab.commands.compare import running_line

    two = {"dr_grpo-G4-seed0-prompts_per_step=16": "step 7/30", "dr_grpo-G4-seed0-prompts_per_step=4": "step 20/30"}
    line = running_line(two)  # was: the joined text cut at 90 characters, "step 20/30" shown as "step 1"
    assert len(line) <= 90 and line.endswith("…ompts_per_step=4 step 20/30")
    assert line.count("…") == 2 and "per_step=16 step 7/30; " in line
    many = {f"sign-G4-lr0.0004-seed{i}-prompts_per_step=16": f"step {i + 10}/30" for i in range(8)}
    line = running_line(many)
    assert len(line) <= 90 and line.endswith(" more")
    shown = line.count("/30")
    assert shown >= 1 and line.endswith(f"+{8 - shown} more")
    assert all(f"step {i + 10}/30" in line for i in range(shown))
    assert running_line({"a": "step 1/2"}) == "a step 1/2"
    assert running_line({"x" * 200: "step 1/2"}, width=40) == "x" * 14 + "…" + "x" * 14 + " step 1/2"
    assert running_line({"x" * 200: "step 1/2", "y" * 200: "step 2/2"}, width=12) == "+2 more"
