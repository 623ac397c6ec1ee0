"""scripts/gpu_numbers.py in its CPU mode (``--cpu``): every part runs, every estimator, loss option and remedy has
its row, the bfloat16 rows hold their bounds on the CPU's autocast, and a row over its bound fails the script. On a
GPU the same script compares CUDA under bfloat16 with the CPU in float32 (docs/gpu.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_numbers():
    spec = importlib.util.spec_from_file_location("gpu_numbers", ROOT / "scripts" / "gpu_numbers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_numbers"] = module
    spec.loader.exec_module(module)
    return module


def test_every_part_runs_and_passes_on_the_cpu(gpu_numbers, tmp_path: Path) -> None:
    assert gpu_numbers.main(["--cpu", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "gpu-numbers.json").read_text())
    named = {(r["part"], r["name"]) for r in rows}
    assert {("update", name) for name in gpu_numbers.VARIANTS} <= named
    assert {("remedies", name) for name in gpu_numbers.REMEDIES} <= named
    assert sum(r["part"] == "sampler" for r in rows) == 2 and sum(r["part"] == "graph" for r in rows) == 1
    assert sum(r["part"] == "families" for r in rows) == 8
    assert all(r["ok"] for r in rows)
    assert "PASS" in (tmp_path / "gpu-numbers.md").read_text()


def test_a_row_over_its_bound_fails_the_script(gpu_numbers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpu_numbers, "VARIANTS", {"sign": {"advantage": "sign"}})
    monkeypatch.setattr(gpu_numbers, "UPDATE_RELATIVE", 0.0)  # bfloat16 never matches float32 exactly
    assert gpu_numbers.main(["--cpu", "--parts", "update", "--out", str(tmp_path)]) == 1
    rows = json.loads((tmp_path / "gpu-numbers.json").read_text())
    assert [(r["name"], r["ok"]) for r in rows] == [("sign", False)]
