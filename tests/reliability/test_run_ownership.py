"""A run directory owns its settings and has one writer at a time, tried as a user hits it: the README's
``grpolab train --out runs/sign --resume`` after a kill -9 (which leaves a stale lock file behind), a resume
with another setting, a resume that extends the run, and a second writer while the first is training.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import yaml

from grpolab.cli import main
from grpolab.train import runlog
from grpolab.train.lock import LOCK_NAME, OWNER_NAME

FLAGS = ["--steps", "5", "--advantage", "dr_grpo", "--lr", "3e-4", "--prompts-per-step", "2", "--eval-limit", "4",
         "--eval-samples", "0", "--checkpoint-every", "1", "--threads", "1", "--no-progress"]
TINY = ["--steps", "2", "--prompts-per-step", "2", "--eval-limit", "4", "--eval-samples", "0", "--no-eval-start",
        "--checkpoint-every", "0", "--threads", "1", "--no-progress"]


def _grpolab(*argv: str) -> list[str]:
    return [sys.executable, "-m", "grpolab.cli", *argv]


def _steps(run: Path) -> list[int]:
    return [row["step"] for row in runlog.read_metrics(run / "metrics.jsonl")]


def _start_and_wait(argv: list[str], run: Path, steps: int) -> subprocess.Popen:
    """Start the CLI in its own session and wait until ``steps`` training steps are logged."""
    process = subprocess.Popen(_grpolab(*argv), start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(_steps(run)) < steps:
        assert process.poll() is None, f"the run ended early: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "timed out waiting for the first steps"
        time.sleep(0.05)
    return process


def _kill_nine(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # already ended: the caller's assertions say how
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()


def test_readme_resume_after_kill_nine_keeps_the_saved_settings_past_the_stale_lock(tmp_path: Path) -> None:
    run = tmp_path / "sign"
    first = _start_and_wait(["train", "--out", str(run), *FLAGS], run, steps=2)
    _kill_nine(first)
    killed_at = _steps(run)
    assert 2 <= len(killed_at) < 5, killed_at
    # the kill left the lock file and the dead holder's pid behind
    assert (run / LOCK_NAME).exists()
    assert json.loads((run / OWNER_NAME).read_text())["pid"] == first.pid

    resumed = subprocess.run(_grpolab("train", "--out", str(run), "--resume"), capture_output=True, text=True,
                             timeout=300)  # the README's command: no flag repeated
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["advantage"], saved["lr"], saved["steps"]) == ("dr_grpo", 3e-4, 5), saved
    assert _steps(run) == [1, 2, 3, 4, 5], "metrics are not continuous"
    assert [row["phase"] for row in runlog.read_metrics(run / "eval.jsonl")] == ["start", "end"]
    assert json.loads((run / "resumes.jsonl").read_text().splitlines()[-1])["changed"] == {}


def _one_line_error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_resume_refuses_another_setting_and_extends_with_more_steps(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY]) == 0
    before = (run / "metrics.jsonl").read_text()
    capsys.readouterr()

    line = _one_line_error(main(["train", "--out", str(run), "--resume", "--lr", "1e-3", "--advantage", "grpo"]),
                           capsys.readouterr().err)
    for needle in ("advantage 'sign'", "lr 0.0001", "advantage 'grpo'", "lr 0.001", "drop those flags", "--out"):
        assert needle in line, (needle, line)
    assert (run / "metrics.jsonl").read_text() == before, "a refused resume touched the run"

    assert main(["train", "--out", str(run), "--resume", *TINY[:2], "--lr", "1e-4"]) == 0  # equal to the saved: fine
    assert main(["train", "--out", str(run), "--resume", "--steps", "3"]) == 0
    assert _steps(run) == [1, 2, 3]
    assert yaml.safe_load((run / "config.yaml").read_text())["steps"] == 3
    assert json.loads((run / "resumes.jsonl").read_text().splitlines()[-1])["changed"] == {"steps": [2, 3]}
    evaluations = [(row["step"], row["phase"]) for row in runlog.read_metrics(run / "eval.jsonl")]
    assert evaluations == [(2, "step"), (3, "end")]  # the old end evaluation stays, as a step evaluation
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
    capsys.readouterr()

    with warnings.catch_warnings(record=True) as said:  # was: a false "eval.jsonl lacks the evaluation(s)" first
        warnings.simplefilter("always")
        code = main(["train", "--out", str(run), "--resume", "--steps", "1"])
    line = _one_line_error(code, capsys.readouterr().err)
    assert "already trained 3 steps" in line and not [str(w.message) for w in said]

    line = _one_line_error(main(["train", "--out", str(run), "--resume", "--overwrite"]), capsys.readouterr().err)
    assert "--resume continues the run in --out and --overwrite replaces it" in line  # was: --overwrite ignored
    assert _steps(run) == [1, 2, 3]


def test_a_second_writer_refuses_at_once_naming_the_first(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # far more steps than the second writer's start-up takes, even on a loaded machine (500 took ~15 s)
    first = _start_and_wait(["train", "--out", str(run), *FLAGS, "--steps", "1000000", "--checkpoint-every", "0"],
                            run, steps=1)
    try:
        second = subprocess.run(_grpolab("train", "--out", str(run), "--resume"), capture_output=True, text=True,
                                timeout=120)
        still_running = first.poll() is None
        rows = len(_steps(run))
    finally:
        _kill_nine(first)
    assert still_running, "the first run ended before the second writer tried"
    assert second.returncode == 2, second.stderr[-2000:]
    lines = second.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 3 and "Traceback" not in second.stderr, second.stderr
    assert f"pid {first.pid}" in second.stderr and "in use by another grpolab process" in second.stderr
    assert _steps(run)[:rows] == list(range(1, rows + 1)), "the second writer disturbed the log"
