"""Finding and streaming the rollout tables that ``grpolab audit`` reads.

Recognised inputs (first match wins):

* a grpolab run directory: ``rollouts/step-NNNNNN.parquet`` (columns step, prompt_id, reward, length, ...);
* a TRL output directory (or its ``completions/`` folder): ``completions_NNNNN.parquet`` written by
  ``GRPOTrainer(log_completions=True)``, columns step, prompt, completion, <one column per reward
  function>, <extra columns>, advantage;
* any directory of, or single, ``.parquet`` / ``.csv`` / ``.jsonl`` / ``.json`` (JSON lines) table.

Tables are read in record batches holding only the needed columns (Parquet ``iter_batches``, pyarrow's
streaming CSV and JSON readers; a JSON line's other fields are skipped unparsed, ``grpolab.audit.jsonl``),
each bounded by bytes, not only by rows: a Parquet batch holds as many rows as fit in ``BATCH_BYTES`` by the
row groups' uncompressed sizes (a few kilobytes of zstd can hold gigabytes of long prompt ids), a CSV or JSON block
is 16 MiB. Prompt ids longer than ``LONG_KEY_BYTES`` are grouped by their SHA-1 digest, so the group tables hold 40
bytes per group whatever the ids' length.

Departures from a plain read: in a run or TRL directory only the files bearing the names the trainer writes
are read; any other table there (a user's backup copy of a step) is skipped and named (``Source.skipped``).
TRL rewrites its whole completion buffer at every logging step, so a
generation batch can appear in several consecutive files; a file identical (prompt + completion
columns) to the previous one is skipped.

Columns: success and pass@k use one *correctness* column (``--reward-column``). TRL's table holds one
column per reward function plus any ``log_extra`` columns, and nothing tells them apart, so among its
numeric columns (other than step and advantage) the one whose values are all 0 or 1 is taken; with
several such columns, or none, the audit refuses and asks for ``--reward-column``. Degeneracy comes from
the ``advantage`` column when there is one (``--advantage-column``; "none" ignores it). TRL rows are grouped
by position: consecutive blocks of G rows in a file (TRL's sampler puts a prompt's G completions next to
each other), G being the gcd of the lengths of the runs of identical prompts (``--group-size`` overrides),
so two dataset rows with the same prompt stay two groups. Where nothing tells one group of 8 from two adjacent
groups of 4 (``grpolab.audit.trl_groups``), or ``--group-size`` does not divide a prompt's run of rows, the audit warns.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from grpolab.audit.jsonl import json_batches, json_schema
from grpolab.errors import UserError
from grpolab.io import number_after

__all__ = ["Columns", "Source", "distinct_files", "find_source", "grpolab_rollout_files", "iter_batches",
           "resolve_columns"]

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}
PROMPT_CANDIDATES = ("prompt_id", "prompt_uid", "uid", "prompt_index", "problem_id", "question_id", "prompt")
REWARD_CANDIDATES = ("reward", "rewards", "score", "correct", "accuracy")
ADVANTAGE_CANDIDATES = ("advantage", "advantages")
STEP_CANDIDATES = ("step", "global_step", "iteration", "train_step")
LENGTH_CANDIDATES = ("length", "completion_length", "response_length", "num_tokens")
TRUNCATED_CANDIDATES = ("truncated", "is_truncated")
TRL_NON_REWARD = {"step", "prompt", "completion", "advantage", "image", "images"}
BATCH_BYTES = 32 << 20
"""The most uncompressed bytes of the needed columns one Parquet record batch holds."""
TEXT_BLOCK_BYTES = 16 << 20
"""The block size CSV and JSONL files are read in; a file with a longer line is read in blocks that hold it."""
LONG_KEY_BYTES = 64
"""Prompt ids longer than this many bytes are grouped by their SHA-1 digest."""


@dataclass(frozen=True)
class Source:
    """Files to audit. kind: "grpolab" | "trl" | "table"; fmt: "parquet" | "csv" | "json"."""

    files: tuple[Path, ...]
    kind: str
    fmt: str
    skipped: tuple[Path, ...] = ()
    """Tables beside ``files`` whose names the trainer does not write (a user's backup copy of a step): not read."""


@dataclass(frozen=True)
class Columns:
    """Resolved column names: ``reward`` is the correctness column; ``ignored``: numeric columns not read;
    ``choice``: how the correctness column was picked, for the report; ``truncated``: the 0/1 column of
    completions that hit the token budget without ending (grpolab's rollout tables write it)."""

    prompt: str
    reward: str
    advantage: str | None
    step: str | None
    length: str | None
    ignored: tuple[str, ...] = ()
    choice: str = ""
    truncated: str | None = None


def _tables_in(directory: Path) -> tuple[list[Path], str]:
    for fmt in ("parquet", "csv", "json"):
        files = sorted(p for p in directory.iterdir() if p.is_file() and FORMATS.get(p.suffix) == fmt)
        if files:
            return files, fmt
    return [], ""


def _written_by_trainer(path: Path, kind: str) -> bool:
    """Whether ``path`` bears a name the trainer writes: grpolab ``step-{step:06d}.parquet``
    (``grpolab.train.runlog.RolloutLog``), TRL ``completions_{step:05d}.parquet``; a copy such as
    ``step-000003 (copy).parquet`` or ``step-0000003.parquet`` does not."""
    prefix, width = ("step-", 6) if kind == "grpolab" else ("completions_", 5)
    step = number_after(prefix, path.name, ".parquet")
    return step is not None and path.name == f"{prefix}{step:0{width}d}.parquet"


def _trainer_files(folder: Path, pattern: str, kind: str) -> tuple[list[Path], list[Path]]:
    """(the files of ``folder`` matching ``pattern`` that the trainer wrote, the others), sorted."""
    found = sorted(p for p in folder.glob(pattern) if p.is_file()) if folder.is_dir() else []
    return [p for p in found if _written_by_trainer(p, kind)], [p for p in found if not _written_by_trainer(p, kind)]


def grpolab_rollout_files(run_dir: Path) -> list[Path]:
    """The rollout tables the trainer wrote in ``run_dir/rollouts``, in step order (none: an empty list)."""
    return _trainer_files(run_dir / "rollouts", "*.parquet", "grpolab")[0]


def find_source(path: Path) -> Source:
    """Classify ``path`` (file or directory) as a grpolab run, TRL completion logs or a plain table."""
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if path.is_file():
        if path.suffix not in FORMATS:
            raise UserError(f"{path}: unknown table format; use .parquet, .csv, .jsonl or .json (JSON lines)")
        return Source((path,), "table", FORMATS[path.suffix])
    steps, others = _trainer_files(path / "rollouts", "*.parquet", "grpolab")
    if steps:
        return Source(tuple(steps), "grpolab", "parquet", tuple(others))
    if others:
        raise UserError(
            f"{path / 'rollouts'}: no step-NNNNNN.parquet file, the names the trainer writes, only "
            f"{', '.join(p.name for p in others[:5])}{', ...' if len(others) > 5 else ''}; "
            "audit such a table on its own with `grpolab audit FILE`"
        )
    for folder in (path / "completions", path):
        trl_files, others = _trainer_files(folder, "completions_*.parquet", "trl")
        if trl_files:
            return Source(tuple(trl_files), "trl", "parquet", tuple(others))
    files, fmt = _tables_in(path)
    if not files:
        raise UserError(
            f"{path}: no rollout tables found (looked for rollouts/step-NNNNNN.parquet, "
            "completions/completions_NNNNN.parquet and *.parquet / *.csv / *.jsonl files)"
        )
    return Source(tuple(files), "table", fmt)


def read_schema(path: Path, fmt: str) -> pa.Schema:
    """The schema of one table file (CSV and JSON: inferred from the first block)."""
    try:
        if fmt == "parquet":
            return pq.read_schema(path)
        if fmt == "csv":
            return pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=text_block_bytes(path))).schema
        return json_schema(path, text_block_bytes(path))
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


