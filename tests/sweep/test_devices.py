"""GPUs per run: how many local workers a sweep starts and each one's ``CUDA_VISIBLE_DEVICES``, for
``--gpus-per-run`` auto (None), 0 and N, under faked GPU counts (no GPU here); the refusals; and worker
processes that really start with the ``CUDA_VISIBLE_DEVICES`` of their slot in their environment."""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

import pytest

import grpolab.sweep.local as local
from grpolab.cli import main
from grpolab.commands.compare import add_arguments
from grpolab.commands.flags import config_from_args
from grpolab.config import CompareConfig, TrainConfig
from grpolab.errors import UserError
from grpolab.sweep import devices
from grpolab.sweep.devices import device_sets, gpus_each, visible_gpu_ids, worker_devices
from grpolab.sweep.local import run_local, worker_pool
from grpolab.sweep.plan import RunSpec
from sweep_runs import devices_once_all_started


def _machine(monkeypatch: pytest.MonkeyPatch, gpus: int, cuda_visible_devices: str | None = None) -> None:
    """Pretend torch sees ``gpus`` GPUs, in a process started with ``cuda_visible_devices`` (None: unset)."""
    monkeypatch.setattr(devices, "cuda_device_count", lambda: gpus)
    if cuda_visible_devices is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible_devices)


@pytest.mark.parametrize(("gpus", "env", "gpus_per_run", "workers", "expected"), [
    # auto: CPU runs without GPUs (every worker told so), else one GPU per run and workers bounded by the GPUs
    (0, None, None, 6, [""] * 6),
    (1, None, None, 6, ["0"]),  # the H100 case: one worker, not six models on one GPU
    (4, None, None, 16, ["0", "1", "2", "3"]),
    (4, None, None, 2, ["0", "1"]),  # fewer workers asked for than GPUs
    (4, "4,5,6,7", None, 6, ["4", "5", "6", "7"]),  # the ids this process sees, not 0..3
    (1, "3", None, 2, ["3"]),
    (1, "GPU-5f2a", None, 2, ["GPU-5f2a"]),  # UUIDs pass through
    # 0: CPU only, whatever the machine has; workers not bounded by GPUs
    (0, None, 0, 3, [""] * 3),
    (1, None, 0, 6, [""] * 6),
    (4, "4,5,6,7", 0, 5, [""] * 5),
    # N: N GPUs per run, disjoint sets, workers = min(workers, GPUs // N)
    (1, None, 1, 6, ["0"]),
    (4, None, 1, 6, ["0", "1", "2", "3"]),
    (4, None, 2, 6, ["0,1", "2,3"]),
    (4, None, 3, 6, ["0,1,2"]),  # one GPU stays idle
    (4, "4,5,6,7", 2, 1, ["4,5"]),
])
def test_workers_and_their_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, gpus: int, env: str | None,
                                                gpus_per_run: int | None, workers: int, expected: list[str]) -> None:
    _machine(monkeypatch, gpus, env)
    assert worker_devices(gpus_per_run, workers) == expected  # one value per worker: len() is the worker count


@pytest.mark.parametrize(("gpus", "env", "gpus_per_run"), [(0, None, 1), (1, None, 2), (4, None, 5), (4, "6,7", 3)])
def test_more_gpus_per_run_than_visible_are_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, gpus: int,
                                                                env: str | None, gpus_per_run: int) -> None:
    _machine(monkeypatch, gpus, env)
    seen = len(visible_gpu_ids(gpus))
    with pytest.raises(UserError, match=f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPU.*torch sees {seen}; "
                                        "lower --gpus-per-run") as refusal:
        worker_devices(gpus_per_run, 4)
    assert "\n" not in str(refusal.value)


def test_runs_on_the_cpu_hold_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 4)
    assert worker_devices(None, 6, {"cpu"}) == [""] * 6  # auto with --device cpu: CPU-only workers, not 4
    assert worker_devices(None, 6, {"cpu", "auto"}) == ["0", "1", "2", "3"]  # some runs want a GPU: one each
    assert worker_devices(0, 6, {"cpu"}) == [""] * 6
    with pytest.raises(UserError, match=r"--gpus-per-run 2 gives each run GPUs, but the runs train on the CPU"):
        worker_devices(2, 6, {"cpu"})


def test_a_cuda_device_the_workers_cannot_see_is_refused() -> None:
    assert gpus_each(None, 2, {"cuda"}) == 1 and gpus_each(2, 2, {"cuda:1"}) == 2
    with pytest.raises(UserError, match="--device cuda needs a GPU, but --gpus-per-run 0 hides the GPUs"):
        gpus_each(0, 4, {"cuda", "auto"})
    with pytest.raises(UserError, match="--device cuda:0 needs a GPU, but torch sees no CUDA GPU"):
        gpus_each(None, 0, {"cuda:0"})
    with pytest.raises(UserError, match=r"--device cuda:1: each run sees only its own 1 GPU\(s\), as cuda:0 to cuda:0"):
        gpus_each(None, 4, {"cuda:1"})


