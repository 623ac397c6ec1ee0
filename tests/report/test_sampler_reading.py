"""The report's sentence on how the runs sampled (``report.sections.sampler_reading``)."""

from __future__ import annotations

import pandas as pd
import pytest

from grpolab.report.sections import sampler_reading

pytestmark = pytest.mark.fast


def _metrics(graph: list[float], fell_back: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": [f"run{i // 2}" for i in range(len(graph))], "step": [1, 2] * (len(graph) // 2),
                         "perf/sampler_graph": graph, "perf/sampler_fell_back": fell_back})


def test_a_run_that_fell_back_on_one_step_is_named() -> None:
    lines = sampler_reading(_metrics([1, 1, 1, 0], [0, 0, 0, 1]))
    assert len(lines) == 1 and "1 of 2 runs (run1)" in lines[0] and "summary.json" in lines[0]


def test_graph_sampling_throughout_is_said_and_the_cpu_says_nothing() -> None:
    assert sampler_reading(_metrics([1, 1, 1, 1], [0, 0, 0, 0])) == [
        "Every rollout of every run replayed the lean decoder's CUDA graph."]
    assert sampler_reading(_metrics([0, 0, 0, 0], [0, 0, 0, 0])) == []


def test_runs_that_predate_the_record_say_nothing() -> None:
    assert sampler_reading(pd.DataFrame({"run_id": ["a"], "step": [1]})) == []
    assert sampler_reading(None) == []
