"""benchmarks/bench_runs_per_gpu.py in its CPU mode, as a subprocess: a tiny compare for each K (as --workers on the
CPU), runs per hour in its table and JSON; and the GPU mode's commands, which pass --runs-per-gpu K."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab import provenance

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_runs_per_gpu", ROOT / "benchmarks" / "bench_runs_per_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_cpu_mode_measures_each_k(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_runs_per_gpu.py"), "--cpu",
                           "--runs-per-gpu", "1,2", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["grpolab"]["source"] == provenance.source_digest()  # the code that ran, named
    rows = result["rows"]
    assert [row["runs_per_gpu"] for row in rows] == [1, 2]
    for row in rows:
        assert row["runs"] == 2 and row["seconds"] > 0
        assert row["runs_per_hour"] == 2 * 3600 / row["seconds"]  # the same float division, unrounded
        assert f"--workers {row['runs_per_gpu']}" in row["command"] and "--runs-per-gpu" not in row["command"]
    assert "| workers (CPU) | engine | runs | seconds | runs/hour | speed-up |" in done.stdout
    assert "| 1 | grpolab | 2 |" in done.stdout and "| 2 | grpolab | 2 |" in done.stdout and "| 1.00x |" in done.stdout


def test_gpu_mode_passes_runs_per_gpu(tmp_path: Path) -> None:
    bench = _bench()
    args = bench.parse_args(["--runs-per-gpu", "1,2,4"])
    command = bench.compare_command(tmp_path, 4, args)
    assert command[command.index("--runs-per-gpu") + 1] == "4" and "--workers" not in command
    assert "--device" not in command  # the runs' device is auto: the GPU each worker is given
    assert command[command.index("--seeds") + 1] == "4" and command[command.index("--estimators") + 1] == "sign,dr_grpo"


def test_engine_and_random_shape_options(tmp_path: Path) -> None:
    bench = _bench()
    args = bench.parse_args(["--engine", "trl"])
    command = bench.compare_command(tmp_path, 2, args)
    assert command[command.index("--engine") + 1] == "trl"
    with pytest.raises(SystemExit, match="not a shape; the shapes are smollm2-135m-shape"):
        bench.build_random_shape("llama-70b-shape", tmp_path, cpu=True)
    folder = Path(bench.build_random_shape("smollm2-135m-shape", tmp_path, cpu=True))
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == 49152 and (folder / "tokenizer.json").is_file()


def test_a_failed_k_is_recorded_with_its_error(tmp_path: Path) -> None:
    bench = _bench()
    args = bench.parse_args(["--cpu", "--model", str(tmp_path / "no-such-model")])
    row = bench.measure(1, args)
    assert row["runs"] == 0 and row["runs_per_hour"] == 0 and row["error"].startswith("exit ")
    assert "(failed: see its error)" in bench.markdown([row], cpu=True)
