"""The GPU check's report of results: the step table, the performance table (engine, model, median step time,
training-rollout tokens/s, evaluation time, peak GPU memory) and the sampling race's table, printed and written as
``gpu-check.md``, ``gpu-check.json`` and ``gpu-check.log``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from gpu_check_processes import tail
from gpu_check_sampling import TRL_SAMPLERS
from gpu_check_setup import MODELS, Step


def fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def perf_rows(steps: list[Step]) -> list[dict[str, Any]]:
    """One row per (engine, model) run: the embedded runs of step 1, then the real shapes."""
    rows = []
    for step in steps:
        if step.name.startswith(("train-", "shape-")):
            engine = step.name.split("-")[1]
            model = "embedded" if step.name.startswith("train-") else step.name.split("-", 2)[2]
            m = step.metrics
            rows.append({"engine": engine, "model": model, "status": step.status,
                         "median_step_s": m.get("median_step_s"), "tokens_per_s": m.get("tokens_per_s"),
                         "eval_s": m.get("eval_s"), "peak_gpu_mib": m.get("peak_gpu_mib")})
    return rows


def markdown(steps: list[Step], device: str, total_s: float) -> str:
    passed = sum(s.status == "pass" for s in steps)
    lines = [f"# GPU check: {passed} of {len(steps)} steps passed ({device}, {total_s:.0f} s)", "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s.name} | {s.status.upper()} | {s.seconds:.1f} | {s.detail.replace('|', '/')} |" for s in steps]
    lines += ["", "| engine | model | median step (s) | rollout tokens/s | evaluation (s, each) | peak GPU memory "
              "(MiB) | status |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['model']} | {fmt(r['median_step_s'], '.3f')} | {fmt(r['tokens_per_s'], '.0f')} "
              f"| {fmt(r['eval_s'], '.2f')} | {fmt(r['peak_gpu_mib'], '.0f')} | {r['status'].upper()} |"
              for r in perf_rows(steps)]
    sampling = next((s for s in steps if s.name == "sampling" and "grpolab" in s.metrics), None)
    if sampling is not None:
        m = sampling.metrics
        batch = m["batch"]
        lines += ["", f"Sampling on {MODELS[0]}, {batch['prompts']} prompts x {batch['samples']} samples x up to "
                  f"{batch['max_new_tokens']} tokens, {batch['device']}:", "",
                  "| sampler | completion tokens | seconds | tokens/s |", "|---|---|---|---|"]
        labels = {"grpolab": "grpolab rollout.sample", **TRL_SAMPLERS}
        lines += [f"| {label} | {m[key]['tokens']} | {m[key]['seconds']:.2f} | {m[key]['tokens_per_s']:.0f} |"
                  if "tokens" in m.get(key, {}) else f"| {label} | - | - | failed: {m.get(key, {}).get('error')} |"
                  for key, label in labels.items()]
        lines += ["", f"grpolab / the fastest TRL configuration ({labels[m['fastest_trl']]}): {m['ratio']:.2f}x"]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, steps: list[Step], work: Path, device: str, total_s: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(steps, device, total_s)
    (out / "gpu-check.md").write_text(text)
    (out / "gpu-check.json").write_text(json.dumps(
        {"device": device, "seconds": total_s, "passed": all(s.status == "pass" for s in steps),
         "steps": [dataclasses.asdict(s) for s in steps], "table": perf_rows(steps)}, indent=1, default=str))
    logs = sorted((work / "logs").glob("*.log")) if (work / "logs").is_dir() else []
    (out / "gpu-check.log").write_text("".join(f"===== {log.name}\n{tail(log)}\n" for log in logs))
    return text


def device_name(cpu: bool) -> str:
    """The GPU's name (or the CPU mode)."""
    if cpu:
        return "CPU mode"
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU visible"
    except Exception as error:  # the table must print whatever happens
        return f"torch unavailable ({error})"