def _numeric(field: pa.Field) -> bool:
    return any(check(field.type) for check in (pa.types.is_floating, pa.types.is_integer, pa.types.is_boolean))


def _is_binary(files: list[Path], column: str) -> bool:
    """Whether every non-missing value of ``column`` in ``files`` is 0 or 1."""
    for path in files:
        values = _read_parquet(path, [column]).column(0).cast(pa.float64()).to_numpy(zero_copy_only=False)
        values = values[~np.isnan(values)]
        if not np.isin(values, (0.0, 1.0)).all():
            return False
    return True


def _trl_correctness(files: list[Path], schema: pa.Schema) -> tuple[str, tuple[str, ...], str]:
    """(correctness column, other numeric columns, how it was chosen) of a TRL completions table."""
    numeric = [f.name for f in schema if f.name not in TRL_NON_REWARD and _numeric(f)]
    binary = [name for name in numeric if _is_binary(files, name)]
    hint = "name the correctness reward with --reward-column"
    if len(binary) > 1:
        raise UserError(
            f"{files[0].parent}: several 0/1 columns could be the correctness reward ({', '.join(binary)}); {hint}"
        )
    if not binary:
        found = ", ".join(numeric) or "none"
        raise UserError(
            f"{files[0].parent}: no 0/1 reward column among the numeric columns ({found}); {hint} "
            "and pass --threshold T to count a reward >= T as a success"
        )
    others = tuple(name for name in numeric if name != binary[0])
    choice = f"the only 0/1 column of {', '.join(numeric)}" if others else "the only reward column"
    return binary[0], others, choice


