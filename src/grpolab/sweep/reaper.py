"""Ending a local Ray cluster with the sweep process that started it, ``kill -9`` included.

``ray.init`` without an address starts a local cluster among this process's descendants (``gcs_server``,
``raylet``, ``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, the workers). When the sweep process is killed
with SIGKILL, the GCS and the raylet end, but the two agents keep running and ignore SIGTERM: both were still
there 30 s after ``kill -9`` of a driver of Ray 2.60 on the CPU machine. Ray offers no setting that promises
otherwise, so ``start_reaper`` starts a small watcher, in a session of its own (a signal to the sweep's process
group does not reach it), that notes every Ray process among the sweep process's descendants twice a second
and, once the sweep process is gone, ends those still running with SIGKILL, then exits. A noted process is told
apart from a later one with the same id by its start time. Only Ray's processes are noted (by their command
line), so a Python program that runs a comparison keeps its other children. Linux only (``/proc``); elsewhere
nothing is started.

This file is run as a script (``python -I reaper.py PID``) and imports only the standard library, so the watcher
starts in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ray_descendants", "start_reaper", "watch"]

_PROC = Path("/proc")
_RAY_PROGRAMS = ("raylet", "gcs_server")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent id, start time in clock ticks) of ``pid``, or None once it has ended (a zombie has ended)."""
    try:
        fields = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def _is_ray(pid: int) -> bool:
    try:
        words = [w.decode(errors="replace") for w in (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0") if w]
    except OSError:
        return False
    return bool(words) and (words[0].startswith("ray::") or Path(words[0]).name in _RAY_PROGRAMS
                            or any(f"-packages{os.sep}ray{os.sep}" in word for word in words))


def ray_descendants(parent: int) -> dict[int, int]:
    """The Ray processes among ``parent``'s descendants: process id -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in _PROC.glob("[0-9]*"):
        stat = _stat(int(entry.name))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
            starts[int(entry.name)] = stat[1]
    found, queue = {}, list(children.get(parent, []))
    while queue:
        pid = queue.pop()
        queue += children.get(pid, [])
        if pid != os.getpid() and _is_ray(pid):
            found[pid] = starts[pid]
    return found


def watch(parent: int, poll_seconds: float = 0.5) -> None:
    """Note ``parent``'s Ray descendants until ``parent`` has ended, then SIGKILL those still running."""
    noted: dict[int, int] = {}
    while _stat(parent) is not None:
        noted |= ray_descendants(parent)
        time.sleep(poll_seconds)
    for pid, started in noted.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == started:  # the same process, not a later one with its id
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def start_reaper(parent: int | None = None) -> subprocess.Popen | None:
    """Start the watcher of ``parent`` (default: this process) in a session of its own; None without /proc."""
    if not (_PROC / "self" / "stat").is_file():
        return None
    # -I: isolated, without this file's folder on sys.path, where select.py would hide the standard library's
    return subprocess.Popen([sys.executable, "-I", str(Path(__file__)), str(parent or os.getpid())],
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True)


if __name__ == "__main__":
    watch(int(sys.argv[1]))
