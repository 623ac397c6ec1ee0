"""GPUs per run: the device sets cut for the worker slots (a fake device count: no GPU here), and a worker
process that really sees the ``CUDA_VISIBLE_DEVICES`` of its slot."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from grpolab.cli import main
from grpolab.errors import UserError
from grpolab.sweep.devices import device_sets, visible_gpu_ids
from grpolab.sweep.local import worker_pool
from sweep_runs import visible_devices


def test_each_worker_slot_gets_a_disjoint_set_and_workers_are_bounded_by_the_gpus() -> None:
    eight = visible_gpu_ids(8, {})
    assert eight == [str(i) for i in range(8)]
    assert device_sets(eight, 2, workers=8) == ["0,1", "2,3", "4,5", "6,7"]  # workers = min(8, 8 // 2)
    assert device_sets(eight, 3, workers=8) == ["0,1,2", "3,4,5"]  # two GPUs stay idle
    assert device_sets(eight, 1, workers=2) == ["0", "1"]  # fewer workers than GPUs
    assert device_sets(eight, 0, workers=4) == []  # CPU runs


def test_the_sets_come_from_the_gpus_this_process_sees() -> None:
    assert visible_gpu_ids(4, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == ["4", "5", "6", "7"]
    assert device_sets(visible_gpu_ids(4, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}), 2, workers=4) == ["4,5", "6,7"]


def test_too_few_gpus_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(UserError, match="--gpus-per-run 2 needs 2 GPU"):
        device_sets(["0"], 2, workers=1)
    code = main(["compare", "--gpus-per-run", "1", "--out", str(tmp_path / "c")])  # this machine has no GPU
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "torch sees 0" in err, err
    assert not (tmp_path / "c" / "compare.yaml").exists()  # refused before anything was written


def test_a_worker_process_sees_its_own_cuda_visible_devices() -> None:
    progress = multiprocessing.get_context("spawn").Queue()
    pool = worker_pool(2, progress, ["0,1", "2,3"])
    try:
        seen = dict(future.result(timeout=120) for future in [pool.submit(visible_devices, 1.0) for _ in range(4)])
    finally:
        pool.shutdown(wait=True)
    assert len(seen) == 2 and sorted(seen.values()) == ["0,1", "2,3"]  # one set per worker, never shared
