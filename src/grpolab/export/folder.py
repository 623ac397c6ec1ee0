"""The export's ``--out`` folder, written whole or not at all.

``check_out`` runs before any model loads: ``--out`` that exists and is not empty is refused unless ``overwrite``,
and even then only when it holds nothing but what an export writes (a model folder's files, or folders of them for
a compare directory's runs), so that ``--overwrite`` never deletes a user's files; a symbolic link is refused.
``staged`` gives a temporary folder beside ``--out`` (``.NAME.export-*``), and only once everything is written
there is it renamed into place (the old folder is moved aside first and deleted after), so an interrupted export
leaves no folder at ``--out`` that looks complete; a failed write removes the temporary folder and raises one line.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grpolab.errors import UserError
from grpolab.io import fsync_dir, is_write_error, link_error, read_error, share_modes, write_error

__all__ = ["EXPORT_FILES", "check_out", "staged"]

# What an export writes into a model folder: save_pretrained of a model and of its tokenizer, and the card.
EXPORT_FILES = ("README.md", "config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
                "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "vocab.json", "vocab.txt", "merges.txt", "added_tokens.json", "tokenizer.model",
                "chat_template.jinja", "chat_template.json")


def _foreign(folder: Path, *, depth: int) -> list[str]:
    """What ``folder`` holds that an export does not write; ``depth`` 1 also accepts folders of model files."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and depth > 0:
            found += [f"{entry.name}/{name}" for name in _foreign(entry, depth=0)]
        elif entry.is_symlink() or entry.is_dir() or not any(fnmatch.fnmatchcase(entry.name, p) for p in EXPORT_FILES):
            found.append(entry.name)
    return found


def check_out(out: Path, *, overwrite: bool) -> None:
    """Refuse ``out`` when an export may not write there (see the module docstring)."""
    if out.is_symlink():
        raise link_error(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out} is a file; choose a folder that does not exist yet")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise UserError(f"--out {out} exists and is not empty; choose a new --out, or pass --overwrite to replace "
                        "an earlier export there")
    foreign = _foreign(out, depth=1)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(f"--out {out} holds files an export does not write ({shown}), so --overwrite would delete "
                        "them; move them away or choose a new --out")


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out``, renamed to ``out`` when the block ends without an error."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        yield staging
        share_modes(staging)
        _replace(staging, out)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, Exception) and is_write_error(error):
            source = getattr(error, "filename", None)
            if source and not _within(Path(source), (staging, out)):  # reading the run failed, not writing
                raise read_error(source, error) from None
            raise write_error(out, error, then="rerun (or choose another --out)") from None
        raise


def _within(path: Path, folders: tuple[Path, ...]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(folder.resolve()) for folder in folders)


def _replace(staging: Path, out: Path) -> None:
    """Move ``staging`` to ``out``; an earlier ``out`` is moved aside first and deleted once the new one is there."""
    old = None
    if out.exists() and any(out.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old)
    os.replace(staging, out)  # over a missing or empty folder
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
