"""scripts/gpu_check.py in its CPU mode, as a subprocess: every step runs (tiny) and passes, the tables list every
step and every (engine, model) row, and a failing step makes the check exit non-zero without hiding the others."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
STEPS = ["train-grpolab", "train-trl", "compare-grpolab", "compare-trl", "resume-grpolab", "resume-trl",
         "build-models", "shape-grpolab-smollm2-135m-shape", "shape-trl-smollm2-135m-shape",
         "shape-grpolab-qwen2.5-0.5b-shape", "shape-trl-qwen2.5-0.5b-shape", "sampling"]
ROWS = [(engine, model) for model in ("embedded", "smollm2-135m-shape", "qwen2.5-0.5b-shape")
        for engine in ("grpolab", "trl")]


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--cpu", "--out", str(tmp_path / "out"),
                           "--work", str(tmp_path / "work"), *args],
                          capture_output=True, text=True, timeout=400, cwd=ROOT)


def _table_rows(text: str) -> dict[str, list[str]]:
    """The markdown tables' rows by their first cell (the step), and by 'engine model' for the perf table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 4:
            rows[cells[0]] = cells
            rows[f"{cells[0]} {cells[1]}"] = cells
    return rows


def test_cpu_mode_runs_every_step_and_passes(tmp_path: Path) -> None:
    done = _check(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _table_rows(done.stdout)
    for step in STEPS:
        assert rows[step][1] == "PASS", rows[step]
    for engine, model in ROWS:
        row = rows[f"{engine} {model}"]
        assert row[-1] == "PASS" and float(row[2]) > 0 and float(row[3]) > 0, row
    assert "grpolab / the fastest TRL configuration" in done.stdout
    assert all(label in done.stdout for label in ("TRL generate (bf16 weights)", "TRL continuous batching"))
    saved = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert saved["passed"] and [s["name"] for s in saved["steps"]] == STEPS
    for step in saved["steps"]:  # each shape run reports grpolab's estimate of its peak (memory.run_peak_parts)
        if step["name"].startswith("shape-"):
            assert step["metrics"]["estimate_mib"] > 0 and "estimate" in step["detail"], step
    assert (tmp_path / "out" / "gpu-check.md").read_text().startswith("# GPU check: 12 of 12 steps passed")
    assert "===== train-trl.log" in (tmp_path / "out" / "gpu-check.log").read_text()


def test_a_failing_step_fails_the_check_and_hides_no_other(tmp_path: Path) -> None:
    done = _check(tmp_path, "--only", "train-grpolab,train-trl,sampling", "--inject-failure", "train-trl,sampling")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _table_rows(done.stdout)
    assert rows["train-grpolab"][1] == "PASS"
    assert rows["train-trl"][1] == "FAIL" and "injected-failure-no-such-model" in rows["train-trl"][3]
    assert rows["sampling"][1] == "FAIL"
    assert rows["build-models"][1] == "PASS"  # sampling needs the models, so they were built
    assert rows["trl embedded"][-1] == "FAIL"
    saved = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert not saved["passed"]


def test_an_unknown_step_is_refused(tmp_path: Path) -> None:
    done = _check(tmp_path, "--only", "no-such-step")
    assert done.returncode == 2 and "unknown steps" in done.stderr
