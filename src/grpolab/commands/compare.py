"""``grpolab compare``: a multi-seed comparison of advantage estimators, evaluated, with statistics and
a report (report.html, report.md, results.parquet in --out). The comparison itself is the library call
``grpolab.compare`` (``grpolab.sweep``); this command parses the flags, calls it, and prints its progress and
summary. Rerunning with the same --out and the same settings resumes; other settings are refused once a run
has trained (the sweep's settings are saved in --out/compare.yaml), and so is a second ``grpolab compare``
on an --out that one is still writing."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from grpolab.commands.flags import add_config_arguments, argument_groups, config_from_args
from grpolab.config import CompareConfig, TrainConfig, load_config_file, split_file_values
from grpolab.errors import UserError
from grpolab.progress import console, print_frame, progress_bar, results_console
from grpolab.sweep.settings import COMPARE_TRAIN_DEFAULTS, SWEEP_OWNED, refuse_sweep_owned
from grpolab.sweep.signals import StopRequest, stop_signals
from grpolab.train.settings import explicit_values

MAX_PLAN_RUNS = 10_000
"""The most runs a plan may hold without --large-plan (at tens of seconds a run, days on one machine)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``grpolab compare``: the config file, then every field of ``CompareConfig`` and ``TrainConfig``
    in its help group (``grpolab.commands.flags``), the command's own flags in the sweep and output groups."""
    parser.add_argument("--config", help="YAML or TOML file with sweep and training settings (flags override it)")
    groups = argument_groups(parser)
    groups["output"].add_argument("--out", default="runs/compare", help="output directory (default: runs/compare)")
    groups["output"].add_argument("--no-report", action="store_true", help="gather results but skip the report")
    groups["sweep"].add_argument("--large-plan", action="store_true",
                                 help=f"run a plan of more than {MAX_PLAN_RUNS:,} runs (refused without it)")
    groups["output"].add_argument("--overwrite", action="store_true",
                                  help="replace an earlier comparison in --out (files grpolab did not write are "
                                       "kept; without it, a --out holding files compare did not write is refused)")
    groups["sweep"].add_argument("--trust-run-code", action="store_true",
                                 help="with --config OLD/compare.yaml, import the task or verifier it names by dotted "
                                      "path (pkg.module:function); only for comparisons you trust")
    add_config_arguments(parser, CompareConfig, groups=groups)
    refused = {name: f"refused: the sweep sets it for each run; use {use}" for name, use in SWEEP_OWNED.items()}
    add_config_arguments(parser, TrainConfig, defaults=COMPARE_TRAIN_DEFAULTS, help_overrides=refused, groups=groups)


def run(args: argparse.Namespace) -> int:
    from grpolab.sweep import compare

    file_values = _config_file_values(args) if args.config else {}
    compare_values, train_values = split_file_values(file_values, CompareConfig, TrainConfig)
    refuse_sweep_owned(explicit_values(args, TrainConfig, train_values))
    sweep: CompareConfig = config_from_args(args, CompareConfig, file_values=compare_values)
    base: TrainConfig = config_from_args(args, TrainConfig, file_values={**COMPARE_TRAIN_DEFAULTS, **train_values})
    sweep = _one_lr_or_grid(args, sweep, base, lrs_given="lrs" in compare_values, lr_given="lr" in train_values)
    progress = _Progress(plan=_plan_line(sweep, base, large=args.large_plan))
    with stop_signals(StopRequest()):  # SIGTERM / SIGHUP while gathering or writing the report: exit 130, one line
        try:
            result = compare(sweep, base, Path(args.out), report=not args.no_report, on_event=progress.on_event,
                             overwrite=args.overwrite)
        finally:
            progress.close()
            for outcome in progress.failed:
                console.print(f"[red]run {outcome['run_id']} failed:[/red] {outcome['error']}")
        for line in selection_notes(result, sweep.lr_bracket_rounds):
            console.print(f"[yellow]{line}[/yellow]")
        if result.report is not None:
            _print_summary(result)
    return 1 if result.failed else 0


