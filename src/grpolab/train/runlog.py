"""Logs a run writes as it goes: ``metrics.jsonl`` (one JSON object per step, flushed and fsynced) and
``rollouts/step-NNNNNN.parquet`` (every completion of a step, written to a temporary file and renamed,
so only complete Parquet files ever exist). On resume from step s, entries of steps >= s are dropped (the
file is rewritten atomically) so that the logs have each step exactly once. A log damaged anywhere but its
last line is refused with one line naming the file and line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from grpolab.errors import UserError

__all__ = ["MetricsLog", "RolloutLog", "read_metrics", "rewrite_jsonl"]

ROLLOUT_SCHEMA = pa.schema(
    [
        ("step", pa.int32()),
        ("prompt_id", pa.string()),
        ("sample", pa.int16()),
        ("completion", pa.string()),
        ("reward", pa.float32()),
        ("advantage", pa.float32()),
        ("length", pa.int32()),
        ("truncated", pa.bool_()),
    ]
)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Appends one JSON line per step to ``path``; optionally mirrors scalars to TensorBoard."""

    def __init__(self, path: Path, *, resume_from_step: int | None = None, tensorboard_dir: Path | None = None):
        self.path = path
        if resume_from_step is not None and path.exists():
            rewrite_jsonl(path, [row for row in read_metrics(path) if row.get("step", -1) < resume_from_step])
        elif resume_from_step is None and path.exists():
            path.unlink()
        self._handle = path.open("a")
        self._writer = _tensorboard(tensorboard_dir) if tensorboard_dir else None

    def write(self, step: int, metrics: dict[str, Any], *, sync: bool = True) -> None:
        """Append the row of ``step``, flushed; fsynced too unless ``sync`` is False (then ``sync()`` later)."""
        row = {"step": step, **{k: _json_safe(v) for k, v in metrics.items()}}
        self._handle.write(json.dumps(row) + "\n")
        self._handle.flush()
        if sync:
            os.fsync(self._handle.fileno())
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float):
                    self._writer.add_scalar(key, value, step)

    def sync(self) -> None:
        """Make every row written so far durable (fsync)."""
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()
        if self._writer is not None:
            self._writer.close()


def _tensorboard(directory: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise UserError(f"--tensorboard needs the tensorboard package: pip install tensorboard ({error})") from None
    return SummaryWriter(str(directory))


def rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``path`` by ``rows`` atomically: a kill or a full disk mid-write leaves the old file whole."""
    staging = path.with_name(path.name + ".tmp")
    with staging.open("w") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All complete JSON lines of a metrics file (a torn last line from a kill is skipped); ``UserError``
    naming the file and line when any other line is not a JSON object with a ``step``."""
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read ({error}); {_DAMAGED_FIX}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        row = _row(line)
        if row is None and number == len(lines):  # torn by a kill mid-write
            continue
        if row is None:
            raise UserError(f"{path} is damaged at line {number} (not a JSON object with a step); {_DAMAGED_FIX}")
        rows.append(row)
    return rows


_DAMAGED_FIX = "move it aside and resume the run (grpolab train --resume) to log again from its last checkpoint"


def _row(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) and isinstance(row.get("step"), int) else None


class RolloutLog:
    """Writes each step's completions to ``directory/step-NNNNNN.parquet`` atomically."""

    def __init__(self, directory: Path, *, resume_from_step: int | None = None):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for path in directory.glob("step-*.parquet*"):  # only the files a run writes
            step = _step_of(path)
            if step is not None and (resume_from_step is None or step >= resume_from_step):
                path.unlink()

    def write(self, step: int, rows: dict[str, list[Any]]) -> Path:
        table = pa.table(rows, schema=ROLLOUT_SCHEMA)
        final = self.directory / f"step-{step:06d}.parquet"
        staging = final.with_suffix(".parquet.tmp")
        pq.write_table(table, staging)
        os.replace(staging, final)
        return final


def _step_of(path: Path) -> int | None:
    stem = path.name.split(".")[0]
    try:
        return int(stem.split("-")[1])
    except (IndexError, ValueError):
        return None
