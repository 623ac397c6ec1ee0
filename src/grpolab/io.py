"""Files written whole or not at all, write errors as one line, and paths that stay inside a folder.

* ``atomic_write_text`` / ``atomic_write_bytes``: the data goes to a temporary file in the target's own
  directory, is fsynced, renamed over the target and the directory is fsynced; a kill or a full disk
  at any moment leaves the old file whole (or none), never half a file, and no temporary file behind.
* ``write_error``: a ``UserError`` naming what could not be written and why (disk full, no permission), for
  any ``OSError`` or safetensors ``SafetensorError`` (which wraps the disk-full ``OSError`` of its Rust writer).
* ``atomic_write_with``: the same for a writer that takes a path (``DataFrame.to_parquet``, ``to_csv``,
  ``pyarrow.parquet.write_table``); every table a sweep writes goes through it.
* ``inside``: ``folder / relative`` for a relative path read from a results file, refused when it is
  absolute, climbs out with ``..`` or leads out of ``folder`` through a symlink.
* No write follows a symlink: ``open_no_follow`` appends to (or creates) a log with ``O_NOFOLLOW``,
  the atomic writers refuse a target that is a link (a rename would replace the user's link; their
  temporary files are made with ``O_EXCL``, so never a link), and ``refuse_links`` checks the names a
  command will write in a folder before it starts. A link is refused in one line (``link_error``).
* Nor through a hard link: a file of more than one name (``st_nlink`` > 1) may be the user's file under another
  name, so ``open_no_follow`` and ``refuse_links`` refuse it in one line (``hard_link_error``) before a byte is
  written (``"w"`` truncates only after the check); the atomic writers replace the name, leaving the other
  names' file as it was.
* ``check_output_folder`` / ``check_output_file``: an output a command writes at its end (a folder made, or a
  file's folder) probed writable before any work, so that a read-only or missing place is refused in one line
  before minutes of sampling, not after (``probe_writable``).
* ``naming``: an ``OSError`` raised inside the block with no file name (a write, flush or fsync on an open handle,
  pyarrow's writer) gets the block's path as its ``filename``, so that a full disk's one line names the file it
  stopped, not the run folder.
* ``numbered``: the entries ``PREFIX<N>`` of a folder (checkpoints, step logs) by the number N, read as ASCII
  digits only (``str.isdigit`` also takes ``²`` and ``٣``, which ``int`` then refuses or reads as 3).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from grpolab.errors import UserError

__all__ = [
    "RESUME",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_with",
    "check_output_file",
    "check_output_folder",
    "fsync_dir",
    "hard_link_error",
    "inside",
    "is_write_error",
    "link_error",
    "naming",
    "number_after",
    "numbered",
    "open_no_follow",
    "os_error_advice",
    "probe_writable",
    "read_error",
    "refuse_links",
    "share_modes",
    "write_error",
]


def fsync_dir(path: str | Path) -> None:
    """Flush a directory's entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def number_after(prefix: str, name: str, suffix: str = "") -> int | None:
    """N of a name ``PREFIX<N>SUFFIX`` whose N is ASCII digits (``step-000012`` -> 12), else None."""
    found = re.fullmatch(re.escape(prefix) + "([0-9]+)" + re.escape(suffix), name)
    return int(found[1]) if found else None


def numbered(folder: str | Path, prefix: str, suffix: str = "") -> list[tuple[int, Path]]:
    """(N, path) of each entry ``PREFIX<N>SUFFIX`` of ``folder`` (none if it is not a folder), by N: as text
    ``step-1000000`` would sort before ``step-999999``."""
    root = Path(folder)
    entries = root.iterdir() if root.is_dir() else ()
    found = [(number, path) for path in entries if (number := number_after(prefix, path.name, suffix)) is not None]
    return sorted(found)


def link_error(path: str | Path) -> UserError:
    """A one-line ``UserError``: ``path`` is a symbolic link, and grpolab does not write through one."""
    return UserError(f"{path} is a symbolic link, and grpolab writes only its own files, never through a link; "
                     "remove the link (or choose another folder), then rerun")


