"""GPUs per run: each local worker gets its own ``CUDA_VISIBLE_DEVICES``, so no two runs share a GPU unless
the user asks for it.

``--gpus-per-run`` (``CompareConfig.gpus_per_run``) is resolved here once for a group of runs:

* auto (None, the default): one GPU per run where torch sees GPUs, else CPU runs;
* 0: CPU only, whatever this machine has;
* N >= 1: N GPUs per run, refused in one line when torch sees fewer than N.

Runs whose ``device`` is ``cpu`` (every run of the group) get CPU-only workers under auto, so that they hold
no GPU they do not use; an explicit N >= 1 with such runs is refused, and so is a ``cuda`` device on workers
that get no GPU, or ``cuda:K`` beyond the K GPUs a run sees (a worker's GPUs are renumbered from 0).

A local worker is given ``CUDA_VISIBLE_DEVICES`` in every case: its own disjoint set of GPU ids, or "" (no GPU)
for CPU runs, so a run's device ``auto`` resolves to its set's first GPU or to the CPU, for both engines. The
number of workers is ``min(workers, GPUs // N)`` when runs get GPUs. The sets are cut from the devices this
process sees: the ids listed in its own ``CUDA_VISIBLE_DEVICES`` when set, else ``0 .. count-1``, so a sweep
started on GPUs 4-7 gives its workers 4,5 and 6,7, never 0,1.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from grpolab.errors import UserError

__all__ = ["check_enough_gpus", "check_gpus", "cuda_device_count", "device_sets", "gpus_each", "visible_gpu_ids",
           "worker_devices"]


def visible_gpu_ids(count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The ids of the ``count`` GPUs this process sees, as ``CUDA_VISIBLE_DEVICES`` names them for a child."""
    listed = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        return [part.strip() for part in listed.split(",") if part.strip()][:count]
    return [str(i) for i in range(count)]


def gpus_each(gpus_per_run: int | None, visible: int, run_devices: Iterable[str] = ("auto",)) -> int:
    """The GPUs each run gets where ``visible`` GPUs are seen, for runs whose ``device`` settings are
    ``run_devices``: ``gpus_per_run`` when set; for auto (None) 0 when every run's device is ``cpu``, else 1
    where ``visible`` >= 1, else 0. Does not check that ``visible`` GPUs suffice (``device_sets`` does).

    Raises:
        UserError: N >= 1 GPUs for runs that all train on the CPU, a ``cuda`` device for runs given no GPU, or
            ``cuda:K`` with K at least the GPUs a run gets.
    """
    devices = set(run_devices) or {"auto"}
    if gpus_per_run is not None and gpus_per_run < 0:
        raise UserError(f"--gpus-per-run must be >= 0, got {gpus_per_run}; 0 runs on the CPU, unset is one GPU "
                        "per run where there are GPUs")
    if gpus_per_run is not None and gpus_per_run > 0 and devices == {"cpu"}:
        raise UserError(f"--gpus-per-run {gpus_per_run} gives each run GPUs, but the runs train on the CPU "
                        "(--device cpu); drop --gpus-per-run (--device cpu runs get CPU-only workers) or use "
                        "--device auto")
    if gpus_per_run is None:
        gpus = 0 if devices == {"cpu"} else min(1, visible)
    else:
        gpus = gpus_per_run
    cuda = sorted(name for name in devices if name.startswith("cuda"))
    if cuda and gpus == 0:
        why = "--gpus-per-run 0 hides the GPUs from every run" if gpus_per_run == 0 else "torch sees no CUDA GPU"
        raise UserError(f"--device {cuda[0]} needs a GPU, but {why}; use --device auto (the first GPU a run "
                        "sees, else the CPU) or --device cpu")
    beyond = [name for name in cuda if ":" in name and int(name.split(":")[1]) >= gpus]
    if beyond:
        raise UserError(f"--device {beyond[0]}: each run sees only its own {gpus} GPU(s), as cuda:0 to "
                        f"cuda:{gpus - 1}; use --device cuda (its first) or raise --gpus-per-run")
    return gpus


def device_sets(visible: list[str], gpus_per_run: int, workers: int) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per worker: ``workers`` times "" (no GPU) for ``gpus_per_run`` 0,
    else ``min(workers, len(visible) // gpus_per_run)`` disjoint sets of ``gpus_per_run`` of ``visible``.

    Raises:
        UserError: ``visible`` holds fewer than ``gpus_per_run`` GPUs.
    """
    if gpus_per_run <= 0:
        return [""] * workers
    check_enough_gpus(gpus_per_run, len(visible), "torch sees")
    slots = min(workers, len(visible) // gpus_per_run)
    return [",".join(visible[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(slots)]


def check_enough_gpus(gpus_per_run: int, available: int, where: str) -> None:
    """Refuse in one line ``gpus_per_run`` GPUs per run where at most ``available`` can be given to one run
    (``where`` says who counted them: "torch sees", "the largest Ray node has"); a run waiting for GPUs that
    never come would wait forever."""
    if available < gpus_per_run:
        raise UserError(f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPU(s), but {where} {available}; "
                        "lower --gpus-per-run (0 runs on the CPU; unset gives one GPU per run where there are GPUs) "
                        "or run where the GPUs are visible")


def worker_devices(gpus_per_run: int | None, workers: int, run_devices: Iterable[str] = ("auto",)) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per local worker (so as many workers as values, at most ``workers``)
    for runs whose ``device`` settings are ``run_devices``, cut from the GPUs this process sees."""
    visible = visible_gpu_ids(cuda_device_count())
    return device_sets(visible, gpus_each(gpus_per_run, len(visible), run_devices), workers)


def cuda_device_count() -> int:
    """How many CUDA devices torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(gpus_per_run: int | None, run_devices: Iterable[str] = ("auto",)) -> None:
    """Refuse at once, in one line, GPUs per run that this machine cannot give or that contradict the runs'
    ``device`` settings (the local backend's check before a sweep writes anything)."""
    worker_devices(gpus_per_run, 1, run_devices)
