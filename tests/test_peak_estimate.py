"""docs/benchmarks.md's and docs/compare.md's numbers of one run's peak estimate against the committed result of
``benchmarks/bench_peak_estimate.py`` (benchmarks/results/cpu-2026-11-28/peak-estimate.json), and the benchmark's
reading of docs/gpu.md's measured peaks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "cpu-2026-11-28" / "peak-estimate.json"

pytestmark = pytest.mark.fast


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peak_estimate", ROOT / "benchmarks" / "bench_peak_estimate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _result() -> dict:
    return json.loads(RESULT.read_text())


def test_the_committed_table_is_the_results_and_docs_benchmarks_shows_it() -> None:
    result, bench = _result(), _bench()
    text = bench.table(result["estimates"], result["layers"])
    assert RESULT.with_suffix(".md").read_text().strip() == text
    assert text in (ROOT / "docs" / "benchmarks.md").read_text()


def test_the_peaks_are_docs_gpus_shape_rows() -> None:
    peaks = _bench().gpu_peaks((ROOT / "docs" / "gpu.md").read_text())
    assert peaks == {("grpolab", "smollm2-135m-shape"): 10106.0, ("trl", "smollm2-135m-shape"): 8058.0,
                     ("grpolab", "qwen2.5-0.5b-shape"): 21029.0, ("trl", "qwen2.5-0.5b-shape"): 14357.0}
    assert {(row["engine"], row["model"]): row["peak_mib"] for row in _result()["estimates"]} == peaks


def test_the_docs_quote_the_results() -> None:
    rows = {(row["engine"], row["model"]): row for row in _result()["estimates"]}
    compare = " ".join((ROOT / "docs" / "compare.md").read_text().split())
    for engine in ("grpolab", "trl"):
        small, large = rows[engine, "smollm2-135m-shape"], rows[engine, "qwen2.5-0.5b-shape"]
        assert f"{small['total_mib']:,.0f} and {large['total_mib']:,.0f} MiB" in compare or (
            f"{small['total_mib']:,.0f} MiB for the SmolLM2 shape and {large['total_mib']:,.0f} MiB for the "
            "Qwen2.5-0.5B shape") in compare
        assert f"{small['peak_mib']:,.0f} and {large['peak_mib']:,.0f} MiB" in compare
        assert rows["trl", small["model"]]["before_mib"] == small["before_mib"]  # the old count: one for both
    small, large = rows["grpolab", "smollm2-135m-shape"], rows["grpolab", "qwen2.5-0.5b-shape"]
    assert f"they were {small['before_mib']:,.0f} and {large['before_mib']:,.0f} MiB" in compare
    ratios = [row["total_mib"] / row["peak_mib"] for row in rows.values()]
    assert all(ratio < 1 for ratio in ratios)  # below every measured peak
    closest = max(rows.values(), key=lambda row: row["total_mib"] / row["peak_mib"])
    assert (closest["engine"], closest["model"]) == ("trl", "qwen2.5-0.5b-shape")
    assert f"TRL's Qwen2.5 run is the closest: {max(ratios):.2f} of its peak" in compare
    shares = [row["forwarded"] / row["measured"] for row in _result()["layers"]]
    assert all(share < 1 for share in shares)  # the lower bound holds at the real sizes too
    spread = f"{min(shares):.2f} to {max(shares):.2f}"
    assert f"it is {spread} of it" in compare
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    line = f"the estimate is {min(ratios):.2f}-{max(ratios):.2f} of those peaks, a layer's activations "
    assert line + spread.replace(" to ", "-") in benchmarks
