"""One run of a sweep inside a worker process, and what a local worker sets up before its first run.

``run_one`` trains (or resumes) one run and never raises: a failed run is an outcome (``ok`` False, the
error in one line), so that one run cannot end the sweep. The warnings a run raises travel in its outcome
(``warnings``) to the sweep process, which shows each distinct one once (``show_worker_warnings``), as one line
on the command line: printed by the worker they were two lines with a source path, once per run.

A local worker (``init_worker``) ends when the sweep process is gone (killed with ``kill -9``, say): on Linux the
kernel kills it at once (``PR_SET_PDEATHSIG``), and a watchdog thread ends it within a second where that is not
available; an orphaned worker would otherwise keep its run's lock and memory. Its ``CUDA_VISIBLE_DEVICES`` is not
set here but in the environment it is started with (``grpolab.sweep.local.worker_pool``), so that it holds before
the worker's interpreter imports anything: torch reads the variable once, when CUDA is first asked about, and the
modules a spawned worker imports first (the sweep script's own, re-imported as ``__mp_main__``, too) may ask.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from grpolab.io import RESUME
from grpolab.sweep.plan import RunSpec

__all__ = ["EventFn", "init_worker", "post_progress", "run_one", "show_worker_warnings", "warning_texts"]

EventFn = Callable[[dict[str, Any]], None]

# This worker process's progress queue, set once by ``init_worker`` (a local pool's workers); None elsewhere.
_progress_queue: Any = None


def run_one(spec: RunSpec, post: EventFn | None = None) -> dict[str, Any]:
    """Train (or resume) one run; ``post`` receives its progress ({run_id, step, steps, reward})."""
    import torch

    torch.set_num_threads(spec.config.threads or 1)
    from grpolab.train.engines import train

    def on_step(step: int, metrics: dict[str, Any]) -> None:
        if post is not None:
            post({"run_id": spec.run_id, "step": step, "steps": spec.config.steps,
                  "reward": metrics.get("rollout/reward_mean")})

    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # handed to the sweep process, which shows each once
        try:
            train(spec.config, spec.run_dir, resume=spec.started, on_step=on_step,
                  start_eval_cache=spec.run_dir.parent.parent / "start-evals")  # the config's engine
            outcome = {"run_id": spec.run_id, "ok": True, "seconds": time.perf_counter() - started}
        except Exception as error:  # one failed run must not end the sweep; it is reported at the end
            text = str(error).replace(RESUME, "rerun the same grpolab compare command (it resumes each run)")
            outcome = {"run_id": spec.run_id, "ok": False, "error": f"{type(error).__name__}: {text}"}
    return {**outcome, "warnings": warning_texts(caught)}


def warning_texts(caught: list[warnings.WarningMessage]) -> list[tuple[str, str]]:
    """(category name, message) of each distinct warning a run raised, in order: plain data that pickles."""
    return list(dict.fromkeys((w.category.__name__, " ".join(str(w.message).split())) for w in caught))


def show_worker_warnings(outcome: dict[str, Any]) -> None:
    """Issue, in the sweep process, the warnings a worker's run raised (``outcome["warnings"]``, taken out of it):
    through ``warnings`` as the sweep process's own, so the command line prints each as one line and Python's
    filters show each distinct one once per sweep, not once per run. A category that is not a built-in warning
    class (a library's own) is issued as ``UserWarning``."""
    for name, text in outcome.pop("warnings", None) or ():
        category = getattr(builtins, name, None)
        if not (isinstance(category, type) and issubclass(category, Warning)):
            category = UserWarning
        warnings.warn_explicit(text, category, "<grpolab sweep worker>", 0, module="grpolab.sweep.worker",
                               registry=_SHOWN)


# Python's registry of the worker warnings shown in this (sweep) process: a warning is shown once per sweep.
_SHOWN: dict[Any, Any] = {}


def post_progress(spec: RunSpec) -> dict[str, Any]:
    """``run_one`` posting progress to this worker's queue (the local pool's task function)."""
    return run_one(spec, _progress_queue.put if _progress_queue is not None else None)


def init_worker(progress_queue: Any, parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Set up a local worker: its progress queue and the watchdog on ``parent_pid``."""
    global _progress_queue
    _progress_queue = progress_queue
    _die_with_parent(parent_pid)
    watchdog = threading.Thread(target=_exit_when_orphaned, args=(parent_pid, poll_seconds), daemon=True,
                                name="grpolab-parent-watchdog")
    watchdog.start()


def _exit_when_orphaned(parent_pid: int, poll_seconds: float) -> None:
    """End this process at once when its parent is gone (the kernel re-parents an orphan)."""
    while os.getppid() == parent_pid:
        time.sleep(poll_seconds)
    os._exit(1)


def _die_with_parent(parent_pid: int) -> None:
    """On Linux, have the kernel SIGKILL this process the moment its parent ends (``prctl(PR_SET_PDEATHSIG)``):
    the watchdog thread needs the interpreter to run, and workers of a sweep OOM-killed in a memory cgroup lived
    on for 15-30 s. The parent may have ended before the request: checked after it."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 \
                and os.getppid() != parent_pid:
            os._exit(1)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
