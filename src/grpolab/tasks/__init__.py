"""Task registry: ``get_task(name, **options) -> Task``.

Built-in tasks: ``reverse`` (the embedded default: digit strings written backwards), ``arith`` (synthetic
arithmetic), ``gsm8k`` and ``math500`` (from a local jsonl file or a ``datasets`` hub id), and ``file``
(any prompt/answer table with any verifier; see ``grpolab.tasks.table``).

Your own task (the task protocol): a builder function taking keyword options and returning a ``Task``,
whose ``train`` and ``test`` are tuples of ``Problem(id, prompt, reference)`` that share no prompt and
whose ``verifier`` names a registered verifier or a dotted path ``pkg.module:function``. Register it with
``@register_task("name")`` (a second registration of a name is a ``ValueError``, as for estimators) and
use the name from Python, e.g. ``TrainConfig(task="name")``; or give the command line its dotted path,
``--task pkg.module:builder``, which every worker process of ``grpolab compare`` can import as well.
``examples/custom_task.py`` is a complete task in 20 lines.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpolab.dotted import import_module
from grpolab.errors import UserError
from grpolab.tasks.base import Problem, Task, TrainStream, with_validation

__all__ = ["Problem", "Task", "TrainStream", "available", "data_files", "get_task", "is_import_path", "register_task",
           "with_validation"]

TaskBuilder = Callable[..., Task]

# name -> "module:function" building the task; imported lazily so that a task's dependencies load only
# when it is used.
_BUILDERS = {
    "reverse": "grpolab.tasks.reverse:make_task",
    "arith": "grpolab.tasks.arith:make_task",
    "gsm8k": "grpolab.tasks.gsm8k:make_task",
    "math500": "grpolab.tasks.math500:make_task",
    "file": "grpolab.tasks.table:make_task",
}
_REGISTERED: dict[str, TaskBuilder] = {}  # tasks registered with @register_task


def register_task(name: str) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator: register ``builder(**options) -> Task`` under ``name``.

    Raises:
        ValueError: ``name`` is already registered or is a built-in task.
    """

    def decorator(builder: TaskBuilder) -> TaskBuilder:
        if name in _BUILDERS or name in _REGISTERED:
            raise ValueError(f"task {name!r} is already registered; pick another name")
        _REGISTERED[name] = builder
        return builder

    return decorator


def available() -> list[str]:
    """Names of the built-in and the registered tasks."""
    return sorted({*_BUILDERS, *_REGISTERED})


def is_import_path(name: str) -> bool:
    """Whether ``get_task(name)`` would import code (``pkg.module:builder``, not a registered name)."""
    return name not in _REGISTERED and name not in _BUILDERS and ":" in name


def _builder(name: str) -> TaskBuilder:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _BUILDERS:
        module_name, _, function_name = _BUILDERS[name].partition(":")
        return getattr(importlib.import_module(module_name), function_name)
    if ":" in name:
        module_name, _, function_name = name.partition(":")
        fix = "give pkg.module:builder, with the package installed or its folder on PYTHONPATH"
        builder = getattr(import_module(module_name, name, "task", fix), function_name, None)
        if not callable(builder):
            raise UserError(f"{name!r} is not a function of module {module_name!r}; pass --task pkg.module:builder")
        return builder
    raise UserError(f"unknown task {name!r}; choose one of {', '.join(available())}, or give the dotted path "
                    "pkg.module:builder of your own task builder")


# built-in task -> "module:function" listing the files it reads from a local data file or folder
_DATA_FILES = {
    "gsm8k": "grpolab.tasks._loading:local_split_files",
    "math500": "grpolab.tasks._loading:local_split_files",
    "file": "grpolab.tasks._tables:table_files",
}


def data_files(name: str, path: Path) -> list[Path] | None:
    """The files task ``name`` reads from its local data ``path``; None when not known (a generated or a user's
    task), and then every file below ``path`` counts."""
    if name not in _DATA_FILES or name in _REGISTERED:
        return None
    module_name, _, function_name = _DATA_FILES[name].partition(":")
    return getattr(importlib.import_module(module_name), function_name)(path) or None


def get_task(name: str, **options: Any) -> Task:
    """Build the task ``name`` (registered, built-in or ``pkg.module:builder``) with its options."""
    builder = _builder(name)
    parameters = inspect.signature(builder).parameters.values()
    known = [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(f"task {name!r} has no option(s) {', '.join(unknown)}; its options are: {', '.join(known)}")
    task = builder(**options)
    if not isinstance(task, Task):
        raise UserError(f"task builder {name!r} returned a {type(task).__name__}, not a grpolab.tasks.Task")
    return task
