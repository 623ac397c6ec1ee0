"""``grpolab gradients``: sample one rollout batch, score it, and print the geometry of its policy gradient.

Effective / stable rank and energy counts of several candidate gradient matrices, the rank-2 check, gradient
sparsity and the zero-advantage shares (see ``grpolab.gradient_geometry`` and docs/gradient-geometry.md).
The task, verifier, reward-granularity, LoRA and dtype flags are ``TrainConfig``'s (the same as ``grpolab
train``'s), so a batch here is sampled, scored and credited as a training step would be.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np
import torch
from rich.table import Table

from grpolab.config import TrainConfig, add_config_arguments, build_config
from grpolab.progress import console

# TrainConfig settings that this command shares with `grpolab train` (flags generated from the dataclass)
_SHARED = ("task_options", "verifier", "advantage_kwargs", "reward_granularity", "lora", "lora_r", "lora_alpha",
           "lora_targets", "dtype", "sampler_dtype")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded", help="model name, directory, or grpolab run directory")
    parser.add_argument("--task", default="reverse", help="task: reverse, arith, gsm8k or math500")
    parser.add_argument("--data", help="data file/directory for gsm8k or math500")
    parser.add_argument("--advantage", default="dr_grpo", help="advantage estimator (see `grpolab estimators`)")
    parser.add_argument("--group-size", type=int, default=4, help="G: completions per prompt")
    parser.add_argument("--prompts", type=int, default=8, help="P: prompts in the batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt choice, sampling and sketch")
    parser.add_argument("--params", default="trainable",
                        help="columns: trainable, all, lora (adds fresh LoRA adapters if the model has none), "
                             "or comma-separated name substrings")
    parser.add_argument("--sketch-dim", type=int, default=None, help="CountSketch width (default: exact rows)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="completion budget (default: task's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_config_arguments(parser, TrainConfig, only=_SHARED,
                         help_overrides={"lora": "wrap the model in fresh LoRA adapters (--lora-r, --lora-alpha, "
                                                 "--lora-targets) before measuring; columns: --params"})


def _config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig this batch is sampled and credited under (validated like a training run's)."""
    shared = {name: getattr(args, name) for name in _SHARED if getattr(args, name, None) is not None}
    return build_config({"model": args.model, "task": args.task, "data": args.data, "advantage": args.advantage,
                         "group_size": args.group_size, "seed": args.seed, "temperature": args.temperature,
                         **shared})


def _sample_batch(args: argparse.Namespace, config: TrainConfig, policy: Any, model: torch.nn.Module) -> Any:
    """One rollout batch of ``args.prompts`` training prompts x ``args.group_size`` samples, scored (per token
    too under ``--reward-granularity token``)."""
    from grpolab import verifiers
    from grpolab.collect import collect_batch
    from grpolab.training_state import load_task_for
    from grpolab.training_step import StepBatch
    from grpolab.verifiers.process import get_process_verifier

    task = load_task_for(config)
    process = get_process_verifier(task.verifier) if config.reward_granularity == "token" else None
    rng = np.random.default_rng(args.seed)
    problems = [task.train[i] for i in rng.choice(len(task.train), size=min(args.prompts, len(task.train)),
                                                  replace=False)]
    batch = collect_batch(model, policy.tokenizer, problems, verifiers.get_verifier(task.verifier),
                          num_samples=args.group_size, max_new_tokens=args.max_new_tokens or task.max_new_tokens,
                          use_chat_template=task.use_chat_template, temperature=args.temperature,
                          generator=torch.Generator().manual_seed(args.seed), dtype=config.sampler_dtype,
                          process_verifier=process)
    return StepBatch.make(problems, batch.rollout, batch.rewards, batch.token_rewards)


def _model_for(args: argparse.Namespace, config: TrainConfig, policy: Any) -> torch.nn.Module:
    """The policy's model; with ``--lora``, or ``--params lora`` and no adapters present, wrapped in fresh LoRA
    adapters."""
    model = policy.model
    has_lora = any("lora_" in name for name, _ in model.named_parameters())
    if config.lora or (args.params == "lora" and not has_lora):
        from grpolab.training_state import wrap_lora

        model = wrap_lora(model, config if config.lora else TrainConfig(lora=True))
    return model.eval()


def _advantages(config: TrainConfig, batch: Any) -> torch.Tensor:
    """Advantages [P, G] of the outcome rewards, or [B, T] of the per-token rewards."""
    from grpolab.advantages import compute_advantages
    from grpolab.errors import UserError
    from grpolab.process_rewards import token_advantages

    try:
        if batch.token_rewards is not None:
            return token_advantages(config.advantage, batch.token_rewards, batch.completion_mask, batch.group_size,
                                    **config.advantage_kwargs)
        return compute_advantages(config.advantage, batch.rewards, **config.advantage_kwargs)
    except ValueError as error:
        raise UserError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    import contextlib

    from grpolab.gradient_geometry import analyze_gradients
    from grpolab.models import load_policy

    config = _config(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    policy = load_policy(args.model)
    model = _model_for(args, config, policy)
    batch = _sample_batch(args, config, policy, model)
    advantages = _advantages(config, batch)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if config.dtype == "bfloat16"
                else contextlib.nullcontext())
    with autocast:
        metrics = analyze_gradients(model, batch, advantages, params=args.params, sketch_dim=args.sketch_dim,
                                    seed=args.seed, temperature=args.temperature)
    settings = {key: getattr(args, key) for key in ("model", "task", "advantage", "group_size", "prompts", "seed",
                                                    "params", "sketch_dim")}
    settings.update(reward_granularity=config.reward_granularity, lora=config.lora, dtype=config.dtype)
    settings["reward_mean"] = float(np.nanmean(batch.rewards)) if batch.rewards.size else 0.0
    if args.json:
        print(json.dumps({**settings, "metrics": {k: _finite_or_none(v) for k, v in metrics.items()}}))
        return 0
    _print(settings, metrics)
    return 0


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _print(settings: dict[str, Any], metrics: dict[str, float]) -> None:
    console.print(" ".join(f"{k}={v}" for k, v in settings.items()))
    ranks = Table("matrix", "effective rank", "stable rank", "energy90", "energy99", title="gradient spectrum")
    names = sorted({k[5:].rsplit("_", 2)[0] for k in metrics if k.endswith("_effective_rank")})
    for name in names:
        values = [metrics[f"grad/{name}_{key}"] for key in ("effective_rank", "stable_rank", "energy90", "energy99")]
        ranks.add_row(name, *(f"{v:.3f}" for v in values))
    console.print(ranks)
    rest = Table("metric", "value", title="checks, sparsity, credit assignment")
    for key, value in metrics.items():
        if not any(key.endswith(suffix) for suffix in ("_effective_rank", "_stable_rank", "_energy90", "_energy99")):
            rest.add_row(key, f"{value:.4g}")
    console.print(rest)
