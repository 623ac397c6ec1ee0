"""``grpolab eval``: evaluate a model or a run directory on a task's test split: greedy accuracy, the
pass@k curve (unbiased estimator over n samples), maj@k, pass^k and avg@n with their standard errors, and the
per-prompt success histogram. ``--from-samples`` re-scores a harness's per-sample files instead
(``grpolab.commands.rescore``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from grpolab.commands.flags import add_config_arguments, config_from_args
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text, check_output_file
from grpolab.progress import results_console as console

# The TrainConfig fields this command reads; each is a flag as in `grpolab train`.
EVAL_FIELDS = ("model", "task", "data", "prompt_column", "reference_column", "task_options", "verifier", "seed",
               "temperature", "max_new_tokens", "eval_samples", "eval_limit", "threads",
               "device")
# Where `grpolab eval` differs from a training run's evaluations: more samples per prompt for a finer pass@k
# curve, and every test prompt. Precedence: TrainConfig defaults < these < flags.
EVAL_TRAIN_DEFAULTS: dict[str, Any] = {"eval_samples": 16, "eval_limit": None}
EVAL_ALIASES = {"eval_samples": "--n", "eval_limit": "--limit"}  # the command's earlier, shorter spellings
# What `eval --model RUN` (or RUN/final) takes from the run's config.yaml where no flag gives it: the task it trained
# on, as one block (a flag naming any of TASK_FIELDS takes none of them), and how it sampled.
TASK_FIELDS = ("task", "data", "prompt_column", "reference_column", "task_options")
RUN_FIELDS = (*TASK_FIELDS, "verifier", "temperature", "max_new_tokens")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, TrainConfig, defaults=EVAL_TRAIN_DEFAULTS, only=EVAL_FIELDS, aliases=EVAL_ALIASES)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", help="also write the result as JSON to this file")
    parser.add_argument("--from-samples", nargs="+", metavar="PATH",
                        help="re-score lm-eval samples_*.jsonl or lighteval details_*.parquet files (or directories "
                             "of them) with the task's verifier (or --verifier) instead of sampling a model; only "
                             "--verifier, --json and --out apply")
    parser.add_argument("--against", metavar="B",
                        help="paired pass@k against B on the same prompts, with a simultaneous 95%% band over k: "
                             "with --from-samples FILE another samples file; with --model RUN a run directory (its "
                             "end evaluation) or a JSON file of grpolab eval --out; nothing is sampled again")
    parser.add_argument("--compare", metavar="DIR",
                        help="paired pass@k of two arms (--arms A,B) of a grpolab compare --out DIR, per G: the "
                             "prompt-level band and the seed-level interval")
    parser.add_argument("--arms", metavar="A,B", help="the two arms --compare pairs (estimators as the report names "
                                                      "them, e.g. sign,dr_grpo)")
    parser.add_argument("--trust-run-code", action="store_true",
                        help="with --model RUN: import the task or verifier that the run's config.yaml names by "
                             "dotted path (pkg.module:function); only for run directories you trust")
    parser.add_argument("--resamples", type=int, default=2000,
                        help="bootstrap resamples of the prompts for the paired band (default: 2000; seed 0)")


def _run_paired(args: argparse.Namespace) -> int:
    from grpolab.commands import paired

    given = [f"--{name.replace('_', '-')}" for name in EVAL_FIELDS if name not in ("verifier", "model")
             and getattr(args, name, None) is not None]
    if given:
        raise UserError(f"a paired comparison reads evaluations already made; {', '.join(given)} would not apply: "
                        "leave them out")
    if args.compare:
        if args.against or args.from_samples or args.model:
            raise UserError("--compare DIR pairs two arms of a sweep; leave out --against, --from-samples and --model")
        return paired.run_compare(args)
    return paired.run_against(args)


def run(args: argparse.Namespace) -> int:
    if args.out:
        check_output_file(args.out)  # before minutes of sampling, not after
    if args.against or args.compare:
        return _run_paired(args)
    if args.from_samples:
        from grpolab.commands import rescore

        ignored = [f"--{name.replace('_', '-')}" for name in EVAL_FIELDS if name != "verifier"
                   and getattr(args, name, None) is not None]
        if ignored:
            raise UserError(f"--from-samples re-scores the files' responses; {', '.join(ignored)} would not apply: "
                            "leave them out (only --verifier, --json and --out go with --from-samples)")

        return rescore.run(args)
    from grpolab import devices
    from grpolab.evaluation import evaluate
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for

    run_values = _run_settings(args)
    config: TrainConfig = config_from_args(args, TrainConfig,
                                           file_values={**EVAL_TRAIN_DEFAULTS, **run_values})  # checks the values
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    device = devices.bind(config.device)  # a GPU that is not there fails before anything loads
    task = load_task_for(config)
    policy = load_policy(config.model)
    policy.model.to(device)
    result = evaluate(policy, task, n=config.eval_samples, limit=config.eval_limit, seed=config.seed,
                      temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    data = {"model": config.model, "task": config.task, **result.to_dict()}
    if args.out:
        atomic_write_text(args.out, json.dumps(data, indent=1))
    if args.json:
        print(json.dumps({k: v for k, v in data.items() if k not in ("successes", "problem_ids")}))
        return 0
    _print(data, result.successes, config.eval_samples)
    return 0


def _run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The task and sampling settings (``RUN_FIELDS``) of the run directory ``--model`` names, as its
    ``config.yaml`` saved them, less those the flags give; {} for a model that is no run directory. Said in one
    line, since they decide what the scores mean."""
    from grpolab.models import run_directory_of
    from grpolab.progress import console as notes
    from grpolab.train.settings import load_saved_config, refuse_run_code

    run_dir = run_directory_of(args.model) if args.model else None
    saved = load_saved_config(run_dir) if run_dir is not None else None
    if saved is None:
        return {}
    given = {name: getattr(args, name) for name in EVAL_FIELDS if getattr(args, name, None) is not None}
    skip = set(TASK_FIELDS) | {"verifier"} if any(name in given for name in TASK_FIELDS) else set()
    values = saved.to_dict()
    taken = {name: values[name] for name in RUN_FIELDS
             if name not in given and name not in skip and values[name] not in (None, {})}
    refuse_run_code(taken, run_dir / "config.yaml", given={}, trust=args.trust_run_code)
    defaults = TrainConfig().to_dict()
    shown = ", ".join(f"{name} {value!r}" for name, value in taken.items() if value != defaults[name])
    if shown:  # what makes this evaluation differ from one of the model outside its run
        notes.print(f"from {run_dir / 'config.yaml'}: {shown} (flags override them)", markup=False,
                    highlight=False, soft_wrap=True)
    return taken


def _print(data: dict, successes: list[int], n: int) -> None:
    console.print(f"{data['model']} on {data['task']} ({len(data['problem_ids'])} prompts)")
    console.print(f"greedy accuracy: {data['greedy_accuracy']:.3f}")
    if data["pass_at_k"]:
        from grpolab.commands.rescore import metric_table

        for line in metric_table(data["sampled"]):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        counts = np.bincount(np.asarray(successes, dtype=int), minlength=n + 1)
        console.print("prompts solved c of n times: " + "  ".join(f"{c}:{int(x)}" for c, x in enumerate(counts)))
