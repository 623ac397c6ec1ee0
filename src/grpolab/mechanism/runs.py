"""The reported runs of a ``grpolab compare`` output directory, and their start/end evaluations.

The reported runs are the ones listed in ``OUT/results.parquet``: with an lr grid, the fresh seeds at each
estimator's selected lr (``OUT/runs/...``); the selection runs (``OUT/selection/...``) are never read here.
A comparison with ``--vary`` axes is read one variant at a time: runs of two variants are never pooled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.io import inside
from grpolab.train.runlog import read_evaluations
from grpolab.train.settings import load_saved_config, refuse_run_code

__all__ = ["ReportedRun", "evaluation_rows", "reported_runs"]

_COLUMNS = ("run_id", "estimator", "group_size", "seed", "lr")

# settings every reported run must share, so that one start policy and one task stand for all of them
_SHARED = ("model", "task", "task_options", "data", "verifier", "temperature", "max_new_tokens", "lora")


@dataclass(frozen=True)
class ReportedRun:
    """One reported run of a comparison: its identity, directory and saved config."""

    run_id: str
    estimator: str
    group_size: int
    seed: int
    lr: float
    run_dir: Path
    config: TrainConfig


def reported_runs(out: Path, *, trust_run_code: bool = False, variant: str | None = None) -> list[ReportedRun]:
    """The runs listed in ``out/results.parquet`` (of one ``variant`` when the comparison has several), each
    with its saved config; ``UserError`` naming the fix when ``out`` is no compare output, the comparison
    has several variants and ``variant`` names none of them, a listed run directory is missing or lies outside
    ``out/runs``, or a saved config names code to import that is not trusted (``refuse_run_code``)."""
    out = Path(out)
    if not out.is_dir():
        raise UserError(f"{out} is not a directory; pass the --out directory of a grpolab compare run")
    table_path = out / "results.parquet"
    if not table_path.is_file():
        raise UserError(f"{out} holds no results.parquet, so it is no finished grpolab compare output; "
                        f"run (or resume) grpolab compare --out {out} first")
    table = _read_table(table_path, out)
    missing = [name for name in _COLUMNS if name not in table.columns]
    if missing:
        raise UserError(f"{table_path} lists no run (it has no {', '.join(missing)} column); resume the sweep "
                        f"with grpolab compare --out {out}")
    table = _one_variant(table, variant, out)
    runs = []
    for row in table.drop_duplicates("run_id").itertuples():
        run_dir = inside(out / "runs", str(row.run_id), what=f"run_id of {table_path}")
        config = load_saved_config(run_dir)
        if config is None:
            raise UserError(f"run {row.run_id} is listed in results.parquet but {run_dir} holds no config.yaml; "
                            f"resume the sweep with grpolab compare --out {out}")
        refuse_run_code(config, run_dir / "config.yaml", given={}, trust=trust_run_code)
        runs.append(ReportedRun(row.run_id, row.estimator, int(row.group_size), int(row.seed), float(row.lr),
                                run_dir, config))
    if not runs:
        raise UserError(f"{table_path} lists no run; resume the sweep with grpolab compare --out {out}")
    _check_shared(runs)
    return runs


def _read_table(path: Path, out: Path) -> pd.DataFrame:
    """``results.parquet``, or a one-line ``UserError`` when it cannot be read (torn by a full disk or a kill
    while an older grpolab wrote it in place, or not Parquet at all)."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(error).split())[:160]
        raise UserError(f"{path} cannot be read ({reason}); rerun grpolab compare --out {out} to write it again "
                        "(its finished runs are not trained again)") from None


def _one_variant(table: pd.DataFrame, variant: str | None, out: Path) -> pd.DataFrame:
    """The rows of ``variant``; all rows when the comparison varies nothing and no variant is asked for."""
    column = table["variant"].fillna("").astype(str) if "variant" in table.columns else pd.Series("", table.index)
    names = sorted(column.unique())
    if variant is None and len(names) == 1:
        return table
    listed = ", ".join(repr(name) for name in names)
    if variant is None:
        raise UserError(f"{out} compares {len(names)} variants ({listed}); analyse one at a time with "
                        f"--variant, e.g. grpolab mechanism {out} --variant '{names[0]}'")
    if variant not in names:
        raise UserError(f"{out} has no variant {variant!r}; its variants are {listed}")
    return table[column == variant]


def _check_shared(runs: list[ReportedRun]) -> None:
    first = runs[0]
    for run in runs[1:]:
        differing = [name for name in _SHARED if getattr(run.config, name) != getattr(first.config, name)]
        if differing:
            raise UserError(f"runs {first.run_id} and {run.run_id} differ in {', '.join(differing)}, so no one "
                            "start policy stands for both; analyse one comparison at a time")


def evaluation_rows(run: ReportedRun) -> list[dict[str, Any]]:
    """The run's start and end evaluations from its ``eval.jsonl`` (rows it lost restored from ``summary.json``,
    with a warning: ``read_evaluations``): one dict per phase with ``pass_at_k`` ({k: value}), ``unscorable`` and
    ``greedy_unscorable`` (None when eval.jsonl does not record them)."""
    rows = []
    for row in read_evaluations(run.run_dir):
        if row.get("phase") not in ("start", "end"):
            continue
        passk = {int(k): float(v) for k, v in (row.get("pass_at_k") or {}).items()}
        rows.append({"phase": row["phase"], "pass_at_k": passk, "greedy_accuracy": float(row["greedy_accuracy"]),
                     "unscorable": row.get("unscorable"), "greedy_unscorable": row.get("greedy_unscorable")})
    if not any(row["phase"] == "end" for row in rows):
        import warnings

        warnings.warn(f"run {run.run_id}: neither {run.run_dir / 'eval.jsonl'} nor its summary.json holds the end "
                      "evaluation, so its end and change values are NaN", UserWarning, stacklevel=2)
    return rows
