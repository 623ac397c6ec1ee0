"""A sweep's local runs trained in this process instead of in spawned workers, for tests of what a sweep computes.

A spawned worker starts an interpreter and imports torch and grpolab before its first run: seconds per worker, per
phase of a sweep, on two loaded cores, where a tiny run trains in under one. Tests of lr selection, tables,
reports, configs and resuming take ``workers_in_process`` (or the ``in_process_workers`` fixture of
``tests/conftest.py``); the tests of the workers themselves keep real processes: ``tests/sweep/test_signals.py``
(SIGTERM, SIGHUP, SIGKILL to ``grpolab compare``), ``tests/sweep/test_devices.py`` (each worker's
``CUDA_VISIBLE_DEVICES``), ``tests/sweep/test_orphaned_workers.py``, ``tests/e2e/test_compare.py``'s killed and
Ctrl-C sweeps, ``tests/e2e/test_ray_backend.py``, ``tests/sweep/test_api.py``'s README example and
``tests/integrations/test_trl_engine.py``'s ``grpolab compare --engine trl``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["InProcessPool", "workers_in_process"]


class InProcessPool(concurrent.futures.Executor):
    """An executor that runs each submitted job at once, in the calling thread, one after another: the runs of a
    sweep in the order they were queued, as one worker would take them."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:  # the future holds it, as a worker's would
            future.set_exception(error)
        return future


@contextlib.contextmanager
def workers_in_process() -> Iterator[None]:
    """``grpolab.sweep.local``'s worker pool replaced by an ``InProcessPool`` posting progress to the sweep's
    queue as a worker does; the torch thread count and random state a run sets are restored afterwards."""
    import torch

    import grpolab.sweep.local as local
    import grpolab.sweep.worker as worker

    threads, state = torch.get_num_threads(), torch.random.get_rng_state()
    with pytest.MonkeyPatch.context() as patch:

        def pool(workers: int, progress: Any, devices: list[str]) -> InProcessPool:
            patch.setattr(worker, "_progress_queue", progress)
            return InProcessPool()

        patch.setattr(local, "worker_pool", pool)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            torch.random.set_rng_state(state)
