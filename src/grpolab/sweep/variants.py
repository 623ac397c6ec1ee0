"""``--vary FIELD=V1,V2,...``: axes beside estimators and G over any training setting a sweep does not own.

Several axes are separated by ``;`` and crossed (``max_grad_norm=0,1;lr_schedule=constant,cosine`` gives four
variants). Values are read as the field's type: numbers, ``true``/``false``, ``null`` for an optional
setting, and JSON for mappings and lists (``task_options={"digits":[1,2]},{"digits":[3,3]}``: commas inside
brackets or quotes do not split). Each variant is named ``FIELD=VALUE[,FIELD=VALUE]`` (the ``variant`` column
of every table; "" when nothing is varied) and its runs' ids end in a file-name-safe form of that name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from grpolab.config import TrainConfig
from grpolab.config.checks import check_types
from grpolab.config.fields import names_in_scope
from grpolab.errors import UserError
from grpolab.sweep.settings import SWEEP_OWNED

__all__ = ["NO_VARIANT", "Variant", "parse_vary"]

# Not an axis: the sweep sets these for each run (or chooses lr itself); runtime settings change nothing trained.
_NOT_VARIED = {**SWEEP_OWNED, "lr": "--lrs (each variant chooses its own lr)",
               **{name: "nothing: it changes how a run is processed, not what it trains"
                  for name in names_in_scope(TrainConfig, "runtime")}}


@dataclass(frozen=True, order=True)
class Variant:
    """One point of the ``--vary`` axes: its name (``max_grad_norm=0``; "" for none) and the settings it changes."""

    name: str
    changes: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def slug(self) -> str:
        """The name as it ends a run id (a file name): unsafe characters replaced, plus a digest when any was."""
        safe = re.sub(r"[^A-Za-z0-9._=+,-]+", "-", self.name).strip("-")
        if safe == self.name:
            return safe
        return f"{safe[:40].rstrip('-')}-{hashlib.sha256(self.name.encode()).hexdigest()[:8]}"


NO_VARIANT = Variant("")


def parse_vary(text: str) -> list[Variant]:
    """The variants of a ``--vary`` text (``[NO_VARIANT]`` for ""); ``UserError`` naming a bad axis or value."""
    axes = [_parse_axis(part) for part in _split(text, ";") if part.strip()]
    names = [name for name, _ in axes]
    if len(set(names)) != len(names):
        raise UserError(f"vary names a setting twice in {text!r}; give each setting one axis with all its values")
    if not axes:
        return [NO_VARIANT]
    variants = []
    for point in itertools.product(*([(name, token, value) for token, value in values] for name, values in axes)):
        variants.append(Variant(",".join(f"{name}={token}" for name, token, _ in point),
                                {name: value for name, _, value in point}))
    return variants


def _parse_axis(part: str) -> tuple[str, list[tuple[str, Any]]]:
    name, equals, values = part.partition("=")
    name = name.strip()
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    if not equals or not values.strip():
        raise UserError(f"vary axis {part.strip()!r} must be FIELD=V1,V2,... such as max_grad_norm=0,1")
    if name not in known:
        raise UserError(f"vary: {name!r} is not a training setting; choose one of `grpolab train --help`'s flags "
                        "(written with underscores, e.g. max_grad_norm)")
    if name in _NOT_VARIED:
        raise UserError(f"vary: {name} cannot be an axis (the sweep sets it for each run); use {_NOT_VARIED[name]}")
    tokens = [token.strip() for token in _split(values, ",")]
    if any(not token for token in tokens):
        raise UserError(f"vary axis {name} needs distinct, non-empty values separated by commas, got {values!r}")
    parsed = [(_canonical(token), _value(name, token)) for token in tokens]
    seen: dict[str, str] = {}
    for token, value in parsed:  # equal values spelt differently (1 and 1.0, true and True) are one variant
        key = json.dumps(value, sort_keys=True, default=str)
        if key in seen:
            raise UserError(f"vary axis {name} names {seen[key]} twice, got {values.strip()!r}; name each value once")
        seen[key] = token
    return name, parsed


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets, braces and double quotes."""
    parts, depth, quoted, current = [], 0, False, []
    for i, char in enumerate(text):
        if char == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and char in "[{":
            depth += 1
        elif not quoted and char in "]}":
            depth -= 1
        if char == separator and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*parts, "".join(current)]


def _canonical(token: str) -> str:
    """A JSON value written compactly (so that spacing does not make a new variant); other values as given."""
    if token[:1] in "[{":
        try:
            return json.dumps(json.loads(token), separators=(",", ":"), sort_keys=True)
        except json.JSONDecodeError:
            return token
    return token


def _value(name: str, token: str) -> Any:
    """``token`` read as the type of setting ``name``, checked against the setting's own rules."""
    kind = typing.get_type_hints(TrainConfig)[name]
    optional = typing.get_origin(kind) in (typing.Union, types.UnionType)
    base = next(a for a in typing.get_args(kind) if a is not type(None)) if optional else kind
    base = typing.get_origin(base) or base
    try:
        if optional and token.lower() in ("none", "null"):
            value = None
        elif base is bool:
            value = {"true": True, "false": False}[token.lower()]
        elif base in (int, float):
            value = base(token)
        elif base in (dict, tuple, list):
            value = json.loads(token)
            value = tuple(value) if base is tuple and isinstance(value, list) else value
        else:
            value = token
    except (ValueError, KeyError, json.JSONDecodeError):
        example = {bool: "true,false", int: "1,2", float: "0.5,1", dict: '{"k":1},{"k":2}', tuple: "[0.9,0.99]"}
        raise UserError(f"vary: {token!r} is not a value of {name} ({getattr(base, '__name__', base)}); "
                        f"write values such as {example.get(base, 'a,b')}") from None
    check_types({name: value}, TrainConfig)
    TrainConfig().replace(**{name: value})  # the setting's own checks (ranges, options), in one line
    return value
