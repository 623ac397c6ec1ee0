"""A sweep process as far as its worker's death goes: it spawns one worker set up by ``init_worker`` with a
watchdog that would look only once an hour, prints the worker's pid once the worker is set up, and waits to be
killed."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

from grpolab.sweep.worker import init_worker


def _worker(parent_pid: int, ready: str) -> None:
    init_worker(None, parent_pid, poll_seconds=3600.0)
    Path(ready).touch()
    time.sleep(600)


if __name__ == "__main__":
    ready = Path(sys.argv[1])
    child = multiprocessing.get_context("spawn").Process(target=_worker, args=(os.getpid(), str(ready)))
    child.start()
    while not ready.exists():
        time.sleep(0.05)
    print(child.pid, flush=True)
    time.sleep(600)
