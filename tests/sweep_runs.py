"""Run directories written by hand for the sweep tests: finished, diverged, or saved with other settings."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from grpolab.config import TrainConfig, save_config
from grpolab.sweep.plan import RunSpec


def finish(spec: RunSpec, score: float, *, passk: dict | None = None, split: str = "test",
           config: TrainConfig | None = None, status: str | None = "finished") -> None:
    """``spec``'s directory as a run that ended with end score ``score`` (pass@k when ``passk``)."""
    spec.run_dir.mkdir(parents=True)
    save_config(config or spec.config, spec.run_dir / "config.yaml")
    (spec.run_dir / "summary.json").write_text(json.dumps({} if status is None else {"status": status}))
    rows = [{"step": 0, "phase": "start", "split": split, "greedy_accuracy": 0.0},
            {"step": spec.config.steps, "phase": "end", "split": split, "greedy_accuracy": score,
             "pass_at_k": passk or {}, "n": len(passk or {})}]
    (spec.run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1, "loss/total": 0.1}\n')


def diverge(spec: RunSpec, *, at_step: int = 2, split: str = "test") -> None:
    """``spec``'s directory as a run the trainer stopped at ``at_step`` on a non-finite loss (the shared
    contract: summary.json with status diverged, no final/, no end evaluation)."""
    spec.run_dir.mkdir(parents=True)
    save_config(spec.config, spec.run_dir / "config.yaml")
    summary = {"status": "diverged", "diverged_at_step": at_step, "reason": "loss is nan"}
    (spec.run_dir / "summary.json").write_text(json.dumps(summary))
    start = {"step": 0, "phase": "start", "split": split, "greedy_accuracy": 0.25}
    (spec.run_dir / "eval.jsonl").write_text(json.dumps(start) + "\n")
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1, "loss/total": 0.1}\n')


def devices_at_start(seconds: float) -> tuple[int, str | None]:
    """(this process's id, the CUDA_VISIBLE_DEVICES it was started with, from /proc/self/environ: before its
    interpreter imported anything) after ``seconds``: a job for a worker pool's worker."""
    time.sleep(seconds)
    with open("/proc/self/environ", "rb") as environ:
        for entry in environ.read().split(b"\0"):
            name, _, value = entry.partition(b"=")
            if name == b"CUDA_VISIBLE_DEVICES":
                return os.getpid(), value.decode()
    return os.getpid(), None


def devices_once_all_started(folder: str, workers: int) -> tuple[int, str | None, str | None]:
    """(this process's id, the CUDA_VISIBLE_DEVICES it was started with (from /proc/self/environ, before its
    interpreter imported anything), the one in its os.environ now), once ``workers`` processes have entered this
    job: each worker of a pool takes one such job, so no fixed sleep is needed for every worker to be seen."""
    pid, at_start = devices_at_start(0.0)
    Path(folder, str(pid)).touch()
    deadline = time.monotonic() + 120
    while len(list(Path(folder).iterdir())) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {workers} workers started within 120 s")
        time.sleep(0.02)
    return pid, at_start, os.environ.get("CUDA_VISIBLE_DEVICES")


def runs_per_gpu_in_worker() -> int:
    """The runs sharing this worker's GPU, as a run in it reads them (``grpolab.engine.memory.runs_sharing_gpu``)."""
    from grpolab.engine.memory import runs_sharing_gpu

    return runs_sharing_gpu()