def _config_file_values(args: argparse.Namespace) -> dict[str, Any]:
    """--config's settings; a comparison's saved compare.yaml reruns as it was made (``settings_to_rerun``), and
    code it names is imported only when the flags name it again or --trust-run-code is given."""
    from grpolab.config.files import SAVED_HEADER
    from grpolab.sweep.settings import settings_to_rerun

    values = load_config_file(args.config)
    with open(args.config, encoding="utf-8") as handle:  # load_config_file read it: it exists and is UTF-8
        saved = handle.readline().strip() == SAVED_HEADER
    return settings_to_rerun(values, saved=saved, source=Path(args.config),
                             given=explicit_values(args, TrainConfig, {}), trust=args.trust_run_code)


def _plan_line(sweep: CompareConfig, base: TrainConfig, *, large: bool) -> str:
    """The line with the plan's size and the memory its workers need (printed when the first runs start),
    counted before anything is built; a plan past ``MAX_PLAN_RUNS`` is refused unless ``large`` (--large-plan)."""
    from grpolab.engine.memory import format_bytes
    from grpolab.sweep.sizing import memory_limit_bytes, plan_runs_count, worker_bytes

    runs = plan_runs_count(sweep)
    if runs > MAX_PLAN_RUNS and not large:
        raise UserError(f"the plan holds {runs:,} runs (estimators x group sizes x variants x seeds, plus the lr "
                        f"selection and its bracketing rounds), more than {MAX_PLAN_RUNS:,}; shorten the lists, or "
                        "pass --large-plan to run it")
    per_worker = worker_bytes([base])
    workers = _local_workers(sweep, base, runs) if sweep.backend == "local" else None
    limit = memory_limit_bytes()
    memory = f"an estimated {format_bytes(per_worker)} per worker" + (
        f" x {workers} worker(s) = {format_bytes(per_worker * workers)}" if workers else "") + (
        f" of the {format_bytes(limit)} allowed" if limit and workers else "")
    bracketing = len(sweep.lr_list) > 1 and sweep.lr_bracket_rounds > 0
    return f"plan: {'up to ' if bracketing else ''}{runs:,} run(s), {memory}"


def _local_workers(sweep: CompareConfig, base: TrainConfig, runs: int) -> int:
    """The local workers a sweep of ``runs`` runs starts: one per GPU slot (GPUs x --runs-per-gpu) or per CPU core,
    at most --workers (``grpolab.sweep.devices.worker_devices``)."""
    import os

    from grpolab.sweep.devices import worker_devices

    try:
        slots = len(worker_devices(sweep.gpus_per_run, sweep.workers, {base.device}, sweep.runs_per_gpu))
    except UserError:  # compare refuses it itself, with every variant's device
        slots = sweep.workers or os.cpu_count() or 1
    return max(1, min(slots, runs))


def selection_notes(result: Any, rounds: int) -> list[str]:
    """One line for each cell whose lr choice is tied (``result.tied``) or still at the edge of the lrs tried."""
    tied = [f"the lrs {', '.join(f'{lr:g}' for lr in lrs)} tie for the best validation score of {cell}: the smallest "
            f"({result.choice[cell]:g}) was chosen and its grid not extended; widen --lrs or add --selection-seeds to "
            "tell them apart" for cell, lrs in sorted(result.tied.items())]
    return tied + [f"the lr chosen for {cell} ({result.choice[cell]:g}) is still the {_edge(result, cell)} lr tried "
                   f"after {rounds} extra round(s): not bracketed; widen --lrs or raise --lr-bracket-rounds"
                   for cell in result.unbracketed if cell not in result.tied]


def selection_rule(event: dict[str, Any]) -> str:
    """How a "selected" event's lr was chosen: the best mean, or under ``lr_seed_floor`` the best mean among the
    lrs whose every selection run scored above the floor, or the best worst seed where none did."""
    floor = event.get("floor")
    if floor is None:
        return "best mean validation pass@1"
    if event.get("below_floor"):
        return f"no lr had every selection seed above {floor:g}: the best worst seed"
    return f"best mean validation pass@1 among lrs with every selection seed above {floor:g}"


def _edge(result: Any, cell: Any) -> str:
    lrs = result.selection
    tried = lrs[(lrs["variant"] == cell.variant.name) & (lrs["estimator"] == cell.estimator)
                & (lrs["group_size"] == cell.group_size)]["lr"]
    return "smallest" if result.choice[cell] <= tried.min() else "largest"


