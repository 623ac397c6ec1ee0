"""The Ray backend: every run is one Ray task (``num_cpus=1``, ``num_gpus=--gpus-per-run / --runs-per-gpu``, a
fraction of one GPU when several runs share it, as Ray allows below 1) on the cluster at
``RAY_ADDRESS``, or on a local Ray started with ``workers`` CPUs. ``--gpus-per-run`` auto is 1 where the cluster
has GPUs and 0 otherwise, or when every run's device is ``cpu`` (``grpolab.sweep.devices.gpus_each``); more GPUs
per run than the cluster's largest live node has are refused at once, in the local backend's line (Ray would keep
such a task queued forever; a cluster that would add GPU nodes later is refused too). Ray gives each task its
own ``CUDA_VISIBLE_DEVICES`` ("" for ``num_gpus=0``); with several runs per GPU each task's environment also holds
``RUNS_PER_GPU_ENV`` (its sampler's share of the GPU). The memory of K runs on one GPU is checked by the local
backend only: the sweep process cannot see the cluster's GPUs. A stop signal (Ctrl-C, SIGTERM, SIGHUP) cancels the
queued and the running runs. A local Ray started here ends with the sweep process, ``kill -9`` included
(``grpolab.sweep.reaper``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from grpolab.engine.memory import RUNS_PER_GPU_ENV
from grpolab.errors import UserError
from grpolab.sweep.devices import check_enough_gpus, gpus_each
from grpolab.sweep.plan import RunSpec
from grpolab.sweep.reaper import start_reaper
from grpolab.sweep.signals import StopRequest, stop_signals
from grpolab.sweep.worker import EventFn, run_one

__all__ = ["run_ray", "task_resources"]


def run_ray(specs: Sequence[RunSpec], workers: int, on_event: EventFn, *, gpus_per_run: int | None = None,
            runs_per_gpu: int = 1) -> list[dict[str, Any]]:
    """Train ``specs`` as Ray tasks; returns the outcomes of the runs that ended."""
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'grpolab[ray]'") from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")  # read first: ray.init sets it to the local cluster it starts
        ray.init(num_cpus=workers, include_dashboard=False, ignore_reinit_error=True, address=address)
        if not address:  # a local cluster of ours: it ends with this process (kill -9 too)
            start_reaper()
    largest = _largest_node_gpus(ray)
    gpus = gpus_each(gpus_per_run, largest, {spec.config.device for spec in specs}, runs_per_gpu)
    check_enough_gpus(gpus, largest, "the largest node of the Ray cluster has")  # else its tasks wait forever
    remote = ray.remote(**task_resources(gpus, runs_per_gpu))(run_one)
    pending = {remote.remote(spec): spec for spec in specs}
    outcomes = []
    with stop_signals(StopRequest()):
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    pending.pop(ref)
                    outcomes.append(ray.get(ref))
                    on_event({"finished": outcomes[-1]})
        except KeyboardInterrupt:  # stop the queued and the running runs, not only this process
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    return outcomes


def task_resources(gpus: int, runs_per_gpu: int) -> dict[str, Any]:
    """The Ray options of one run's task: one CPU and ``gpus / runs_per_gpu`` GPUs (``runs_per_gpu`` > 1 only with
    one GPU per run, ``grpolab.sweep.devices.check_runs_per_gpu``), and for a shared GPU the environment variable
    that gives the run's sampler its share."""
    options: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus / runs_per_gpu if runs_per_gpu > 1 else gpus}
    if runs_per_gpu > 1:
        options["runtime_env"] = {"env_vars": {RUNS_PER_GPU_ENV: str(runs_per_gpu)}}
    return options


def _largest_node_gpus(ray: Any) -> int:
    """The most GPUs one live node of the cluster has: a task asking for more is never scheduled."""
    return max((int(node.get("Resources", {}).get("GPU", 0)) for node in ray.nodes() if node.get("Alive")), default=0)
