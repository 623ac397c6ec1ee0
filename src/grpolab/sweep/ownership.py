"""What ``grpolab compare`` may do to its ``--out`` folder: write only its own files, never a user's.

A sweep folder is one whose ``compare.yaml`` starts with grpolab's first line (or, that line damaged, that holds
the sweep's ``identity.json``). ``compare`` refuses a folder that
holds anything it does not write (``report.md``, ``runs.csv``, ``figures/*.png`` and the tables count as the
user's in a folder that is no sweep), as ``grpolab train`` does (``grpolab.train.ownership``): a comparison would
overwrite them or mix with them. With ``overwrite`` an earlier comparison's own files are deleted (its run
directories through ``grpolab.train.ownership.remove_run_files``), and every other file is kept; a user's file at
a name the comparison writes is refused even then. A symbolic link at a name it writes is refused in one line.

``overwrite`` checks everything before it deletes anything: each run directory's lock is taken (a run that a live
``grpolab train`` is writing is refused, naming its process) and each run is checked as ``train --overwrite``
checks it (``check_run_removable``). It deletes only what the comparison wrote below ``figures/``, ``start-evals/``
and ``mechanism/``: the figures its ``report.md`` links, the start evaluations by their key names, and
``grpolab mechanism``'s four files.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
from pathlib import Path

from grpolab.config.files import SAVED_HEADER
from grpolab.errors import UserError
from grpolab.io import refuse_links
from grpolab.sweep.identity import IDENTITY_FILE, START_EVAL_ENTRY, START_EVALS
from grpolab.train.lock import DirectoryLock
from grpolab.train.ownership import check_run_removable, remove_run_files

__all__ = ["check_sweep_dir"]

_LOCKS = (".grpolab.lock", ".grpolab.lock.owner")
_FOLDERS = ("runs", "selection", "start-evals")  # run directories guard themselves (train.ownership)
# what a comparison (and ``grpolab mechanism`` into the same folder) writes at the top of --out; compare.json:
# the settings file of sweeps made before compare.yaml
_FILES = ("compare.yaml", "compare.json", "task.json", "identity.json", "results.parquet", "metrics.parquet",
          "selection.parquet", "runs.csv", "report.html", "report.md", "mechanism.csv", "mechanism_runs.csv",
          "mechanism.md", "mechanism.png")
_MECHANISM = tuple(f"mechanism/*/{name}" for name in ("mechanism.csv", "mechanism_runs.csv", "mechanism.md",
                                                     "mechanism.png"))
_START_EVALS = f"{START_EVALS}/{START_EVAL_ENTRY}"
_OWN_DEEPER = ("figures/*.png", *_MECHANISM, _START_EVALS)
_REPORT_FIGURE = re.compile(r"\]\((figures/[A-Za-z0-9_]+\.png)\)")  # how report.md links a figure it wrote
_STAGING = (".*.tmp",)  # what an atomic write killed mid-way leaves


def _is_sweep(out: Path) -> bool:
    """Whether ``out`` is a sweep's folder: its ``compare.yaml`` starts with grpolab's first line (only that line
    is read: damage further on is for the settings check to name, not a reason to disown the folder), or, where
    that line is damaged, the folder holds the sweep's ``identity.json`` record beside it."""
    try:
        with (out / "compare.yaml").open("rb") as handle:
            first = handle.readline(len(SAVED_HEADER) + 2).decode("utf-8", "replace").strip()
    except OSError:
        return False
    return first == SAVED_HEADER or _has_identity(out)


