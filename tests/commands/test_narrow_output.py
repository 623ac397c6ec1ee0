"""Output a person can read anywhere: piped (not a terminal) at COLUMNS=80, no line of a command's tables and
results is wider than 80 columns; at a wide terminal the tables keep their columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _stdout(argv: list[str], columns: int, cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "grpolab", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300, check=False)  # stdout is a pipe, as in `grpolab ... | less`
    assert done.returncode == 0, done.stderr
    return done.stdout


def _audit_log(folder: Path) -> Path:
    path = folder / "log.parquet"
    pq.write_table(pa.table({"step": [1, 1, 1, 1, 2, 2, 2, 2], "prompt": list("aabbaabb"),
                             "reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], "length": [3] * 8}), path)
    return path


@pytest.mark.parametrize("command", ["estimators", "audit", "plan", "preflight"])
def test_no_line_is_wider_than_80_columns_in_a_pipe(command: str, tmp_path: Path) -> None:
    argv = {"estimators": ["estimators"], "audit": ["audit", str(_audit_log(tmp_path))],
            "plan": ["plan", "--effect", "0.05", "--sd", "0.1"],
            "preflight": ["preflight", "--eval-limit", "4", "--eval-samples", "4", "--out", str(tmp_path / "p")]}
    lines = _stdout(argv[command], 80, tmp_path).splitlines()
    assert len(lines) > 2
    wide = [line for line in lines if len(line) > 80]
    assert not wide, wide  # before: preflight's table 192 columns, plan's lines 160, estimators cut to "ne…"
    assert "…" not in "".join(lines)  # nothing cut to an ellipsis either


def test_the_estimators_table_keeps_its_columns_when_wide(tmp_path: Path) -> None:
    text = _stdout(["estimators"], 200, tmp_path)
    assert "needs G >= 2" in text.splitlines()[1] and "hyper-parameters" in text.splitlines()[1]
    narrow = _stdout(["estimators"], 80, tmp_path)
    assert narrow.startswith("sign\n  needs G >= 2: no\n  binary only: yes\n"), narrow[:200]
