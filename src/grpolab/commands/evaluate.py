"""``grpolab eval``: evaluate a model or a run directory on a task's test split: greedy accuracy, the
pass@k curve (unbiased estimator over n samples) and the per-prompt success histogram."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from grpolab.errors import UserError
from grpolab.progress import console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded", help="model name, directory, or grpolab run directory")
    parser.add_argument("--task", default="reverse",
                        help="task: reverse, arith, gsm8k, math500, file or pkg.module:builder")
    parser.add_argument("--data", help="data file/directory for gsm8k, math500 or file (default: hub id)")
    parser.add_argument("--prompt-column", help="file task: the column holding the prompt (default: prompt)")
    parser.add_argument("--reference-column", help="file task: the column holding the reference (default: answer)")
    parser.add_argument("--task-options", type=json.loads, default={},
                        help='task knobs as JSON, e.g. \'{"digits": [2, 2], "use_chat_template": true}\'')
    parser.add_argument("--verifier", help="verifier name or dotted path (default: the task's)")
    parser.add_argument("--n", type=int, default=16, help="samples per prompt for pass@k (0: greedy only)")
    parser.add_argument("--limit", type=int, default=None, help="evaluate at most this many test prompts")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature for pass@k")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="completion budget (default: task's)")
    parser.add_argument("--seed", type=int, default=0,
                        help="sampling seed; also the train/test cut of single-split data such as math500")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", help="also write the result as JSON to this file")


def run(args: argparse.Namespace) -> int:
    from grpolab.config import TrainConfig
    from grpolab.evaluation import evaluate
    from grpolab.models import load_policy
    from grpolab.training_state import load_task_for

    if args.n < 0:
        raise UserError(f"--n must be >= 0 (0: greedy accuracy only), got {args.n}")
    config = TrainConfig(task=args.task, data=args.data, task_options=args.task_options, verifier=args.verifier,
                         prompt_column=args.prompt_column, reference_column=args.reference_column,
                         seed=args.seed, eval_samples=args.n, eval_limit=args.limit, temperature=args.temperature,
                         max_new_tokens=args.max_new_tokens)  # checks the values
    task = load_task_for(config)
    policy = load_policy(args.model)
    result = evaluate(policy, task, n=args.n, limit=args.limit, seed=args.seed, temperature=args.temperature,
                      max_new_tokens=args.max_new_tokens)
    data = {"model": args.model, "task": args.task, **result.to_dict()}
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1))
    if args.json:
        print(json.dumps({k: v for k, v in data.items() if k not in ("successes", "problem_ids")}))
        return 0
    _print(data, result.successes, args.n)
    return 0


def _print(data: dict, successes: list[int], n: int) -> None:
    console.print(f"{data['model']} on {data['task']} ({len(data['problem_ids'])} prompts)")
    console.print(f"greedy accuracy: {data['greedy_accuracy']:.3f}")
    if data["pass_at_k"]:
        curve = "  ".join(f"pass@{k} {v:.3f}" for k, v in data["pass_at_k"].items())
        console.print(curve)
        counts = np.bincount(np.asarray(successes, dtype=int), minlength=n + 1)
        console.print("prompts solved c of n times: " + "  ".join(f"{c}:{int(x)}" for c, x in enumerate(counts)))
