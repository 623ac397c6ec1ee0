"""Evaluate a finished comparison's reported runs (and its start policy) on a task, and print the table.

    # transfer: greedy accuracy on GSM8K
    python scripts/evaluate_runs.py runs/smollm2 --task gsm8k --data ../shared/data/gsm8k \\
        --task-options '{"use_chat_template": true}' --limit 200
    # pass@k up to k = 8 on the comparison's own task: 8 samples at the training temperature
    python scripts/evaluate_runs.py runs/smollm2 --same-task --samples 8 --limit 100 --seeds 0,1,2

For every reported run of ``OUT/runs.csv`` (role ``result``; ``--seeds`` keeps some seeds) and for the start
policy (the sweep's model), this runs ``grpolab eval --model <run directory> ... --json`` unless
``OUT/evaluations/<task>-n<samples>-limit<limit>/<run>.json`` already holds its result, so an interrupted
measurement resumes. Runs are taken seed by seed, one estimator after another, so that a partial measurement
stays balanced. ``--same-task`` takes the task, its options, the verifier and the temperature from the
sweep's ``compare.yaml``. Then it prints a Markdown table: the start policy and, per estimator, the mean
greedy accuracy (and pass@k for k = 1, 2, 4, ... with ``--samples``) over the runs, with the Holm-adjusted p of
every pair of estimators on greedy accuracy, or on the largest k's pass@k: paired by seed where the two share
seeds (``grpolab.pairing``; Welch's test only with ``--unpaired``), and the output names the test.
``--no-run`` prints the table from the results so far; ``--csv`` also writes one row per policy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from grpolab import stats
from grpolab.advantages import display_order
from grpolab.io import inside
from grpolab.pairing import UNPAIRED_FLAG, compare_arms, which_tests


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the comparison's --out directory (holds runs.csv and runs/)")
    parser.add_argument("--task", help="the task to evaluate on (or --same-task)")
    parser.add_argument("--same-task", action="store_true", help="the sweep's own task, options, verifier, temperature")
    parser.add_argument("--data")
    parser.add_argument("--task-options", default="{}")
    parser.add_argument("--verifier")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--samples", type=int, default=0, help="samples per prompt for pass@k (0: greedy only)")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--seeds", help="comma-separated seeds of the reported runs to evaluate (default: all)")
    parser.add_argument("--no-run", action="store_true", help="only print the table of the results so far")
    parser.add_argument("--csv", type=Path, help="also write one row per policy")
    parser.add_argument(UNPAIRED_FLAG, action="store_true", dest="unpaired",
                        help="Welch's test although the estimators share seeds (not the default; the output says so)")
    args = parser.parse_args()
    if args.same_task:
        _take_sweep_task(args)
    if not args.task:
        parser.error("give --task, or --same-task")
    return args


def _take_sweep_task(args: argparse.Namespace) -> None:
    saved = yaml.safe_load((args.out / "compare.yaml").read_text())
    args.task = saved["task"]
    args.task_options = json.dumps(saved.get("task_options") or {})
    args.verifier = args.verifier or saved.get("verifier")
    args.temperature = args.temperature if args.temperature is not None else saved.get("temperature")
    args.data = args.data or saved.get("data")


def _reported_runs(out: Path, seeds: str | None) -> pd.DataFrame:
    runs = pd.read_csv(out / "runs.csv")
    runs = runs[runs["role"] == "result"]
    if seeds:
        runs = runs[runs["seed"].isin([int(s) for s in seeds.split(",")])]
    order = display_order(runs["estimator"])
    runs = runs.assign(rank=runs["estimator"].map(order.index)).sort_values(["seed", "rank"])
    return runs[["run_id", "estimator", "seed", "model"]].reset_index(drop=True)


def _command(model: str, args: argparse.Namespace) -> list[str]:
    optional = {"--data": args.data, "--verifier": args.verifier, "--temperature": args.temperature}
    return [sys.executable, "-m", "grpolab.cli", "eval", "--model", model, "--task", args.task,
            "--task-options", args.task_options, "--n", str(args.samples), "--limit", str(args.limit),
            "--threads", "1", "--json", *[x for k, v in optional.items() if v is not None for x in (k, str(v))]]


def _evaluate(model: str, target: Path, args: argparse.Namespace) -> None:
    command = _command(model, args)
    print(" ".join(command[2:]), file=sys.stderr, flush=True)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{model}: grpolab eval failed:\n{result.stderr[-2000:]}")
    staging = target.with_suffix(".tmp")
    staging.write_text(result.stdout.strip().splitlines()[-1])
    staging.replace(target)


def _result(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _measures(result: dict | None, ks: list[int]) -> dict[str, float]:
    if result is None:
        return {}
    return {"greedy": result["greedy_accuracy"], **{f"pass@{k}": result["pass_at_k"][str(k)] for k in ks}}


def _ks(samples: int) -> list[int]:
    return [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples] if samples else []


def _rows(runs: pd.DataFrame, results: Path, start_model: str, ks: list[int]) -> pd.DataFrame:
    start = {"run_id": "start", "estimator": "start", "seed": "", "model": start_model,
             **_measures(_result(results / "start.json"), ks)}
    rows = [{**run._asdict(), **_measures(_result(results / f"{run.run_id}.json"), ks)}
            for run in runs.itertuples(index=False)]
    columns = ["run_id", "estimator", "seed", "model", "greedy", *[f"pass@{k}" for k in ks]]
    return pd.DataFrame([start, *rows]).reindex(columns=columns)


def _table(rows: pd.DataFrame, ks: list[int], unpaired: bool = False) -> str:
    columns = ["greedy", *[f"pass@{k}" for k in ks]]
    lines = ["| policy | runs | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    scores: dict[str, pd.Series] = {}
    for estimator, group in rows.groupby("estimator", sort=False):
        done = group.dropna(subset=["greedy"])
        cells = [f"{100 * done[c].mean():.1f}%" if len(done) else "-" for c in columns]
        lines.append(f"| {estimator} | {len(done)} of {len(group)} | " + " | ".join(cells) + " |")
        if estimator != "start":
            scores[str(estimator)] = done.set_index("seed")[columns[-1]].astype(float)
    return "\n".join(lines) + f"\n\nTests on {columns[-1]}:\n" + _pairs(scores, unpaired)


def _pairs(scores: dict[str, pd.Series], unpaired: bool) -> str:
    """Every pair of estimators, paired by seed where they share seeds (``grpolab.pairing``), Holm-adjusted over
    the pairs; the first line names the tests that ran."""
    pairs = [(a, b) for a, b in itertools.combinations(scores, 2) if len(scores[a]) > 1 and len(scores[b]) > 1]
    if not pairs:
        return "(fewer than 2 runs per estimator: no test)"
    results = [compare_arms(scores[a], scores[b], unpaired=unpaired) for a, b in pairs]
    adjusted = stats.holm_correction([result["p"] for result in results])
    return which_tests(results) + "\n" + "\n".join(
        f"- {a} vs {b}: Holm-adjusted {result['test']} p = {p:.2g} (n = {len(scores[a])} vs {len(scores[b])})"
        for (a, b), result, p in zip(pairs, results, adjusted, strict=True))


def main() -> None:
    args = _arguments()
    runs = _reported_runs(args.out, args.seeds)
    results = args.out / "evaluations" / f"{args.task}-n{args.samples}-limit{args.limit}"
    results.mkdir(parents=True, exist_ok=True)
    start_model = str(runs["model"].iloc[0])
    if not args.no_run:
        if not (results / "start.json").is_file():
            _evaluate(start_model, results / "start.json", args)
        for run in runs.itertuples():
            if not (results / f"{run.run_id}.json").is_file():
                run_dir = inside(args.out / "runs", str(run.run_id), what="run_id of results.parquet")
                _evaluate(str(run_dir), results / f"{run.run_id}.json", args)
    ks = _ks(args.samples)
    rows = _rows(runs, results, start_model, ks)
    print(_table(rows, ks, args.unpaired))
    if args.csv:
        rows.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
