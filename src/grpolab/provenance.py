"""What software produced a run: grpolab's version and, when it runs from a git checkout, the commit of its source
tree and whether that tree had uncommitted changes. ``summary.json`` records it (``"grpolab"``), and
``grpolab export`` writes it into the model card, so that every number a run reports names the code behind it.

Nothing here departs from the papers: they say nothing of provenance.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["software"]

_SOURCE = Path(__file__).resolve().parent


@functools.cache
def software() -> dict[str, Any]:
    """``{"version": ..., "commit": 40 hex digits or None, "dirty": bool or None}``; ``commit`` and ``dirty`` are None
    where grpolab is not run from a git checkout (an installed wheel) or git is not there."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", str(_SOURCE)) if commit else None
    return {"version": _version(), "commit": commit or None, "dirty": None if status is None else bool(status)}


def _version() -> str | None:
    """grpolab's installed version (the package's metadata: ``grpolab.__version__`` imports the whole package)."""
    try:
        return metadata.version("grpolab")
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """``git ARGS`` run in grpolab's source folder: its stripped output, or None when it fails or takes over 5 s."""
    try:
        done = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=5,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
