"""Shared helpers of the reliability tests: a small checkpointed run made once per session, copied per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grpolab.cli import main

# a 2-step dr_grpo run at lr 3e-4 with a checkpoint after every step: not the defaults, so a resume that
# fell back to the defaults (sign, lr 1e-4, 100 steps) would show
RUN_FLAGS = ["--steps", "2", "--advantage", "dr_grpo", "--lr", "3e-4", "--prompts-per-step", "2", "--eval-limit",
             "4", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "1", "--threads", "1",
             "--no-progress"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """``grpolab.cli.main(argv)`` in-process: (exit code, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    return code, capsys.readouterr().err


def assert_one_line_error(code: int, err: str, *needles: str) -> str:
    """Exit code 2 and one ``grpolab ...: error:`` line holding every needle, no traceback; returns the line."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("grpolab "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="session")
def finished_run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("template") / "run"
    assert main(["train", "--out", str(run), *RUN_FLAGS]) == 0
    return run


@pytest.fixture
def finished_run(finished_run_template: Path, tmp_path: Path) -> Path:
    """A copy of a finished 2-step dr_grpo run (lr 3e-4) with checkpoints at steps 1 and 2."""
    run = tmp_path / "run"
    shutil.copytree(finished_run_template, run)
    return run
