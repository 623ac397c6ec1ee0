"""benchmarks/bench_decode_kernels.py: the event counting it does on a GPU's profile (fake CUDA events), its CPU mode as
a subprocess (every row, the per-layer split adding up to the full model's count, the compile flag's row traced by
torch.compile's 'eager' backend), and a compiler that fails giving a row that says why."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernels():
    path = ROOT / "benchmarks" / "bench_decode_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_decode_kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_decode_kernels"] = module
    spec.loader.exec_module(module)
    return module


def _event(name: str, device: str = "cpu", parent=None, children=()):
    kind = torch.autograd.DeviceType.CUDA if device == "cuda" else torch.autograd.DeviceType.CPU
    return SimpleNamespace(name=name, device_type=kind, cpu_parent=parent, cpu_children=list(children))


def test_cuda_events_count_kernels_copies_sets_and_launches(kernels) -> None:
    events = [
        _event("ampere_bf16_gemm", "cuda"),
        _event("void at::native::softmax", "cuda"),
        _event("Memcpy DtoD (Device -> Device)", "cuda"),
        _event("Memset (Device)", "cuda"),
        _event("cudaLaunchKernel"),
        _event("cudaLaunchKernel"),
        _event("cudaGraphLaunch"),
        _event("cudaMemcpyAsync"),
        _event("aten::mm"),
        _event("cudaStreamSynchronize"),
    ]
    assert kernels.count_events(events, cuda=True) == {"kernels": 2, "memcpy": 1, "memset": 1, "launches": 4}


def test_cpu_events_count_outermost_aten_operators_less_views_and_no_op_casts(kernels) -> None:
    region = _event("Torch-Compiled Region: 0/0")
    linear = _event("aten::linear", parent=region)
    cast = _event("aten::to", children=[_event("aten::_to_copy")])
    events = [
        region,
        linear,
        _event("aten::mm", parent=linear),
        _event("aten::view"),
        _event("aten::to"),
        cast,
        _event("aten::softmax"),
        _event("cudaLaunchKernel"),
    ]
    assert kernels.count_events(events, cuda=False)["kernels"] == 3  # linear (under a non-aten wrapper), cast, softmax


def test_cpu_mode_prints_every_row_and_the_layers_add_up(tmp_path: Path) -> None:
    out = tmp_path / "kernels.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_decode_kernels.py"),
            "--cpu",
            "--compile",
            "default",
            "--compile-backend",
            "eager",
            "--steps",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {row["variant"]: row for row in result["rows"]}
    assert list(rows) == ["static eager", "static eager, bf16 cache", "static eager, bf16 stream", "dynamic",
                          "compiled default"]
    assert rows["static eager"]["path"] == "lean static" and rows["dynamic"]["path"] == "lean dynamic"
    # the bfloat16 stream: no casts around the two norms, the projection and the rotated q/k (4), the rotation in one
    # matmul instead of three operations (2), and the two residual adds fused into their matmuls (2)
    assert rows["static eager, bf16 cache"]["per_layer"] - rows["static eager, bf16 stream"]["per_layer"] == 8
    for row in rows.values():
        assert row["per_layer"] > 0 and row["fixed"] > 0
        assert row["predicted"] == row["kernels"]  # fixed + 3 x per layer: the 3-layer model's own count
        assert f"| {row['variant']} | {row['path']} | {row['kernels']:.0f} | {row['per_layer']:.0f} |" in done.stdout
    # a rollout's token costs the decoder's step and the sampling loop's own work
    assert result["rollout_kernels_per_token"] > rows["dynamic"]["kernels"]


def test_a_compiler_that_fails_gives_a_row_that_says_why(kernels, monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(*args, **kwargs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(torch, "compile", unavailable)
    models = {layers: kernels.shape_model("smollm2-135m-shape", True, "cpu", layers=layers) for layers in (1, 2)}
    args = SimpleNamespace(steps=1, compile_backend="inductor")
    row = kernels.variant_row("compiled default", models, "static", "default", args)
    assert row["skipped"] == "torch.compile failed: RuntimeError: no C++ compiler found"
    assert "kernels" not in row
    assert "| compiled default | skipped: torch.compile failed" in kernels.table(
        {
            "device": "cpu",
            "torch": torch.__version__,
            "model": "m",
            "layers": 2,
            "rows": [row],
            "unit": "aten ops",
            "seconds": 0.0,
            "rollout_kernels_per_token": 1.0,
        }
    )


def test_the_docs_proxy_table_recomputes_from_the_committed_counts() -> None:
    """docs/benchmarks.md's table of operators a layer (the bfloat16 stream's section) and the count of the code that
    ran on the H100, from the committed files of ``bench_decode_kernels.py --cpu``; the 30-layer column is fixed +
    30 x per layer."""
    results = ROOT / "benchmarks" / "results" / "cpu-2026-11-28"
    current = json.loads((results / "decode-kernels.json").read_text())
    rows = {row["variant"]: row for row in current["rows"]}
    old = {row["variant"]: row for row in json.loads((results / "decode-kernels-8599f9a.json").read_text())["rows"]}
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    labels = {
        "static eager": "float32 cache (the CPU's static default)",
        "static eager, bf16 cache": "bfloat16 cache, float32 stream (CUDA's default)",
        "static eager, bf16 stream": "bfloat16 cache, bfloat16 stream",
    }
    for variant, label in labels.items():
        row = rows[variant]
        line = f"| {label} | {row['per_layer']:.0f} | {row['fixed']:.0f} | {row['fixed'] + 30 * row['per_layer']:.0f} |"
        assert line in docs
    assert (old["static eager, bf16 cache"]["per_layer"], old["static eager, bf16 cache"]["fixed"]) == (24, 20)
    assert "counts 24\noperators a layer and 20 fixed" in docs
    dynamic = rows["dynamic"]
    assert (rows["static eager"]["per_layer"], dynamic["per_layer"], dynamic["fixed"]) == (22, 22, 8)
    assert "counted 22 operators per layer in both step modes, 20 fixed\nin the static step and 8" in docs
    assert f"and {current['rollout_kernels_per_token']:.1f} per token" in docs


def test_the_docs_ab_table_is_the_committed_runs() -> None:
    """The bfloat16 stream section's A/B table quotes the committed ``ab_versions.py`` outputs, row for row, and
    every A/B ratio lies inside the A/A control's spread, as the text says."""
    results = ROOT / "benchmarks" / "results" / "cpu-2026-11-28"

    def ratios(name: str) -> dict[str, tuple[str, ...]]:
        rows = [line.split("|")[1:-1] for line in (results / name).read_text().splitlines()[2:] if line.strip()]
        return {cells[0].strip(): tuple(c.strip() for c in cells[1:4]) for cells in rows}

    ab, aa = ratios("ab-6908351-vs-1d95ecf.md"), ratios("aa-1d95ecf.md")
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    labels = {"sample embedded": "sample embedded (16 prompts x 4 x 32 tokens)",
              "sample smollm2-135m": "sample SmolLM2-135M (4 x 4 x 32 tokens)",
              "RL step embedded": "RL step embedded (the defaults)"}
    for workload, label in labels.items():
        old, new, ratio = ab[workload]
        assert f"| {label} | {old} | {new} | {ratio} | {aa[workload][2]} |" in docs
    control = [float(row[2]) for row in aa.values()]
    assert all(min(control) <= float(row[2]) <= max(control) for row in ab.values())
    assert f"A/A control's spread ({min(control):.3f} to {max(control):.3f})" in docs
