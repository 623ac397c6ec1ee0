"""The local backend: a process pool of spawned workers, one torch thread each, that every signal stops.

Ctrl-C (SIGINT), SIGTERM and SIGHUP to the sweep process all stop the whole sweep at once: queued runs do not
start, running ones are ended (their checkpoints are written atomically, so each resumes on the next
``grpolab compare``), and the sweep raises ``KeyboardInterrupt`` (exit code 130 on the command line). The
workers start with SIGINT and SIGHUP blocked, so a Ctrl-C or a closed terminal reaches only this process,
which ends them; SIGTERM stays deliverable, since ending a worker sends it. A worker whose sweep process
dies without stopping it (``kill -9``) ends itself (``grpolab.sweep.worker.init_worker``'s watchdog).

A spawned worker starts as ``python -c ...``, which puts the current directory first on ``sys.path`` before it
imports ``multiprocessing``; so the sweep's children (the workers and multiprocessing's resource tracker) are started
with ``PYTHONSAFEPATH=1`` (``children_environment``, which also hands them the runs per GPU): a folder the user runs
``grpolab compare`` in that holds a ``multiprocessing/`` (or ``torch/``) package runs none of its code in them. A
worker's ``sys.path`` is then the sweep process's own, which spawn hands over.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queues
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from grpolab.engine.memory import RUNS_PER_GPU_ENV
from grpolab.errors import UserError
from grpolab.sweep.devices import worker_devices
from grpolab.sweep.plan import RunSpec
from grpolab.sweep.signals import StopRequest, blocked_in_children, stop_signals
from grpolab.sweep.sizing import fit_workers, memory_limit_bytes, worker_bytes
from grpolab.sweep.worker import EventFn, init_worker, post_progress, show_worker_warnings

__all__ = ["children_environment", "run_local", "worker_pool"]

def worker_pool(workers: int, progress: Any, devices: list[str]) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes posting progress to ``progress``; with ``devices`` (one
    ``CUDA_VISIBLE_DEVICES`` value per worker, "" for no GPU) each worker starts with a value of its own in its
    environment, so it holds before the worker imports anything that could initialise CUDA; with [] the
    workers inherit this process's."""
    context = _DeviceContext(devices) if devices else multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                               initargs=(progress, os.getpid()))


class _DeviceContext(multiprocessing.context.SpawnContext):
    """The spawn context, but each process it makes takes the next of ``devices`` as its
    ``CUDA_VISIBLE_DEVICES``."""

    def __init__(self, devices: Sequence[str]):
        super().__init__()
        self._left, self._lock = list(devices), threading.Lock()

    def Process(self, *args: Any, **kwargs: Any) -> _DeviceProcess:  # type: ignore[override]
        with self._lock:
            if not self._left:
                raise RuntimeError("more worker processes made than device sets cut for them")
            return _DeviceProcess(self._left.pop(0), *args, **kwargs)


class _DeviceProcess(multiprocessing.context.SpawnProcess):
    """A spawned process whose environment holds ``CUDA_VISIBLE_DEVICES`` = ``devices`` from its start: the
    value is put in this process's environment only while the child is spawned, which copies it."""

    _starting = threading.Lock()

    def __init__(self, devices: str, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cuda_visible_devices = devices

    def start(self) -> None:
        with self._starting, _environment({"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices}):
            super().start()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while the block runs (each child started in it copies them)."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def run_local(specs: Sequence[RunSpec], workers: int | None, on_event: EventFn, *, gpus_per_run: int | None = None,
              runs_per_gpu: int = 1) -> list[dict[str, Any]]:
    """Train ``specs`` on a local process pool of ``workers`` (fewer when GPUs bound them; None: one per GPU slot,
    or the CPU count for CPU runs; never more than the runs), each worker with the GPUs
    ``grpolab.sweep.devices.worker_devices`` gives it (``gpus_per_run`` None: auto), ``runs_per_gpu`` to a GPU;
    returns the outcomes of the runs that ended."""
    devices = worker_devices(gpus_per_run, workers, {spec.config.device for spec in specs}, runs_per_gpu)
    devices = devices[:max(1, len(specs))]
    workers = fit_workers(len(devices), worker_bytes([spec.config for spec in specs]), memory_limit_bytes())
    devices = devices[:workers]  # at most as many workers as the memory allowed holds (one-line warning)
    request = StopRequest()
    outcomes: list[dict[str, Any]] = []
    with stop_signals(request), children_environment(runs_per_gpu):
        progress = multiprocessing.get_context("spawn").Queue()  # may start the resource tracker
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
                    show_worker_warnings(outcomes[-1])  # each distinct one once, as the sweep process's own
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


def children_environment(runs_per_gpu: int = 1) -> contextlib.AbstractContextManager[None]:
    """What the sweep's children (its workers, multiprocessing's resource tracker) find in their environment, put in
    this process's while they start (each copies it): ``PYTHONSAFEPATH=1``, so that their interpreters do not put
    the current directory first on ``sys.path`` (Python 3.11's ``-P``), and ``RUNS_PER_GPU_ENV``, the runs that
    share a worker's GPU (each run's sampler takes its share, ``grpolab.engine.memory.sampler_budget``)."""
    return _environment({"PYTHONSAFEPATH": "1", RUNS_PER_GPU_ENV: str(runs_per_gpu)})


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