def _has_identity(out: Path) -> bool:
    """Whether ``out/identity.json`` is a sweep's identity record (a JSON object naming its data or model)."""
    try:
        record = json.loads((out / IDENTITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and bool({"data", "model", "splits"} & set(record))


def _entries(out: Path) -> list[str]:
    """Every file below ``out`` outside the run folders, and every name at its top, relative to ``out``."""
    names = [p.name for p in out.iterdir()]
    for folder in ("figures", "mechanism", "start-evals"):
        if (out / folder).is_dir() and not (out / folder).is_symlink():
            names += [str(p.relative_to(out)) for p in (out / folder).rglob("*") if not p.is_dir()]
    return names


def _foreign(out: Path) -> list[str]:
    sweep = _is_sweep(out)
    own = [*_LOCKS, *_FOLDERS, *_STAGING, *(("figures", "mechanism", *_FILES, *_OWN_DEEPER) if sweep else ())]
    return sorted(name for name in _entries(out) if not any(fnmatch.fnmatchcase(name, p) for p in own)
                  and not (not sweep and name in ("figures", "mechanism")))


def check_sweep_dir(out: Path, *, overwrite: bool = False) -> None:
    """Refuse a comparison in ``out`` while it holds files ``compare`` did not write; with ``overwrite``, delete
    an earlier comparison's own files first (keeping the rest), refusing a user's file at a name it writes."""
    out = Path(out)
    refuse_links(out, (*_LOCKS, *_FOLDERS, *_FILES, "figures", "mechanism"))
    if not out.is_dir():
        return
    for folder in ("runs", "selection"):  # a run directory that is a link would be trained (written) elsewhere
        if (out / folder).is_dir():
            refuse_links(out / folder, sorted(p.name for p in (out / folder).iterdir()))
    foreign = _foreign(out)
    if foreign and not overwrite:
        raise UserError(f"{out} holds files grpolab compare did not write ({', '.join(foreign[:4])}), which a "
                        "comparison would replace or mix with; choose a new --out, or pass --overwrite to replace an "
                        "earlier comparison there (files grpolab did not write are kept)")
    if overwrite:
        clashing = [name for name in foreign if name in _FILES or fnmatch.fnmatchcase(name, "figures/*.png")]
        if clashing:
            raise UserError(f"{out} holds files grpolab compare did not write at names it writes "
                            f"({', '.join(clashing[:4])}); move them out of {out}, then rerun")
        _remove_sweep_files(out)


def _report_figures(out: Path) -> set[str]:
    """The figures the comparison's ``report.md`` links (``figures/<stem>.png``): those it wrote."""
    try:
        return set(_REPORT_FIGURE.findall((out / "report.md").read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        return set()


def _own_deeper(name: str, figures: set[str]) -> bool:
    """Whether ``name`` (below ``figures/``, ``mechanism/`` or ``start-evals/``) is a file the comparison wrote."""
    if name.startswith("figures/"):
        return name in figures
    return any(fnmatch.fnmatchcase(name, p) for p in (*_MECHANISM, _START_EVALS))


def _run_dirs(out: Path) -> list[Path]:
    return [run_dir for folder in ("runs", "selection") if (out / folder).is_dir()
            for run_dir in sorted((out / folder).iterdir()) if run_dir.is_dir() and not run_dir.is_symlink()]


def _remove_sweep_files(out: Path) -> None:
    """Delete what an earlier comparison wrote in ``out`` (its run directories' own files included), once every
    run directory is locked and checked: nothing is deleted when any of them is refused."""
    if not _is_sweep(out):
        return
    run_dirs = _run_dirs(out)
    with contextlib.ExitStack() as locks:
        for run_dir in run_dirs:  # a live writer, a link or a user's file in any run: refused before any deletion
            locks.enter_context(DirectoryLock(run_dir, "grpolab compare --overwrite"))
            check_run_removable(run_dir)
        for run_dir in run_dirs:
            remove_run_files(run_dir)
            if all(p.name in _LOCKS for p in run_dir.iterdir()):
                for lock in run_dir.iterdir():
                    lock.unlink()
                run_dir.rmdir()
    figures = _report_figures(out)
    for name in _entries(out):
        if (name in _FILES and name != "compare.yaml") or ("/" in name and _own_deeper(name, figures)):
            (out / name).unlink()
    for folder in ("figures", "mechanism", "start-evals", "runs", "selection"):
        _remove_empty(out / folder)
    (out / "compare.yaml").unlink()


def _remove_empty(root: Path) -> None:
    if not root.is_dir() or root.is_symlink():
        return
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(root.iterdir()):
        root.rmdir()
