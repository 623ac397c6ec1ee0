"""One writer per run or sweep directory: an exclusive lock, held while a process writes there.

The lock is ``filelock.FileLock`` on ``DIR/.grpolab.lock``, an operating-system lock (``flock`` on POSIX).
The kernel drops it when the holding process ends in any way, ``kill -9`` included, so the lock file a
killed process leaves behind never blocks a resume: only a live holder does. The holder writes its
process id and command to ``DIR/.grpolab.lock.owner``, so that a refused second writer can name it; a symbolic
link planted there is refused, not written through.
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

__all__ = ["LOCK_NAME", "OWNER_NAME", "DirectoryLock"]

LOCK_NAME = ".grpolab.lock"
OWNER_NAME = ".grpolab.lock.owner"


class DirectoryLock:
    """The exclusive write lock of ``directory``; ``acquire`` refuses at once while another process holds it."""

    def __init__(self, directory: str | Path, command: str):
        self.directory = Path(directory)
        self.command = command
        self._lock = FileLock(self.directory / LOCK_NAME, thread_local=False)

    def acquire(self) -> DirectoryLock:
        """Take the lock, or raise a ``UserError`` naming the holder's process id."""
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
        """Give the lock up (a no-op when it is not held)."""
        if self._lock.is_locked:
            self._lock.release(force=True)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def _holder(self) -> str:
        try:
            owner = json.loads((self.directory / OWNER_NAME).read_text())
            return f"pid {owner['pid']}, {owner['command']}, since {owner['started']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "pid unknown"

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
