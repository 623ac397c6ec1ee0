"""Multi-seed sweeps: every (estimator, group size, seed) is one training run with its own directory.

A sweep is resumable: a run whose ``summary.json`` exists is finished and skipped; a run with
checkpoints is resumed from the newest one; the rest start fresh. Runs go to a local process pool
(``backend="local"``, one torch thread per worker) or to Ray (``backend="ray"``). Afterwards the runs'
``eval.jsonl`` and ``metrics.jsonl`` are gathered into ``results.parquet`` (one row per run and
evaluation) and ``metrics.parquet`` (one row per run and step).

The runs at one seed start from the same policy (LoRA starts as the identity), so their start
evaluation is computed once and shared through ``OUT/start-evals/`` (keyed on every setting it depends
on; see ``grpolab.train.run.start_evaluation_key``).

An estimator spelled ``name+dynamic`` (e.g. ``dr_grpo+dynamic``) is estimator ``name`` with DAPO's
dynamic sampling switched on, so it can be compared like one more estimator.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab import advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.runlog import read_metrics
from grpolab.train.settings import load_saved_config, same_run_settings

__all__ = ["RunSpec", "collect_results", "plan_lr_grid", "plan_runs", "run_sweep", "runs_table", "select_lrs"]

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its id, directory and full training config (``config.lr`` is the run's lr)."""

    run_id: str
    estimator: str
    seed: int
    group_size: int
    run_dir: Path
    config: TrainConfig

    @property
    def lr(self) -> float:
        return self.config.lr

    @property
    def finished(self) -> bool:
        """Complete, and under the planned settings (a run saved with other settings is never a result)."""
        return (self.run_dir / "summary.json").is_file() and self.saved_as_planned

    @property
    def saved_as_planned(self) -> bool:
        try:
            return same_run_settings(load_saved_config(self.run_dir), self.config)
        except UserError:  # unreadable: not this run; the trainer says why when the sweep tries it
            return False

    @property
    def started(self) -> bool:
        checkpoints = self.run_dir / "checkpoints"  # step-*: grpolab's engine; checkpoint-*: the TRL engine's
        return checkpoints.is_dir() and (any(checkpoints.glob("step-*")) or any(checkpoints.glob("checkpoint-*")))


def parse_estimator(spec: str) -> tuple[str, bool]:
    """``'dr_grpo+dynamic'`` -> (``'dr_grpo'``, True) through the registry; ``UserError`` if unknown."""
    try:
        return advantages.parse_spec(spec)
    except ValueError as error:
        raise UserError(f"{error} in --estimators") from None


def plan_runs(base: TrainConfig, estimators: list[str], seeds: list[int], group_sizes: list[int],
              out_dir: Path, *, lrs: dict[tuple[str, int], float] | None = None,
              folder: str = "runs") -> list[RunSpec]:
    """The runs of a sweep, in the order they are started (seed-major, so early results span estimators).

    ``lrs`` maps (estimator, G) to that pair's learning rate (default: ``base.lr`` for all); when given,
    run ids carry the lr. Runs live in ``out_dir / folder``.
    """
    specs = []
    for seed in seeds:
        for group_size in group_sizes:
            for estimator in estimators:
                name, dynamic = parse_estimator(estimator)
                if advantages.info(name).needs_group and group_size < 2:
                    raise UserError(f"estimator {name!r} needs group sizes >= 2; drop G={group_size} or the estimator")
                lr = base.lr if lrs is None else lrs[(estimator, group_size)]
                config = base.replace(advantage=name, dynamic_sampling=dynamic or base.dynamic_sampling,
                                      seed=seed, group_size=group_size, progress=False, lr=lr)
                run_id = f"{estimator}-G{group_size}-seed{seed}" if lrs is None else \
                    f"{estimator}-G{group_size}-lr{lr:g}-seed{seed}"
                specs.append(RunSpec(run_id, estimator, seed, group_size, out_dir / folder / run_id, config))
    return specs


def plan_lr_grid(base: TrainConfig, estimators: list[str], group_sizes: list[int], lrs: list[float],
                 seeds: list[int], out_dir: Path) -> list[RunSpec]:
    """The lr-selection runs: every (estimator, G, lr) on ``seeds``, in ``out_dir/selection``. They are
    evaluated on the validation split and never reported as results."""
    base = base.replace(eval_split="validation", eval_start=False)
    specs: list[RunSpec] = []
    for lr in lrs:
        grid = {(estimator, size): lr for estimator in estimators for size in group_sizes}
        specs += plan_runs(base, estimators, seeds, group_sizes, out_dir, lrs=grid, folder="selection")
    return specs