def _correctness(
    source: Source, files: list[Path], schema: pa.Schema, requested: str | None
) -> tuple[str | None, tuple[str, ...], str]:
    """(column, ignored numeric columns, choice) for the correctness reward."""
    names, path = schema.names, files[0]
    others = tuple(f.name for f in schema if _numeric(f) and f.name not in TRL_NON_REWARD)
    if requested is not None:
        if "," in requested:
            raise UserError(
                f"--reward-column takes one column, the 0/1 correctness reward, got {requested!r}; "
                "degeneracy comes from the advantage column (or equal rewards) on its own"
            )
        _pick(requested, names, (), "reward", path)
        return requested, tuple(n for n in others if n != requested), "--reward-column"
    if source.kind == "trl":
        return _trl_correctness(files, schema)
    found = _pick(None, names, REWARD_CANDIDATES, "reward", path)
    return found, tuple(n for n in others if n != found), "by name"


def resolve_columns(
    source: Source,
    files: list[Path],
    *,
    prompt: str | None,
    reward: str | None,
    step: str | None,
    length: str | None,
    advantage: str | None = None,
) -> Columns:
    """Pick the columns to read, from the options or by name; ``UserError`` lists the columns present."""
    path = files[0]
    schema = read_schema(path, source.fmt)
    names = schema.names
    prompt_col = _pick(prompt, names, PROMPT_CANDIDATES, "prompt", path)
    reward_col, ignored, choice = _correctness(source, files, schema, reward)
    missing = [what for what, col in (("prompt", prompt_col), ("reward", reward_col)) if not col]
    if missing:
        option = " and ".join(f"--{m}-column" for m in missing)
        raise UserError(
            f"{path}: cannot find the {' and '.join(missing)} column; columns present: {', '.join(names)}. "
            f"Name it with {option}"
        )
    advantage_col = None if advantage == "none" else _pick(advantage, names, ADVANTAGE_CANDIDATES, "advantage", path)
    step_col = _pick(step, names, STEP_CANDIDATES, "step", path)
    length_col = _pick(length, names, LENGTH_CANDIDATES, "length", path)
    truncated_col = _pick(None, names, TRUNCATED_CANDIDATES, "truncated", path)
    used = {prompt_col, reward_col, advantage_col, step_col, length_col, truncated_col}
    ignored = tuple(name for name in ignored if name not in used)
    return Columns(prompt_col, reward_col, advantage_col, step_col, length_col, ignored, choice,  # type: ignore
                   truncated_col)


