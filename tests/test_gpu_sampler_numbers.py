"""scripts/gpu_sampler_numbers.py in its smoke mode (``--cpu --tiny``): every section measures and the files hold its
rows; a section that raises or runs past its time limit in its child process is recorded and the next one runs; the
floors' lines and the roofline's bytes by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_sampler_numbers.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--tiny", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
        env=ENV,
    )


@pytest.fixture(scope="module")
def numbers():
    for name, folder in (("gpu_sampler_numbers", "scripts"), ("bench_decode_kernels", "benchmarks")):
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_sampler_numbers"]


def test_smoke_mode_measures_every_section(tmp_path: Path) -> None:
    done = _run(tmp_path, "--inline", "--compile-backend", "eager")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu-sampler-numbers.json").read_text())
    sections = result["sections"]
    assert list(sections) == ["bandwidth", "sampling-smollm2", "sampling-smollm2-bf16-stream", "sampling-qwen2.5",
                              "kernels", "rl-step", "update", "compiled"]
    assert all(record["status"] == "ok" for record in sections.values())
    stream = sections["sampling-smollm2-bf16-stream"]["result"]
    assert stream["stream"] == "bfloat16" and sections["sampling-smollm2"]["result"]["stream"] == "float32"
    assert {row["path"] for row in stream["rows"]} == {"lean static"}  # the CPU's static step: the stream's own
    # its settings are put back: the next section, in the same process (--inline), samples on the CPU's default step
    assert {row["path"] for row in sections["sampling-qwen2.5"]["result"]["rows"]} == {"lean dynamic"}
    for name in ("sampling-smollm2", "sampling-smollm2-bf16-stream", "sampling-qwen2.5"):
        rows = sections[name]["result"]["rows"]
        assert [(r["rows"], r["new_tokens"]) for r in rows] == [(4, 8), (8, 8), (4, 16)]
        assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 and r["roofline"] > 0 for r in rows)
    assert [r["floor_tokens_per_s"] for r in sections["sampling-smollm2"]["result"]["rows"]] == [1e5, 1.5e5, None]
    assert [r["variant"] for r in sections["compiled"]["result"]["rows"]][-1] == "compiled max-autotune-no-cudagraphs"
    rl = sections["rl-step"]["result"]
    assert rl["grpolab_update_ms"] > 0 and rl["trl_update_ms"] > 0 and rl["step_ratio"] > 0
    assert rl["trl_weights"] == "bfloat16"  # TRL trained its copy in bfloat16 weights
    assert rl["micro_batch_size"] == rl["prompts"] * rl["group_size"]  # one micro-batch, as TRL forwards one batch
    update = sections["update"]["result"]["rows"]
    assert [row["micro_batch_size"] for row in update] == [4]  # the tiny batch: P x G = 4 rows, one micro-batch
    for row in update:
        assert row["update_ms"] > 0 and row["update_padded_ms"] > 0
        assert row["peak_gpu_mib"] is None and row["estimate_mib"] > 0  # on a GPU: the peak beside the estimate
        assert row["packed_forwards"] == row["forwards"] > 0  # the packed timing did run the packed forward
    table = (tmp_path / "gpu-sampler-numbers.md").read_text()
    assert "8 of 8 sections measured" in table and "a smoke run on tiny models" in table
    assert table.count("n/a (smoke run)") == 4 and "| update alone |" in table
    assert "| smollm2-135m-shape, bfloat16 stream | 4 x 8 (one pass) |" in table
    assert "| 4 | 1 |" in table and "update, padded forward (ms)" in table and "| estimate / peak |" in table


def test_a_failing_section_is_recorded_and_the_next_one_runs(tmp_path: Path) -> None:
    done = _run(tmp_path, "--sections", "bandwidth,sampling-qwen2.5", "--inject-failure", "bandwidth")
    assert done.returncode == 1
    sections = json.loads((tmp_path / "gpu-sampler-numbers.json").read_text())["sections"]
    assert sections["bandwidth"]["status"] == "error"
    assert "failure injected into bandwidth" in sections["bandwidth"]["error"]
    assert "Traceback" in sections["bandwidth"]["log_tail"]
    assert sections["sampling-qwen2.5"]["status"] == "ok"  # it measured its own copy bandwidth
    assert sections["sampling-qwen2.5"]["result"]["bandwidth_gb_s"] > 0
    assert "| bandwidth | error |" in (tmp_path / "gpu-sampler-numbers.md").read_text()


def test_a_section_past_its_time_limit_is_killed_and_recorded(tmp_path: Path) -> None:
    done = _run(tmp_path, "--sections", "bandwidth", "--limit-scale", "0.01")  # 0.2 s: less than importing torch
    assert done.returncode == 1
    record = json.loads((tmp_path / "gpu-sampler-numbers.json").read_text())["sections"]["bandwidth"]
    assert record["status"] == "timeout" and record["error"] == "killed at its time limit of 0.2 s"
    assert "Copy bandwidth: not measured." in (tmp_path / "gpu-sampler-numbers.md").read_text()


def test_floor_lines_pass_and_fail_on_a_gpu_result(numbers) -> None:
    import gpu_sampler_report

    rows = [
        {"rows": 128, "new_tokens": 128, "tokens_per_s": 99_999.0, "floor_tokens_per_s": 1e5},
        {"rows": 512, "new_tokens": 128, "tokens_per_s": 150_000.0, "floor_tokens_per_s": 1.5e5},
        {"rows": 128, "new_tokens": 512, "tokens_per_s": 1.0, "floor_tokens_per_s": None},
    ]
    measured = {"model": "smollm2-135m-shape", "stream": "float32", "rows": rows}
    result = {"smoke": False, "sections": {"sampling-smollm2": {"status": "ok", "result": measured}}}
    lines = gpu_sampler_report.floor_lines(result)
    assert lines[2:] == [
        "| smollm2-135m-shape: 128 rows x 128 tokens, one pass: >= 100,000 | 99,999 | FAIL |",
        "| smollm2-135m-shape: 512 rows x 128 tokens, one pass: >= 150,000 | 150,000 | PASS |",
    ]
    stream_rows = [{**row, "tokens_per_s": 2e5} for row in rows]
    result["sections"]["sampling-smollm2-bf16-stream"] = {
        "status": "ok", "result": {**measured, "stream": "bfloat16", "rows": stream_rows}}
    assert gpu_sampler_report.floor_lines(result)[4:] == [
        "| smollm2-135m-shape, bfloat16 stream: 128 rows x 128 tokens, one pass: >= 100,000 | 200,000 | PASS |",
        "| smollm2-135m-shape, bfloat16 stream: 512 rows x 128 tokens, one pass: >= 150,000 | 200,000 | PASS |",
    ]
    result["sections"]["sampling-smollm2"] = {"status": "timeout", "error": "killed"}
    assert gpu_sampler_report.floor_lines(result)[2] == (
        "| the sampling floors (smollm2-135m-shape) | not measured | FAIL |")


def test_roofline_bytes_by_hand(numbers) -> None:
    from bench_decode_kernels import shape_model

    model = shape_model("smollm2-135m-shape", True, "cpu")  # hidden 64, 2 layers, 4 heads, 2 KV heads, MLP 128
    layer = 64 * 64 + 2 * (2 * 16 * 64) + 64 * 64 + 3 * 64 * 128  # q, k and v, o, gate, up and down
    weights = 2 * (2 * layer + 49152 * 64)
    cache = 2 * 2 * 2 * 8 * 2 * 16 * (32 + 64)  # K and V x bf16 x layers x B x Hkv x Dh x (Lp + T / 2)
    assert numbers.step_bytes(model, 8, 32, 128) == weights + cache
