"""Choosing each cell's learning rate on validation runs, and extending a grid until the choice is bracketed.

Every (variant, estimator, G) trains at each lr of its grid on the selection seeds, scored on the validation
split; the lr with the best mean validation score wins (ties: the smaller lr). An lr at which any selection
run diverged is disqualified. Under ``lr_seed_floor`` an lr also needs every selection run above the floor:
a mean can hide a collapsed seed (docs/compare.md). Where no lr of a cell clears the floor, the lr with the best
worst seed is chosen (ties: the smaller lr) and the cell is named (``Selection.below_floor``). Following the
practice of reporting tuned baselines only when the tuned value is
inside the searched range (Henderson et al. 2018, "Deep RL that matters"; Agarwal et al. 2021), a choice is
*bracketed* when the grid holds a tried lr below it and one above it; an lr above at which runs diverged
counts as a bracket from above. ``extend_grids`` gives an unbracketed cell one more lr on the open side, in
the ratio of its two outermost tried lrs on that side (a geometric grid stays geometric), rounded to three
significant digits so that run ids stay readable. A cell whose best score is shared by two or more lrs is
*tied* and never extended: extending toward the smaller tied lr chased a flat score (all 0 on a task too hard at
every lr) toward lr -> 0, one round after another.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from grpolab.errors import UserError
from grpolab.sweep.gather import not_counted
from grpolab.sweep.plan import Cell, RunSpec
from grpolab.train.runlog import read_evaluations

__all__ = ["Selection", "extend_grids", "select_lrs", "validation_score"]

COLUMNS = ["variant", "estimator", "group_size", "lr", "round", "seed", "status", "validation_score"]


@dataclass
class Selection:
    """The outcome of lr selection: each cell's chosen lr, whether it is bracketed, and the table of the
    selection runs (one row per ended run: variant, estimator, group_size, lr, round, seed, status,
    validation_score, selected, bracketed)."""

    choice: dict[Cell, float]
    bracketed: dict[Cell, bool]
    table: pd.DataFrame
    tried: dict[Cell, list[float]] = field(default_factory=dict)
    tied: dict[Cell, list[float]] = field(default_factory=dict)  # the lrs sharing the best score, where several do
    below_floor: list[Cell] = field(default_factory=list)  # cells where no lr cleared lr_seed_floor
    not_counted: list[dict[str, Any]] = field(default_factory=list)  # outcomes (``gather.not_counted``)

    @property
    def unbracketed(self) -> list[Cell]:
        return sorted(cell for cell, ok in self.bracketed.items() if not ok)


def validation_score(row: dict[str, Any]) -> float:
    """The selection criterion of one evaluation: pass@1 when samples were drawn, else greedy accuracy."""
    passk = row.get("pass_at_k") or {}
    return float(passk["1"]) if "1" in passk else float(row["greedy_accuracy"])


def _row(spec: RunSpec, rounds: Mapping[Cell, Mapping[float, int]], uncounted: list[dict[str, Any]]
         ) -> dict[str, Any] | None:
    """The selection row of one ended run (None while it has not ended, or ended without a validation score:
    then named, and its outcome added to ``uncounted``)."""
    status = spec.status
    if status is None:
        return None
    score = math.nan
    if status == "finished":
        evaluations = [r for r in read_evaluations(spec.run_dir)
                       if r.get("phase") == "end" and r.get("split") == "validation"]
        if not evaluations:  # neither eval.jsonl nor summary.json holds it: never dropped without a word
            message = (f"selection run {spec.run_dir} finished but neither its eval.jsonl nor its summary.json "
                       f"holds its end evaluation on the validation split, so lr {spec.lr:g} has no score from it; "
                       f"move the run aside and resume the sweep to train it again")
            warnings.warn(message, UserWarning, stacklevel=2)
            uncounted.append(not_counted(spec, message))
            return None
        score = validation_score(evaluations[-1])
    return {"variant": spec.variant.name, "estimator": spec.estimator, "group_size": spec.group_size, "lr": spec.lr,
            "round": rounds.get(spec.cell, {}).get(spec.lr, 0), "seed": spec.seed, "status": status,
            "validation_score": score}


_TIE_TOLERANCE = 1e-9
"""Mean scores closer than this are tied: scores are shares of finitely many samples, so means of equal sums
differ only by the rounding of their summation order, far below it; a real difference is at least 1 / samples."""


def _choose(rows: pd.DataFrame, floor: float | None = None
            ) -> tuple[float | None, bool, list[float], list[float], bool]:
    """One cell's (chosen lr or None when every lr diverged, bracketed, tried lrs ascending, the lrs tied for the
    best score when more than one shares it, else [], whether no lr cleared ``floor``)."""
    tried = sorted(set(rows["lr"]))
    diverged = set(rows.loc[rows["status"] == "diverged", "lr"])
    scores = rows[~rows["lr"].isin(diverged)].groupby("lr")["validation_score"]
    means, worst = scores.mean(), scores.min()
    if means.empty:
        return None, False, tried, [], False
    below = floor is not None and not (worst > floor).any()
    if floor is not None:
        means = worst if below else means[worst > floor]  # none clears it: the best worst seed
    top = float(means.max())
    best_lrs = sorted(float(lr) for lr, score in means.items() if top - score <= _TIE_TOLERANCE)
    best = best_lrs[0]
    tied = best_lrs if len(best_lrs) > 1 else []
    return best, any(lr < best for lr in tried) and any(lr > best for lr in tried), tried, tied, below


def select_lrs(grid: Sequence[RunSpec], rounds: Mapping[Cell, Mapping[float, int]] | None = None,
               floor: float | None = None) -> Selection:
    """Each cell's lr with the best mean validation score over its finished grid runs, lrs with a diverged
    run excluded, and under ``floor`` (``lr_seed_floor``) lrs with a run at or below it. ``rounds``: the round in
    which each cell's lr joined its grid (0: the --lrs grid)."""
    by_cell: dict[Cell, list[dict[str, Any]]] = {}
    uncounted: list[dict[str, Any]] = []
    for spec in grid:
        row = _row(spec, rounds or {}, uncounted)
        if row is not None:
            by_cell.setdefault(spec.cell, []).append(row)
    if not by_cell:
        raise UserError("no lr-selection run finished; see the errors above and the runs in selection/")
    choice, bracketed, tried, tied, below, tables = {}, {}, {}, {}, [], []
    for cell, rows in by_cell.items():
        table = pd.DataFrame(rows, columns=COLUMNS)
        best, inside, tried[cell], tied_lrs, below_floor = _choose(table, floor)
        if best is not None:
            choice[cell], bracketed[cell] = best, inside
        if tied_lrs:
            tied[cell] = tied_lrs
        if below_floor:
            below.append(cell)
        tables.append(table.assign(selected=table["lr"] == best, bracketed=inside))
    return Selection(choice, bracketed, pd.concat(tables, ignore_index=True), tried, tied, not_counted=uncounted,
                     below_floor=sorted(below))


def _next_lr(value: float, ratio: float) -> float:
    return float(f"{value * ratio:.3g}")


def extend_grids(selection: Selection, fallback_ratio: float) -> dict[Cell, list[float]]:
    """The lrs to add to each unbracketed cell: one past the chosen lr on each open side, in the ratio of the
    two outermost tried lrs there (``fallback_ratio`` when the cell has only one tried lr). A tied cell is not
    extended (see the module docstring)."""
    added: dict[Cell, list[float]] = {}
    for cell in (cell for cell in selection.unbracketed if cell not in selection.tied):
        best, tried = selection.choice[cell], selection.tried[cell]
        new = []
        if best >= tried[-1]:
            ratio = tried[-1] / tried[-2] if len(tried) > 1 else fallback_ratio
            new.append(_next_lr(tried[-1], ratio))
        if best <= tried[0]:
            ratio = tried[1] / tried[0] if len(tried) > 1 else fallback_ratio
            new.append(_next_lr(tried[0], 1 / ratio))
        added[cell] = [lr for lr in new if lr not in tried and lr > 0]
    return {cell: lrs for cell, lrs in added.items() if lrs}
