"""A local worker dies with its sweep process at once on Linux (the kernel's parent-death signal), not only when
its watchdog thread next looks: workers of a sweep OOM-killed in a memory cgroup lived on for 15-30 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpolab.sweep.reaper import _stat


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_sweep_process_without_waiting_for_its_watchdog(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_orphan_parent.py")),
                               str(tmp_path / "ready")],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(parent.stdout.readline())
    try:
        assert _stat(worker) is not None and _stat(worker)[0] == parent.pid
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30  # the watchdog looks once an hour: only the kernel can end it sooner
        while _stat(worker) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stat(worker) is None, "the worker outlived its sweep process"
    finally:
        if _stat(worker) is not None:
            os.kill(worker, signal.SIGKILL)
