"""Benchmarks that no test ran have rotted before (``bench_trl_engine.py`` failed on a keyword passed twice, then on
a closed log's new home). These run each of the quick ones in its smallest mode and check that it returns its rows
with numbers; whether a goal was met is the benchmark's to say, not a test's (speed is never timed in a test)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("name", ["trl_engine", "cli", "rescore"])
def test_the_benchmark_runs_in_its_quick_mode(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module(f"bench_{name}")
    rows = module.run(True)
    assert rows and all(row["name"] for row in rows)
    numbers = [row.get("ratio", row.get("value")) for row in rows]
    assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in numbers), rows
    sys.modules.pop(f"bench_{name}", None)
