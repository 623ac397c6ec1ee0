"""Row loading shared by the real-data tasks: local jsonl files or ``datasets`` hub ids -> row dicts.

A malformed row (bad JSON, not an object, a missing or non-string field) is an error naming the file and
line, never a silent skip: a data set that quietly loses rows makes results incomparable. Blank lines are
allowed and ignored. A line longer than ``MAX_LINE_BYTES`` is refused, naming it, after reading only that many
bytes of it: no prompt that long could fit a model's context, and reading (then tokenizing) it whole took
gigabytes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.hub import hub_cached, hub_unavailable
from grpolab.json_input import parse_json

Row = dict[str, Any]

MAX_LINE_BYTES = 16 << 20
"""The longest line of a JSONL data file that is read (16 MiB)."""


def read_jsonl(path: Path, fields: Sequence[str]) -> list[Row]:
    """The rows of a jsonl file, each checked to have string-valued ``fields``.

    Raises:
        UserError: missing file, bad JSON or a bad row (with ``path:line``).
    """
    if not path.is_file():
        raise UserError(f"data file {path} does not exist; pass the path of a .jsonl file or of a folder "
                        "holding train.jsonl / test.jsonl, or leave the path out to load from the hub")
    rows = []
    with path.open("rb") as handle:  # bytes, decoded line by line, so that a bad byte is named by its line
        for line_number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise UserError(f"{path}:{line_number}: a line longer than {MAX_LINE_BYTES >> 20} MiB, more than "
                                "any model's context holds; shorten the row or remove it")
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # a byte-order mark opens the file
            except UnicodeDecodeError as error:
                raise UserError(f"{path}:{line_number}: not UTF-8 text ({error.reason} at byte {error.start} of "
                                "the line); save the file as UTF-8") from None
            if not line.strip():
                continue
            row = parse_json(line, f"{path}:{line_number}", "fix or remove the line")
            check_row(row, fields, f"{path}:{line_number}")
            rows.append(row)
    return rows


def check_row(row: object, fields: Sequence[str], where: str) -> None:
    """Raise ``UserError`` naming ``where`` unless ``row`` is a dict with a string for every field."""
    if not isinstance(row, dict):
        wanted = f" with fields {', '.join(fields)}" if fields else " (one row: its fields by name)"
        raise UserError(f"{where}: a JSON {type(row).__name__}, where a JSON object{wanted} was expected; write each "
                        "row as an object, or remove the line")
    for field in fields:
        if not isinstance(row.get(field), str):
            problem = "missing" if field not in row else f"not a string ({type(row[field]).__name__})"
            raise UserError(f"{where}: field {field!r} is {problem}; every row needs {', '.join(fields)}")


def local_splits(path: str | Path, fields: Sequence[str]) -> dict[str, list[Row]]:
    """Rows of a local data set: ``{"train": ..., "test": ...}`` from a folder, ``{"all": ...}`` from a file.

    A folder must hold ``test.jsonl`` and may hold ``train.jsonl`` (without it, only ``test`` is returned).
    """
    root = Path(path).expanduser()
    if root.is_dir():
        splits = {"test": read_jsonl(root / "test.jsonl", fields)}
        if (root / "train.jsonl").is_file():
            splits["train"] = read_jsonl(root / "train.jsonl", fields)
        return splits
    return {"all": read_jsonl(root, fields)}


def local_split_files(path: Path) -> list[Path]:
    """The files ``local_splits(path)`` reads: the file itself, or a folder's ``test.jsonl`` and ``train.jsonl``."""
    if not path.is_dir():
        return [path] if path.is_file() else []
    return sorted(file for file in (path / "test.jsonl", path / "train.jsonl") if file.is_file())


def require_hub_dataset(hub_id: str, local_alternative: str) -> None:
    """Raise a ``UserError`` at once (not after the hub's retries) when the ``datasets`` hub data set ``hub_id``
    is not in the local cache and the hub is offline (``HF_HUB_OFFLINE``) or out of reach; the message ends
    with ``local_alternative``, what to pass instead."""
    offline = hub_unavailable()
    if offline and not hub_cached(hub_id, "dataset"):
        raise UserError(f"data set {hub_id!r} is not in the local cache and the hub cannot be used ({offline}); "
                        f"{local_alternative}")


def hub_split(hub_id: str, config: str | None, split: str, fields: Sequence[str]) -> list[Row]:
    """Rows of ``split`` of the ``datasets`` hub data set ``hub_id`` (downloads on first use; fails at once
    when it is not cached and the hub is offline or out of reach)."""
    import datasets

    require_hub_dataset(hub_id, "pass a local jsonl path (a file, or a folder with train.jsonl / test.jsonl)")
    try:
        data = datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:  # datasets raises many types (network, missing config, ...)
        raise UserError(f"could not load {hub_id!r} (config {config!r}, split {split!r}) with datasets: "
                        f"{exc}; check the id and your network, or pass a local jsonl path") from exc
    rows = [dict(row) for row in data]
    for index, row in enumerate(rows):
        check_row(row, fields, f"{hub_id}[{split}] row {index}")
    return rows


def split_by_seed(rows: Sequence[Row], test_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """Shuffle with ``random.Random(seed)`` and cut ``round(test_fraction * n)`` rows off as the test split.

    Both splits keep the file order of their rows, so the result depends only on ``seed`` and the data.
    """
    if not 0.0 < test_fraction < 1.0:
        raise UserError(f"test_fraction must be strictly between 0 and 1, got {test_fraction}")
    indices = list(range(len(rows)))
    random.Random(seed).shuffle(indices)
    n_test = round(test_fraction * len(rows))
    test_indices = set(indices[:n_test])
    train = [row for i, row in enumerate(rows) if i not in test_indices]
    test = [row for i, row in enumerate(rows) if i in test_indices]
    return train, test


def head(rows: list[Row], limit: int | None) -> list[Row]:
    """The first ``limit`` rows (all when ``limit`` is None)."""
    if limit is not None and limit < 0:
        raise UserError(f"limit must be >= 0, got {limit}")
    return rows if limit is None else rows[:limit]


def load_train_test(
    path: str | Path | None,
    *,
    hub_id: str,
    hub_config: str | None,
    hub_splits: Sequence[str],
    fields: Sequence[str],
    seed: int,
    test_fraction: float,
) -> tuple[list[Row], list[Row]]:
    """Train and test rows from ``path`` (local) or ``hub_id`` (when ``path`` is None).

    Every row gets ``_id = "<split>/<line index>"``. When the source has both a train and a test split
    they are used as they are; a single file or a single split is cut by :func:`split_by_seed`.
    """
    if path is not None:
        splits = local_splits(path, fields)
    else:
        splits = {split: hub_split(hub_id, hub_config, split, fields) for split in hub_splits}
    for name, rows in splits.items():
        for index, row in enumerate(rows):
            row["_id"] = f"{name}/{index}"
    if "train" in splits and "test" in splits:
        return splits["train"], splits["test"]
    (only,) = splits.values()
    return split_by_seed(only, test_fraction, seed)