def hard_link_error(path: str | Path, links: int) -> UserError:
    """A one-line ``UserError``: ``path`` is one of ``links`` names of a file, and grpolab does not write through
    one (the other names may be the user's)."""
    return UserError(f"{path} has {links} hard links, so writing it would change the same file under its other "
                     "name(s), and grpolab writes only its own files; remove it (or replace it by a copy), then rerun")


def refuse_links(folder: str | Path, names: Iterable[str]) -> None:
    """Refuse (``link_error``, ``hard_link_error``) when any of ``names`` in ``folder`` is a symbolic link or a
    file with other hard links: the files a command is about to write there, checked before it writes any."""
    for name in names:
        path = Path(folder) / name
        if path.is_symlink():
            raise link_error(path)
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                raise hard_link_error(path, info.st_nlink)


def open_no_follow(path: str | Path, mode: str = "a") -> TextIO:
    """``path`` opened for text appending (``"a"``) or writing (``"w"``, emptied), created when missing, never
    through a symbolic link (``O_NOFOLLOW``: ``link_error``) nor a file with other hard links
    (``hard_link_error``, checked before it is emptied)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if mode == "a" else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise link_error(path) from None
        raise
    links = os.fstat(fd).st_nlink
    if links > 1:
        os.close(fd)
        raise hard_link_error(path, links)
    if mode != "a":
        os.ftruncate(fd, 0)
    return os.fdopen(fd, mode, encoding="utf-8")


def atomic_write_with(path: str | Path, write: Callable[[Path], object], *, sync: bool = True) -> None:
    """Replace ``path`` atomically by what ``write(temporary path)`` writes (a temporary file in the same
    directory, made with ``O_EXCL``; fsync unless ``sync`` is False; rename; fsync of the directory); a
    ``path`` that is a symbolic link is refused (``link_error``); ``UserError`` naming ``path`` when it
    cannot be written."""
    path = Path(path)
    if path.is_symlink():
        raise link_error(path)
    staging = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        staging = Path(name)
        os.chmod(staging, _mode(path))  # mkstemp makes 0600: give the file the mode a plain open would
        write(staging)
        if sync:
            with staging.open("rb") as handle:
                os.fsync(handle.fileno())
        os.replace(staging, path)
        staging = None
        if sync:
            fsync_dir(path.parent)
    except OSError as error:
        raise write_error(path, error) from None
    finally:
        if staging is not None:
            with contextlib.suppress(OSError):
                staging.unlink()


def _mode(path: Path) -> int:
    """The old file's permission bits, or for a new file those ``open`` gives under the umask."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def share_modes(folder: str | Path) -> None:
    """Give ``folder`` and everything in it the modes a plain ``mkdir`` or ``open`` gives under the umask (links left
    alone): ``tempfile.mkdtemp`` makes 0700 and safetensors writes 0600, which would keep a run's checkpoints,
    models and exports from the owner's group, whatever the umask says."""
    umask = os.umask(0)
    os.umask(umask)
    root = Path(folder)
    for path in (root, *root.rglob("*")):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (``atomic_write_with``: temp file in the same directory, fsync,
    rename, fsync dir; a symbolic link refused); ``UserError`` naming ``path`` when it cannot be written."""
    atomic_write_with(path, lambda staging: staging.write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def is_write_error(error: BaseException) -> bool:
    """Whether ``error`` is a failed write: an ``OSError`` or a safetensors ``SafetensorError``."""
    return isinstance(error, OSError) or type(error).__name__ == "SafetensorError"


_CAUSES = (  # (errno, words a library's message holds, the reason said, what to do): the one table of write faults
    (errno.ENOSPC, ("No space left", "StorageFull"), "disk full", "free disk space"),
    (errno.EFBIG, ("File too large",), "file too large",
     "raise the file-size limit (ulimit -f) or write to a file system that takes larger files"),
    (errno.EACCES, ("Permission denied",), "permission denied",
     "give this user access to it (its owner and mode), or work in a folder of this user's"),
    (errno.EPERM, ("Operation not permitted",), "operation not permitted",
     "give this user access to it (its owner and mode), or work in a folder of this user's"),
    (errno.EROFS, ("Read-only file system",), "read-only file system", "write to a folder on a writable disk"),
)
RESUME = "rerun with --resume"
"""The end of a ``grpolab train`` write error's advice; a sweep says how its own rerun resumes instead."""


