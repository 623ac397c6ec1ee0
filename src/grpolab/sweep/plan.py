"""The runs of a sweep: one ``RunSpec`` per (variant, estimator, group size, seed[, lr]), each with its own
directory and full training config, and what its directory says about it (planned, started, finished,
diverged).

An estimator spelled ``name+dynamic`` (e.g. ``dr_grpo+dynamic``) is estimator ``name`` with DAPO's dynamic
sampling switched on (Yu et al. 2025), so it can be compared like one more estimator; ``name+mask`` likewise
switches on group masking (``mask_degenerate_groups``), and the suffixes combine (``dr_grpo+dynamic+mask``). A run whose
``summary.json`` says ``"status": "diverged"`` has ended (it is never retried); a summary without a status is
an old finished run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from grpolab import advantages, capabilities
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.remedies import SUFFIXES as REMEDY_SUFFIXES
from grpolab.sweep.variants import NO_VARIANT, Variant
from grpolab.train.settings import load_saved_config, same_run_settings

__all__ = ["Cell", "RunSpec", "parse_estimator", "plan_cells", "plan_lr_grid", "plan_runs", "remedy_settings",
           "run_config"]


class Cell(NamedTuple):
    """What one lr is chosen for and one row of the comparison is about: a variant, an estimator, a G."""

    variant: Variant
    estimator: str
    group_size: int

    def __str__(self) -> str:
        return f"{self.estimator} G={self.group_size}" + (f" ({self.variant.name})" if self.variant.name else "")


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its id, directory and full training config (``config.lr`` is the run's lr)."""

    run_id: str
    estimator: str
    seed: int
    group_size: int
    run_dir: Path
    config: TrainConfig
    variant: Variant = NO_VARIANT

    @property
    def lr(self) -> float:
        return self.config.lr

    @property
    def cell(self) -> Cell:
        return Cell(self.variant, self.estimator, self.group_size)

    @property
    def summary(self) -> dict[str, Any] | None:
        """The run's ``summary.json`` once it has ended under the planned settings, else None."""
        if not (self.run_dir / "summary.json").is_file() or not self.saved_as_planned:
            return None
        try:
            summary = json.loads((self.run_dir / "summary.json").read_text())
        except (OSError, ValueError):  # unreadable: not ended; the trainer says why when the sweep tries it
            return None
        return summary if isinstance(summary, dict) else None

    @property
    def status(self) -> str | None:
        """``finished`` or ``diverged`` once the run has ended under the planned settings, else None."""
        summary = self.summary
        if summary is None:
            return None
        return "diverged" if summary.get("status") == "diverged" else "finished"

    @property
    def ended(self) -> bool:
        """Finished or diverged: nothing more to train (a diverged run is never retried automatically)."""
        return self.status is not None

    @property
    def finished(self) -> bool:
        """Complete, and under the planned settings (a run saved with other settings is never a result)."""
        return self.status == "finished"

    @property
    def diverged(self) -> bool:
        return self.status == "diverged"

    @property
    def saved_as_planned(self) -> bool:
        try:
            return same_run_settings(load_saved_config(self.run_dir), self.config)
        except UserError:  # unreadable: not this run; the trainer says why when the sweep tries it
            return False

    @property
    def extended_steps(self) -> int | None:
        """The steps of a run extended by hand past the planned ones (``grpolab train --out RUN --resume --steps
        N``): its saved config is the planned one but for a larger ``steps``. None for any other run."""
        try:
            saved = load_saved_config(self.run_dir)
        except UserError:
            return None
        if saved is None or saved.steps <= self.config.steps:
            return None
        return saved.steps if same_run_settings(saved, self.config.replace(steps=saved.steps)) else None

    @property
    def started(self) -> bool:
        return capabilities.has_checkpoint(self.run_dir)  # a checkpoint of any engine (each names its folders)


def parse_estimator(spec: str) -> tuple[str, tuple[str, ...]]:
    """``'dr_grpo+dynamic'`` -> (``'dr_grpo'``, (``'+dynamic'``,)) through the registry: the estimator and its
    remedy suffixes (``grpolab.remedies``); ``UserError`` if unknown."""
    try:
        return advantages.parse_arm(spec)
    except ValueError as error:
        raise UserError(f"{error} in --estimators") from None


def remedy_settings(base: TrainConfig, remedies: Sequence[str]) -> dict[str, bool]:
    """The settings an arm's remedy suffixes switch on (a remedy the base config already has stays on)."""
    return {setting: (suffix in remedies) or getattr(base, setting)
            for suffix, setting in REMEDY_SUFFIXES.items()}


def plan_cells(estimators: Sequence[str], group_sizes: Sequence[int],
               variants: Sequence[Variant] = (NO_VARIANT,)) -> list[Cell]:
    """Every (variant, estimator, G), refusing an unknown estimator or a group estimator at G = 1."""
    for estimator in estimators:
        name, _ = parse_estimator(estimator)
        small = [g for g in group_sizes if g < 2]
        if advantages.info(name).needs_group and small:
            raise UserError(f"estimator {name!r} needs group sizes >= 2; drop G={small[0]} or the estimator")
    return [Cell(v, e, g) for v in variants for g in group_sizes for e in estimators]


def run_config(base: TrainConfig, cell: Cell, seed: int, lr: float) -> TrainConfig:
    """The training config of one run of ``cell``: its variant's changes, its estimator and remedies, G, seed and lr."""
    name, remedies = parse_estimator(cell.estimator)
    return base.replace(**cell.variant.changes, advantage=name, **remedy_settings(base, remedies),
                        seed=seed, group_size=cell.group_size, progress=False, lr=lr)


def _spec(base: TrainConfig, cell: Cell, seed: int, lr: float | None, folder: Path) -> RunSpec:
    run_id = f"{cell.estimator}-G{cell.group_size}" + (f"-lr{lr:g}" if lr is not None else "") + f"-seed{seed}"
    run_id += f"-{cell.variant.slug}" if cell.variant.name else ""
    config = run_config(base, cell, seed, base.lr if lr is None else lr)
    return RunSpec(run_id, cell.estimator, seed, cell.group_size, folder / run_id, config, cell.variant)


def plan_runs(base: TrainConfig, estimators: Sequence[str], seeds: Sequence[int], group_sizes: Sequence[int],
              out_dir: Path, *, variants: Sequence[Variant] = (NO_VARIANT,), lrs: Mapping[Cell, float] | None = None,
              folder: str = "runs") -> list[RunSpec]:
    """The runs of a sweep, in the order they are started (seed-major, so early results span estimators).

    ``lrs`` maps each cell to its learning rate (default: ``base.lr`` for all); when given, run ids carry the
    lr. Runs live in ``out_dir / folder``.
    """
    cells = plan_cells(estimators, group_sizes, variants)
    return [_spec(base, cell, seed, None if lrs is None else lrs[cell], Path(out_dir) / folder)
            for seed in seeds for cell in cells]


def plan_lr_grid(base: TrainConfig, grids: Mapping[Cell, Sequence[float]], seeds: Sequence[int],
                 out_dir: Path) -> list[RunSpec]:
    """The lr-selection runs: every cell at each of its lrs on ``seeds``, in ``out_dir/selection``. They are
    evaluated on the validation split, never reported as results, and their ids carry the lr."""
    base = base.replace(eval_split="validation", eval_start=False)
    return [_spec(base, cell, seed, lr, Path(out_dir) / "selection")
            for cell, lrs in grids.items() for lr in sorted(lrs) for seed in seeds]
