"""How each config field is classified, carried in the field's own metadata (transformers' ``field(metadata=)``
style), so that no list elsewhere names fields and a new field cannot be left out of one.

Every field of ``TrainConfig`` and ``CompareConfig`` is declared with ``setting(default, scope=...)``:

* ``scope="start"``: the policy at step 0 or how it is evaluated depends on it (model, task, seed, sampling,
  evaluation settings). Runs that agree on every such setting share one start evaluation.
* ``scope="training"``: only what is trained after step 0 (estimator, lr, loss, schedule, logging of training).
* ``scope="runtime"``: how the process runs, not what it trains or finds (progress bars, threads, workers); it
  may differ between runs of one directory and may change on ``--resume``.
* ``scope="sweep"``: a ``CompareConfig`` setting of what a sweep runs.

and optionally ``resume=True`` (may change on ``--resume``; implied by ``runtime``), ``sweep_owned="--flag"``
(``grpolab compare`` sets it for each run itself; the text names what to use instead) and ``at_least=N`` (the
least value it may take; ``None`` stays allowed where the type allows it). The queries below read the metadata;
``tests/config/test_fields.py`` fails for a field without a classification.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["SCOPES", "lower_bounds", "names_in_scope", "resume_may_change", "runtime_only", "setting", "sweep_owned",
           "unclassified"]

SCOPES = ("start", "training", "runtime", "sweep")
_MISSING: Any = dataclasses.MISSING


def setting(default: Any = _MISSING, *, scope: str, default_factory: Any = _MISSING, resume: bool = False,
            sweep_owned: str | None = None, at_least: float | None = None) -> Any:
    """A dataclass field with its classification in ``metadata`` (see the module docstring)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    metadata = {"scope": scope, "resume": resume or scope == "runtime", "sweep_owned": sweep_owned,
                "at_least": at_least}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _fields(cls_or_config: Any) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls_or_config)


def unclassified(cls: type) -> list[str]:
    """The fields of ``cls`` declared without ``setting(...)`` (a test keeps this empty)."""
    return [f.name for f in _fields(cls) if f.metadata.get("scope") not in SCOPES]


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
