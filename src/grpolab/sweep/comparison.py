"""``grpolab.compare``: a multi-seed comparison as one library call; ``grpolab compare`` parses, calls and prints.

The order of a comparison: (1) check the sweep directory's saved settings and build the task once (bad data
fails before any run starts); (2) with several lrs, select an lr per cell (variant, estimator, G) on
validation runs, extending a cell's grid while its best lr is the smallest or largest tried
(``lr_bracket_rounds`` times at most; ``grpolab.sweep.select``); (3) train each cell at its lr on the reported
seeds; (4) gather the tables and write the report. Every step resumes: a finished sweep re-run with the same
``out`` trains nothing. Progress goes to ``on_event`` (``CompareResult`` documents the events).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab import capabilities, remedies
from grpolab.config import CompareConfig, TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.sweep.devices import check_gpus
from grpolab.sweep.gather import collect_results, runs_table, write_table, write_tables
from grpolab.sweep.identity import check_sweep_identity, refuse_runs_on_other_data
from grpolab.sweep.ownership import check_sweep_dir
from grpolab.sweep.plan import Cell, RunSpec, parse_estimator, plan_cells, plan_lr_grid, plan_runs, run_config
from grpolab.sweep.run import run_sweep
from grpolab.sweep.select import Selection, extend_grids, select_lrs
from grpolab.sweep.settings import (
    SWEEP_FILE,
    adopt_saved_settings,
    check_sweep_settings,
    sweep_defaults,
    sweep_train_settings,
)
from grpolab.sweep.sharing import check_shared_gpus
from grpolab.sweep.variants import Variant, parse_vary
from grpolab.sweep.worker import EventFn
from grpolab.train.lock import DirectoryLock

__all__ = ["CompareResult", "compare"]


@dataclass
class CompareResult:
    """What a comparison leaves in ``out`` (and returns): ``results`` (one row per run and evaluation),
    ``metrics`` (per run and step), ``runs`` (one row per run, selection runs included), ``selection`` (the
    lr-selection runs, None without selection), each cell's ``choice`` of lr and whether it is
    ``bracketed`` (or ``tied``: the lrs that share its best validation score, the smallest chosen, the grid not
    extended), the ``outcomes`` of the runs trained by this call, the ``settings`` saved for the report,
    and the report's paths (None with ``report=False``).

    Events passed to ``on_event``: {"phase": label, "total": n, "already": k, "resumed": r} before a group of
    runs (k ended already, r of them before this call), {"run_id", "step", "steps", "reward"} per training step,
    {"finished": outcome} per run, {"phase_done": label, "trained": n, "seconds": s}, and {"selected": cell, "lr":
    lr, "bracketed": bool, "tied": [lr, ...]}.
    """

    out: Path
    results: pd.DataFrame
    metrics: pd.DataFrame
    runs: pd.DataFrame
    selection: pd.DataFrame | None
    choice: dict[Cell, float]
    bracketed: dict[Cell, bool]
    outcomes: list[dict[str, Any]]
    settings: dict[str, Any]
    report: tuple[Path, Path] | None = None
    specs: list[RunSpec] = field(default_factory=list, repr=False)
    not_counted: list[dict[str, Any]] = field(default_factory=list)
    tied: dict[Cell, list[float]] = field(default_factory=dict)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The outcomes of runs that failed or diverged, then those of ended runs that could not be counted
        (``not_counted``: the end evaluation lost from both eval.jsonl and summary.json; ``error`` says why)."""
        return [outcome for outcome in self.outcomes if not outcome["ok"]] + self.not_counted

    @property
    def unbracketed(self) -> list[Cell]:
        """The cells whose chosen lr is still the smallest or largest lr tried."""
        return sorted(cell for cell, inside in self.bracketed.items() if not inside)


def compare(sweep: CompareConfig, base: TrainConfig, out: str | Path, *, report: bool = True,
            on_event: EventFn | None = None, overwrite: bool = False) -> CompareResult:
    """Compare ``sweep.estimators`` at ``sweep.group_sizes`` (and each ``--vary`` variant) over seeds, each at
    its lr chosen on validation runs (one lr in ``sweep.lrs``: every run at that lr), on the training settings
    ``base``; writes everything into ``out`` and returns it. Holds ``out``'s lock while it runs. ``out`` holding
    files ``compare`` did not write is refused; ``overwrite`` deletes an earlier comparison's own files there
    first (``grpolab.sweep.ownership``)."""
    out = Path(out)
    with DirectoryLock(out, "grpolab compare"):  # one sweep process per --out
        check_sweep_dir(out, overwrite=overwrite)
        return _compare(sweep, base, out, report=report, on_event=on_event or (lambda event: None))


