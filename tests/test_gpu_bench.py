"""benchmarks/bench_gpu.py in its CPU mode, as a subprocess: it builds the GPU check's model tiny, times every
sampler row (the graph row runs the CUDA graph's static step eagerly on the CPU), and prints and writes the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_mode_prints_every_row(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    names = [row["sampler"] for row in result["rows"]]
    assert names == ["grpolab eager", "grpolab graph", "grpolab graph f32 full", "trl generate"]
    for row in result["rows"]:
        assert row["tokens"] > 0 and row["tokens_per_s"] > 0 and 0 < row["roofline"]
    assert result["bandwidth_gb_s"] > 0
    for name in names:
        assert f"| {name} | 2 x 2 x 4 |" in done.stdout
