"""The directory lock's refusal names the process that really holds the lock when the owner file names one that
has ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.errors import UserError
from grpolab.train.lock import LOCK_NAME, OWNER_NAME, DirectoryLock


def test_a_refusal_names_the_live_holder_not_the_dead_owner(tmp_path: Path) -> None:
    # was: "in use by another grpolab process (pid <the dead owner>, ...)", a pid no longer there to stop. The
    # owner file names a process that has ended while another holds the lock: a holder that has not yet written
    # its owner file, or a process that shares the lock's open file (a child started holding it)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    (tmp_path / OWNER_NAME).write_text(json.dumps({"pid": ended.pid, "command": "grpolab train",
                                                   "started": "2026-01-01 00:00:00", "argv": []}) + "\n")
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / LOCK_NAME)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError) as caught:
            DirectoryLock(tmp_path, "grpolab train").acquire()
        message = str(caught.value)
        assert f"held by pid {holder.pid} (" in message and "import fcntl" in message, message
        assert f"pid {ended.pid}, which wrote {OWNER_NAME}, has ended" in message and "\n" not in message, message
    finally:
        holder.kill()
        holder.wait()
    with DirectoryLock(tmp_path, "grpolab train"):  # the kernel dropped the lock with its holder
        assert json.loads((tmp_path / OWNER_NAME).read_text())["pid"] == os.getpid()


def test_a_live_owner_is_named_as_before(tmp_path: Path) -> None:
    with DirectoryLock(tmp_path, "grpolab compare"):
        other = DirectoryLock(tmp_path, "grpolab compare")
        other._lock = type(other._lock)(str(tmp_path / ".grpolab.lock"), thread_local=False, is_singleton=False)
        with pytest.raises(UserError, match=rf"in use by another grpolab process \(pid {os.getpid()}, grpolab "
                                            r"compare, since .*\); wait for it"):
            other.acquire()