def _compare(sweep: CompareConfig, base: TrainConfig, out: Path, *, report: bool, on_event: EventFn) -> CompareResult:
    sweep = adopt_saved_settings(out, sweep)
    sweep = dataclasses.replace(sweep, primary=",".join(sweep.primary_pair))
    variants = parse_vary(sweep.vary)
    cells = plan_cells(sweep.estimator_list, sweep.group_size_list, variants)
    for variant in variants:  # a bad value for this base config fails before anything is written
        base.replace(**variant.changes)
    if len(sweep.lr_list) == 1:  # one lr, no selection: every run trains at it, and the saved settings say so
        base = base.replace(lr=sweep.lr_list[0])
    _check_engine(base, cells)
    _check_devices(sweep, base, variants)
    settings = {"compare": sweep.to_dict(), "train": sweep_train_settings(base),
                "task": _task_summary(base, sweep.estimator_list)}
    recorded = (out / SWEEP_FILE).is_file()  # a sweep's folder already, so its identity was recorded too
    # refuses other settings; saves them otherwise, with when the primary comparison was declared
    settings["primary_declaration"] = check_sweep_settings(out, settings, sweep_defaults())
    # refuses changed data or model once trained, or a lost record of them; clears a stale start cache
    identity = check_sweep_identity(out, base, settings["task"].get("data_sha256"), recorded=recorded)
    atomic_write_text(out / "task.json", json.dumps(settings["task"], indent=1, default=str))  # data facts, as in a run
    runner = _Runner(sweep, on_event, lambda specs: refuse_runs_on_other_data(specs, identity, base, out))
    grid: list[RunSpec] = []
    selection: Selection | None = None
    if len(sweep.lr_list) > 1:
        grid, selection = _select(base, sweep, cells, out, runner)
        lrs = selection.choice
    else:
        lrs = None
    specs = plan_runs(base, sweep.estimator_list, sweep.seed_list, sweep.group_size_list, out, variants=variants,
                      lrs=lrs)
    runner.run(specs, "runs")
    return _gather(out, sweep, settings, grid, specs, selection, runner.outcomes, report=report)


def _check_devices(sweep: CompareConfig, base: TrainConfig, variants: Sequence[Variant]) -> None:
    """Refuse, before anything is written, GPUs this machine lacks or that contradict the runs' devices (local
    backend), runs per GPU an arm's engine cannot share a GPU with, and K runs per GPU that do not fit its free
    memory (local backend; ``grpolab.sweep.sharing``)."""
    arms = [base.replace(**variant.changes, group_size=size) for variant in variants for size in sweep.group_size_list]
    for arm in arms:
        capabilities.engine(arm.engine).check_shared_gpu(arm, sweep.runs_per_gpu)
    if sweep.backend == "local":
        check_gpus(sweep.gpus_per_run, {arm.device for arm in arms}, sweep.runs_per_gpu)
        check_shared_gpus(arms, sweep.runs_per_gpu)


def _check_engine(base: TrainConfig, cells: list[Cell]) -> None:
    """Refuse, before any run starts, an arm the config's engine cannot run (``--engine trl``: an estimator with a
    per-token baseline, a remedy TRL has no form for), in one line: a remedy the arm names by its suffix is named
    as written (``+replay``), not by the setting it switches on."""
    for cell in cells:
        _check_arm_remedies(cell.estimator, base.engine)
    engine = capabilities.engine(base.engine)
    if engine.arm_check is None:
        return
    for cell in cells:
        engine.check_arm(run_config(base, cell, seed=base.seed, lr=base.lr))


def _check_arm_remedies(arm: str, engine: str) -> None:
    refused = remedies.engine_refusals(engine)
    for suffix in parse_estimator(arm)[1]:
        remedy = remedies.by_suffix(suffix)
        if remedy.setting in refused:
            raise UserError(f"arm {arm!r}: {suffix} is not supported by engine {engine} ({refused[remedy.setting]}); "
                            f"drop {suffix} from --estimators, or use --engine {' or --engine '.join(remedy.engines)}")


class _Runner:
    """Runs groups of runs with one sweep's backend settings, telling ``on_event`` and keeping the outcomes."""

    def __init__(self, sweep: CompareConfig, on_event: EventFn,
                 check_data: Callable[[Sequence[RunSpec]], None] = lambda specs: None):
        self.sweep, self.on_event, self.check_data = sweep, on_event, check_data
        self.outcomes: list[dict[str, Any]] = []
        self._given: set[str] = set()  # the runs of this invocation's earlier groups (the lr-bracketing rounds)

    def run(self, specs: Sequence[RunSpec], label: str) -> None:
        """Run ``specs``, telling ``on_event`` how many ended already ("already", skipped) and how many of those
        ended before this invocation ("resumed": the runs of an earlier ``compare`` on the same --out)."""
        _refuse_extended_runs(specs)
        ended = [spec.run_id for spec in specs if spec.ended]
        resumed = sum(run_id not in self._given for run_id in ended)
        self._given.update(spec.run_id for spec in specs)
        self.on_event({"phase": label, "total": len(specs), "already": len(ended), "resumed": resumed})
        started = time.perf_counter()
        outcomes = run_sweep(specs, workers=self.sweep.workers, backend=self.sweep.backend, on_event=self.on_event,
                             gpus_per_run=self.sweep.gpus_per_run, runs_per_gpu=self.sweep.runs_per_gpu)
        self.outcomes += outcomes
        self.check_data(specs)  # a run on data edited while the sweep ran is never gathered
        self.on_event({"phase_done": label, "trained": len(outcomes), "seconds": time.perf_counter() - started})


