"""One writer per run or sweep directory: an exclusive lock, held while a process writes there.

The lock is ``filelock.FileLock`` on ``DIR/.grpolab.lock``, an operating-system lock (``flock`` on POSIX).
The kernel drops it when the holding process ends in any way, ``kill -9`` included, so the lock file a
killed process leaves behind never blocks a resume: only a live holder does. The holder writes its
process id and command to ``DIR/.grpolab.lock.owner``, so that a refused second writer can name it; a symbolic
link planted there is refused, not written through.

The lock belongs to an open file, not to a process: a child forked while the lock is held shares it and keeps it
after the owner has died. A refusal whose owner file names a dead process (or none) therefore names the live
processes that hold the lock file open instead (from ``/proc/*/fd`` on Linux), so that the user stops the
process that really blocks, not one that is gone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from grpolab.errors import UserError
from grpolab.io import open_no_follow, refuse_links

__all__ = ["LOCK_NAME", "OWNER_NAME", "DirectoryLock", "refuse_a_file"]

LOCK_NAME = ".grpolab.lock"
OWNER_NAME = ".grpolab.lock.owner"


class DirectoryLock:
    """The exclusive write lock of ``directory``; ``acquire`` refuses at once while another process holds it."""

    def __init__(self, directory: str | Path, command: str):
        self.directory = Path(directory)
        self.command = command
        self._lock = FileLock(self.directory / LOCK_NAME, thread_local=False)
        # the folders not there when the lock was made, deepest first: this command's to remove if it writes nothing
        self._created = [path for path in (self.directory, *self.directory.parents) if not path.exists()]
        self._new_lock = not (self.directory / LOCK_NAME).exists()  # lock files this command makes, and may remove

    def acquire(self) -> DirectoryLock:
        """Take the lock, or raise a ``UserError`` naming the holder's process id (or saying that the directory's
        name is taken by a file)."""
        refuse_a_file(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        refuse_links(self.directory, (LOCK_NAME, OWNER_NAME))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise UserError(f"{self.directory} is in use by another grpolab process ({self._holder()}); "
                            "wait for it to finish or stop it, then rerun") from None
        owner = {"pid": os.getpid(), "command": self.command, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "argv": sys.argv[1:]}
        try:
            with open_no_follow(self.directory / OWNER_NAME, "w") as handle:  # a planted link is refused
                handle.write(json.dumps(owner) + "\n")
        except UserError:
            self.release()
            raise
        return self

    def release(self) -> None:
        """Give the lock up (a no-op when it is not held). When the folder holds nothing but lock files this command
        made (it failed before writing anything), they are removed, and so are the folders it made for them: a
        failed command leaves nothing behind, and what was there before it is left as it was."""
        if not self._lock.is_locked:
            return
        empty = self._new_lock and self.directory.is_dir() and _names(self.directory) <= {LOCK_NAME, OWNER_NAME}
        if empty:
            for name in (OWNER_NAME, LOCK_NAME):
                (self.directory / name).unlink(missing_ok=True)
        self._lock.release(force=True)
        for folder in self._created if empty else ():
            try:
                folder.rmdir()  # only while empty: a folder something else wrote into meanwhile stays
            except OSError:
                break

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def _holder(self) -> str:
        try:
            owner = json.loads((self.directory / OWNER_NAME).read_text())
            named = f"pid {owner['pid']}, {owner['command']}, since {owner['started']}"
            pid = int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            named, pid = "pid unknown", None
        if pid is not None and _alive(pid):
            return named
        holders = [other for other in _processes_holding(self.directory / LOCK_NAME) if other != os.getpid()]
        if not holders:
            return named
        gone = f"pid {pid}, which wrote {OWNER_NAME}, has ended" if pid is not None else f"no {OWNER_NAME}"
        return f"held by pid {', '.join(map(str, holders))} ({_command_line(holders[0])}); {gone}"

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


def refuse_a_file(directory: Path) -> None:
    """A ``UserError`` when ``directory``, an output folder, is the name of a file."""
    if directory.exists() and not directory.is_dir():
        raise UserError(f"{directory} is a file, not a folder; choose a folder for --out (a new one, or one grpolab "
                        "wrote)")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _processes_holding(path: Path) -> list[int]:
    """The live processes with ``path`` open (``/proc/*/fd``; empty where /proc cannot tell)."""
    target, found = os.path.realpath(path), []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                found.append(int(proc.name))
        except OSError:  # ended meanwhile, or another user's
            continue
    return sorted(pid for pid in found if _alive(pid))


def _command_line(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return " ".join(word.decode(errors="replace") for word in words if word)[:120] or "command unknown"
    except OSError:
        return "command unknown"


def _names(directory: Path) -> set[str]:
    """The names in ``directory``; empty when it is gone (an overwrite deleted the run it locked)."""
    try:
        return {p.name for p in directory.iterdir()}
    except FileNotFoundError:
        return set()
