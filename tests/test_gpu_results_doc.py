"""docs/benchmarks.md's H100 numbers of 2026-11-28 against the files they were read from
(benchmarks/results/h100-2026-11-28/): every quoted figure is recomputed from the JSON, so that an edit of either
side without the other fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "h100-2026-11-28"
DOC = (ROOT / "docs" / "benchmarks.md").read_text()


def _result(name: str, section: str) -> dict:
    record = json.loads((RESULTS / f"{name}.json").read_text())["sections"][section]
    assert record["status"] == "ok", record
    return record["result"]


def _section() -> str:
    start = DOC.index("### Measured on one H100 80GB HBM3 (torch 2.11.0+cu130), 2026-11-28")
    return DOC[start:DOC.index("\n## ", start)]


@pytest.mark.parametrize(("name", "section", "label"), [
    ("sampler-1", "sampling-smollm2", "SmolLM2-135M"),
    ("sampler-2", "sampling-qwen2.5", "Qwen2.5-0.5B"),
])
def test_sampling_rows_match_the_files(name: str, section: str, label: str) -> None:
    text = _section()
    for row in _result(name, section)["rows"]:
        line = (f"| {label} | {row['rows']} x {row['new_tokens']} | {row['tokens_per_s']:,.0f} | "
                f"{100 * row['roofline']:.1f}% | {row['peak_gpu_mib']:,.0f} |")
        assert line in text, line
        assert row["path"] == "lean graph"


def test_the_floors_are_reported_as_failed() -> None:
    rows = _result("sampler-1", "sampling-smollm2")["rows"]
    floored = [row for row in rows if row["floor_tokens_per_s"]]
    assert [row["rows"] for row in floored] == [128, 512]
    assert all(row["tokens_per_s"] < row["floor_tokens_per_s"] for row in floored)
    assert "**Both floors fail:**" in _section()


def test_kernel_rows_and_derived_figures_match() -> None:
    text = _section()
    rows = _result("compiled", "compiled")["rows"]
    graph = next(row for row in rows if row["variant"] == "graph")
    compiled = next(row for row in rows if row["compile"])
    for row in rows:
        assert f"| {row['kernels']:.0f} | {row['per_layer']:.0f} | {row['fixed']:.0f} | {row['memset']:.0f} | " \
               f"{row['ms_per_step']:.2f} |" in text, row["variant"]
    assert f"predict {compiled['predicted']:.0f} for 30 layers, not\nthe {compiled['kernels']:.0f} measured" in text
    saved = graph["kernels"] - compiled["kernels"]
    assert f"removes {saved:.0f} kernels ({100 * saved / graph['kernels']:.0f}%)" in text
    first = _result("sampler-1", "kernels")
    assert first["rows"][1]["kernels"] == graph["kernels"]  # the two calls counted the same graph
    assert f"{first['rollout_kernels_per_token']:.0f} kernels per new token" in text
    per_kernel_us = 1000 * graph["ms_per_step"] / graph["kernels"]
    assert f"{per_kernel_us:.1f} us a kernel" in text
    step_128 = 1000 * 128 / _result("sampler-1", "sampling-smollm2")["rows"][0]["tokens_per_s"]
    assert f"takes {step_128:.2f} ms (128 / 38,314 tokens/s)" in text


def test_rl_step_and_update_match() -> None:
    text = _section()
    result = _result("sampler-1", "rl-step")
    assert (f"| RL step | {result['grpolab_step_ms']:,.1f} | {result['trl_step_ms']:,.1f} | "
            f"{result['step_ratio']:.3f} |") in text
    ratio = result["grpolab_update_ms"] / result["trl_update_ms"]
    update = f"| update alone | {result['grpolab_update_ms']:,.1f} | {result['trl_update_ms']:,.1f} | {ratio:.3f} |"
    assert update in text
    assert f"is {1 / result['step_ratio']:.2f}x TRL's speed" in text
    assert f"TRL spends {100 * result['trl_generate_share']:.1f}% of its step" in text
    assert f"(mean {result['mean_completion_tokens']:.1f}" in text
    assert f"it is {100 * result['grpolab_update_ms'] / result['grpolab_step_ms']:.0f}% of grpolab's step" in text
    assert "micro_batch_size" not in result  # the run of 2026-11-28 predates the field: 16 rows, bench_smollm2's


def test_runs_per_gpu_rows_match() -> None:
    text = _section()
    rows = [*json.loads((RESULTS / "runs-per-gpu-k1-k2.json").read_text())["rows"],
            *json.loads((RESULTS / "runs-per-gpu-k4.json").read_text())["rows"]]
    first = rows[0]["runs_per_hour"]
    assert [row["runs_per_gpu"] for row in rows] == [1, 2, 4]
    for row in rows:
        assert "error" not in row and "--random-shape" not in row["command"]
        assert f"| {row['runs_per_gpu']} | {row['runs']} | {row['seconds']:.1f} | {row['runs_per_hour']:.0f} | " \
               f"{row['runs_per_hour'] / first:.2f}x" in text
        assert "--runs-per-gpu " + str(row["runs_per_gpu"]) in row["command"]


def test_the_fair_rl_step_matches_its_file() -> None:
    """sampler-3: the RL-step section with grpolab's update in one micro-batch of P x G rows, as TRL's."""
    text = _section()
    result = _result("sampler-3", "rl-step")
    assert result["micro_batch_size"] == result["prompts"] * result["group_size"] == 128
    ratio = result["grpolab_update_ms"] / result["trl_update_ms"]
    assert (f"| RL step | {result['grpolab_step_ms']:,.1f} | {result['trl_step_ms']:,.1f} | "
            f"{result['step_ratio']:.3f} |") in text
    update_row = f"| update alone | {result['grpolab_update_ms']:,.1f} | {result['trl_update_ms']:,.1f} | {ratio:.3f} |"
    assert update_row in text
    assert f"grpolab's update takes {ratio:.2f}x TRL's time" in text
    assert f"the step is\n{1 / result['step_ratio']:.2f}x TRL's speed" in text
    assert f"TRL spends {100 * result['trl_generate_share']:.1f}% of its step generating" in text
    update = json.loads((RESULTS / "sampler-3.json").read_text())["sections"]["update"]
    assert update["status"] == "timeout" and f"({update['seconds']:.1f} s of its 120)" in text
