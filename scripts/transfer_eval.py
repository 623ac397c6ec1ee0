"""Evaluate a finished comparison's reported runs on another task (transfer), and print the table.

    python scripts/transfer_eval.py runs/smollm2 --task gsm8k --data ../shared/data/gsm8k \
        --task-options '{"use_chat_template": true}' --limit 200

For every reported run of ``OUT/runs.csv`` (role ``result``), and for the start policy (the sweep's model),
this runs ``grpolab eval --model <run directory> ... --n 0 --json`` (greedy accuracy) unless
``OUT/transfer-<task>/<run>.json`` already holds its result, so an interrupted measurement resumes. Runs are
taken seed by seed, one estimator after another, so that a partial measurement stays balanced. Then it
prints a Markdown table: the start policy, and per estimator the mean, each seed and the Holm-adjusted Welch
p of every pair (``grpolab.stats``). ``--no-run`` prints the table from the results there so far; ``--csv``
also writes one row per policy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from grpolab import stats
from grpolab.advantages import display_order


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the comparison's --out directory (holds runs.csv and runs/)")
    parser.add_argument("--task", required=True)
    parser.add_argument("--data")
    parser.add_argument("--task-options", default="{}")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--no-run", action="store_true", help="only print the table of the results so far")
    parser.add_argument("--csv", type=Path, help="also write one row per policy (run_id, estimator, seed, accuracy)")
    return parser.parse_args()


def _reported_runs(out: Path) -> pd.DataFrame:
    runs = pd.read_csv(out / "runs.csv")
    runs = runs[runs["role"] == "result"].sort_values(["seed", "estimator"], key=_estimator_key)
    return runs[["run_id", "estimator", "seed", "model"]].reset_index(drop=True)


def _estimator_key(column: pd.Series) -> pd.Series:
    if column.name != "estimator":
        return column
    order = display_order(column)
    return column.map(order.index)


def _evaluate(model: str, target: Path, args: argparse.Namespace) -> None:
    command = [sys.executable, "-m", "grpolab.cli", "eval", "--model", model, "--task", args.task,
               "--task-options", args.task_options, "--n", "0", "--limit", str(args.limit), "--threads", "1",
               "--json", *(["--data", args.data] if args.data else [])]
    print(" ".join(command[2:]), file=sys.stderr, flush=True)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{model}: grpolab eval failed:\n{result.stderr[-2000:]}")
    staging = target.with_suffix(".tmp")
    staging.write_text(result.stdout.strip().splitlines()[-1])
    staging.replace(target)


def _accuracy(path: Path) -> float | None:
    return json.loads(path.read_text())["greedy_accuracy"] if path.is_file() else None


def _table(runs: pd.DataFrame, results: Path, start_model: str) -> str:
    start = _accuracy(results / "start.json")
    lines = ["| policy | runs | greedy accuracy, mean | per seed |", "|---|---|---|---|"]
    lines.append(f"| start ({start_model}) | 1 | {'-' if start is None else f'{100 * start:.1f}%'} | |")
    scores: dict[str, list[float]] = {}
    for estimator, rows in runs.groupby("estimator", sort=False):
        found = [(int(r.seed), _accuracy(results / f"{r.run_id}.json")) for r in rows.itertuples()]
        values = [v for _, v in found if v is not None]
        scores[str(estimator)] = values
        mean = f"{100 * sum(values) / len(values):.1f}%" if values else "-"
        seeds = ", ".join(f"seed {s}: {100 * v:.1f}%" for s, v in found if v is not None)
        lines.append(f"| {estimator} | {len(values)} of {len(found)} | {mean} | {seeds} |")
    return "\n".join(lines) + "\n\n" + _pairs(scores)


def _pairs(scores: dict[str, list[float]]) -> str:
    pairs = [(a, b) for a, b in itertools.combinations(scores, 2) if len(scores[a]) > 1 and len(scores[b]) > 1]
    if not pairs:
        return "(fewer than 2 runs per estimator: no test)"
    p_values = [stats.welch_t_test(scores[a], scores[b])[2] for a, b in pairs]
    adjusted = stats.holm_correction(p_values)
    return "\n".join(f"- {a} vs {b}: Holm-adjusted Welch p = {p:.2g} (n = {len(scores[a])} vs {len(scores[b])})"
                     for (a, b), p in zip(pairs, adjusted, strict=True))


def main() -> None:
    args = _arguments()
    runs = _reported_runs(args.out)
    results = args.out / f"transfer-{args.task}"
    results.mkdir(exist_ok=True)
    start_model = str(runs["model"].iloc[0])
    if not args.no_run:
        if not (results / "start.json").is_file():
            _evaluate(start_model, results / "start.json", args)
        for run in runs.itertuples():
            target = results / f"{run.run_id}.json"
            if not target.is_file():
                _evaluate(str(args.out / "runs" / run.run_id), target, args)
    print(_table(runs, results, start_model))
    if args.csv:
        _rows(runs, results, start_model).to_csv(args.csv, index=False)


def _rows(runs: pd.DataFrame, results: Path, start_model: str) -> pd.DataFrame:
    start = {"run_id": "start", "estimator": "", "seed": "", "model": start_model,
             "greedy_accuracy": _accuracy(results / "start.json")}
    rows = [{**run._asdict(), "greedy_accuracy": _accuracy(results / f"{run.run_id}.json")}
            for run in runs.itertuples(index=False)]
    return pd.DataFrame([start, *rows])


if __name__ == "__main__":
    main()