def _one_lr_or_grid(args: argparse.Namespace, sweep: CompareConfig, base: TrainConfig, *, lrs_given: bool,
                    lr_given: bool) -> CompareConfig:
    """An explicit --lr (flag or config file) runs every estimator at that one lr, without selection; an
    explicit non-empty --lrs chooses per estimator; both at once is refused. An empty --lrs is no grid."""
    lrs_given = (lrs_given or args.lrs is not None) and bool(sweep.lr_list)
    lr_given = lr_given or args.lr is not None
    if lr_given and lrs_given:
        raise UserError("--lr and --lrs both given (as flags or in the config file); --lrs chooses the lr per "
                        "estimator on validation data, --lr runs all at one lr: drop one (--lrs \"\" is no grid)")
    return dataclasses.replace(sweep, lrs=f"{base.lr!r}") if lr_given else sweep


class _Progress:
    """The progress bar of each group of runs, drawn from ``grpolab.compare``'s events."""

    def __init__(self, plan: str | None = None) -> None:
        self.plan = plan  # printed once, when the first group of runs starts
        self.failed: list[dict[str, Any]] = []
        self._bars = contextlib.ExitStack()
        self._bar: Any = None
        self._task: Any = None
        self._current: dict[str, str] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        if "phase" in event:
            self._start(event)
        elif "phase_done" in event:
            self.close()
            console.print(f"{event['phase_done']}: {event['trained']} run(s) trained in {event['seconds']:.0f} s")
        elif "selected" in event:
            console.print(f"selected lr {event['lr']:g} for {event['selected']} ({selection_rule(event)}"
                          + ("" if event["bracketed"] else "; at the edge of the lrs tried") + ")")
        elif "finished" in event:
            if not event["finished"]["ok"]:
                self.failed.append(event["finished"])
            self._current.pop(event["finished"]["run_id"], None)
            self._update(advance=1)
        else:
            self._current[event["run_id"]] = f"step {event['step']}/{event['steps']}"
            self._update()

    def _start(self, event: dict[str, Any]) -> None:
        self.close()
        if self.plan:
            console.print(self.plan, markup=False, highlight=False, soft_wrap=True)  # one line at any width
            self.plan = None
        if event.get("resumed"):  # runs an earlier compare on this --out finished (not this one's earlier rounds)
            console.print(f"resuming: {event['resumed']} of {event['total']} runs already finished, skipping them")
        self._bar = self._bars.enter_context(progress_bar(True))
        if self._bar is not None:
            self._task = self._bar.add_task(event["phase"], total=event["total"], completed=event["already"], info="")

    def _update(self, advance: int = 0) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=advance, info=running_line(self._current))

    def close(self) -> None:
        self._bars.close()
        self._bar, self._current = None, {}


def running_line(steps: dict[str, str], width: int = 90) -> str:
    """The progress bar's note of the running runs, run id -> "step a/b", in at most ``width`` characters. Where the
    whole ids do not fit, each is shortened in its middle ("dr_grpo-G…per_step=4"), never its step; runs that still
    do not fit are counted ("+2 more"). Cutting the joined text at ``width`` once showed "step 20/30" as "step 1"."""
    entries = sorted(steps.items())
    whole = "; ".join(f"{run} {step}" for run, step in entries)
    if len(whole) <= width:
        return whole
    room = max(12, width // len(entries) - max(len(step) for _, step in entries) - 3)
    shown: list[str] = []
    for index, (run, step) in enumerate(entries):
        entry = f"{_middle(run, room)} {step}"
        more = len(entries) - index - 1
        tail = f"; +{more} more" if more else ""
        if len("; ".join([*shown, entry]) + tail) > width:
            return "; ".join(shown) + f"{'; ' if shown else ''}+{len(entries) - index} more"
        shown.append(entry)
    return "; ".join(shown)


def _middle(text: str, room: int) -> str:
    """``text`` in at most ``room`` characters, its middle replaced by "…" where it is longer."""
    if len(text) <= room:
        return text
    head = (room - 1) // 2
    return text[:head] + "…" + text[len(text) - (room - 1 - head):]


def _print_summary(result: Any) -> None:
    from grpolab import report

    print_frame(report.summary_display(report.summary_table(result.results)))
    html_path, md_path = result.report
    results_console.print(f"report: {html_path}\nsummary: {md_path}\nresults: {result.out / 'results.parquet'}")
