"""GPUs per run and runs per GPU: each local worker gets its own ``CUDA_VISIBLE_DEVICES``, so no two runs share a
GPU unless the user asks for it (``--runs-per-gpu``).

``--gpus-per-run`` (``CompareConfig.gpus_per_run``) is resolved here once for a group of runs:

* auto (None, the default): one GPU per run where torch sees GPUs, else CPU runs;
* 0: CPU only, whatever this machine has;
* N >= 1: N GPUs per run, refused in one line when torch sees fewer than N.

Runs whose ``device`` is ``cpu`` (every run of the group) get CPU-only workers under auto, so that they hold
no GPU they do not use; an explicit N >= 1 with such runs is refused, and so is a ``cuda`` device on workers
that get no GPU, or ``cuda:K`` beyond the K GPUs a run sees (a worker's GPUs are renumbered from 0).

A local worker is given ``CUDA_VISIBLE_DEVICES`` in every case: its own disjoint set of GPU ids, or "" (no GPU)
for CPU runs, so a run's device ``auto`` resolves to its set's first GPU or to the CPU, for both engines. The
number of workers is ``min(workers, GPUs // N)`` when runs get GPUs (``workers`` unset: ``GPUs // N``). The sets
are cut from the devices this process sees: the ids listed in its own ``CUDA_VISIBLE_DEVICES`` when set, else
``0 .. count-1``, so a sweep started on GPUs 4-7 gives its workers 4,5 and 6,7, never 0,1.

``--runs-per-gpu K`` (``CompareConfig.runs_per_gpu``, default 1) puts K runs on each GPU: every GPU is named by
K workers' ``CUDA_VISIBLE_DEVICES`` (2 GPUs and K = 3: six workers, ``0,1,0,1,0,1``, so that fewer workers than
slots still spread over the GPUs), and the workers default to that slot count instead of the CPU count. It is
refused for runs that get no GPU, and with more than one GPU per run: a grpolab run computes on the first GPU it
sees, and Ray gives a task a fraction of one GPU only (``num_gpus`` below 1), never a share of several.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from grpolab.errors import UserError

__all__ = ["check_enough_gpus", "check_gpus", "check_runs_per_gpu", "cuda_device_count", "device_sets", "gpus_each",
           "visible_gpu_ids", "worker_devices"]


def visible_gpu_ids(count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The ids of the ``count`` GPUs this process sees, as ``CUDA_VISIBLE_DEVICES`` names them for a child."""
    listed = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        return [part.strip() for part in listed.split(",") if part.strip()][:count]
    return [str(i) for i in range(count)]


def gpus_each(gpus_per_run: int | None, visible: int, run_devices: Iterable[str] = ("auto",),
              runs_per_gpu: int = 1) -> int:
    """The GPUs each run gets where ``visible`` GPUs are seen, for runs whose ``device`` settings are
    ``run_devices``: ``gpus_per_run`` when set; for auto (None) 0 when every run's device is ``cpu``, else 1
    where ``visible`` >= 1, else 0. Does not check that ``visible`` GPUs suffice (``device_sets`` does).

    Raises:
        UserError: N >= 1 GPUs for runs that all train on the CPU, a ``cuda`` device for runs given no GPU,
            ``cuda:K`` with K at least the GPUs a run gets, or a ``runs_per_gpu`` ``check_runs_per_gpu`` refuses.
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
    check_runs_per_gpu(runs_per_gpu, gpus, _why_no_gpu(gpus_per_run, devices))
    return gpus


def _why_no_gpu(gpus_per_run: int | None, devices: set[str]) -> str:
    """Why runs whose ``device`` settings are ``devices`` get no GPU, for a refusal."""
    if gpus_per_run == 0:
        return "--gpus-per-run 0"
    return "--device cpu" if devices == {"cpu"} else "no GPU is seen"


def check_runs_per_gpu(runs_per_gpu: int, gpus: int, why_no_gpu: str = "no GPU is seen") -> None:
    """Refuse in one line ``runs_per_gpu`` runs on each GPU where runs get ``gpus`` GPUs each: below 1, above 1 for
    runs that get no GPU (``why_no_gpu`` says why they get none), or above 1 with several GPUs per run."""
    if not isinstance(runs_per_gpu, int) or runs_per_gpu < 1:
        raise UserError(f"--runs-per-gpu must be a whole number >= 1, got {runs_per_gpu}; 1 gives each run its GPU "
                        "alone, K puts K runs on each GPU")
    if runs_per_gpu > 1 and gpus == 0:
        raise UserError(f"--runs-per-gpu {runs_per_gpu} puts several runs on each GPU, but the runs get no GPU "
                        f"({why_no_gpu}); drop --runs-per-gpu (runs on the CPU run --workers at once) or run "
                        "them where torch sees a GPU")
    if runs_per_gpu > 1 and gpus > 1:
        raise UserError(f"--runs-per-gpu {runs_per_gpu} shares one GPU among runs, but --gpus-per-run {gpus} gives "
                        "each run several; use --gpus-per-run 1 (or leave it unset) with --runs-per-gpu, or "
                        "--runs-per-gpu 1")


def device_sets(visible: list[str], gpus_per_run: int, workers: int | None, runs_per_gpu: int = 1) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per worker: ``workers`` (None: the CPU count) times "" (no GPU) for
    ``gpus_per_run`` 0, else the ``len(visible) // gpus_per_run`` disjoint sets of ``gpus_per_run`` of ``visible``,
    each named ``runs_per_gpu`` times (round-robin: ``0,1,0,1``), the first ``workers`` of them (None: all).

    Raises:
        UserError: ``visible`` holds fewer than ``gpus_per_run`` GPUs.
    """
    if gpus_per_run <= 0:
        return [""] * (workers or os.cpu_count() or 1)
    check_enough_gpus(gpus_per_run, len(visible), "torch sees")
    sets = [",".join(visible[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(len(visible) // gpus_per_run)]
    slots = sets * runs_per_gpu
    return slots[:workers] if workers else slots


def check_enough_gpus(gpus_per_run: int, available: int, where: str) -> None:
    """Refuse in one line ``gpus_per_run`` GPUs per run where at most ``available`` can be given to one run
    (``where`` says who counted them: "torch sees", "the largest Ray node has"); a run waiting for GPUs that
    never come would wait forever."""
    if available < gpus_per_run:
        raise UserError(f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPU(s), but {where} {available}; "
                        "lower --gpus-per-run (0 runs on the CPU; unset gives one GPU per run where there are GPUs) "
                        "or run where the GPUs are visible")


def worker_devices(gpus_per_run: int | None, workers: int | None, run_devices: Iterable[str] = ("auto",),
                   runs_per_gpu: int = 1) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per local worker (so as many workers as values, at most ``workers``;
    None: one per GPU slot, or the CPU count for CPU runs) for runs whose ``device`` settings are ``run_devices``,
    ``runs_per_gpu`` to a GPU, cut from the GPUs this process sees."""
    visible = visible_gpu_ids(cuda_device_count())
    gpus = gpus_each(gpus_per_run, len(visible), run_devices, runs_per_gpu)
    return device_sets(visible, gpus, workers, runs_per_gpu)


def cuda_device_count() -> int:
    """How many CUDA devices torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(gpus_per_run: int | None, run_devices: Iterable[str] = ("auto",), runs_per_gpu: int = 1) -> None:
    """Refuse at once, in one line, GPUs per run (and runs per GPU) that this machine cannot give or that
    contradict the runs' ``device`` settings (the local backend's check before a sweep writes anything)."""
    worker_devices(gpus_per_run, 1, run_devices, runs_per_gpu)