def _read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as error:
        raise UserError(
            f"{path}: not a readable Parquet file ({str(error).splitlines()[0][:120]}); "
            "remove or replace it (was it still being written?)"
        ) from None


def _fingerprint(path: Path) -> str:
    table = _read_parquet(path)
    keep = [c for c in ("prompt", "completion") if c in table.column_names] or table.column_names
    return hashlib.sha1(json.dumps(table.select(keep).to_pylist(), default=str).encode()).hexdigest()


def distinct_files(source: Source) -> tuple[list[Path], int]:
    """(the files to read, how many were skipped): every file, except TRL snapshots identical to the
    previous file."""
    if source.kind != "trl":
        return list(source.files), 0
    kept, previous = [], None
    for path in source.files:
        fingerprint = _fingerprint(path)
        if fingerprint != previous:
            kept.append(path)
        previous = fingerprint
    return kept, len(source.files) - len(kept)


def trl_file_steps(source: Source) -> list[int]:
    """The steps TRL wrote a completions file at (from ``completions_{step:05d}.parquet``), every file."""
    steps = [number_after("completions_", path.stem) for path in source.files]
    return sorted(step for step in steps if step is not None)


def _batches_of(
    path: Path, fmt: str, columns: list[str], batch_rows: int, prompt: str
) -> Iterator[pa.RecordBatch]:
    if fmt == "parquet":
        parquet = pq.ParquetFile(path)
        rows = min(batch_rows, parquet_rows_within(parquet.metadata, columns, BATCH_BYTES))
        yield from parquet.iter_batches(batch_size=rows, columns=columns)
    elif fmt == "csv":  # prompt ids as text: type inference on the first block must not flip later
        convert = pacsv.ConvertOptions(include_columns=columns, column_types={prompt: pa.string()})
        read = pacsv.ReadOptions(block_size=text_block_bytes(path))
        yield from pacsv.open_csv(path, read_options=read, convert_options=convert)
    else:  # only the audited fields are parsed (grpolab.audit.jsonl)
        yield from json_batches(path, read_schema(path, fmt), columns, text_block_bytes(path))


def text_block_bytes(path: Path, least: int = TEXT_BLOCK_BYTES) -> int:
    """The block size to read a CSV or JSONL file with: ``least``, or more when a line is longer (pyarrow cannot
    read a row that straddles two blocks). One pass over the file in blocks of ``least`` bytes, so the memory is
    bounded by the longest line, not the file; remembered while the file's size and time are unchanged."""
    stat = Path(path).stat()
    return _block_bytes(str(path), stat.st_size, stat.st_mtime_ns, least)


