"""Every signal stops the whole sweep: SIGTERM and SIGHUP to ``grpolab compare`` end its workers as Ctrl-C
does, and workers end themselves when the sweep process is killed outright; the re-run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.train.lock import DirectoryLock

SWEEP = ["compare", "--estimators", "sign,dr_grpo", "--seeds", "1", "--group-sizes", "2", "--workers", "2",
         "--no-report", "--lrs", "1e-3", "--steps", "30", "--prompts-per-step", "2", "--eval-samples", "0",
         "--eval-limit", "4", "--checkpoint-every", "1"]


def _training(out: Path, process: subprocess.Popen) -> None:
    """Wait until both runs have saved a checkpoint (both workers are busy training)."""
    deadline = time.monotonic() + 300
    while sum(1 for run in out.glob("runs/*") if any(run.glob("checkpoints/step-*"))) < 2:
        assert process.poll() is None and time.monotonic() < deadline, "the sweep did not start training"
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _gone_within(process: subprocess.Popen, seconds: float) -> float:
    """Seconds until no process of the sweep's process group is left (the sweep, reaped, and every worker);
    fails after ``seconds``."""
    started = time.monotonic()
    while process.poll() is None or _group_alive(process.pid):
        assert time.monotonic() - started < seconds, f"processes of the sweep remain after {seconds} s"
        time.sleep(0.1)
    return time.monotonic() - started


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_to_the_sweep_process_ends_every_worker(tmp_path: Path, signum: signal.Signals,
                                                         request: pytest.FixtureRequest) -> None:
    """The sweep and its workers are real processes; the SIGTERM case's re-run trains in this process
    (``in_process_workers``): what it checks is where the runs resume, which no worker process changes."""
    out = tmp_path / "cmp"
    process = subprocess.Popen([sys.executable, "-m", "grpolab.cli", *SWEEP, "--out", str(out)],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _training(out, process)
    process.send_signal(signum)  # to the sweep process alone, as `kill PID` or a scheduler's stop does
    seconds = _gone_within(process, 10)  # its process group: the sweep and its workers
    print(f"{signum.name}: every process of the sweep gone after {seconds:.1f} s")  # shown with pytest -s
    stderr = process.stderr.read()
    if signum != signal.SIGKILL:
        assert process.returncode == 130 and "Traceback" not in stderr, stderr[-2000:]
        assert "rerun with the same --out to resume" in stderr, stderr
    for run in out.glob("runs/*"):  # no worker still holds a run directory
        DirectoryLock(run, "test").acquire().release()
    if signum == signal.SIGTERM:  # the re-run resumes the runs where they stopped
        assert not list(out.glob("runs/*/summary.json"))  # stopped part-way, both of them
        request.getfixturevalue("in_process_workers")
        assert main([*SWEEP, "--out", str(out)]) == 0
        results = pd.read_parquet(out / "results.parquet")
        assert results["run_id"].nunique() == 2 and set(results["status"]) == {"finished"}
        for log in out.glob("runs/*/resumes.jsonl"):  # each resumed from its checkpoint, not from step 0
            assert '"from_step": 0' not in log.read_text()
        assert len(list(out.glob("runs/*/resumes.jsonl"))) == 2


def test_sigterm_while_the_report_is_written_exits_130_in_one_line_leaving_no_partial_file(tmp_path: Path) -> None:
    # was: exit 143 and no line (SIGTERM's default action outside the training phase; the docs say 130)
    out = tmp_path / "cmp"
    script = Path(__file__).with_name("_term_in_report.py")
    process = subprocess.Popen([sys.executable, str(script), "compare", "--estimators", "sign", "--seeds", "1",
                                "--group-sizes", "2", "--lrs", "1e-4", "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120  # a hang guard, not a speed claim
    while not (out / "writing").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()[-2000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=180)  # a hang guard: the exit took over 60 s once on 2 loaded cores
    assert process.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == ("grpolab compare: interrupted; rerun with the same --out to resume (its "
                                               "runs go on from their last checkpoints)")
    assert "Traceback" not in stderr, stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["writing"]  # neither report.html nor its staging file
