"""Training the runs of a sweep: ``run_sweep`` hands the runs that have not ended to a backend, ``local`` (a
process pool, ``grpolab.sweep.local``) or ``ray`` (``grpolab.sweep.cluster``); each run trains in
``grpolab.sweep.worker.run_one``.

A run that has ended (finished, or diverged: the trainer's ``summary.json`` says so) is skipped; a run with
checkpoints is resumed from the newest one; the rest start fresh. One failed run never ends the sweep: its
outcome (``ok`` False, the error in one line) is reported at the end. The runs at one seed start from the
same policy (LoRA starts as the identity), so their start evaluation is computed once and shared through
``OUT/start-evals/`` (keyed on every "start"-scope setting; ``grpolab.train.lifecycle.start_evaluation_key``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from grpolab.errors import UserError
from grpolab.sweep.plan import RunSpec
from grpolab.sweep.worker import EventFn

__all__ = ["run_sweep"]


def run_sweep(specs: Sequence[RunSpec], *, workers: int | None = None, backend: str = "local",
              on_event: EventFn | None = None, gpus_per_run: int | None = None, runs_per_gpu: int = 1
              ) -> list[dict[str, Any]]:
    """Run every run of ``specs`` that has not ended; returns one outcome per run started (ok, error,
    seconds). ``on_event`` receives progress messages and {"finished": outcome}. ``gpus_per_run``: None (auto),
    0 (CPU only) or N; ``runs_per_gpu``: the runs that share each GPU (``grpolab.sweep.devices``). ``workers``
    None: one local worker per GPU slot (GPUs x ``runs_per_gpu``), else the CPU count."""
    todo = [spec for spec in specs if not spec.ended]
    on_event = on_event or (lambda event: None)
    if not todo:
        return []
    if backend == "local":
        from grpolab.sweep.local import run_local

        return run_local(todo, workers and min(workers, len(todo)), on_event, gpus_per_run=gpus_per_run,
                         runs_per_gpu=runs_per_gpu)
    if backend == "ray":
        from grpolab.sweep.cluster import run_ray

        workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
        return run_ray(todo, workers, on_event, gpus_per_run=gpus_per_run, runs_per_gpu=runs_per_gpu)
    raise UserError(f"unknown backend {backend!r}; choose local or ray")
