"""Finding and streaming the rollout tables that ``grpolab audit`` reads.

Recognised inputs (first match wins):

* a grpolab run directory: ``rollouts/*.parquet`` (columns step, prompt_id, reward, length, ...);
* a TRL output directory (or its ``completions/`` folder): ``completions_*.parquet`` written by
  ``GRPOTrainer(log_completions=True)``, columns step, prompt, completion, <one column per reward
  function>, <extra columns>, advantage;
* any directory of, or single, ``.parquet`` / ``.csv`` / ``.jsonl`` / ``.json`` (JSON lines) table.

Tables are read in record batches holding only the needed columns (Parquet ``iter_batches``, pyarrow's
streaming CSV and JSON readers), so memory stays bounded by the batch size.

Departures from a plain read: TRL rewrites its whole completion buffer at every logging step, so a
generation batch can appear in several consecutive files; a file identical (prompt + completion
columns) to the previous one is skipped. TRL's reward is the sum of its reward-function columns
(TRL's default ``reward_weights``); a completion whose reward columns are all missing is unscorable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from grpolab.errors import UserError

__all__ = ["Columns", "Source", "find_source", "iter_batches", "resolve_columns"]

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}
PROMPT_CANDIDATES = ("prompt_id", "prompt_uid", "uid", "prompt_index", "problem_id", "question_id", "prompt")
REWARD_CANDIDATES = ("reward", "rewards", "score", "correct", "accuracy")
STEP_CANDIDATES = ("step", "global_step", "iteration", "train_step")
LENGTH_CANDIDATES = ("length", "completion_length", "response_length", "num_tokens")
TRL_NON_REWARD = {"step", "prompt", "completion", "advantage", "image", "images"}


@dataclass(frozen=True)
class Source:
    """Files to audit. kind: "grpolab" | "trl" | "table"; fmt: "parquet" | "csv" | "json"."""

    files: tuple[Path, ...]
    kind: str
    fmt: str


@dataclass(frozen=True)
class Columns:
    """Resolved column names; ``reward`` may list several columns, which are summed (TRL)."""

    prompt: str
    reward: tuple[str, ...]
    step: str | None
    length: str | None


def _tables_in(directory: Path) -> tuple[list[Path], str]:
    for fmt in ("parquet", "csv", "json"):
        files = sorted(p for p in directory.iterdir() if p.is_file() and FORMATS.get(p.suffix) == fmt)
        if files:
            return files, fmt
    return [], ""


def find_source(path: Path) -> Source:
    """Classify ``path`` (file or directory) as a grpolab run, TRL completion logs or a plain table."""
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if path.is_file():
        if path.suffix not in FORMATS:
            raise UserError(f"{path}: unknown table format; use .parquet, .csv, .jsonl or .json (JSON lines)")
        return Source((path,), "table", FORMATS[path.suffix])
    if (path / "rollouts").is_dir() and sorted((path / "rollouts").glob("*.parquet")):
        return Source(tuple(sorted((path / "rollouts").glob("*.parquet"))), "grpolab", "parquet")
    for folder in (path / "completions", path):
        trl_files = sorted(folder.glob("completions_*.parquet")) if folder.is_dir() else []
        if trl_files:
            return Source(tuple(trl_files), "trl", "parquet")
    files, fmt = _tables_in(path)
    if not files:
        raise UserError(
            f"{path}: no rollout tables found (looked for rollouts/*.parquet, "
            "completions/completions_*.parquet and *.parquet / *.csv / *.jsonl files)"
        )
    return Source(tuple(files), "table", fmt)


def read_schema(path: Path, fmt: str) -> pa.Schema:
    """The schema of one table file (CSV and JSON: inferred from the first block)."""
    try:
        if fmt == "parquet":
            return pq.read_schema(path)
        if fmt == "csv":
            return pacsv.open_csv(path).schema
        return pajson.open_json(path).schema
    except (pa.ArrowInvalid, OSError) as error:
        raise UserError(f"{path}: cannot read it as {fmt}: {error}") from None


def _pick(
    requested: str | None, names: list[str], candidates: tuple[str, ...], what: str, path: Path
) -> str | None:
    if requested is not None:
        if requested not in names:
            raise UserError(f"{path}: no {what} column {requested!r}; columns present: {', '.join(names)}")
        return requested
    return next((c for c in candidates if c in names), None)


def _trl_rewards(schema: pa.Schema) -> tuple[str, ...]:
    numeric = (pa.types.is_floating, pa.types.is_integer, pa.types.is_boolean)
    return tuple(
        f.name for f in schema if f.name not in TRL_NON_REWARD and any(check(f.type) for check in numeric)
    )


def resolve_columns(
    source: Source, *, prompt: str | None, reward: str | None, step: str | None, length: str | None
) -> Columns:
    """Pick the columns to read, from the options or by name; ``UserError`` lists the columns present."""
    path = source.files[0]
    schema = read_schema(path, source.fmt)
    names = schema.names
    prompt_col = _pick(prompt, names, PROMPT_CANDIDATES, "prompt", path)
    if reward is not None:
        rewards = tuple(r.strip() for r in reward.split(","))
        for name in rewards:
            _pick(name, names, (), "reward", path)
    else:
        found = _pick(None, names, ("reward",) if source.kind == "trl" else REWARD_CANDIDATES, "reward", path)
        rewards = (found,) if found else _trl_rewards(schema) if source.kind == "trl" else ()
    missing = [what for what, col in (("prompt", prompt_col), ("reward", rewards)) if not col]
    if missing:
        option = " and ".join(f"--{m}-column" for m in missing)
        raise UserError(
            f"{path}: cannot find the {' and '.join(missing)} column; columns present: {', '.join(names)}. "
            f"Name it with {option}"
        )
    step_col = _pick(step, names, STEP_CANDIDATES, "step", path)
    length_col = _pick(length, names, LENGTH_CANDIDATES, "length", path)
    return Columns(prompt_col, rewards, step_col, length_col)  # type: ignore[arg-type]


def _fingerprint(path: Path) -> str:
    table = pq.read_table(path)
    keep = [c for c in ("prompt", "completion") if c in table.column_names] or table.column_names
    return hashlib.sha1(json.dumps(table.select(keep).to_pylist(), default=str).encode()).hexdigest()


def distinct_files(source: Source) -> list[Path]:
    """The files to read: every file, except TRL snapshots identical to the previous file."""
    if source.kind != "trl":
        return list(source.files)
    kept, previous = [], None
    for path in source.files:
        fingerprint = _fingerprint(path)
        if fingerprint != previous:
            kept.append(path)
        previous = fingerprint
    return kept


def _batches_of(
    path: Path, fmt: str, columns: list[str], batch_rows: int, prompt: str
) -> Iterator[pa.RecordBatch]:
    if fmt == "parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns)
    elif fmt == "csv":  # prompt ids as text: type inference on the first block must not flip later
        convert = pacsv.ConvertOptions(include_columns=columns, column_types={prompt: pa.string()})
        read = pacsv.ReadOptions(block_size=1 << 24)
        yield from pacsv.open_csv(path, read_options=read, convert_options=convert)
    else:
        for batch in pajson.open_json(path, read_options=pajson.ReadOptions(block_size=1 << 24)):
            yield batch.select(columns)


def iter_batches(source: Source, columns: Columns, batch_rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
    """Record batches holding only the needed columns, file after file."""
    needed = [c for c in (columns.step, columns.prompt, *columns.reward, columns.length) if c]
    needed = list(dict.fromkeys(needed))
    for path in distinct_files(source):
        schema_names = read_schema(path, source.fmt).names
        absent = [c for c in needed if c not in schema_names]
        if absent:
            raise UserError(f"{path}: no column {absent[0]!r}; columns present: {', '.join(schema_names)}")
        try:
            yield from _batches_of(path, source.fmt, needed, batch_rows, columns.prompt)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise UserError(f"{path}: cannot read it as {source.fmt}: {error}") from None


def reward_values(batch: pa.RecordBatch, names: tuple[str, ...]) -> np.ndarray:
    """Reward per row [N] as float64; several columns are summed; NaN where every column is missing."""
    columns = []
    for name in names:
        array = batch.column(name)
        if not (
            pa.types.is_floating(array.type)
            or pa.types.is_integer(array.type)
            or pa.types.is_boolean(array.type)
        ):
            raise UserError(f"reward column {name!r} must be numeric, found {array.type}")
        columns.append(array.cast(pa.float64()).to_numpy(zero_copy_only=False))
    values = np.vstack(columns)  # [F, N]
    missing = np.isnan(values).all(axis=0)
    total = np.nansum(values, axis=0) if len(columns) > 1 else values[0]
    return np.where(missing, np.nan, total)


def prompt_keys(array: pa.Array) -> pa.Array:
    """Prompt ids as a groupable array: strings and integers as they are, anything else as JSON text."""
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind):
        return array
    if pa.types.is_dictionary(kind):
        return array.cast(kind.value_type)
    return pa.array([json.dumps(v, sort_keys=True, default=str) for v in array.to_pylist()], pa.string())