def test_device_sets_are_disjoint_and_bounded_by_the_gpus() -> None:
    eight = visible_gpu_ids(8, {})
    assert eight == [str(i) for i in range(8)]
    assert device_sets(eight, 2, workers=8) == ["0,1", "2,3", "4,5", "6,7"]  # workers = min(8, 8 // 2)
    assert device_sets(eight, 3, workers=8) == ["0,1,2", "3,4,5"]  # two GPUs stay idle
    assert device_sets(eight, 0, workers=3) == ["", "", ""]  # CPU runs: no GPU for any worker
    assert visible_gpu_ids(4, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == ["4", "5", "6", "7"]
    assert visible_gpu_ids(2, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == ["4", "5"]  # torch sees only two


class _Pool:
    """A worker pool that records how it was made and runs nothing."""

    made: ClassVar[list[tuple[int, list[str]]]] = []

    def __init__(self, workers: int, progress: Any, values: list[str]):
        self.made.append((workers, values))

    def submit(self, fn: Any, spec: RunSpec) -> Future:
        future: Future = Future()
        future.set_result({"run_id": spec.run_id, "ok": True, "seconds": 0.0})
        return future

    def shutdown(self, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize(("gpus", "gpus_per_run", "device", "made"), [
    (1, None, "auto", (1, ["0"])),
    (4, None, "auto", (4, ["0", "1", "2", "3"])),
    (4, None, "cpu", (6, [""] * 6)),
    (4, 0, "auto", (6, [""] * 6)),
    (4, 2, "auto", (2, ["0,1", "2,3"])),
    (0, None, "auto", (6, [""] * 6)),
])
def test_the_local_backend_starts_the_bounded_workers_with_their_devices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: int, gpus_per_run: int | None, device: str,
        made: tuple[int, list[str]]) -> None:
    _machine(monkeypatch, gpus)
    monkeypatch.setattr(local, "worker_pool", _Pool)
    _Pool.made = []
    specs = [RunSpec(f"r{i}", "sign", i, 2, tmp_path / f"r{i}", TrainConfig(device=device)) for i in range(6)]
    outcomes = run_local(specs, 6, lambda event: None, gpus_per_run=gpus_per_run)
    assert _Pool.made == [made] and len(outcomes) == 6


def test_too_few_gpus_or_a_cpu_contradiction_are_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for flags in (["--gpus-per-run", "1"], ["--gpus-per-run", "1", "--device", "cpu"],
                  ["--gpus-per-run", "0", "--device", "cuda"]):
        code = main(["compare", *flags, "--out", str(tmp_path / "c")])  # this machine has no GPU
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "--gpus-per-run" in err, err
        assert not (tmp_path / "c" / "compare.yaml").exists()  # refused before anything was written


class _GpulessRay:
    """A Ray already initialised on a cluster of one live node with CPUs only (and one dead GPU node); submitting a
    task to it fails the test, since Ray would keep a task asking for a GPU queued forever."""

    submitted: ClassVar[list[Any]] = []

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def cluster_resources() -> dict[str, float]:
        return {"CPU": 2.0}

    @staticmethod
    def nodes() -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"GPU": 8.0}}]

    @classmethod
    def remote(cls, **resources: Any) -> Any:
        cls.submitted.append(resources)
        raise AssertionError(f"a task was submitted with {resources}: it would wait forever for a GPU")


@pytest.mark.parametrize("gpus_per_run", [1, 2])
def test_the_ray_backend_refuses_gpus_its_cluster_lacks_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                gpus_per_run: int) -> None:
    from grpolab.sweep.cluster import run_ray

    monkeypatch.setitem(sys.modules, "ray", _GpulessRay)
    _GpulessRay.submitted.clear()
    specs = [RunSpec("r0", "sign", 0, 2, tmp_path / "r0", TrainConfig())]
    with pytest.raises(UserError, match=f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPU.*Ray cluster has 0; "
                                        "lower --gpus-per-run") as refusal:
        run_ray(specs, 1, lambda event: None, gpus_per_run=gpus_per_run)
    assert "\n" not in str(refusal.value) and _GpulessRay.submitted == []


def test_gpus_per_run_is_auto_unless_set_by_flag_or_config_file(tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert CompareConfig().gpus_per_run is None
    assert config_from_args(parser.parse_args([]), CompareConfig, file_values={}).gpus_per_run is None
    assert config_from_args(parser.parse_args(["--gpus-per-run", "0"]), CompareConfig, file_values={}).gpus_per_run == 0
    assert config_from_args(parser.parse_args([]), CompareConfig, file_values={"gpus_per_run": 2}).gpus_per_run == 2
    assert config_from_args(parser.parse_args([]), CompareConfig, file_values={"gpus_per_run": None}).gpus_per_run \
        is None
    with pytest.raises(UserError, match="gpus_per_run must be >= 0"):
        CompareConfig(gpus_per_run=-1)


def test_a_worker_process_starts_with_its_own_cuda_visible_devices(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """In the environment the worker was started with, so before its interpreter imported anything (torch reads
    the variable once, when CUDA is first asked about). One pool of two workers covers both kinds of value: a GPU
    set, and "" (a CPU run's: set and empty, not inherited or unset), in a parent whose own value differs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    values = ["0,1", ""]
    progress = multiprocessing.get_context("spawn").Queue()
    pool = worker_pool(2, progress, values)
    try:
        jobs = [pool.submit(devices_once_all_started, str(tmp_path), 2) for _ in values]
        seen = [future.result(timeout=180) for future in jobs]
    finally:
        pool.shutdown(wait=True)
    assert len({pid for pid, _, _ in seen}) == 2  # one job in each worker
    assert sorted(at_start for _, at_start, _ in seen) == sorted(values)  # one value per worker, never shared
    assert all(now == at_start for _, at_start, now in seen)  # and the worker's os.environ says the same
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"  # the parent's own value is left as it was
