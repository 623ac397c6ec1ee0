"""``grpolab compare``: a multi-seed comparison of advantage estimators, evaluated, with statistics and
a report (report.html, report.md, results.parquet in --out). Rerunning with the same --out and the same
settings resumes; other settings are refused once a run has trained (the sweep's settings are saved in
--out/compare.yaml), and so is a second ``grpolab compare`` on an --out that one is still writing."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from grpolab.commands.flags import add_config_arguments, config_from_args
from grpolab.config import CompareConfig, TrainConfig, load_config_file, split_file_values
from grpolab.errors import UserError
from grpolab.progress import console, progress_bar
from grpolab.train.lock import DirectoryLock
from grpolab.train.settings import (
    SWEEP_OWNED,
    check_sweep_settings,
    explicit_values,
    refuse_sweep_owned,
    sweep_train_settings,
)

# The training settings of a comparison that differ from `grpolab train`'s: a fixed, short budget, so the
# comparison measures how fast each estimator learns (and the default sweep runs in minutes on 2 cores).
# Precedence: TrainConfig defaults < these < the config file < flags.
COMPARE_TRAIN_DEFAULTS: dict[str, Any] = {"steps": 20}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML or TOML file with sweep and training settings (flags override it)")
    parser.add_argument("--out", default="runs/compare", help="output directory (default: runs/compare)")
    parser.add_argument("--no-report", action="store_true", help="gather results but skip the report")
    add_config_arguments(parser, CompareConfig)
    refused = {name: f"refused: the sweep sets it for each run; use {use}" for name, use in SWEEP_OWNED.items()}
    add_config_arguments(parser, TrainConfig, defaults=COMPARE_TRAIN_DEFAULTS, help_overrides=refused)


def run(args: argparse.Namespace) -> int:
    file_values = load_config_file(args.config) if args.config else {}
    compare_values, train_values = split_file_values(file_values, CompareConfig, TrainConfig)
    refuse_sweep_owned(explicit_values(args, TrainConfig, train_values))
    sweep: CompareConfig = config_from_args(args, CompareConfig, file_values=compare_values)
    base: TrainConfig = config_from_args(args, TrainConfig, file_values={**COMPARE_TRAIN_DEFAULTS, **train_values})
    out = Path(args.out)
    sweep = _one_lr_or_grid(args, sweep, base, lrs_given="lrs" in compare_values, lr_given="lr" in train_values)
    with DirectoryLock(out, "grpolab compare"):  # one sweep process per --out
        return _sweep(out, sweep, base, report=not args.no_report)


def _sweep(out: Path, sweep: CompareConfig, base: TrainConfig, *, report: bool) -> int:
    from grpolab import experiments

    settings = {"compare": sweep.to_dict(), "train": sweep_train_settings(base), "task": _task_summary(base)}
    defaults = {**CompareConfig().to_dict(), **TrainConfig().to_dict(), **COMPARE_TRAIN_DEFAULTS}
    check_sweep_settings(out, settings, defaults)  # refuses other settings; saves them while no run has trained
    (out / "task.json").write_text(json.dumps(settings["task"], indent=1, default=str))  # data facts, as in a run
    if len(sweep.lr_list) > 1:
        grid, choice, specs, outcomes, selection = _select_then_run(experiments, base, sweep, out)
    else:
        base = base.replace(lr=sweep.lr_list[0]) if sweep.lr_list else base
        specs = experiments.plan_runs(base, sweep.estimator_list, sweep.seed_list, sweep.group_size_list, out)
        outcomes, selection, grid, choice = _run_with_progress(experiments, specs, sweep, "runs"), None, [], None
    results, metrics = experiments.collect_results(specs)
    experiments.write_tables(out, results, metrics)
    experiments.runs_table(grid, specs, choice).to_csv(out / "runs.csv", index=False)
    if selection is not None:
        selection.to_parquet(out / "selection.parquet", index=False)
    failed = [o for o in outcomes if not o["ok"]]
    for outcome in failed:
        console.print(f"[red]run {outcome['run_id']} failed:[/red] {outcome['error']}")
    if results.empty:
        raise UserError(f"no run finished; see the errors above and the run directories in {out / 'runs'}")
    if report:
        _report(out, results, metrics, settings, selection)
    return 1 if failed else 0


def _one_lr_or_grid(args: argparse.Namespace, sweep: CompareConfig, base: TrainConfig, *, lrs_given: bool,
                    lr_given: bool) -> CompareConfig:
    """An explicit --lr (flag or config file) runs every estimator at that one lr, without selection; an
    explicit --lrs chooses per estimator; both at once is refused."""
    lrs_given = lrs_given or args.lrs is not None
    lr_given = lr_given or args.lr is not None
    if lr_given and lrs_given:
        raise UserError("--lr and --lrs both given; --lrs chooses the lr per estimator on validation data, "
                        "so drop --lr (or give one value to --lrs)")
    return dataclasses.replace(sweep, lrs=f"{base.lr!r}") if lr_given else sweep


def _select_then_run(experiments: Any, base: TrainConfig, sweep: CompareConfig, out: Path) -> tuple:
    """Phase 1: the lr grid on selection seeds, scored on validation; phase 2: each (estimator, G) at its
    chosen lr on the reported seeds. Returns (grid specs, chosen lrs, reported specs, outcomes of both
    phases, selection table)."""
    grid = experiments.plan_lr_grid(base, sweep.estimator_list, sweep.group_size_list, sweep.lr_list,
                                    sweep.selection_seed_list, out)
    outcomes = _run_with_progress(experiments, grid, sweep, "lr selection")
    choice, selection = experiments.select_lrs(grid)
    missing = [f"{e} G={g}" for e in sweep.estimator_list for g in sweep.group_size_list if (e, g) not in choice]
    if missing:
        raise UserError(f"no lr-selection run finished for {', '.join(missing)}; see the errors above")
    for (estimator, size), lr in sorted(choice.items()):
        console.print(f"selected lr {lr:g} for {estimator} G={size} (best mean validation pass@1)")
    specs = experiments.plan_runs(base, sweep.estimator_list, sweep.seed_list, sweep.group_size_list, out,
                                  lrs=choice)
    return grid, choice, specs, outcomes + _run_with_progress(experiments, specs, sweep, "runs"), selection


def _task_summary(base: TrainConfig) -> dict[str, Any]:
    """The task every run trains on, built once here so that bad data fails before any run starts."""
    from grpolab.train.run import load_task_for

    return load_task_for(base).summary()


def _run_with_progress(experiments: Any, specs: list, sweep: CompareConfig, label: str) -> list[dict[str, Any]]:
    total = len(specs)
    already = sum(spec.finished for spec in specs)
    if already:
        console.print(f"resuming: {already} of {total} runs already finished, skipping them")
    current: dict[str, str] = {}
    started = time.perf_counter()
    with progress_bar(True) as bar:
        task_id = bar.add_task(label, total=total, completed=already, info="") if bar else None

        def on_event(event: dict[str, Any]) -> None:
            if bar is None:
                return
            if "finished" in event:
                current.pop(event["finished"]["run_id"], None)
                bar.advance(task_id)
            else:
                current[event["run_id"]] = f"{event['run_id']} step {event['step']}/{event['steps']}"
            bar.update(task_id, info="; ".join(sorted(current.values()))[:90])

        outcomes = experiments.run_sweep(specs, workers=sweep.workers, backend=sweep.backend, on_event=on_event)
    console.print(f"{label}: {len(outcomes)} run(s) trained in {time.perf_counter() - started:.0f} s")
    return outcomes


def _report(out: Path, results: Any, metrics: Any, settings: dict[str, Any], selection: Any) -> None:
    from grpolab import report

    html_path, md_path = report.write_report(out, results, metrics, settings, selection=selection)
    table = report.summary_display(report.summary_table(results))
    print(table.to_string(index=False), flush=True)  # wide: no rich wrapping
    console.print(f"report: {html_path}\nsummary: {md_path}\nresults: {out / 'results.parquet'}")