def validation_score(row: dict[str, Any]) -> float:
    """The selection criterion of one evaluation: pass@1 when samples were drawn, else greedy accuracy."""
    passk = row.get("pass_at_k") or {}
    return float(passk["1"]) if "1" in passk else float(row["greedy_accuracy"])


def select_lrs(grid: list[RunSpec]) -> tuple[dict[tuple[str, int], float], pd.DataFrame]:
    """Each (estimator, G)'s lr with the best mean validation score over its finished grid runs (ties: the
    smaller lr) -> (choice, table with one row per grid run: estimator, group_size, lr, seed,
    validation_score, selected)."""
    rows = []
    for spec in grid:
        evaluations = [r for r in read_metrics(spec.run_dir / "eval.jsonl")
                       if r.get("phase") == "end" and r.get("split") == "validation"]
        if spec.finished and evaluations:
            rows.append({"estimator": spec.estimator, "group_size": spec.group_size, "lr": spec.lr,
                         "seed": spec.seed, "validation_score": validation_score(evaluations[-1])})
    table = pd.DataFrame(rows, columns=["estimator", "group_size", "lr", "seed", "validation_score"])
    if table.empty:
        raise UserError("no lr-selection run finished; see the errors above and the runs in selection/")
    means = table.groupby(["estimator", "group_size", "lr"])["validation_score"].mean().reset_index()
    means = means.sort_values(["validation_score", "lr"], ascending=[False, True])
    best = means.groupby(["estimator", "group_size"]).head(1)
    choice = {(r.estimator, int(r.group_size)): float(r.lr) for r in best.itertuples()}
    table["selected"] = [choice.get((e, g)) == lr for e, g, lr in
                         zip(table["estimator"], table["group_size"], table["lr"], strict=True)]
    return choice, table


# ---------------------------------------------------------------------------- running one run


def run_one(spec: RunSpec, queue: Any = None) -> dict[str, Any]:
    """Train (or resume) one run; posts progress messages to ``queue``. Runs in a worker process."""
    import torch

    torch.set_num_threads(spec.config.threads or 1)
    from grpolab.train.trainer import train

    def on_step(step: int, metrics: dict[str, Any]) -> None:
        if queue is not None:
            queue.put({"run_id": spec.run_id, "step": step, "steps": spec.config.steps,
                       "reward": metrics.get("rollout/reward_mean")})

    started = time.perf_counter()
    try:
        train(spec.config, spec.run_dir, resume=spec.started, on_step=on_step,
              start_eval_cache=spec.run_dir.parent.parent / "start-evals")  # the config's engine
    except Exception as error:  # one failed run must not end the sweep; it is reported at the end
        return {"run_id": spec.run_id, "ok": False, "error": f"{type(error).__name__}: {error}"}
    return {"run_id": spec.run_id, "ok": True, "seconds": time.perf_counter() - started}


