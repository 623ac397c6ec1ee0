"""The GPU check's child processes and their logs: run a command with its log in the working folder and a timeout
that kills its whole process group, SIGKILL a run at its first checkpoint (the kill/resume step), and read the
tail and the telling last line of a log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from gpu_check_setup import ROOT, StepFailed


def run_logged(argv: list[str], log: Path, timeout: float, env: dict[str, str]) -> int:
    """Run ``argv`` with stdout and stderr in ``log``; its whole process group is killed at ``timeout`` (exit code
    124 then)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if timeout <= 0:
        log.write_text("not started: the check's time budget is spent\n")
        return 124
    with log.open("w") as handle:
        handle.write("$ " + " ".join(repr(a) if (" " in a or not a) else a for a in argv) + "\n")
        handle.flush()
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   start_new_session=True)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process)
            handle.write(f"\n[gpu-check] timed out after {timeout:.0f} s; killed\n")
            return 124


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL ``process`` and the processes it started (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def kill_at_first_checkpoint(argv: list[str], log: Path, run: Path, engine: str, timeout: float,
                             env: dict[str, str]) -> str:
    """Start the run, SIGKILL it (and its children) as soon as a complete checkpoint exists, and return that
    checkpoint's name. Raises ``StepFailed`` when the run ended first, or no checkpoint came in time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pattern = "step-*" if engine == "grpolab" else "checkpoint-*/trainer_state.json"
    with log.open("w") as handle:
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   start_new_session=True)
        stop = time.monotonic() + timeout
        found: list[Path] = []
        while process.poll() is None and time.monotonic() < stop:
            found = sorted((run / "checkpoints").glob(pattern))
            if found:
                break
            time.sleep(0.005)
        kill_group(process)
    if not found:
        raise StepFailed(f"no checkpoint before the run ended (exit code {process.returncode}): "
                         f"{last_line(tail(log))}")
    if (run / "summary.json").exists():
        raise StepFailed("the run finished before it could be killed; give it more steps")
    return (found[0].parent if engine == "trl" else found[0]).name


def tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("[gpu-check]")]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["(no output)"])[-1][:300]
