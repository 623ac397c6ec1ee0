"""Which harness files a path names, and which reader reads each.

A path is a file (``samples_*.jsonl`` from lm-eval, ``details_*.parquet`` from lighteval) or a directory,
searched recursively for both (lm-eval's ``--output_path`` and lighteval's ``--output-dir`` hold them in
subfolders). A directory holding none, a missing path and a file of another name are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from grpolab.errors import UserError
from grpolab.harness_samples import lighteval, lm_eval
from grpolab.harness_samples.records import HarnessSamples

__all__ = ["READERS", "find_sample_files", "read_samples"]

READERS: tuple[tuple[str, str, Callable[[Path], HarnessSamples]], ...] = (
    ("lm-eval", "samples_*.jsonl", lm_eval.read_lm_eval),
    ("lighteval", "details_*.parquet", lighteval.read_lighteval),
)
"""(harness, file pattern, reader) for each harness read."""


def _reader(path: Path) -> Callable[[Path], HarnessSamples]:
    for _, pattern, reader in READERS:
        if path.match(pattern):
            return reader
    names = " or ".join(pattern for _, pattern, _ in READERS)
    raise UserError(f"{path}: not a harness samples file; --from-samples reads {names} (or a directory of them)")


def find_sample_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files the paths name, in the order given; directories are searched recursively, sorted."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = sorted(p for _, pattern, _ in READERS for p in path.rglob(pattern) if p.is_file())
            if not inside:
                raise UserError(f"{path}: no harness samples files inside (looked for "
                                f"{', '.join(pattern for _, pattern, _ in READERS)})")
            found += inside
        elif path.is_file():
            _reader(path)
            found.append(path)
        else:
            raise UserError(f"{path}: no such file or directory")
    return found


def read_samples(path: Path) -> HarnessSamples:
    """The samples of one harness file, read by the reader its name calls for."""
    return _reader(path)(path)