def _run_local(specs: list[RunSpec], workers: int, on_event: ProgressFn) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    outcomes: list[dict[str, Any]] = []
    with _sigint_blocked():  # the workers start with Ctrl-C blocked: only this process handles it
        manager = context.Manager()
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        queue = manager.Queue()
        with _sigint_blocked():
            pending = {pool.submit(run_one, spec, queue) for spec in specs}  # starts the workers
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(queue, on_event)
            for future in done:
                outcome = future.result()
                outcomes.append(outcome)
                on_event({"finished": outcome})
        _drain(queue, on_event)
    except KeyboardInterrupt:
        _stop_at_once(pool, manager)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        manager.shutdown()
    return outcomes


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread (a child process started meanwhile inherits the blocked signal); a
    Ctrl-C pressed meanwhile arrives when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop_at_once(pool: ProcessPoolExecutor, manager: Any) -> None:
    """Ctrl-C: drop the queued runs and end the running ones (their checkpoints are written atomically, so
    each resumes on the next ``grpolab compare``); a second Ctrl-C meanwhile is ignored."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():  # the workers and the progress queue's manager
            child.terminate()
        for child in multiprocessing.active_children():
            child.join(timeout=5)
        pool.shutdown(wait=True)
        manager.shutdown()
    finally:
        signal.signal(signal.SIGINT, previous)


def _drain(queue: Any, on_event: ProgressFn) -> None:
    while not queue.empty():
        on_event(queue.get())


def _run_ray(specs: list[RunSpec], workers: int, on_event: ProgressFn) -> list[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'grpolab[ray]'") from None
    if not ray.is_initialized():
        ray.init(num_cpus=workers, include_dashboard=False, ignore_reinit_error=True,
                 address=os.environ.get("RAY_ADDRESS"))
    remote = ray.remote(num_cpus=1)(run_one)
    pending = {remote.remote(spec): spec for spec in specs}
    outcomes = []
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                pending.pop(ref)
                outcome = ray.get(ref)
                outcomes.append(outcome)
                on_event({"finished": outcome})
    except KeyboardInterrupt:  # Ctrl-C: stop the queued and the running runs, not only this process
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return outcomes


def run_sweep(specs: list[RunSpec], *, workers: int | None = None, backend: str = "local",
              on_event: ProgressFn | None = None) -> list[dict[str, Any]]:
    """Run every unfinished run of ``specs``; returns one outcome per run started (ok, error, seconds)."""
    todo = [spec for spec in specs if not spec.finished]
    on_event = on_event or (lambda event: None)
    if not todo:
        return []
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    if backend == "local":
        return _run_local(todo, workers, on_event)
    if backend == "ray":
        return _run_ray(todo, workers, on_event)
    raise UserError(f"unknown backend {backend!r}; choose local or ray")


# ---------------------------------------------------------------------------- gathering results


def _run_columns(spec: RunSpec) -> dict[str, Any]:
    return {"run_id": spec.run_id, "estimator": spec.estimator, "seed": spec.seed, "group_size": spec.group_size,
            "lr": spec.lr, "task": spec.config.task, "model": spec.config.model, "steps": spec.config.steps}


def collect_results(specs: list[RunSpec]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, metrics) tables of the finished runs: one row per run and evaluation / run and step."""
    results, metrics = [], []
    for spec in specs:
        if not spec.finished:
            continue
        columns = _run_columns(spec)
        for row in read_metrics(spec.run_dir / "eval.jsonl"):
            passk = row.get("pass_at_k", {})
            results.append({**columns, "phase": row["phase"], "step": row["step"],
                            "completions_generated": row.get("completions_generated", 0),
                            "greedy_accuracy": row["greedy_accuracy"], "n": row.get("n", 0),
                            "pass_at_k": [passk[k] for k in sorted(passk, key=int)],
                            "successes": row.get("successes", []), "families": row.get("families", []),
                            "mean_length": row.get("mean_length", 0.0),
                            "greedy_unscorable": row.get("greedy_unscorable", float("nan")),
                            "unscorable": row.get("unscorable", float("nan"))})
        for row in read_metrics(spec.run_dir / "metrics.jsonl"):
            metrics.append({**{k: columns[k] for k in ("run_id", "estimator", "seed", "group_size")}, **row})
    return pd.DataFrame(results), pd.DataFrame(metrics)


def _evaluation_columns(prefix: str, row: dict[str, Any] | None) -> dict[str, Any]:
    """``prefix_greedy``, ``prefix_pass_at_1``, ``prefix_pass_at_n`` and ``prefix_unscorable`` of one
    evaluation (NaN when it was not made)."""
    row = row or {}
    passk = row.get("pass_at_k") or {}
    top = max(passk, key=int) if passk else None
    nan = float("nan")
    return {f"{prefix}_greedy": row.get("greedy_accuracy", nan), f"{prefix}_pass_at_1": passk.get("1", nan),
            f"{prefix}_pass_at_n": passk[top] if top else nan, f"{prefix}_unscorable": row.get("unscorable", nan)}


def runs_table(grid: list[RunSpec], specs: list[RunSpec], choice: dict[tuple[str, int], float] | None) -> pd.DataFrame:
    """One row per finished run, the lr-grid runs included (``role`` selection or result): its estimator,
    G, seed, lr, the split it was scored on, ``n`` samples per prompt, and its start and end figures.
    ``selected`` marks the grid runs at the lr chosen for their (estimator, G)."""
    rows = []
    for role, group in (("selection", grid), ("result", specs)):
        for spec in (s for s in group if s.finished):
            evaluations = read_metrics(spec.run_dir / "eval.jsonl")
            start = next((r for r in evaluations if r["phase"] == "start"), None)
            end = next((r for r in reversed(evaluations) if r["phase"] == "end"), None)
            selected = choice.get((spec.estimator, spec.group_size)) == spec.lr if role == "selection" and choice \
                else None
            rows.append({"role": role, **_run_columns(spec), "selected": selected,
                         "split": (end or {}).get("split", spec.config.eval_split), "n": (end or {}).get("n", 0),
                         **_evaluation_columns("start", start), **_evaluation_columns("end", end)})
    return pd.DataFrame(rows)


def write_tables(out_dir: Path, results: pd.DataFrame, metrics: pd.DataFrame) -> None:
    """Write results.parquet and metrics.parquet (the sweep's settings are in its compare.yaml)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results.to_parquet(out_dir / "results.parquet", index=False)
    metrics.to_parquet(out_dir / "metrics.parquet", index=False)
