"""Gathering a sweep's runs into tables: ``results.parquet`` (one row per run and evaluation),
``metrics.parquet`` (one row per run and training step) and ``runs.csv`` (one row per run, the lr-selection
runs included, with its start and end figures). Every table is written atomically (``write_table``).

Each evaluation row also carries the sampled metrics at k = n (avg@n, maj@n, pass^n, each with its standard error
over prompts: ``SAMPLED_COLUMNS``), so that a comparison's result leaves grpolab with the statistics papers report.

Every row carries the run's ``variant`` ("" when nothing is varied) and ``status``: ``finished``, or
``diverged`` for a run the trainer stopped on a non-finite loss, gradient or parameter (with
``diverged_at_step`` in results and runs), or ``no_signal`` for a run ``--stop-when-dead`` ended because its first
steps carried no gradient signal (with ``no_signal_at_step``). A diverged run keeps
the evaluations it made before it stopped and has no ``end`` evaluation, so it is never scored as 0%; the
report marks it. Each results row also carries its run's prompt fate (``fate_columns``). A no-signal run has
its end evaluation at the step it stopped: it is counted in its arm, and the report flags it. ``bracketed`` says
whether the run's lr was chosen inside its selection grid (None when the sweep chose no lr).

Each results row and each runs row also carries the run's compute spent by that evaluation (``spent_columns``: one
column per counter of ``grpolab.metric_keys.COMPUTE``, read from the run's metrics row of that step), NaN where the
run did not record the counter (a run older than it, or the TRL engine's unrecorded ones).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab.audit.fate_source import run_fate
from grpolab.diagnostics.fate import FATE_COUNTS
from grpolab.io import atomic_write_with
from grpolab.metric_keys import COMPUTE
from grpolab.sweep.plan import Cell, RunSpec
from grpolab.train.no_signal import NO_SIGNAL
from grpolab.train.runlog import missing_steps, read_evaluations, read_metrics, spans

__all__ = ["collect_results", "fate_columns", "not_counted", "runs_table", "spent_columns", "write_table",
           "write_tables"]


def not_counted(spec: RunSpec, why: str) -> dict[str, Any]:
    """The outcome of an ended run that no table can count (its end evaluation is lost): a failure, so that
    ``grpolab compare`` exits non-zero instead of reporting a comparison without it."""
    return {"run_id": spec.run_id, "ok": False, "seconds": 0.0, "error": f"could not be counted: {why}"}


def _run_columns(spec: RunSpec, bracketed: Mapping[Cell, bool] | None = None) -> dict[str, Any]:
    summary = spec.summary or {}
    status = summary["status"] if summary.get("status") in ("diverged", NO_SIGNAL) else "finished"
    at_step = summary.get("diverged_at_step") if status == "diverged" else None
    dead_at = summary.get("no_signal_at_step") if status == NO_SIGNAL else None
    return {"run_id": spec.run_id, "variant": spec.variant.name, "estimator": spec.estimator, "seed": spec.seed,
            "group_size": spec.group_size, "lr": spec.lr, "task": spec.config.task, "model": spec.config.model,
            "steps": spec.config.steps, "status": status,
            "diverged_at_step": float("nan") if at_step is None else float(at_step),
            "no_signal_at_step": float("nan") if dead_at is None else float(dead_at),
            "bracketed": None if bracketed is None else bracketed.get(spec.cell)}


SAMPLED_COLUMNS = {"avg@n": "avg_at_n", "maj@{n}": "maj_at_n", "pass^{n}": "pass_all_at_n"}
"""The evaluation's sampled metrics at k = n (``grpolab.diagnostics.sampled``) that results.parquet carries, each
with its standard error over prompts (``<column>_se``; NaN where the run drew no samples or too few prompts)."""


def _sampled_columns(row: dict[str, Any]) -> dict[str, float]:
    sampled, n = row.get("sampled") or {}, row.get("n", 0)
    metrics, errors = sampled.get("metrics") or {}, sampled.get("se") or {}
    out = {}
    for key, column in SAMPLED_COLUMNS.items():
        name = key.format(n=n)
        value, error = metrics.get(name), errors.get(name)
        out[column] = float("nan") if value is None else float(value)
        out[f"{column}_se"] = float("nan") if error is None else float(error)
    return out


def fate_columns(run_dir: Path) -> dict[str, float]:
    """``fate_<count>`` for each of ``FATE_COUNTS``: each prompt's fate over the run (``grpolab.diagnostics.fate``),
    NaN for a run without rollout tables."""
    fate = run_fate(run_dir) or {}
    return {f"fate_{name}": float(fate.get(name, float("nan"))) for name in FATE_COUNTS}


def spent_columns(steps: Sequence[dict[str, Any]], step: int) -> dict[str, float]:
    """The run's cumulative compute counts at ``step``: one column per counter of ``COMPUTE``, from its metrics row
    ``steps`` of that step (0 at step 0 for a counter the run records), NaN where the run did not record it."""
    row = next((r for r in steps if r.get("step") == step), None)
    recorded = {name for name, (_, total) in COMPUTE.items() if any(total in r for r in steps)}
    if step == 0:
        return {name: 0.0 if name in recorded else float("nan") for name in COMPUTE}
    return {name: float((row or {}).get(total, float("nan"))) for name, (_, total) in COMPUTE.items()}


def _result_row(columns: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    passk = row.get("pass_at_k", {})
    return {**columns, **_sampled_columns(row), "phase": row["phase"], "step": row["step"],
            "completions_generated": row.get("completions_generated", 0),
            "greedy_accuracy": row["greedy_accuracy"], "n": row.get("n", 0),
            "pass_at_k": [passk[k] for k in sorted(passk, key=int)],
            "successes": row.get("successes", []), "families": row.get("families", []),
            "mean_length": row.get("mean_length", 0.0),
            "greedy_unscorable": row.get("greedy_unscorable", float("nan")),
            "unscorable": row.get("unscorable", float("nan"))}


def collect_results(specs: Sequence[RunSpec], bracketed: Mapping[Cell, bool] | None = None, *,
                    uncounted: list[dict[str, Any]] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results, metrics) tables of the ended runs: one row per run and evaluation / run and step. A finished
    run with no end evaluation anywhere is named, and its outcome (``not_counted``) added to ``uncounted``."""
    results, metrics = [], []
    for spec in (s for s in specs if s.ended):
        columns = {**_run_columns(spec, bracketed), **fate_columns(spec.run_dir)}
        evaluations = read_evaluations(spec.run_dir)
        if columns["status"] != "diverged" and not any(row.get("phase") == "end" for row in evaluations):
            message = (f"run {spec.run_dir} finished but neither its eval.jsonl nor its summary.json holds its end "
                       "evaluation, so it has no end score in results.parquet; move the run aside and resume the "
                       "sweep to train it again")
            warnings.warn(message, UserWarning, stacklevel=2)
            if uncounted is not None:
                uncounted.append(not_counted(spec, message))
        keys = ("run_id", "variant", "estimator", "seed", "group_size", "status")  # per step: no diverged_at_step
        steps = read_metrics(spec.run_dir / "metrics.jsonl")
        results += [{**_result_row(columns, row), **spent_columns(steps, row["step"])} for row in evaluations]
        upto = (int(columns["diverged_at_step"]) if columns["status"] == "diverged"
                else _last_step(spec, evaluations, columns["status"]))
        lost = missing_steps([row["step"] for row in steps], upto)
        if lost:
            warnings.warn(f"{spec.run_dir / 'metrics.jsonl'} lacks step(s) {spans(lost)} of its {upto}; "
                          "metrics.parquet has no rows for them", UserWarning, stacklevel=2)
        metrics += [{**{k: columns[k] for k in keys}, **row} for row in steps]
    return pd.DataFrame(results), pd.DataFrame(metrics)


