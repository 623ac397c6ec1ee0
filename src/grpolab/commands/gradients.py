"""``grpolab gradients``: sample one rollout batch, score it, and print the geometry of its policy gradient.

Effective / stable rank and energy counts of several candidate gradient matrices, the rank-2 check, gradient
sparsity and the zero-advantage shares (see ``grpolab.gradients.geometry`` and docs/gradient-geometry.md).
Every setting but ``--json`` is a ``TrainConfig`` field (``--params`` and ``--sketch-dim`` are the
``grad_analysis_*`` fields) with the flag of
``grpolab train``, so a batch here is sampled, scored and credited as a training step would be.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.table import Table

from grpolab.commands.flags import add_config_arguments, config_from_args
from grpolab.config import TrainConfig
from grpolab.progress import results_console as console

if TYPE_CHECKING:
    import torch

# The TrainConfig fields this command reads; each is a flag as in `grpolab train`.
GRADIENTS_FIELDS = ("model", "task", "data", "task_options", "verifier", "advantage", "advantage_kwargs",
                    "reward_granularity", "group_size", "prompts_per_step", "seed", "temperature", "max_new_tokens",
                    "lora", "lora_r", "lora_alpha", "lora_targets", "dtype", "sampler_dtype", "threads",
                    "grad_analysis_params", "grad_analysis_sketch_dim", "device")
# Where one analysed batch differs from a training run's: dr_grpo (the zero-sum estimator the rank-2 check is
# about) and 8 prompts. Precedence: TrainConfig defaults < these < flags.
GRADIENTS_TRAIN_DEFAULTS: dict[str, Any] = {"advantage": "dr_grpo", "prompts_per_step": 8}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, TrainConfig, defaults=GRADIENTS_TRAIN_DEFAULTS, only=GRADIENTS_FIELDS,
                         aliases={"prompts_per_step": "--prompts", "grad_analysis_params": "--params",
                                  "grad_analysis_sketch_dim": "--sketch-dim"},
                         help_overrides={"lora": "wrap the model in fresh LoRA adapters (--lora-r, --lora-alpha, "
                                                 "--lora-targets) before measuring; columns: --params"})
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def sample_batch(config: TrainConfig, policy: Any, model: torch.nn.Module, problems: list[Any] | None = None) -> Any:
    """One rollout batch of ``problems`` (default: ``prompts_per_step`` prompts drawn without replacement from the
    task's train split, seeded by the config's seed; refused where the split has fewer) x ``group_size`` samples,
    scored (per token too under ``--reward-granularity token``)."""
    import torch

    from grpolab import verifiers
    from grpolab.engine.collect import collect_batch
    from grpolab.engine.fit import check_evaluation_fits
    from grpolab.errors import UserError
    from grpolab.train.batch import StepBatch
    from grpolab.train.lifecycle import load_task_for
    from grpolab.verifiers.process import get_process_verifier

    task = load_task_for(config)
    process = get_process_verifier(task.verifier) if config.reward_granularity == "token" else None
    if problems is None:
        if config.prompts_per_step > len(task.train):
            raise UserError(f"--prompts {config.prompts_per_step} is more than the {len(task.train)} train prompts "
                            f"this command draws from for task {task.name!r}; lower --prompts")
        rng = np.random.default_rng(config.seed)
        problems = [task.train[i] for i in rng.choice(len(task.train), size=config.prompts_per_step, replace=False)]
    budget = check_evaluation_fits(model, policy.tokenizer, [p.prompt for p in problems], samples=config.group_size,
                                   max_new_tokens=config.max_new_tokens or task.max_new_tokens,
                                   use_chat_template=task.use_chat_template, explicit=config.max_new_tokens is not None,
                                   where="batch", lower="--group-size or --max-new-tokens")
    batch = collect_batch(model, policy.tokenizer, problems, verifiers.get_verifier(task.verifier),
                          num_samples=config.group_size, max_new_tokens=budget,
                          use_chat_template=task.use_chat_template, temperature=config.temperature,
                          generator=torch.Generator().manual_seed(config.seed), dtype=config.sampler_dtype,
                          process_verifier=process)
    return StepBatch.from_scored(batch)


def model_for(config: TrainConfig, policy: Any) -> torch.nn.Module:
    """The policy's model; with ``--lora``, or ``--params lora`` and no adapters present, wrapped in fresh LoRA
    adapters."""
    model = policy.model
    has_lora = any("lora_" in name for name, _ in model.named_parameters())
    if config.lora or (config.grad_analysis_params == "lora" and not has_lora):
        from grpolab.train.lifecycle import wrap_lora

        model = wrap_lora(model, config if config.lora else TrainConfig(lora=True))
    return model.eval()


def run(args: argparse.Namespace) -> int:
    import torch

    from grpolab import devices
    from grpolab.gradients.geometry import analyze_gradients
    from grpolab.models import check_finite_weights, load_policy
    from grpolab.train.step_advantages import estimator_statistics, step_advantages

    config: TrainConfig = config_from_args(args, TrainConfig, file_values=GRADIENTS_TRAIN_DEFAULTS)  # validated
    if config.threads:
        torch.set_num_threads(config.threads)
    device = devices.bind(config.device)  # a GPU that is not there fails before anything loads
    torch.manual_seed(config.seed)
    policy = load_policy(config.model)
    check_finite_weights(policy.model, f"the model {config.model}")  # its gradient spectrum has no meaning
    model = model_for(config, policy).to(device)
    batch = sample_batch(config, policy, model)
    advantages = step_advantages(batch, config, statistics=estimator_statistics(model, batch, config))
    with devices.compute_autocast(config.dtype, device):
        metrics = analyze_gradients(model, batch, advantages, params=config.grad_analysis_params,
                                    sketch_dim=config.grad_analysis_sketch_dim, seed=config.seed,
                                    temperature=config.temperature)
    settings = {"model": config.model, "task": config.task, "advantage": config.advantage,
                "group_size": config.group_size, "prompts": config.prompts_per_step, "seed": config.seed,
                "params": config.grad_analysis_params, "sketch_dim": config.grad_analysis_sketch_dim}
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
