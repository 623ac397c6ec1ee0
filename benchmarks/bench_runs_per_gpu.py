"""``grpolab compare``'s throughput (runs per hour) with K runs sharing each GPU (``--runs-per-gpu K``).

    on a GPU machine (one call):   python benchmarks/bench_runs_per_gpu.py --runs-per-gpu 1,2,4 --out bench.json
    tiny, on the CPU (tests/test_bench_runs_per_gpu.py):  python benchmarks/bench_runs_per_gpu.py --cpu

For each K it runs one ``grpolab compare`` as a subprocess, in a fresh ``--out``, with the same plan: the estimators
``--estimators`` x ``--seeds`` seeds at G = ``--group-size``, one lr (no selection), ``--steps`` steps, evaluations
on ``--eval-limit`` test prompts, no report. Runs per hour = the runs that finished x 3600 / the command's wall
seconds (the sweep's set-up included: the task, the memory check, the workers' start). The speed-up is against the
first K of the list. Plan enough runs that the largest K fills its slots (8 runs for K up to 4 on one GPU).

``--cpu`` runs a tiny plan on the CPU, where ``--runs-per-gpu`` is refused: K becomes ``--workers K`` with
``--device cpu``, the same concurrency on the host, so that this script's machinery is run by a test and cannot rot;
its numbers say nothing of a GPU. It prints a Markdown table and, with ``--out``, JSON (rewritten after every K).

``--random-shape NAME`` builds a random-weight model of a real model's shape (``scripts/gpu_check_shapes.SHAPES``:
``smollm2-135m-shape``, ``qwen2.5-0.5b-shape``; tiny on the CPU) in a temporary folder and gives it to every compare
as ``--model``: the throughput of that shape with no download; its rewards mean nothing. ``--engine trl`` times
TRL's engine instead of grpolab's. A K whose compare fails is recorded with its error and the next K runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TINY = {"estimators": "sign", "seeds": 2, "group_size": 2, "steps": 1, "eval_limit": 4, "prompts_per_step": 2,
        "eval_samples": 0}
"""The ``--cpu`` plan: two one-step runs."""


def compare_command(out: Path, runs_per_gpu: int, args: argparse.Namespace) -> list[str]:
    """The ``grpolab compare`` of one K: ``--runs-per-gpu K`` on the GPU, ``--workers K --device cpu`` on the CPU."""
    command = [sys.executable, "-m", "grpolab", "compare", "--out", str(out), "--model", args.model,
               "--engine", args.engine,
               "--estimators", args.estimators, "--seeds", str(args.seeds), "--group-sizes", str(args.group_size),
               "--lrs", "", "--lr", "1e-4", "--steps", str(args.steps), "--prompts-per-step",
               str(args.prompts_per_step), "--eval-limit", str(args.eval_limit), "--eval-samples",
               str(args.eval_samples), "--no-report"]
    if args.cpu:
        return [*command, "--device", "cpu", "--gpus-per-run", "0", "--workers", str(runs_per_gpu)]
    return [*command, "--runs-per-gpu", str(runs_per_gpu)]


def measure(runs_per_gpu: int, args: argparse.Namespace) -> dict[str, Any]:
    """One compare at ``runs_per_gpu``: its runs, wall seconds and runs per hour."""
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-runs-per-gpu-") as tmp:
        out = Path(tmp) / "out"
        command = compare_command(out, runs_per_gpu, args)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                                          os.environ.get("PYTHONPATH")]))}
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        seconds = time.perf_counter() - started
        runs_dir = out / "runs"
        runs = sum(1 for path in runs_dir.iterdir() if (path / "summary.json").is_file()) if runs_dir.is_dir() else 0
    row = {"runs_per_gpu": runs_per_gpu, "engine": args.engine, "runs": runs, "seconds": seconds,
           "runs_per_hour": runs * 3600 / seconds, "command": " ".join(command[2:])}
    if done.returncode != 0:
        row["error"] = f"exit {done.returncode}: {done.stderr[-2000:]}"
    return row


def markdown(rows: list[dict[str, Any]], cpu: bool) -> str:
    """The table: K, runs, seconds, runs per hour, speed-up against the first row."""
    label = "workers (CPU)" if cpu else "runs per GPU"
    lines = [f"| {label} | engine | runs | seconds | runs/hour | speed-up |", "|---|---|---|---|---|---|"]
    first = rows[0]["runs_per_hour"]
    for row in rows:
        speed_up = f"{row['runs_per_hour'] / first:.2f}x" if first > 0 else "n/a"
        failed = " (failed: see its error)" if "error" in row else ""
        lines.append(f"| {row['runs_per_gpu']} | {row['engine']} | {row['runs']} | {row['seconds']:.1f} | "
                     f"{row['runs_per_hour']:.0f} | {speed_up}{failed} |")
    return "\n".join(lines)


def build_random_shape(name: str, folder: Path, cpu: bool) -> str:
    """A random-weight model of ``name``'s shape (``gpu_check_shapes``) saved with its tokenizer in ``folder``."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_check_shapes

    if name not in gpu_check_shapes.SHAPES:
        raise SystemExit(f"--random-shape {name!r}: not a shape; the shapes are {', '.join(gpu_check_shapes.SHAPES)}")
    gpu_check_shapes.save_random_model(name, folder / name, cpu)
    return str(folder / name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-gpu", default="1,2,4", help="the K to measure, comma-separated (default 1,2,4)")
    parser.add_argument("--cpu", action="store_true", help="a tiny plan on the CPU, K as --workers (for the test)")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--random-shape", default=None, help="a random-weight model of this shape as --model")
    parser.add_argument("--engine", default="grpolab", choices=("grpolab", "trl"))
    parser.add_argument("--estimators", default="sign,dr_grpo")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--eval-limit", type=int, default=50)
    parser.add_argument("--eval-samples", type=int, default=8)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.cpu:
        for name, value in TINY.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    return args


def main(argv: list[str] | None = None) -> int:
    from grpolab.provenance import software  # the code that ran (provenance.describe)

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-shape-") as shapes:
        if args.random_shape:
            args.model = build_random_shape(args.random_shape, Path(shapes), args.cpu)
        rows = []
        for k in (int(k) for k in args.runs_per_gpu.split(",") if k.strip()):
            rows.append(measure(k, args))
            print(f"K = {k}: {rows[-1]['runs']} runs in {rows[-1]['seconds']:.1f} s", flush=True)
            if args.out:
                args.out.write_text(json.dumps({"cpu": args.cpu, "model": args.random_shape or args.model,
                                                "grpolab": software(), "rows": rows}, indent=1))
    print(markdown(rows, args.cpu))
    for row in rows:
        if "error" in row:
            print(f"K = {row['runs_per_gpu']} failed: {row['error']}", file=sys.stderr)
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