def os_error_advice(error: BaseException) -> tuple[str, str]:
    """(reason, remedy) of a failed read or write: disk full, file too large, permission denied, read-only file
    system, else the error's own words and "check the folder"."""
    code, text = getattr(error, "errno", None), str(error)
    for number, words, reason, remedy in _CAUSES:
        if code == number or any(word in text for word in words):
            return reason, remedy
    if isinstance(error, OSError):
        return error.strerror or text, "check the folder"
    return " ".join(text.split())[:200], "check the folder"


def read_error(path: str | Path, error: BaseException) -> UserError:
    """A one-line ``UserError``: ``path`` could not be read, why and what to do (``os_error_advice``)."""
    reason, remedy = os_error_advice(error)
    return UserError(f"cannot read {path} ({reason}); {remedy}, then rerun")


def write_error(path: str | Path, error: BaseException, *, then: str = "rerun") -> UserError:
    """A one-line ``UserError``: ``path`` could not be written, why (``os_error_advice``), what to do, and ``then``
    (how to go on once that is done)."""
    reason, remedy = os_error_advice(error)
    return UserError(f"cannot write {path} ({reason}); {remedy}, then {then}")


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Within the block, an ``OSError`` that names no file is given ``path`` as its ``filename``."""
    try:
        yield
    except OSError as error:
        if not error.filename:
            error.filename = str(path)
        raise


def probe_writable(folder: Path) -> None:
    """Create and remove a new file in ``folder``: an ``OSError`` when this user cannot write there. The probe
    is named per process (two starting writers do not collide) and made with ``O_EXCL`` (never a link's target);
    a killed writer's probe, or a link planted under its name, is removed first."""
    probe = folder / f".write-test-{os.getpid()}"
    probe.unlink(missing_ok=True)
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    probe.unlink()


def check_output_folder(folder: str | Path, *, flag: str = "--out") -> Path:
    """``folder``, made (with its parents) and probed writable, or a one-line ``UserError`` naming ``flag``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file; choose a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_writable(folder)
    except OSError as error:
        reason, remedy = os_error_advice(error)
        raise UserError(f"cannot write to {flag} {folder} ({reason}); {remedy}, or choose another {flag}") from None
    return folder


def check_output_file(path: str | Path, *, flag: str = "--out", example: str = "result.json") -> Path:
    """``path``, refused in one line naming ``flag`` when it is a folder, its folder is missing, or that folder
    cannot be written (``probe_writable``); the file itself is written later, whole (``atomic_write_text``).
    ``example`` is the file name the refusal of a folder suggests."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path} is a folder; give a file name, such as {path / example}")
    if path.parent.exists() and not path.parent.is_dir():
        raise UserError(f"{flag} {path}: {path.parent} is a file, not a folder; choose another {flag}")
    if not path.parent.is_dir():
        raise UserError(f"{flag} {path}: the folder {path.parent} does not exist; create it or choose another "
                        f"{flag}")
    try:
        probe_writable(path.parent)
    except OSError as error:
        reason, remedy = os_error_advice(error)
        raise UserError(f"cannot write {flag} {path} ({reason}); {remedy}, or choose another {flag}") from None
    return path


def inside(folder: str | Path, relative: str, *, what: str = "path") -> Path:
    """``folder / relative``, refused (``UserError`` naming ``relative``) when it is empty, absolute, holds
    ``..`` or resolves outside ``folder`` (a symlink)."""
    folder = Path(folder)
    text = str(relative)
    parts = Path(text).parts
    if not text or Path(text).is_absolute() or ".." in parts or "\\" in text:
        raise UserError(f"{what} {text!r} does not name a place inside {folder}; the results file was edited "
                        "or damaged: rerun the command that wrote it")
    joined = folder / text
    if not joined.resolve().is_relative_to(folder.resolve()):
        raise UserError(f"{what} {text!r} leads out of {folder} through a symlink; remove the link or rerun the "
                        "command that wrote it")
    return joined
