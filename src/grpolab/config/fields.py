"""How each config field is classified, carried in the field's own metadata (transformers' ``field(metadata=)``
style), so that no list elsewhere names fields and a new field cannot be left out of one.

Every field of ``TrainConfig`` and ``CompareConfig`` is declared with ``setting(default, scope=...)``:

* ``scope="start"``: the policy at step 0 or how it is evaluated depends on it (model, task, seed, sampling,
  evaluation settings). Runs that agree on every such setting share one start evaluation.
* ``scope="training"``: only what is trained after step 0 (estimator, lr, loss, schedule, logging of training).
* ``scope="runtime"``: how the process runs, not what it trains or finds (progress bars, threads, workers); it
  may differ between runs of one directory and may change on ``--resume``.
* ``scope="sweep"``: a ``CompareConfig`` setting of what a sweep runs.

and ``group=...``, its titled group in ``--help`` (a key of ``HELP_GROUPS``, which holds each group's title and
description, in the order ``--help`` shows them: model, task, sampling, loss, optimiser, evaluation, sweep,
engine, output),

and optionally ``resume=True`` (may change on ``--resume``; implied by ``runtime``), ``sweep_owned="--flag"``
(``grpolab compare`` sets it for each run itself; the text names what to use instead), ``at_least=N`` (the
least value it may take; ``None`` stays allowed where the type allows it), ``choices=(...)`` (the only values a
setting takes; the checks, the flags' argparse ``choices`` and the TRL mapping read them here) and ``check=fn``
(for values that follow a pattern rather than a list, such as ``device``: ``fn(value)`` raises a ``UserError``).
The queries below read the metadata; ``tests/config/test_fields.py`` fails for a field without a
classification (a scope and a help group), and for a text field with neither choices nor a check that is not
on its list of free-text settings.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["HELP_GROUPS", "SCOPES", "choices", "help_group", "help_title", "lower_bounds", "names_in_scope",
           "open_text", "resume_may_change", "runtime_only", "setting", "sweep_owned", "unclassified", "value_checks"]

SCOPES = ("start", "training", "runtime", "sweep")
HELP_GROUPS: dict[str, str] = {
    "model": "the policy: weights, LoRA, precision",
    "task": "prompts, references, scoring",
    "sampling": "what each step samples and keeps",
    "loss": "advantage estimator and policy loss",
    "optimiser": "update, schedule, steps, seed, budget",
    "evaluation": "held-out evaluation, gradient diagnostics",
    "sweep": "what grpolab compare runs and tests",
    "engine": "training engine, sampler, device, workers",
    "output": "run directory, checkpoints, logs, progress",
}
"""The titled groups of a command's ``--help``, name -> what its settings decide, in the order shown
(``help_title``)."""
_MISSING: Any = dataclasses.MISSING


def setting(default: Any = _MISSING, *, scope: str, group: str | None = None, default_factory: Any = _MISSING,
            resume: bool = False, sweep_owned: str | None = None, at_least: float | None = None,
            choices: tuple[str, ...] | None = None, check: Callable[[Any], None] | None = None) -> Any:
    """A dataclass field with its classification in ``metadata`` (see the module docstring); a field without a
    ``group`` is reported by ``unclassified``."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if group is not None and group not in HELP_GROUPS:
        raise ValueError(f"group must be one of {', '.join(HELP_GROUPS)}, got {group!r}")
    if choices is not None:
        if not isinstance(choices, tuple) or not choices or not all(isinstance(c, str) for c in choices):
            raise ValueError(f"choices must be a non-empty tuple of names, got {choices!r}")
        if default is not _MISSING and default not in choices:
            raise ValueError(f"the default {default!r} is not one of the choices {', '.join(choices)}")
    metadata = {"scope": scope, "group": group, "resume": resume or scope == "runtime", "sweep_owned": sweep_owned,
                "at_least": at_least, "choices": choices, "check": check}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _fields(cls_or_config: Any) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls_or_config)


def unclassified(cls: type) -> list[str]:
    """The fields of ``cls`` declared without ``setting(...)`` or without a help group (a test keeps this empty)."""
    return [f.name for f in _fields(cls) if f.metadata.get("scope") not in SCOPES
            or f.metadata.get("group") not in HELP_GROUPS]


def help_title(group: str) -> str:
    """The title ``--help`` shows for ``group``: its name and what its settings decide."""
    return f"{group} ({HELP_GROUPS[group]})"


def help_group(cls: type, name: str) -> str:
    """The ``--help`` group (a key of ``HELP_GROUPS``) of the field ``name`` of ``cls``."""
    return next(f.metadata["group"] for f in _fields(cls) if f.name == name)


def names_in_scope(cls: type, *scopes: str) -> frozenset[str]:
    """The fields of ``cls`` whose scope is one of ``scopes``."""
    return frozenset(f.name for f in _fields(cls) if f.metadata.get("scope") in scopes)


def runtime_only(*classes: type) -> frozenset[str]:
    """Settings of how a process runs, not of what it trains or finds."""
    return frozenset().union(*(names_in_scope(cls, "runtime") for cls in classes))


def resume_may_change(cls: type) -> frozenset[str]:
    """Settings that ``--resume`` may change (the runtime ones, and those marked ``resume=True``)."""
    return frozenset(f.name for f in _fields(cls) if f.metadata.get("resume"))


def sweep_owned(cls: type) -> dict[str, str]:
    """Training settings that ``grpolab compare`` sets for each run -> what to use instead."""
    return {f.name: f.metadata["sweep_owned"] for f in _fields(cls) if f.metadata.get("sweep_owned")}


def lower_bounds(config: Any) -> dict[str, float]:
    """Setting -> the least value it may take, for the fields that have one."""
    return {f.name: f.metadata["at_least"] for f in _fields(config) if f.metadata.get("at_least") is not None}


def choices(config: Any) -> dict[str, tuple[str, ...]]:
    """Setting -> the only values it takes, for the fields that have a fixed set."""
    return {f.name: f.metadata["choices"] for f in _fields(config) if f.metadata.get("choices")}


def value_checks(config: Any) -> dict[str, Callable[[Any], None]]:
    """Setting -> the function that refuses a bad value, for the fields whose values follow a pattern."""
    return {f.name: f.metadata["check"] for f in _fields(config) if f.metadata.get("check")}


def open_text(cls: type) -> list[str]:
    """The text fields of ``cls`` (``str`` or ``str | None``) with neither ``choices`` nor ``check``: any text
    is accepted as far as the schema goes (a test keeps this equal to a list of free-text settings)."""
    hints = typing.get_type_hints(cls)

    def text(kind: Any) -> bool:
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            return str in typing.get_args(kind)
        return kind is str

    return [f.name for f in _fields(cls) if text(hints[f.name]) and not f.metadata.get("choices")
            and not f.metadata.get("check")]
