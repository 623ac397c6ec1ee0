"""What software produced a run: grpolab's version, a digest of its source files and, when it runs from a git
checkout, the commit of its source tree and whether that tree had uncommitted changes. ``summary.json`` records it
(``"grpolab"``), and ``grpolab export`` writes it into the model card, so that every number a run reports names the
code behind it.

* ``source_digest``: the SHA-256 over grpolab's Python files (each file's path inside the package and the SHA-256 of
  its bytes, in path order). It names the code that ran where the commit cannot: an installed wheel has no commit,
  and a checkout with changes (a copy of a newer tree over an older ``.git``, as a GPU machine receives it) names a
  commit that is not the code.
* ``commit_source_digest``: the same digest of a commit's files, read from git's objects (no checkout), and
  ``commits_with_source``: the commits, newest first, whose files give a digest; ``python -m grpolab.provenance
  DIGEST`` prints them, so that a recorded digest finds its commit.

Nothing here departs from the papers: they say nothing of provenance.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["commit_source_digest", "commits_with_source", "describe", "software", "source_digest"]

_SOURCE = Path(__file__).resolve().parent


@functools.cache
def software() -> dict[str, Any]:
    """``{"version": ..., "commit": 40 hex digits or None, "dirty": bool or None, "source": 64 hex digits}``;
    ``commit`` and ``dirty`` are None where grpolab is not run from a git checkout (an installed wheel) or git is not
    there; ``source`` is ``source_digest()``. A checkout that does not track grpolab's files is not grpolab's: a
    wheel installed into a virtual environment inside a user's own repository names no commit, not that
    repository's."""
    commit = _git("rev-parse", "HEAD") if _git("ls-files", "--", "__init__.py") else None
    status = _git("status", "--porcelain", "--untracked-files=no", "--", str(_SOURCE)) if commit else None
    return {"version": _version(), "commit": commit or None, "dirty": None if status is None else bool(status),
            "source": source_digest()}


def describe(record: dict[str, Any]) -> str:
    """A ``software()`` record in words: the version, the commit and whether it had changes, and the source digest's
    first 12 hex digits where the commit does not name the code (changes, or no commit)."""
    commit, source = record.get("commit"), record.get("source")
    text = str(record.get("version"))
    if commit:
        text += f", commit {commit[:12]}" + (" with uncommitted changes" if record.get("dirty") else "")
    if source and (record.get("dirty") or not commit):
        text += f", source {source[:12]}"
    return text


def _digest(files: Iterable[tuple[str, bytes]]) -> str:
    """SHA-256 over (path, SHA-256 of the bytes) of each ``.py`` file, in path order."""
    total = hashlib.sha256()
    for path, data in sorted((path, data) for path, data in files if path.endswith(".py")):
        total.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    return total.hexdigest()


def source_digest(root: Path | None = None) -> str:
    """The digest of the Python files under ``root`` (default: grpolab's package folder), caches left out."""
    root = _SOURCE if root is None else root
    files = (path for path in root.rglob("*.py") if "__pycache__" not in path.relative_to(root).parts)
    return _digest((path.relative_to(root).as_posix(), path.read_bytes()) for path in files)


def commit_source_digest(commit: str, prefix: str | None = None) -> str | None:
    """``source_digest`` of grpolab's package folder as ``commit`` holds it, read from git's objects; None where this
    is no checkout or git cannot read the commit. ``prefix``: the folder's path in the repository (default: asked
    of git)."""
    prefix = _git("rev-parse", "--show-prefix") if prefix is None else prefix
    listing = _git("ls-tree", "-r", "-z", "--full-tree", commit, "--", prefix) if prefix else None
    if not listing:
        return None
    blobs = {}
    for entry in listing.split("\0"):
        meta, _, path = entry.partition("\t")
        if path.endswith(".py") and meta.split()[1:2] == ["blob"]:
            blobs[path[len(prefix):]] = meta.split()[2]
    contents = _blobs(list(blobs.values()))
    return None if contents is None else _digest((path, contents[name]) for path, name in blobs.items())


def _blobs(names: list[str]) -> dict[str, bytes] | None:
    """The bytes of git blobs by name (``git cat-file --batch``), or None when git fails."""
    try:
        done = subprocess.run(["git", "-C", str(_SOURCE), "cat-file", "--batch"],
                              input="".join(f"{name}\n" for name in names).encode(), capture_output=True, timeout=60,
                              check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    out, found, at = done.stdout, {}, 0
    for name in names:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        found[name] = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1  # the contents, then a newline
    return found


def commits_with_source(digest: str, revisions: int = 200) -> list[str]:
    """The commits among the last ``revisions`` of HEAD's history, newest first, whose grpolab files give ``digest``
    (a prefix of at least 8 hex digits matches)."""
    if len(digest) < 8:
        raise ValueError(f"a source digest of {len(digest)} hex digits is too short to match; give at least 8")
    log = _git("rev-list", f"--max-count={revisions}", "HEAD") or ""
    prefix = _git("rev-parse", "--show-prefix") or ""
    by_tree: dict[str | None, str | None] = {}  # commits that leave grpolab's folder alone share its tree
    found = []
    for commit in log.split():
        tree = _git("rev-parse", f"{commit}:{prefix}")
        if tree not in by_tree:
            by_tree[tree] = commit_source_digest(commit, prefix)
        if (by_tree[tree] or "").startswith(digest.lower()):
            found.append(commit)
    return found


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


def main(argv: list[str] | None = None) -> int:
    """``python -m grpolab.provenance DIGEST [REVISIONS]``: print the commits whose grpolab files give DIGEST."""
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m grpolab.provenance DIGEST [REVISIONS]: the commits whose grpolab files give DIGEST "
              "(summary.json's grpolab.source), among HEAD's last REVISIONS (200)", file=sys.stderr)
        return 2
    found = commits_with_source(args[0], int(args[1]) if len(args) == 2 else 200)
    print("\n".join(found) if found else f"no commit among HEAD's last {args[1] if len(args) == 2 else 200} "
          "has these files (they were changed and not committed, or the commit is older)")
    return 0 if found else 1


if __name__ == "__main__":
    raise SystemExit(main())
