"""What a run's settings name but cannot vouch for: the content of a local data file or folder and the files of a
local model directory (``run_identity``). Checkpoints record it (``grpolab.train.checkpoint``), and a resume or a
sweep refuses a run whose data or model changed since (``grpolab.train.settings.check_identity``,
``grpolab.sweep.identity``). This module imports nothing else of ``grpolab.train``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grpolab.config import TrainConfig
from grpolab.tasks import data_files

__all__ = ["run_identity"]


def run_identity(settings: TrainConfig | dict[str, Any]) -> dict[str, str]:
    """What a run's settings name but cannot vouch for: ``data``, a SHA-256 of the content of a local data file
    or folder (``data``, or a ``path`` in ``task_options``; of a folder, the files its task reads), and
    ``model``, a fingerprint of a local model directory; a key only for what is a local path (a built-in task's
    data is its settings; a hub name is not fingerprinted).

    Why content for the data and names + sizes + modification times for the model: a data file is small (MB)
    and is edited in place by hand, often keeping its size and within a second ("4" -> "5" in one answer), which
    only its content shows; a model's weights are large (270 MB for SmolLM2-135M, 15 GB for a 7B model, so
    seconds to minutes of hashing at every start and checkpoint) and are changed by rewriting them
    (``save_pretrained``, a copy, a download), which always gives a new modification time. An in-place edit
    that keeps a weight file's size and restores its modification time is not seen."""
    values = settings.to_dict() if isinstance(settings, TrainConfig) else dict(settings)
    identity: dict[str, str] = {}
    data = values.get("data") or (values.get("task_options") or {}).get("path")
    if isinstance(data, str) and Path(data).exists():
        identity["data"] = _content_hash(Path(data), data_files(str(values.get("task")), Path(data)))
    model = values.get("model")
    if isinstance(model, str) and Path(model).is_dir():
        identity["model"] = _fingerprint(Path(model))
    return identity


def _files(root: Path) -> list[Path]:
    """``root`` itself (a file), or the files below it, by name; hidden names (caches, .git) are left out."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


# (file, inode, size, mtime, ctime) of every file -> content hash: hashed once per process while no file is
# written (any write moves ctime, which utime cannot set back)
_HASHED: dict[tuple, str] = {}


def _content_hash(root: Path, read: list[Path] | None) -> str:
    """SHA-256 of the names and contents of the files the task reads below ``root`` (``read``; every file when
    None): a README or notes beside the data are no part of it."""
    files = _files(root) if read is None else read
    stamp = tuple((str(p), s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for p in files for s in [p.stat()])
    if stamp not in _HASHED:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(root) if path != root else path.name).encode() + b"\0")
            with path.open("rb") as handle:
                for block in iter(lambda h=handle: h.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
        _HASHED[stamp] = digest.hexdigest()
    return _HASHED[stamp]


def _fingerprint(root: Path) -> str:
    listing = [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in _files(root)]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()
