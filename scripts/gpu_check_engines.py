"""Steps 1 to 3 of the GPU check, each once per engine on the embedded model and task ``reverse``: ``train-E``
(the run learns), ``compare-E`` (``grpolab compare`` finishes every run) and ``resume-E`` (a run killed with SIGKILL
at its first checkpoint resumes and finishes), with the readers of the run directories they leave. What each step
checks: gpu_check.py's docstring."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_check_processes import kill_at_first_checkpoint, last_line
from gpu_check_report import fmt_pct
from gpu_check_setup import Step, StepFailed

if TYPE_CHECKING:
    from gpu_check_runner import Check


def train(check: Check, engine: str) -> Step:
    """Step 1: ``grpolab train --engine ENGINE`` on the embedded model; on the GPU its greedy accuracy must rise."""
    name = f"train-{engine}"

    def body(step: Step) -> None:
        run = check.work / name
        code, log = check.grpolab(name, ["train", "--engine", engine, "--model", check.model_flag(name, "embedded"),
                                         "--task", "reverse", "--advantage", "sign", *check.sizes.train,
                                         *check.device_flags(engine), "--no-progress", "--out", str(run)], "train")
        if code != 0:
            raise StepFailed(f"exit code {code}: {last_line(log)}")
        summary = json.loads((run / "summary.json").read_text())
        device = summary.get("device", "")
        if not check.cpu and not device.startswith("cuda"):
            raise StepFailed(f"asked for --device cuda, summary.json says it trained on {device!r}")
        if engine == "grpolab":
            sampled_as_graph(summary, cuda=not check.cpu)
        start, end = evaluations(run)
        step.metrics.update(run_perf(run, engine))
        step.metrics.update({"engine": engine, "model": "embedded", "start_greedy": start["greedy_accuracy"],
                             "end_greedy": end["greedy_accuracy"], "start_pass1": pass1(start),
                             "end_pass1": pass1(end)})
        gain = 100 * (end["greedy_accuracy"] - start["greedy_accuracy"])
        step.detail = (f"on {device}: greedy {100 * start['greedy_accuracy']:.1f}% -> "
                       f"{100 * end['greedy_accuracy']:.1f}% "
                       f"({gain:+.1f} points), pass@1 {fmt_pct(pass1(start))} -> {fmt_pct(pass1(end))}")
        need = check.sizes.learn_points
        if need is not None and gain < need:
            raise StepFailed(f"{step.detail}: rose less than {need:.0f} points")

    return check.record(name, body)


def compare(check: Check, engine: str) -> Step:
    """Step 2: ``grpolab compare --engine ENGINE`` with 2 estimators and 2 seeds finishes every run."""
    name = f"compare-{engine}"

    def body(step: Step) -> None:
        out = check.work / name
        code, log = check.grpolab(name, ["compare", "--engine", engine, "--model", check.model_flag(name, "embedded"),
                                         "--task", "reverse", "--estimators", "sign,dr_grpo", "--group-sizes", "4",
                                         "--seeds", "2", "--lrs", "", "--lr", "1e-3", *check.sizes.compare,
                                         *check.device_flags(engine), "--no-progress", "--out", str(out)],
                                  "compare")
        if code != 0:
            raise StepFailed(f"exit code {code}: {last_line(log)}")
        step.detail = compare_summary(out)

    return check.record(name, body)


def resume(check: Check, engine: str) -> Step:
    """Step 3: a run killed with SIGKILL at its first checkpoint resumes (on another device) and finishes."""
    name = f"resume-{engine}"

    def body(step: Step) -> None:
        run = check.work / name
        steps = check.sizes.resume_steps
        argv = ["train", "--engine", engine, "--model", check.model_flag(name, "embedded"), "--task", "reverse",
                "--steps", str(steps), *check.sizes.resume, *check.device_flags(engine), "--no-progress"]
        killed_at = kill_at_first_checkpoint([check.python, "-m", "grpolab", *argv, "--out", str(run)],
                                             check.work / "logs" / f"{name}-killed.log", run, engine,
                                             check.timeout("resume"), check.env)
        # a checkpoint must resume on another device: grpolab's engine resumes its GPU checkpoint on the CPU;
        # TRL's resumes where it ran, and a copy of it on the CPU
        across = ["--device", "cpu"] if engine == "grpolab" else []
        copy = run.with_name(f"{name}-on-cpu") if engine == "trl" else None
        if copy is not None:
            shutil.copytree(run, copy)
        code, log = check.grpolab(f"{name}-resumed", [*argv, "--out", str(run), "--resume", *across], "resume")
        if code != 0:
            raise StepFailed(f"killed at checkpoint {killed_at}; resume: exit code {code}: {last_line(log)}")
        step.detail = f"killed (SIGKILL) after checkpoint {killed_at}, resumed: {finished_run(run, steps)}"
        if copy is not None:
            code, log = check.grpolab(f"{name}-resumed-on-cpu", [*argv, "--out", str(copy), "--resume",
                                                                  "--device", "cpu"], "resume")
            if code != 0:
                raise StepFailed(f"{step.detail}; its copy resumed on the CPU: exit code {code}: "
                                 f"{last_line(log)}")
            step.detail += f"; a copy resumed on the CPU: {finished_run(copy, steps)}"

    return check.record(name, body)


def finished_run(run: Path, steps: int) -> str:
    """What a resumed run's files say, as a detail; ``StepFailed`` unless it finished with steps 1..``steps`` logged
    once each."""
    summary = json.loads((run / "summary.json").read_text())
    logged = sorted({row["step"] for row in read_jsonl(run / "metrics.jsonl")})
    detail = (f"status {summary.get('status')}, {summary.get('steps')} steps, metrics.jsonl steps "
              f"{logged[0] if logged else '-'}..{logged[-1] if logged else '-'}")
    if summary.get("status") != "finished" or summary.get("steps") != steps or logged != list(range(1, steps + 1)):
        raise StepFailed(detail)
    return detail


def sampled_as_graph(summary: dict[str, Any], *, cuda: bool) -> None:
    """``StepFailed`` unless the run's rollouts all replayed the lean decoder's CUDA graph (on CUDA) or, anywhere,
    unless summary.json records how the run sampled, with no fall-back on CUDA."""
    sampler = summary.get("sampler") or {}
    paths = set(sampler.get("paths") or {})
    if not paths:
        raise StepFailed("summary.json records no sampler paths")
    if cuda and (paths != {"lean graph"} or sampler.get("fallback")):
        raise StepFailed(f"a CUDA run sampled {sorted(paths)} without being asked to (fell back: "
                         f"{sampler.get('fallback')})")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluations(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The start and end rows of a finished run's ``eval.jsonl``."""
    if json.loads((run / "summary.json").read_text()).get("status") != "finished":
        raise StepFailed(f"{run.name}: summary.json does not say finished")
    rows = read_jsonl(run / "eval.jsonl")
    start = [r for r in rows if r.get("phase") == "start"]
    end = [r for r in rows if r.get("phase") == "end"]
    if not start or not end:
        raise StepFailed(f"{run.name}: eval.jsonl lacks its start or end evaluation")
    return start[0], end[-1]


