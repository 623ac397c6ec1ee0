"""Task registry: ``get_task(name, **options) -> Task``.

Built-in tasks: ``reverse`` (the embedded default: digit strings written backwards), ``arith`` (synthetic
arithmetic), ``gsm8k`` and ``math500``
(from a local jsonl file or a ``datasets`` hub id).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from grpolab.errors import UserError
from grpolab.tasks.base import Problem, Task, TrainStream, with_validation

__all__ = ["Problem", "Task", "TrainStream", "available", "get_task", "with_validation"]

# name -> "module:function" building the task; imported lazily so that a task's dependencies load only
# when it is used.
_BUILDERS = {
    "reverse": "grpolab.tasks.reverse:make_task",
    "arith": "grpolab.tasks.arith:make_task",
    "gsm8k": "grpolab.tasks.gsm8k:make_task",
    "math500": "grpolab.tasks.math500:make_task",
}


def available() -> list[str]:
    """Names of the built-in tasks."""
    return sorted(_BUILDERS)


def get_task(name: str, **options: Any) -> Task:
    """Build the task ``name`` with its options (data path, split sizes, difficulty, seed...)."""
    if name not in _BUILDERS:
        raise UserError(f"unknown task {name!r}; choose one of {', '.join(available())}")
    module_name, _, function_name = _BUILDERS[name].partition(":")
    builder = getattr(importlib.import_module(module_name), function_name)
    known = [p.name for p in inspect.signature(builder).parameters.values() if p.kind is p.KEYWORD_ONLY
             or p.kind is p.POSITIONAL_OR_KEYWORD]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(f"task {name!r} has no option(s) {', '.join(unknown)}; its options are: {', '.join(known)}")
    return builder(**options)
