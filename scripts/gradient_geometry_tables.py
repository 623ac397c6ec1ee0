"""Regenerate the measurement tables of docs/gradient-geometry.md from ``grpolab gradients --json``.

    python scripts/gradient_geometry_tables.py arith      # "Measurements on the embedded model" (18 runs)
    python scripts/gradient_geometry_tables.py reverse    # "Embedded model, reverse task" (18 runs)
    python scripts/gradient_geometry_tables.py smollm2    # "SmolLM2-135M with LoRA" (4 runs, minutes each)

Each table runs its grid of ``grpolab gradients ... --threads 1 --json`` commands one after another (each
printed to stderr as it starts), then prints the table as Markdown on stdout: means over the seeds, except
"mixed groups", the total over the seeds. ``--save FILE`` also writes the runs' JSON results (with each
run's wall seconds); ``--load FILE`` prints a table from such a file without running anything.

``smollm2`` needs the ``smollm2`` extra and, for its trained-policy rows, a run directory of the real-model
experiment's `dr_grpo` seed 0 (``--trained``, default ``runs/smollm2-geometry/runs/dr_grpo-G4-seed0``, written by
``grpolab compare --config experiments/smollm2/compare.yaml --estimators dr_grpo --lrs "" --lr 2e-4 --seeds 1
--out runs/smollm2-geometry``, about 9 minutes).

Residuals below 1e-12 are rounding noise whose digits change from run to run; they are shown as a bound.
The commands run as ``python -m grpolab.cli`` with this interpreter, so ``PYTHONPATH=src`` selects a
checkout's code as it does for the ``grpolab`` command.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Run = dict[str, Any]
Column = tuple[str, Callable[[list[Run]], str]]

TRAINED = "runs/smollm2-geometry/runs/dr_grpo-G4-seed0"
SMOLLM2_TASK = ["--lora", "--lora-r", "16", "--task", "arith", "--task-options",
                '{"digits": [2, 2], "operators": "+", "operands": 2, "word_problems": true, '
                '"use_chat_template": true, "max_new_tokens": 32}',
                "--verifier", "gsm8k", "--dtype", "bfloat16", "--advantage", "grpo"]
DEFAULT_SEEDS = {"arith": "0,1,2", "reverse": "0,1,2", "smollm2": "0"}


def cells(table: str, trained: str) -> list[list[str]]:
    """The flags of each table cell (every run of a cell differs only in ``--seed``), in table order."""
    if table == "arith":
        return [["--model", "embedded-arith", "--task", "arith", "--advantage", advantage, "--group-size", size,
                 "--prompts", "32"] for size in ("2", "4", "8") for advantage in ("dr_grpo", "sign")]
    if table == "reverse":
        return [["--model", "embedded", "--task", "reverse", "--advantage", advantage, "--reward-granularity",
                 rewards, "--group-size", "4", "--prompts", "32"]
                for advantage in ("grpo", "dr_grpo", "sign") for rewards in ("outcome", "token")]
    if table == "smollm2":
        return [["--model", model, *SMOLLM2_TASK, "--reward-granularity", rewards, "--group-size", "4",
                 "--prompts", prompts]
                for model, prompts in (("smollm2-135m", "4"), (trained, "8")) for rewards in ("outcome", "token")]
    raise ValueError(table)


def commands(table: str, seeds: list[str], trained: str = TRAINED) -> list[list[str]]:
    return [["gradients", *flags, "--seed", seed, "--threads", "1", "--json"]
            for flags in cells(table, trained) for seed in seeds]


def run_all(argvs: list[list[str]]) -> list[Run]:
    results = []
    for index, argv in enumerate(argvs, 1):
        print(f"[{index}/{len(argvs)}] grpolab {shlex.join(argv)}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "grpolab.cli", *argv], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise SystemExit(f"grpolab {shlex.join(argv)} failed ({done.returncode}):\n{done.stderr}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["wall_seconds"] = time.perf_counter() - started
        results.append(result)
    return results


# ---------------------------------------------------------------------------- formatting


def _values(runs: list[Run], key: str) -> list[float]:
    values = [run[key] if key in run else run["metrics"][key] for run in runs]
    return [math.nan if value is None else float(value) for value in values]


def _mean(runs: list[Run], key: str) -> float:
    values = [v for v in _values(runs, key) if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def rank(name: str) -> Column:
    def format_(runs: list[Run]) -> str:
        found, stable = _mean(runs, f"grad/{name}_effective_rank"), _mean(runs, f"grad/{name}_stable_rank")
        return "-" if math.isnan(found) else f"{found:.2f} ({stable:.2f})"
    return f"{name} erank (stable)", format_


def small(header: str, key: str) -> Column:
    """Residual-like numbers: 0 as 0, rounding noise below 1e-12 as a bound, other tiny ones in e-notation,
    the rest with 2 significant digits."""
    def format_(runs: list[Run]) -> str:
        value = _mean(runs, key)
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) < 1e-12:
            return "< 1e-13" if abs(value) < 1e-13 else "< 1e-12"
        return f"{value:.1e}" if abs(value) < 1e-3 else f"{value:.2g}"
    return header, format_


def fixed(header: str, key: str, digits: int) -> Column:
    return header, lambda runs: f"{_mean(runs, key):.{digits}f}"


def total(header: str, key: str) -> Column:
    return header, lambda runs: f"{sum(_values(runs, key)):g}"


def setting(header: str, key: str, shown: Callable[[Any], str] = str) -> Column:
    return header, lambda runs: shown(runs[0][key])


def _policy(model: str) -> str:
    return "base" if model == "smollm2-135m" else "trained"


ZERO_ADV = fixed("zero-adv completions", "grad/zero_advantage_completions", 2)
COLUMNS: dict[str, list[Column]] = {
    "arith": [setting("G", "group_size"), setting("estimator", "advantage"),
              fixed("reward mean", "reward_mean", 3),
              *[rank(name) for name in ("weighted", "weighted_group", "group_sum", "split_group", "raw",
                                        "raw_group", "layer")],
              total("mixed groups", "grad/mixed_groups"), small("rank2_res", "grad/rank2_residual"),
              small("rank1_res", "grad/rank1_residual"), small("all_sum_share", "grad/all_sum_share"),
              fixed("sparsity", "grad/sparsity", 3), ZERO_ADV],
    "reverse": [setting("estimator", "advantage"), setting("rewards", "reward_granularity"),
                ("seeds", lambda runs: str(len(runs))), fixed("reward mean", "reward_mean", 3),
                *[rank(name) for name in ("weighted", "weighted_group", "group_sum", "layer", "raw", "raw_group")],
                total("mixed groups", "grad/mixed_groups"), small("rank2_res (max)", "grad/rank2_residual"),
                small("rank1_res", "grad/rank1_residual"),
                small("within-completion adv std", "grad/token_advantage_within_completion_std"), ZERO_ADV],
    "smollm2": [setting("policy", "model", _policy), setting("prompts", "prompts"),
                setting("rewards", "reward_granularity"), fixed("reward mean", "reward_mean", 3),
                *[rank(name) for name in ("weighted", "weighted_group", "group_sum", "layer", "raw")],
                total("mixed groups", "grad/mixed_groups"), small("rank2_res", "grad/rank2_residual"),
                ZERO_ADV, fixed("wall s", "wall_seconds", 0)],
}
CELL_KEYS = ("model", "task", "advantage", "reward_granularity", "group_size", "prompts")


def markdown(table: str, runs: list[Run]) -> str:
    """One row per cell (runs equal in everything but the seed), in the order of ``runs``."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run[key] for key in CELL_KEYS), []).append(run)
    columns = COLUMNS[table]
    lines = ["| " + " | ".join(header for header, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_(group) for _, format_ in columns) + " |" for group in groups.values()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(COLUMNS))
    parser.add_argument("--seeds", help="comma-separated seeds (default: 0,1,2; smollm2: 0)")
    parser.add_argument("--trained", default=TRAINED, help="smollm2: the trained policy's run directory")
    parser.add_argument("--save", type=Path, help="also write the runs' JSON results to this file")
    parser.add_argument("--load", type=Path, help="print the table from a file written by --save; run nothing")
    args = parser.parse_args(argv)
    if args.load:
        runs = json.loads(args.load.read_text())
    else:
        seeds = [s.strip() for s in (args.seeds or DEFAULT_SEEDS[args.table]).split(",") if s.strip()]
        runs = run_all(commands(args.table, seeds, args.trained))
        if args.save:
            args.save.write_text(json.dumps(runs, indent=1) + "\n")
    print(markdown(args.table, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
