"""The result runs of a ``grpolab compare`` directory that an export names: every run listed in its
``results.parquet`` (the fresh seeds at each arm's chosen lr, in ``OUT/runs/RUN_ID``; the lr-selection runs in
``OUT/selection`` are never exported), narrowed to some arms (the ``estimator`` column, e.g. ``sign`` or
``dr_grpo+dynamic``) and seeds. An arm or seed the comparison does not have is refused, naming those it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from grpolab.errors import UserError
from grpolab.io import inside

__all__ = ["is_compare_dir", "result_runs"]

_COLUMNS = ["run_id", "estimator", "seed"]


def is_compare_dir(path: Path) -> bool:
    """Whether ``path`` is a ``grpolab compare`` output (it holds ``compare.yaml`` or ``results.parquet``)."""
    return (path / "compare.yaml").is_file() or (path / "results.parquet").is_file()


def _table(out: Path) -> pd.DataFrame:
    path = out / "results.parquet"
    if not path.is_file():
        raise UserError(f"{out} holds no results.parquet, so no run of it has ended; run (or resume) grpolab compare "
                        f"--out {out} first")
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(error).split())[:160]
        raise UserError(f"{path} cannot be read ({reason}); rerun grpolab compare --out {out} to write it "
                        "again") from None
    missing = [name for name in _COLUMNS if name not in table.columns]
    if missing:
        raise UserError(f"{path} lists no run (it has no {', '.join(missing)} column); rerun grpolab compare --out "
                        f"{out} to write it again")
    return table.drop_duplicates("run_id")


def _narrowed(table: pd.DataFrame, column: str, wanted: Sequence, flag: str, out: Path) -> pd.DataFrame:
    if not wanted:
        return table
    have = sorted(table[column].unique().tolist())
    unknown = [value for value in wanted if value not in have]
    if unknown:
        raise UserError(f"{out} has no {column} {unknown[0]!r} ({flag}); it has {', '.join(map(str, have))}")
    return table[table[column].isin(list(wanted))]


def result_runs(out: Path, *, arms: Sequence[str] = (), seeds: Sequence[int] = ()) -> list[tuple[str, Path]]:
    """(run id, run directory) of the result runs of ``out`` of the given arms and seeds (all when empty), in the
    order ``results.parquet`` lists them."""
    table = _table(out)
    table = _narrowed(table, "estimator", arms, "--arm", out)
    table = _narrowed(table.astype({"seed": int}), "seed", seeds, "--seed", out)
    if table.empty:
        raise UserError(f"{out} has no result run of the arms and seeds asked for; drop --arm or --seed")
    return [(str(run_id), inside(out / "runs", str(run_id), what=f"run_id of {out / 'results.parquet'}"))
            for run_id in table["run_id"]]
