"""GPUs per run: each local worker slot gets its own disjoint set of devices through ``CUDA_VISIBLE_DEVICES``.

The sets are cut from the devices this process sees: the ids listed in its own ``CUDA_VISIBLE_DEVICES`` when
set, else ``0 .. count-1``, so a sweep started on GPUs 4-7 gives its workers 4,5 and 6,7, never 0,1.
"""

from __future__ import annotations

import os

from grpolab.errors import UserError

__all__ = ["check_gpus", "cuda_device_count", "device_sets", "visible_gpu_ids"]


def visible_gpu_ids(count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The ids of the ``count`` GPUs this process sees, as ``CUDA_VISIBLE_DEVICES`` names them for a child."""
    listed = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip():
        return [part.strip() for part in listed.split(",") if part.strip()][:count]
    return [str(i) for i in range(count)]


def device_sets(visible: list[str], gpus_per_run: int, workers: int) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per worker slot: ``min(workers, len(visible) // gpus_per_run)``
    disjoint sets of ``gpus_per_run`` devices ([] for ``gpus_per_run`` 0: CPU runs)."""
    if gpus_per_run <= 0:
        return []
    if len(visible) < gpus_per_run:
        raise UserError(f"--gpus-per-run {gpus_per_run} needs {gpus_per_run} GPU(s), but torch sees {len(visible)}; "
                        "lower --gpus-per-run (0 runs on the CPU) or run where the GPUs are visible")
    slots = min(workers, len(visible) // gpus_per_run)
    return [",".join(visible[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(slots)]


def cuda_device_count() -> int:
    """How many CUDA devices torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(gpus_per_run: int) -> None:
    """Refuse ``--gpus-per-run`` > 0 at once when torch sees fewer GPUs than one run needs."""
    if gpus_per_run > 0:
        device_sets(visible_gpu_ids(cuda_device_count()), gpus_per_run, workers=1)
