"""Importing user code named by a dotted path (``--task pkg.module:builder``, ``--verifier pkg.module:function``):
the module part must be a Python module name, so that a file path (``../tasks.py:make``, ``my-tasks:make``) is one
line naming the fix instead of importlib's ``TypeError`` for a relative import."""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from grpolab.errors import UserError

__all__ = ["import_module"]

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def import_module(module_name: str, spec: str, what: str, fix: str) -> ModuleType:
    """The module ``module_name`` of the dotted path ``spec`` (a ``what``: "task", "verifier"); a ``UserError``
    ending in ``fix`` when the name is not a module name or the module cannot be imported."""
    if not _MODULE_NAME.fullmatch(module_name):
        raise UserError(f"{what} {spec!r} names the module {module_name!r}, which is not a Python module name (a "
                        f"file path is not one); {fix}")
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise UserError(f"cannot import module {module_name!r} for {what} {spec!r} ({error}); {fix}") from None