@functools.lru_cache(maxsize=256)
def _block_bytes(path: str, size: int, mtime_ns: int, least: int) -> int:
    longest = current = 0
    with open(path, "rb") as file:
        while block := file.read(least):
            ends = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
            if not ends.size:
                current += len(block)
                continue
            longest = max(longest, current + int(ends[0]) + 1, int(np.diff(ends).max(initial=0)))
            current = len(block) - int(ends[-1]) - 1
    longest = max(longest, current)
    return least if longest < least else (longest // least + 2) * least


def parquet_rows_within(metadata: pq.FileMetaData, columns: list[str], budget: int) -> int:
    """How many rows of ``columns`` fit in ``budget`` uncompressed bytes, by the widest row group (at least 1)."""
    widest = 0.0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        if not group.num_rows:
            continue
        size = sum(group.column(j).total_uncompressed_size for j in range(group.num_columns)
                   if group.column(j).path_in_schema.split(".")[0] in columns)
        widest = max(widest, size / group.num_rows)
    return max(1, int(budget // widest)) if widest else 1 << 20


def iter_batches(
    files: list[Path], fmt: str, columns: Columns, batch_rows: int = 1 << 20
) -> Iterator[tuple[pa.RecordBatch, int]]:
    """(record batch holding only the needed columns, offset of its first row in its file), file by file."""
    needed = [c for c in (columns.step, columns.prompt, columns.reward, columns.advantage, columns.length,
                          columns.truncated) if c]
    needed = list(dict.fromkeys(needed))
    for path in files:
        schema_names = read_schema(path, fmt).names
        absent = [c for c in needed if c not in schema_names]
        if absent:
            raise UserError(f"{path}: no column {absent[0]!r}; columns present: {', '.join(schema_names)}")
        offset = 0
        try:
            for batch in _batches_of(path, fmt, needed, batch_rows, columns.prompt):
                _refuse_empty_steps(path, batch, columns.step, offset)
                yield batch, offset
                offset += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as error:
            raise UserError(f"{path}: cannot read it as {fmt}: {str(error).splitlines()[0][:160]}") from None


def flag_values(batch: pa.RecordBatch, column: str) -> np.ndarray:
    """[N] int64 0/1 of a boolean or integer column (missing values count 0); ``UserError`` for other types."""
    values = batch.column(column)
    if not (pa.types.is_boolean(values.type) or pa.types.is_integer(values.type)):
        raise UserError(f"column {column!r} holds {values.type}, not true/false; rename the column, or write it "
                        "as booleans or 0/1")
    flags = pc.fill_null(pc.not_equal(values.cast(pa.int64()), 0), False)
    return flags.to_numpy(zero_copy_only=False).astype(np.int64)


def _refuse_empty_steps(path: Path, batch: pa.RecordBatch, step: str | None, offset: int) -> None:
    """One line for a step column with empty values: their groups belong to no step (and a step range built
    from them would be unbounded)."""
    if not step or not batch.column(step).null_count:
        return
    first = offset + int(pc.index(pc.is_null(batch.column(step)), True).as_py()) + 1
    raise UserError(f"{path}: the step column {step!r} is empty in {batch.column(step).null_count:,} rows (the "
                    f"first is row {first:,}); fill in the steps, or audit the table without them by renaming "
                    "the column")


def numeric_values(batch: pa.RecordBatch, name: str, what: str) -> np.ndarray:
    """Column ``name`` of ``batch`` as float64 [N], NaN where missing; ``UserError`` if not numeric."""
    array = batch.column(name)
    if pa.types.is_null(array.type):  # a CSV column left empty in every row read: all missing
        return np.full(len(array), np.nan)
    if not (pa.types.is_floating(array.type) or pa.types.is_integer(array.type) or pa.types.is_boolean(array.type)):
        raise UserError(f"{what} column {name!r} must be numeric, found {array.type}")
    return array.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)  # integers past 2^53: rounded


def _short_keys(array: pa.Array) -> pa.Array:
    """String ids, with those longer than ``LONG_KEY_BYTES`` replaced by ``sha1:<hex digest>``."""
    if len(array) == 0 or (pc.max(pc.binary_length(array)).as_py() or 0) <= LONG_KEY_BYTES:
        return array
    return pa.array([value if value is None or len(value.encode()) <= LONG_KEY_BYTES
                     else "sha1:" + hashlib.sha1(value.encode()).hexdigest() for value in array.to_pylist()],
                    pa.string())


def prompt_keys(array: pa.Array) -> pa.Array:
    """Prompt ids as a groupable array: strings and integers as they are, anything else as JSON text."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        return prompt_keys(array.cast(kind.value_type))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _short_keys(array)
    if pa.types.is_integer(kind):
        return array
    return pa.array([json.dumps(v, sort_keys=True, default=str) for v in array.to_pylist()], pa.string())
