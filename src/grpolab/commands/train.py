"""``grpolab train``: one GRPO-family training run (flags = the fields of ``grpolab.config.TrainConfig``)."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from grpolab import devices
from grpolab.commands.flags import add_config_arguments, argument_groups, config_from_args
from grpolab.config import TrainConfig, load_config_file
from grpolab.errors import UserError
from grpolab.progress import console, progress_bar, results_console
from grpolab.sweep.signals import StopRequest, stop_signals
from grpolab.train.settings import explicit_values, resume_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``grpolab train``: the config file and resuming, then every field of ``TrainConfig`` in its help
    group (``grpolab.commands.flags``), the run directory's flags in the output group."""
    parser.add_argument("--config", help="YAML or TOML file with settings (flags override it)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its newest checkpoint, with its saved settings "
                             "(config.yaml); flags may repeat them, and --steps may change")
    parser.add_argument("--trust-run-code", action="store_true",
                        help="on --resume, import the task or verifier that the run's config.yaml names by dotted "
                             "path (pkg.module:function); only for run directories you trust")
    groups = argument_groups(parser)
    groups["output"].add_argument("--out", help="run directory (default: runs/<task>-<advantage>-G<G>-seed<seed>)")
    groups["output"].add_argument("--overwrite", action="store_true",
                                  help="replace the run already in --out (its logs, checkpoints and final model); "
                                       "files grpolab did not write are kept")
    add_config_arguments(parser, groups=groups)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    out = Path(args.out or f"runs/{config.task}-{config.advantage}-G{config.group_size}-seed{config.seed}")
    if args.resume and args.overwrite:
        raise UserError("--resume continues the run in --out and --overwrite replaces it; pass one of them")
    if args.resume:
        explicit = explicit_values(args, TrainConfig, _file_values(args))
        saved = resume_config(out, explicit, trust_run_code=args.trust_run_code)
        if saved is None:  # resume-or-start, as a preemptible job's script asks; a mistyped --out shows here
            warnings.warn(f"--resume: {out} holds no saved run (no config.yaml), so a fresh run starts there",
                          UserWarning, stacklevel=1)
        config = saved or config
    device = devices.describe(devices.resolve(config.device))  # a GPU that is not there fails here, in one line
    # SIGTERM (a cluster's preemption) and SIGHUP end the run as Ctrl-C does, in one line, until the summary is out
    with stop_signals(StopRequest()):
        with progress_bar(config.progress) as bar:
            task_id = bar.add_task(f"train on {device}", total=config.steps, info="") if bar else None
            result = _run(config, out, args, _step_reporter(bar, task_id), bar, task_id)
        _print_summary(result, device)
    return 0


def _step_reporter(bar: Any, task_id: Any) -> Any:
    """The trainer's ``on_step``: the bar at the step, with its reward, degenerate share and time."""

    def on_step(step: int, metrics: dict) -> None:
        if bar is None:
            return
        reward = metrics.get("rollout/reward_mean")  # absent on a step with nothing scored
        info = (f"reward {'-' if reward is None else f'{reward:.2f}'}  degenerate "
                f"{metrics.get('starvation/degenerate', 0):.2f}  {metrics['perf/step_time']:.2f}s/step"
                + ("  sampler fell back (summary.json says why)" if metrics.get("perf/sampler_fell_back") else ""))
        bar.update(task_id, completed=step, info=info)

    return on_step


def _run(config: TrainConfig, out: Path, args: argparse.Namespace, on_step: Any, bar: Any, task_id: Any) -> Any:
    """The run with its engine (under accelerate: on every process): the bar at the resumed step, what changed."""
    from grpolab.train.engines import start

    run = start(config, out, resume=args.resume, on_step=on_step, overwrite=args.overwrite)
    if bar is not None:
        bar.update(task_id, completed=run.start_step)
    changes = run.shell.resumed_changes
    if changes:
        console.print(f"resuming at step {run.start_step}; changed since the last start: "
                      + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changes.items()))
    return run.run()


def _file_values(args: argparse.Namespace) -> dict:
    return load_config_file(args.config) if args.config else {}


def _print_summary(result, device: str) -> None:
    evaluations = {e["phase"]: e for e in result.evaluations}
    for phase in ("start", "end"):
        if phase in evaluations:
            e = evaluations[phase]
            passk = e.get("pass_at_k", {})
            top = f", pass@{max(passk, key=int)} {passk[max(passk, key=int)]:.3f}" if passk else ""
            results_console.print(f"{phase:>5}: greedy accuracy {e['greedy_accuracy']:.3f}{top}")
    results_console.print(f"run directory: {result.run_dir} (trained on {device})", soft_wrap=True)  # one line
    from grpolab.train.runlog import read_summary

    sampler = (read_summary(result.run_dir) or {}).get("sampler")
    if sampler and sampler.get("paths"):
        paths = ", ".join(f"{path} ({count} rollouts)" for path, count in sampler["paths"].items())
        fallback = f"; fell back: {sampler['fallback']}" if sampler.get("fallback") else ""
        since = f" in the steps after {sampler['from_step']}" if sampler.get("from_step") else ""
        results_console.print(f"sampled with: {paths}{since}{fallback}", soft_wrap=True)
