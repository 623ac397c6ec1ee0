"""The tables of ``scripts/gpu_sampler_numbers.py``: its result (one record per section) as Markdown, the floors'
pass/fail lines, and the two files it rewrites after every section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_check_report import device_name as _device_name


def device_name(cpu: bool) -> str:
    """The GPU's name and torch's version (or the CPU mode), and grpolab's commit and, where the tree has changes
    (a GPU machine's copy of a newer tree over an older ``.git``), its source digest (``provenance.describe``)."""
    try:
        import torch

        version = f"torch {torch.__version__}"
    except ImportError:
        version = "no torch"
    from grpolab.provenance import describe, software

    return f"{_device_name(cpu)}, {version}, grpolab {describe(software())}"


def write(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-sampler-numbers.json").write_text(json.dumps(result, indent=1))
    (out / "gpu-sampler-numbers.md").write_text(markdown(result) + "\n")


def _ok(result: dict[str, Any], section: str) -> dict[str, Any] | None:
    record = result["sections"].get(section)
    return record["result"] if record and record["status"] == "ok" else None


def sampling_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        "| shape | rows x new tokens | tokens | seconds | tokens/s | bytes/step | roofline | path | peak GPU MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for section in ("sampling-smollm2", "sampling-smollm2-bf16-stream", "sampling-qwen2.5"):
        measured = _ok(result, section)
        for row in measured["rows"] if measured else []:
            path = row["path"] + (f" (fell back: {row['fallback']})" if row["fallback"] else "")
            peak = f"{row['peak_gpu_mib']:,.0f}" if row["peak_gpu_mib"] is not None else "n/a"
            lines.append(
                f"| {_shape(measured)} | {row['rows']} x {row['new_tokens']} (one pass) | {row['tokens']:,} "
                f"| {row['seconds']:.3f} | {row['tokens_per_s']:,.0f} | {row['bytes_per_step'] / 1e6:,.1f} MB "
                f"| {100 * row['roofline']:.1f}% | {path} | {peak} |"
            )
    return [*lines, "", result["roofline_formula"] + "."]


def _shape(measured: dict[str, Any]) -> str:
    """A sampling section's shape, and its residual stream where that is not the default float32."""
    stream = measured.get("stream", "float32")
    return measured["model"] + ("" if stream == "float32" else f", {stream} stream")


def floor_lines(result: dict[str, Any]) -> list[str]:
    """One line per floor and sampling section held to it: PASS or FAIL on a GPU, n/a in a smoke run, "not measured"
    when the default stream's section is missing (the bfloat16 stream's, an option, is left out when missing)."""
    lines = ["| floor | measured tokens/s | status |", "|---|---|---|"]
    for section in ("sampling-smollm2", "sampling-smollm2-bf16-stream"):
        measured = _ok(result, section)
        if measured is None:
            if section == "sampling-smollm2":
                lines.append("| the sampling floors (smollm2-135m-shape) | not measured | FAIL |")
            continue
        for row in measured["rows"]:
            floor = row["floor_tokens_per_s"]
            if floor is None:
                continue
            status = "n/a (smoke run)" if result["smoke"] else ("PASS" if row["tokens_per_s"] >= floor else "FAIL")
            lines.append(
                f"| {_shape(measured)}: {row['rows']} rows x {row['new_tokens']} tokens, one pass: >= {floor:,.0f} "
                f"| {row['tokens_per_s']:,.0f} | {status} |"
            )
    return lines


def rl_lines(result: dict[str, Any]) -> list[str]:
    measured = _ok(result, "rl-step")
    if measured is None:
        return ["(not measured)"]
    update = (
        measured["grpolab_update_ms"] / measured["trl_update_ms"] if measured.get("trl_update_ms") else float("nan")
    )
    return [
        f"{measured['model']}, LoRA, bfloat16, P = {measured['prompts']}, G = {measured['group_size']}, up to "
        f"{measured['max_new_tokens']} new tokens, grpolab's micro-batch {measured.get('micro_batch_size', 16)} rows "
        f"(TRL: one batch), {measured['steps_timed']} step(s) timed per side:",
        "",
        f"| | grpolab (ms) | TRL, {measured['trl_weights']} weights (ms) | grpolab / TRL |",
        "|---|---|---|---|",
        f"| RL step | {measured['grpolab_step_ms']:,.1f} | {measured['trl_step_ms']:,.1f} | "
        f"{measured['step_ratio']:.3f} |",
        f"| update alone | {measured['grpolab_update_ms']:,.1f} | {measured['trl_update_ms']:,.1f} | {update:.3f} |",
    ]


def update_lines(result: dict[str, Any]) -> list[str]:
    measured = _ok(result, "update")
    if measured is None:
        return ["(not measured)"]
    return [
        f"grpolab's update alone, {measured['model']}, P = {measured['prompts']}, G = {measured['group_size']}, up to "
        f"{measured['max_new_tokens']} new tokens, medians of 2 steps after a warm-up:",
        "",
        "| micro-batch (rows) | micro-batches | update, prefix-packed (ms) | update, padded forward (ms) | "
        "peak GPU (MiB) | estimate (MiB) | estimate / peak |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {row['micro_batch_size']} | {row['micro_batches']} | {row['update_ms']:,.1f} | "
            f"{row['update_padded_ms']:,.1f} | {_mib(row.get('peak_gpu_mib'))} | {_mib(row.get('estimate_mib'))} | "
            f"{_share(row.get('estimate_mib'), row.get('peak_gpu_mib'))} |"
            for row in measured["rows"]
        ),
        "",
        "Peak: `torch.cuda.max_memory_allocated` over the size's 6 steps, above what the process held before;",
        "estimate: `grpolab.engine.memory.run_peak_parts`, what `compare --runs-per-gpu` checks (a lower bound).",
    ]


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _share(estimate: float | None, peak: float | None) -> str:
    return "n/a" if not estimate or not peak else f"{estimate / peak:.2f}"


def markdown(result: dict[str, Any]) -> str:
    import bench_decode_kernels

    sections = result["sections"]
    lines = [
        f"Sampler numbers on {result['device']}: {sum(r['status'] == 'ok' for r in sections.values())} of "
        f"{len(sections)} sections measured in {result.get('seconds', 0):.0f} s"
        + (" (a smoke run on tiny models: not measurements)" if result["smoke"] else "")
        + ".",
        "",
    ]
    bandwidth = _ok(result, "bandwidth")
    lines += [
        f"Copy bandwidth (device to device, 1 GiB on a GPU, read + write bytes per second): "
        f"{bandwidth['bandwidth_gb_s']:,.0f} GB/s."
        if bandwidth
        else "Copy bandwidth: not measured.",
        "",
    ]
    lines += ["## Sampling", "", *sampling_lines(result), "", *floor_lines(result), ""]
    for section, title in (("kernels", "Kernels per decoding step"), ("compiled", "The static step compiled")):
        measured = _ok(result, section)
        lines += [f"## {title}", "", bench_decode_kernels.table(measured) if measured else "(not measured)", ""]
    lines += [
        "## The RL step and the update against TRL's",
        "",
        *rl_lines(result),
        "",
        "## The update by micro-batch size",
        "",
        *update_lines(result),
        "",
        "## Sections",
        "",
        "| section | status | seconds | error |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {r['status']} | {r['seconds']:.1f} | {r.get('error', '')} |" for name, r in sections.items()]
    return "\n".join(lines)
