"""Reading a user's prompt/answer table into named splits of rows, for the ``file`` task.

A source is one of:

- a JSONL (``.jsonl``, or ``.json`` holding one object per line or one array), CSV or Parquet file: one
  split, ``all``;
- a folder of such files named by split (``train.jsonl``, ``test.csv``, ``validation.parquet``, or the hub
  layout ``data/train-00000-of-00001.parquet``; several files of one split are read in name order);
- a folder written by ``datasets``' ``save_to_disk`` (read with ``datasets.load_from_disk``);
- a ``datasets`` hub id such as ``openai/gsm8k`` (read with ``datasets.load_dataset``, every split);
- from Python, a ``pandas.DataFrame``, a ``datasets.Dataset`` or ``DatasetDict``.

Readers are pyarrow (Parquet), pandas (CSV, every column read as text), ``datasets`` and the standard ``json``
module (JSONL, so that a bad line is named by its number). Rows come back as plain dicts of Python values;
turning a cell into text is the task's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.json_input import parse_json
from grpolab.tasks._loading import Row, read_jsonl, require_hub_dataset

__all__ = ["SUFFIXES", "Table", "read_table", "split_name", "table_files"]

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
# File-name stems and datasets split names -> the split they stand for (the aliases datasets itself knows).
_SPLIT_ALIASES = {"train": "train", "training": "train", "test": "test", "testing": "test", "eval": "test",
                  "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation"}


@dataclass(frozen=True)
class Table:
    """Rows of a data source by split.

    Attributes:
        source: what was read (a path, a hub id, or the type of an in-memory object).
        splits: split name (``train``, ``test``, ``validation``, ``all`` or the source's own) -> rows.
        columns: every column name, in first-seen order.
    """

    source: str
    splits: dict[str, list[Row]]
    columns: tuple[str, ...]


def split_name(name: str) -> str:
    """The split a file stem or a ``datasets`` split name stands for (``dev`` -> ``validation``)."""
    return _SPLIT_ALIASES.get(name.lower(), name)


def read_table(data: Any, hub_config: str | None = None) -> Table:
    """The rows of ``data`` (a path, a hub id or an in-memory table; see the module docstring)."""
    if isinstance(data, str | Path):
        source = str(data)
        splits = _read_location(Path(data).expanduser(), source, hub_config)
    else:
        source = type(data).__name__
        splits = _read_object(data)
    for name, rows in splits.items():
        if not rows:
            raise UserError(f"the {name!r} split of {source} has no rows; remove it or add rows")
    columns = dict.fromkeys(key for rows in splits.values() for row in rows for key in row)
    return Table(source, splits, tuple(columns))


def _read_location(path: Path, source: str, hub_config: str | None) -> dict[str, list[Row]]:
    if path.is_file():
        return {"all": read_file(path)}
    if path.is_dir():
        marker = _saved_dataset_marker(path)
        if marker is None:
            return _read_folder(path)
        import datasets

        try:
            saved = datasets.load_from_disk(str(path))
        except Exception as error:  # datasets raises many types (missing files, bad JSON, Arrow errors)
            problem = " ".join(str(error).split())[:300]
            raise UserError(f"folder {path} looks written by datasets' save_to_disk (it holds {marker}) but datasets "
                            f"cannot load it ({type(error).__name__}: {problem}); save it again with save_to_disk, "
                            "or pass a folder of train/test files without those names") from None
        return _read_object(saved)
    if path.suffix.lower() in SUFFIXES or source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise UserError(f"data file {source} does not exist; pass a .jsonl, .csv or .parquet file, a folder "
                        "of train/test files, or a datasets hub id such as openai/gsm8k")
    return _read_hub(source, hub_config)


def _saved_dataset_marker(folder: Path) -> str | None:
    """The file names that make ``folder`` one written by ``datasets``' ``save_to_disk`` (None if it is not):
    ``dataset_dict.json``, or ``state.json`` with ``dataset_info.json``, as ``datasets.load_from_disk`` reads
    them. A ``state.json`` alone (e.g. a trainer's) does not count."""
    if (folder / "dataset_dict.json").is_file():
        return "dataset_dict.json"
    if (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file():
        return "state.json and dataset_info.json"
    return None


def read_file(path: Path) -> list[Row]:
    """The rows of one JSONL, JSON, CSV or Parquet file; ``UserError`` naming the file if it is unreadable."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(f"{path}: unknown file type {suffix or '(none)'!r}; use .jsonl, .json, .csv or .parquet")
    if suffix in (".jsonl", ".json"):
        return _read_json(path)
    if suffix == ".csv":
        return _read_csv(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as error:
        problem = " ".join(str(error).split())
        raise UserError(f"{path}: cannot read it as Parquet ({problem}); check the file") from None


def _read_csv(path: Path) -> list[Row]:
    """Every cell as text (an empty cell is ""), so that ``007`` stays ``007``."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save the file as UTF-8") \
            from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        problem = " ".join(str(error).split())
        raise UserError(f"{path}: cannot read it as CSV ({problem}); check the file") from None
    return frame.to_dict("records")


def _read_json(path: Path) -> list[Row]:
    try:
        with path.open(encoding="utf-8-sig") as handle:  # a byte-order mark is no content
            first = handle.read(4096).lstrip()
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save the file as UTF-8") \
            from None
    if not first.startswith("["):
        return read_jsonl(path, ())
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save the file as UTF-8") \
            from None
    rows = parse_json(text, str(path), "fix the file")
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if bad is not None:
        raise UserError(f"{path}: item {bad} of the JSON array is not an object; every item needs named fields")
    return rows


def table_files(path: Path) -> list[Path]:
    """The files ``read_table(path)`` reads from a local file or folder (none for a folder it cannot read):
    what a run's data identity hashes, so that a README beside the data is no part of it."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    if _saved_dataset_marker(path) is not None:  # datasets reads the folder's files as it sees fit
        return sorted(p for p in path.rglob("*") if p.is_file())
    return sorted(file for files in _split_files(path).values() for file in files)


def _split_files(folder: Path) -> dict[str, list[Path]]:
    """split -> the files named by it in ``folder`` (or in its ``data`` subfolder, the hub layout); {} if none."""
    for candidate in (folder, folder / "data"):
        files = sorted(p for p in candidate.glob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        by_split: dict[str, list[Path]] = {}
        for file in files:
            stem = file.name.split(".")[0].split("-")[0]
            by_split.setdefault(split_name(stem), []).append(file)
        known = {name: paths for name, paths in by_split.items() if name in ("train", "test", "validation")}
        if known:
            return known
    return {}


def _read_folder(folder: Path) -> dict[str, list[Row]]:
    """Files named by split in ``folder`` (or in its ``data`` subfolder, the hub layout)."""
    known = _split_files(folder)
    if known:
        return {name: [row for path in paths for row in read_file(path)] for name, paths in known.items()}
    raise UserError(f"folder {folder} holds no train/test files; name them train.jsonl and test.jsonl (or .csv, "
                    ".parquet), or pass a single file")


def _read_hub(hub_id: str, hub_config: str | None) -> dict[str, list[Row]]:
    import datasets

    require_hub_dataset(hub_id, "pass a local .jsonl, .csv or .parquet file, or a folder of train/test files")
    try:
        data = datasets.load_dataset(hub_id, hub_config)
    except Exception as error:  # datasets raises many types (network, missing config, bad id, ...)
        problem = " ".join(str(error).split())[:300]
        raise UserError(f"could not load {hub_id!r} with datasets ({type(error).__name__}: {problem}); check the "
                        "id and your network, or pass a local .jsonl, .csv or .parquet file") from None
    return _read_object(data)


def _read_object(data: Any) -> dict[str, list[Row]]:
    """Rows of a DataFrame, a datasets Dataset or a DatasetDict (split names mapped by ``split_name``)."""
    if isinstance(data, Mapping) and data and all(hasattr(part, "to_list") for part in data.values()):
        return {split_name(str(name)): part.to_list() for name, part in data.items()}
    if hasattr(data, "to_list") and hasattr(data, "column_names"):  # a datasets.Dataset
        return {"all": data.to_list()}
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas.DataFrame
        return {"all": data.to_dict("records")}
    raise UserError(f"cannot read a {type(data).__name__} as a table; pass a path, a hub id, a pandas DataFrame "
                    "or a datasets Dataset / DatasetDict")
