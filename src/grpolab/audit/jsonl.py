"""Reading JSON-lines logs for ``grpolab audit`` without parsing the fields it does not read.

pyarrow's JSON reader infers a type for every field of every row before columns can be selected: a 4 KB line
holding an unused field nested 2,000 levels deep took 10 s to infer, and one of 40 KB (20,000 levels) crashed the
process with a segmentation fault. Here the schema comes from a scan of the top level of each line of the first block:
a value that is an object or a list is skipped by counting its brackets (strings skipped whole), and only values
at most ``MAX_DEPTH`` levels deep are parsed, for their types. The rows are then read by pyarrow with that
schema, narrowed to the audited columns, and ``unexpected_field_behavior="ignore"``, which skips the other fields
without building them. An audited column whose values nest deeper than ``MAX_DEPTH`` is refused in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

from grpolab.errors import UserError

__all__ = ["MAX_DEPTH", "json_batches", "json_schema", "top_level_values"]

MAX_DEPTH = 64
"""The deepest nesting of a value whose type the scan reads; a deeper value is skipped (its field typed null)."""
TOO_DEEP = b"grpolab.nested_deeper_than_max_depth"
"""Field metadata key marking a field whose values nest deeper than ``MAX_DEPTH`` in the scanned lines."""
NO_TYPE = b"grpolab.no_single_type"
"""Field metadata key marking a field whose values have no one pyarrow type (mixed types, an integer past 64 bits):
refused only when audited."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_SCALAR = re.compile(r"[^,}\]\s]+")
_SPACE = re.compile(r"\s*")
_DEEP = object()


def _skip_space(line: str, at: int) -> int:
    return _SPACE.match(line, at).end()  # type: ignore[union-attr]  # \s* always matches


def _container_end(line: str, start: int) -> tuple[int, int]:
    """(the end of the object or list starting at ``start``, its deepest nesting), bracket by bracket."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(line, start):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
            if depth == 0:
                return match.end(), deepest
    raise ValueError("an object or list is not closed")


def _value(line: str, start: int) -> tuple[Any, int]:
    """(the value at ``start``, parsed, or ``_DEEP`` when nested deeper than ``MAX_DEPTH``; where it ends)."""
    if line[start] in "[{":
        end, deepest = _container_end(line, start)
        return (_DEEP if deepest > MAX_DEPTH else json.loads(line[start:end])), end
    match = (_STRING if line[start] == '"' else _SCALAR).match(line, start)
    if match is None:
        raise ValueError(f"no value at character {start}")
    return json.loads(match.group()), match.end()


def top_level_values(line: str) -> dict[str, Any]:
    """The fields of one JSON object line, each value parsed unless nested deeper than ``MAX_DEPTH`` (then
    ``_DEEP``, never parsed). ``ValueError`` when the line is not one JSON object."""
    at = _skip_space(line, 0)
    if not line.startswith("{", at):
        raise ValueError("not a JSON object")
    values: dict[str, Any] = {}
    at = _skip_space(line, at + 1)
    if line.startswith("}", at):
        return values
    while True:
        key = _STRING.match(line, at)
        if key is None:
            raise ValueError(f"no field name at character {at}")
        at = _skip_space(line, key.end())
        if not line.startswith(":", at):
            raise ValueError(f"no ':' at character {at}")
        values[json.loads(key.group())], at = _value(line, _skip_space(line, at + 1))
        at = _skip_space(line, at)
        if line.startswith("}", at):
            return values
        if not line.startswith(",", at):
            raise ValueError(f"no ',' or '}}' at character {at}")
        at = _skip_space(line, at + 1)


def _first_block_rows(path: Path, block_bytes: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, fields) of each non-empty line of the first ``block_bytes`` of ``path`` (a line cut by the
    block's end is left out)."""
    with open(path, "rb") as file:
        block = file.read(block_bytes)
        whole = not file.read(1)
    lines = block.split(b"\n")
    for number, raw in enumerate(lines if whole else lines[:-1], start=1):
        if raw.strip():
            try:
                yield number, top_level_values(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                raise UserError(f"{path}:{number}: cannot read it as json: {str(error)[:120]}") from None


def _field(name: str, values: list[Any], deep: bool) -> pa.Field:
    try:
        kind, metadata = pa.array(values).type, {TOO_DEEP: b"1"} if deep else None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
        kind, metadata = pa.null(), {NO_TYPE: " ".join(str(error).split())[:120].encode()}
    return pa.field(name, kind, metadata=metadata)


def json_schema(path: Path, block_bytes: int) -> pa.Schema:
    """The schema of a JSON-lines file from its first block's lines, fields in the order first seen; a field whose
    values there nest deeper than ``MAX_DEPTH`` is typed from its other values and marked (``TOO_DEEP``), one whose
values have no one type is typed null and marked (``NO_TYPE``)."""
    columns: dict[str, list[Any]] = {}
    deep: set[str] = set()
    for count, (_, row) in enumerate(_first_block_rows(path, block_bytes)):
        for name in row:
            columns.setdefault(name, [None] * count)
        for name, values in columns.items():
            value = row.get(name)
            deep |= {name} if value is _DEEP else set()
            values.append(None if value is _DEEP else value)
    return pa.schema([_field(name, values, name in deep) for name, values in columns.items()])


def json_batches(path: Path, schema: pa.Schema, columns: list[str], block_bytes: int) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` only: every other field is skipped unparsed. An audited column whose values
    nest deeper than ``MAX_DEPTH`` is refused in one line."""
    for name in columns:
        marks = schema.field(name).metadata or {}
        if marks.get(TOO_DEEP):
            raise UserError(f"{path}: the column {name!r} holds values nested deeper than {MAX_DEPTH} levels; "
                            "audit a copy of the log in which it holds plain ids or numbers")
        if marks.get(NO_TYPE):
            raise UserError(f"{path}: the column {name!r} has no one type ({marks[NO_TYPE].decode()}); write it with "
                            "one type in every row")
    parse = pajson.ParseOptions(explicit_schema=pa.schema([schema.field(name) for name in columns]),
                                unexpected_field_behavior="ignore")
    for batch in pajson.open_json(path, read_options=pajson.ReadOptions(block_size=block_bytes),
                                  parse_options=parse):
        yield batch.select(columns)