def _refuse_extended_runs(specs: Sequence[RunSpec]) -> None:
    """Refuse, in one line, a run of the sweep that was trained past the sweep's steps by hand: the sweep would retry
    it with its own, fewer, steps, which the run's resume refuses."""
    for spec in specs:
        steps = spec.extended_steps
        if steps is not None:
            raise UserError(f"run {spec.run_id} was extended by hand to {steps} steps (train --resume --steps "
                            f"{steps}), past this sweep's {spec.config.steps}, so it is no longer one of its runs; "
                            f"move {spec.run_dir} out of {spec.run_dir.parent} (this sweep then trains it again), or "
                            "compare the extended runs in a new --out")


def _select(base: TrainConfig, sweep: CompareConfig, cells: list[Cell], out: Path,
            runner: _Runner) -> tuple[list[RunSpec], Selection]:
    """Select each cell's lr on the selection seeds, extending unbracketed grids for up to
    ``sweep.lr_bracket_rounds`` more rounds. Returns (every grid run, the final selection)."""
    rounds: dict[Cell, dict[float, int]] = {cell: dict.fromkeys(sweep.lr_list, 0) for cell in cells}
    ratio = sweep.lr_list[1] / sweep.lr_list[0]
    for round_ in range(sweep.lr_bracket_rounds + 1):
        grid = plan_lr_grid(base, rounds, sweep.selection_seed_list, out)
        runner.run(grid, "lr selection" + (f", round {round_}" if round_ else ""))
        selection = select_lrs(grid, rounds, sweep.lr_seed_floor)
        added = extend_grids(selection, ratio) if round_ < sweep.lr_bracket_rounds else {}
        if not added:
            break
        for cell, lrs in added.items():
            rounds[cell].update(dict.fromkeys(lrs, round_ + 1))
    missing = [str(cell) for cell in cells if cell not in selection.choice]
    if missing:
        raise UserError(f"no lr-selection run of {', '.join(missing)} finished without diverging; see the errors "
                        "above and the runs in selection/")
    for cell, lr in sorted(selection.choice.items()):
        runner.on_event({"selected": cell, "lr": lr, "bracketed": selection.bracketed[cell],
                         "tied": selection.tied.get(cell, []), "floor": sweep.lr_seed_floor,
                         "below_floor": cell in selection.below_floor})
    return grid, selection


def _task_summary(base: TrainConfig, estimators: list[str]) -> dict[str, Any]:
    """The task every run trains on, built once here so that bad data fails before any run starts (and a
    ``+curriculum`` arm on a task that streams its prompts, before any run trains)."""
    from grpolab.train.curriculum import check_curriculum
    from grpolab.train.lifecycle import load_task_for

    task = load_task_for(base)
    if any(remedies.by_suffix("+curriculum").suffix in parse_estimator(name)[1] for name in estimators):
        check_curriculum(base.replace(curriculum=True), task)
    return task.summary()


def _gather(out: Path, sweep: CompareConfig, settings: dict[str, Any], grid: list[RunSpec], specs: list[RunSpec],
            selection: Selection | None, outcomes: list[dict[str, Any]], *, report: bool) -> CompareResult:
    choice = selection.choice if selection else {}
    bracketed = selection.bracketed if selection else {}
    uncounted = list(selection.not_counted) if selection else []
    results, metrics = collect_results(specs, bracketed if selection else None, uncounted=uncounted)
    write_tables(out, results, metrics)
    runs = runs_table(grid, specs, choice or None, bracketed if selection else None)
    write_table(out / "runs.csv", runs)
    if selection is not None:
        write_table(out / "selection.parquet", selection.table)
        settings["selection"] = {"unbracketed": [str(cell) for cell in selection.unbracketed],
                                 "tied": {str(cell): lrs for cell, lrs in selection.tied.items()},
                                 "below_floor": [str(cell) for cell in selection.below_floor],
                                 "lr_bracket_rounds": sweep.lr_bracket_rounds}
    result = CompareResult(out, results, metrics, runs, selection.table if selection else None, choice, bracketed,
                           outcomes, settings, specs=specs, not_counted=uncounted,
                           tied=selection.tied if selection else {})
    if results.empty:
        raise UserError(f"no run finished; see the errors above and the run directories in {out / 'runs'}")
    if report:
        from grpolab import report as reporting

        result.report = reporting.write_report(out, results, metrics, settings, selection=result.selection)
    return result