def pass1(row: dict[str, Any]) -> float | None:
    value = (row.get("pass_at_k") or {}).get("1")
    return None if value is None else float(value)


def run_perf(run: Path, engine: str) -> dict[str, Any]:
    """Median step time and training-rollout tokens/s of a run, from its ``metrics.jsonl`` (see gpu_check.py's
    docstring for what each engine writes)."""
    rows = read_jsonl(run / "metrics.jsonl")
    step_times = [r["perf/step_time"] for r in rows if "perf/step_time" in r]
    rates = []
    for row in rows:
        if engine == "grpolab" and "perf/rollout_tokens_per_s" in row:
            rates.append(row["perf/rollout_tokens_per_s"])
        elif row.get("perf/rollout_time"):
            completions = row.get("rollout/completions_generated", 0) / max(row.get("step", 1), 1)
            rates.append(row.get("rollout/completion_length", 0) * completions / row["perf/rollout_time"])
    return {"steps": len(rows), "median_step_s": statistics.median(step_times) if step_times else None,
            "tokens_per_s": statistics.median(rates) if rates else None}


def compare_summary(out: Path) -> str:
    """What ``grpolab compare`` left: each estimator's mean end score; ``StepFailed`` when a run is missing."""
    import pandas as pd

    results = pd.read_parquet(out / "results.parquet")
    end = results[results["phase"] == "end"]
    estimators = sorted(set(end["estimator"]))
    if estimators != ["dr_grpo", "sign"] or len(end) < 4:
        raise StepFailed(f"results.parquet holds {len(end)} end rows of {estimators}; expected 2 seeds of "
                         "dr_grpo and sign")
    score = end.groupby("estimator")["greedy_accuracy"].mean()
    return f"{len(end)} runs; mean end greedy: " + ", ".join(f"{e} {100 * score[e]:.1f}%" for e in estimators)
