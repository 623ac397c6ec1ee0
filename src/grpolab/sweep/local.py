"""The local backend: a process pool of spawned workers, one torch thread each, that every signal stops.

Ctrl-C (SIGINT), SIGTERM and SIGHUP to the sweep process all stop the whole sweep at once: queued runs do not
start, running ones are ended (their checkpoints are written atomically, so each resumes on the next
``grpolab compare``), and the sweep raises ``KeyboardInterrupt`` (exit code 130 on the command line). The
workers start with SIGINT and SIGHUP blocked, so a Ctrl-C or a closed terminal reaches only this process,
which ends them; SIGTERM stays deliverable, since ending a worker sends it. A worker whose sweep process
dies without stopping it (``kill -9``) ends itself (``grpolab.sweep.worker.init_worker``'s watchdog).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queues
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from grpolab.errors import UserError
from grpolab.sweep.devices import cuda_device_count, device_sets, visible_gpu_ids
from grpolab.sweep.plan import RunSpec
from grpolab.sweep.signals import StopRequest, blocked_in_children, stop_signals
from grpolab.sweep.worker import EventFn, init_worker, post_progress

__all__ = ["run_local", "worker_pool"]

def worker_pool(workers: int, progress: Any, devices: list[str]) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes posting progress to ``progress``; with ``devices`` (one
    ``CUDA_VISIBLE_DEVICES`` value per worker) each worker takes a set of its own."""
    context = multiprocessing.get_context("spawn")
    device_queue = None
    if devices:
        device_queue = context.Queue()
        for value in devices:
            device_queue.put(value)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                               initargs=(progress, device_queue, os.getpid()))


def _worker_count(workers: int, gpus_per_run: int) -> tuple[int, list[str]]:
    if gpus_per_run <= 0:
        return workers, []
    sets = device_sets(visible_gpu_ids(cuda_device_count()), gpus_per_run, workers)
    return len(sets), sets


def run_local(specs: Sequence[RunSpec], workers: int, on_event: EventFn, *, gpus_per_run: int = 0
              ) -> list[dict[str, Any]]:
    """Train ``specs`` on a local process pool of ``workers`` (fewer when GPUs bound them); returns the
    outcomes of the runs that ended."""
    workers, devices = _worker_count(workers, gpus_per_run)
    progress = multiprocessing.get_context("spawn").Queue()
    request = StopRequest()
    outcomes: list[dict[str, Any]] = []
    with stop_signals(request):
        with blocked_in_children():
            pool = worker_pool(workers, progress, devices)
        try:
            with blocked_in_children():
                pending = {pool.submit(post_progress, spec) for spec in specs}  # starts the workers
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                _drain(progress, on_event)
                for future in done:
                    outcomes.append(future.result())
                    on_event({"finished": outcomes[-1]})
            _drain(progress, on_event)
        except (KeyboardInterrupt, BrokenProcessPool) as error:
            request.stopping = True
            _stop_at_once(pool)
            if isinstance(error, BrokenProcessPool) and request.signal is None:
                raise UserError("a worker process of the sweep died (killed by the system, out of memory?); rerun "
                                "with the same --out to resume, perhaps with fewer --workers") from None
            raise KeyboardInterrupt from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _stop_at_once(pool: ProcessPoolExecutor) -> None:
    """Drop the queued runs and end the running ones: SIGTERM, then SIGKILL for a worker still alive after 5 s."""
    pool.shutdown(wait=False, cancel_futures=True)
    children = multiprocessing.active_children()  # this process's workers
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
            child.join(timeout=5)


def _drain(progress: Any, on_event: EventFn) -> None:
    while True:
        try:
            on_event(progress.get_nowait())
        except queues.Empty:
            return