def _last_step(spec: RunSpec, evaluations: list[dict[str, Any]], status: str = "finished") -> int:
    """The last step of a finished run: ``steps``, or the step of its end evaluation when a compute budget
    (``--budget``) or ``--stop-when-dead`` (status ``no_signal``) ended it sooner."""
    if spec.config.budget is None and status != NO_SIGNAL:
        return spec.config.steps
    return next((int(row["step"]) for row in reversed(evaluations) if row.get("phase") == "end"), spec.config.steps)


def _evaluation_columns(prefix: str, row: dict[str, Any] | None) -> dict[str, Any]:
    """``prefix_greedy``, ``prefix_pass_at_1``, ``prefix_pass_at_n`` and ``prefix_unscorable`` of one
    evaluation (NaN when it was not made)."""
    row = row or {}
    passk = row.get("pass_at_k") or {}
    top = max(passk, key=int) if passk else None
    nan = float("nan")
    return {f"{prefix}_greedy": row.get("greedy_accuracy", nan), f"{prefix}_pass_at_1": passk.get("1", nan),
            f"{prefix}_pass_at_n": passk[top] if top else nan, f"{prefix}_unscorable": row.get("unscorable", nan)}


def runs_table(grid: Sequence[RunSpec], specs: Sequence[RunSpec], choice: Mapping[Cell, float] | None,
               bracketed: Mapping[Cell, bool] | None = None) -> pd.DataFrame:
    """One row per ended run, the lr-grid runs included (``role`` selection or result): its variant,
    estimator, G, seed, lr, status, the split it was scored on, ``n`` samples per prompt, and its start and
    end figures and the compute it spent by its end evaluation (``spent_columns``). ``selected`` marks the grid runs
    at the lr chosen for their cell."""
    rows = []
    for role, group in (("selection", grid), ("result", specs)):
        for spec in (s for s in group if s.ended):
            evaluations = read_evaluations(spec.run_dir)
            start = next((r for r in evaluations if r["phase"] == "start"), None)
            end = next((r for r in reversed(evaluations) if r["phase"] == "end"), None)
            selected = choice.get(spec.cell) == spec.lr if role == "selection" and choice else None
            spent = spent_columns(read_metrics(spec.run_dir / "metrics.jsonl"), end["step"]) if end else {}
            rows.append({"role": role, **_run_columns(spec, bracketed), "selected": selected,
                         "split": (end or {}).get("split", spec.config.eval_split), "n": (end or {}).get("n", 0),
                         **_evaluation_columns("start", start), **_evaluation_columns("end", end),
                         **{name: spent.get(name, float("nan")) for name in COMPUTE}})
    return pd.DataFrame(rows)


def write_tables(out_dir: Path, results: pd.DataFrame, metrics: pd.DataFrame) -> None:
    """Write results.parquet and metrics.parquet (the sweep's settings are in its compare.yaml)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_table(out_dir / "results.parquet", results)
    write_table(out_dir / "metrics.parquet", metrics)


def write_table(path: Path, table: pd.DataFrame) -> None:
    """``table`` as Parquet (or CSV for a ``.csv`` path), written atomically (``grpolab.io.atomic_write_with``):
    a full disk or a kill leaves the old table whole, never a torn one, and a symbolic link is refused."""
    if path.suffix == ".csv":
        atomic_write_with(path, lambda staging: table.to_csv(staging, index=False))
    else:
        atomic_write_with(path, lambda staging: table.to_parquet(staging, index=False))
