"""A local Ray cluster ends with the sweep process that started it, ``kill -9`` included (grpolab.sweep.reaper);
without the reaper, ray::DashboardAgent and ray::RuntimeEnvAgent outlived a killed driver (they ignore SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpolab.sweep import reaper


def _alive(processes: dict[int, int]) -> dict[int, int]:
    return {pid: start for pid, start in processes.items() if (reaper._stat(pid) or (0, None))[1] == start}


def test_the_local_ray_cluster_ends_after_kill_nine_of_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'grpolab[ray]'")
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    driver = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_ray_driver.py"))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    cluster: dict[int, int] = {}
    try:
        assert driver.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 120  # a hang guard, not a speed claim: the agents start after ray.init
        names = set()
        while not {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names:
            assert time.monotonic() < deadline, names
            cluster |= reaper.ray_descendants(driver.pid)
            names = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                     for pid in _alive(cluster)}
            time.sleep(0.5)
        time.sleep(1.0)  # the reaper notes the cluster twice a second
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 60
        while _alive(cluster) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert not _alive(cluster), [Path(f"/proc/{pid}/cmdline").read_bytes()[:60] for pid in _alive(cluster)]
    finally:
        for pid in _alive(cluster):  # the processes this test started, by id
            os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_only_ray_processes_are_noted(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while reaper._stat(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid not in reaper.ray_descendants(os.getpid())  # a plain child is left alone
    finally:
        child.kill()
        child.wait()
