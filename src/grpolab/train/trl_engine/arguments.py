"""Every ``TrainConfig`` setting, mapped onto TRL 1.16's ``GRPOConfig`` (and peft's ``LoraConfig``), kept on
grpolab's side, or refused: the table of the TRL engine.

Each field of ``TrainConfig`` sits in exactly one of three tables (``tests/integrations/test_trl_arguments.py``
enumerates the fields, so a new one cannot slip through); ``docs/integrations.md`` shows them as
``render_markdown`` gives them:

* ``MAPPED``: setting -> the ``GRPOConfig`` arguments it sets and how (``Mapped``); ``grpo_arguments`` does the
  conversion, and ``tests/integrations/test_trl_mapping.py`` moves each setting and checks that it changes TRL's
  arguments, and only those its row names.
* ``GRPOLAB_SIDE``: settings grpolab itself honours around TRL (the task, the verifier as TRL's reward
  function, the estimator, the evaluation, the logs, the process).
* ``REFUSED``: settings TRL cannot honour; a value other than the default is refused in one line naming the
  setting and the engine. A field in none of the tables (one added later) is refused the same way.

Each ``MAPPED`` row says how its setting converts (P prompts, G completions, B = P * G, n processes,
mu = num_iterations). The batch layout, the one conversion that combines settings: ``generation_batch_size`` = B
completions, ``num_generations`` = G; each process trains B / n of them in micro-batches of
``per_device_train_batch_size`` (the largest divisor of B / n that is at most ``micro_batch_size``), and
``gradient_accumulation_steps`` = ``steps_per_generation`` = the number of those micro-batches, so one optimiser
step consumes one rollout batch. TRL counts optimiser steps: a grpolab step is mu of them.

``report_to`` (and ``tensorboard``) stay on grpolab's side: TRL's ``report_to`` is ``none``, and the rows of
``metrics.jsonl`` (grpolab's names, TRL's logs as ``trl/*``) go to grpolab's backends at grpolab's steps, in the
same files as the grpolab engine. TRL's own callbacks would log at optimiser steps (mu per grpolab step), put
TensorBoard under ``checkpoints/runs`` and W&B in the working directory, and fail without a W&B account.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from grpolab import advantages as advantage_registry
from grpolab import capabilities, devices, remedies
from grpolab.config import TrainConfig
from grpolab.errors import UserError

__all__ = [
    "GRPOLAB_SIDE",
    "MAPPED",
    "REFUSED",
    "Mapped",
    "batch_layout",
    "check_supported",
    "grpo_arguments",
    "lora_config",
    "render_markdown",
    "settings_for_trl_name",
]

@dataclass(frozen=True)
class Mapped:
    """How one setting reaches TRL: the ``GRPOConfig`` arguments it sets (``peft_config.*``: peft's ``LoraConfig``),
    and how, where it is not the same value under another name. ``targets`` are exactly the arguments that change
    when the setting does (``tests/integrations/test_trl_mapping.py`` moves each setting and checks)."""

    targets: tuple[str, ...]
    how: str = ""


MAPPED: dict[str, Mapped] = {
    "group_size": Mapped(("num_generations", "generation_batch_size", "per_device_train_batch_size",
                          "gradient_accumulation_steps", "steps_per_generation"),
                         "`num_generations` = G; a generation batch of P·G completions"),
    "prompts_per_step": Mapped(("generation_batch_size", "per_device_train_batch_size", "steps_per_generation",
                                "gradient_accumulation_steps"),
                               "a generation batch of P·G completions, trained in one optimiser step"),
    "micro_batch_size": Mapped(("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation"),
                               "`per_device_train_batch_size` = the largest divisor of P·G / processes within it; "
                               "`gradient_accumulation_steps` = `steps_per_generation` = the micro-batches"),
    "steps": Mapped(("max_steps",), "`max_steps` = steps·mu (a grpolab step is mu optimiser steps)"),
    "seed": Mapped(("seed", "data_seed")),
    "lr": Mapped(("learning_rate",)),
    "lr_schedule": Mapped(("lr_scheduler_type",), "constant (`constant_with_warmup` with warm-up) / linear / cosine"),
    "warmup_steps": Mapped(("warmup_steps", "lr_scheduler_type"),
                           "`warmup_steps` = W·mu; TRL's first step gets lr 0 (grpolab: lr / W)"),
    "weight_decay": Mapped(("weight_decay",)),
    "adam_betas": Mapped(("adam_beta1", "adam_beta2"), "AdamW, `optim=\"adamw_torch\"`"),
    "max_grad_norm": Mapped(("max_grad_norm",)),
    "num_iterations": Mapped(("num_iterations", "max_steps", "save_steps", "warmup_steps"),
                             "mu = `num_iterations`; `max_steps`, `save_steps` and `warmup_steps` count mu per step"),
    "epsilon_low": Mapped(("epsilon", "epsilon_high"), "`epsilon` (and `epsilon_high` while that is unset)"),
    "epsilon_high": Mapped(("epsilon_high",)),
    "beta": Mapped(("beta",), "k3 without an importance weight: `use_bias_correction_kl=False`"),
    "loss_aggregation": Mapped(("loss_type",), "token_mean / seq_mean_token_mean / seq_mean_token_sum_norm -> "
                                               "`dapo` / `grpo` / `dr_grpo`; seq_mean_token_sum is refused"),
    "temperature": Mapped(("temperature",)),
    "top_p": Mapped(("top_p",), "`top_k=0`"),
    "max_new_tokens": Mapped(("max_completion_length",), "default: the task's"),
    "dtype": Mapped(("bf16",), "`bf16` (TRL's default True is overridden), `fp16=False`; with LoRA on a GPU the "
                               "base weights load in bfloat16"),
    "device": Mapped(("use_cpu",), "`use_cpu` where it resolves to the CPU; else accelerate's device (with one "
                                   "process the GPU named is made current)"),
    "lora": Mapped(("peft_config", "peft_config.r", "peft_config.lora_alpha", "peft_config.target_modules"),
                   "`peft_config=LoraConfig(...)`, dropout 0"),
    "lora_r": Mapped(("peft_config.r",)),
    "lora_alpha": Mapped(("peft_config.lora_alpha",)),
    "lora_targets": Mapped(("peft_config.target_modules",), "the targets present in the model"),
    "checkpoint_every": Mapped(("save_steps",), "`save_strategy=\"steps\"`, `save_steps` = N·mu (0: "
                                                "`save_strategy=\"no\"`); the last step is always saved"),
    "use_vllm": Mapped(("use_vllm",), "refused without CUDA or without the vllm package"),
    "vllm_mode": Mapped(("vllm_mode",)),
    "importance_sampling_level": Mapped(("importance_sampling_level",), "token / sequence (GSPO)"),
    "policy_loss": Mapped(("loss_type", "epsilon_high"), "cispo: `loss_type=\"cispo\"` with `epsilon_high` = "
                                                         "cispo_ratio_max (token-mean aggregation only); sapo, "
                                                         "luspo (seq_mean_token_mean only) and vespo (token_mean "
                                                         "only): the `loss_type` of that name"),
    "sapo_temperature_pos": Mapped(("sapo_temperature_pos",), "read under sapo"),
    "sapo_temperature_neg": Mapped(("sapo_temperature_neg",), "read under sapo"),
    "vespo_k_pos": Mapped(("vespo_k_pos",), "read under vespo"),
    "vespo_lambda_pos": Mapped(("vespo_lambda_pos",), "read under vespo"),
    "vespo_k_neg": Mapped(("vespo_k_neg",), "read under vespo"),
    "vespo_lambda_neg": Mapped(("vespo_lambda_neg",), "read under vespo"),
    "entropy_coef": Mapped(("entropy_coef",), "token_mean aggregation only: TRL's bonus is the token mean of each "
                                              "micro-batch whatever its `loss_type`"),
    "entropy_target": Mapped(("use_adaptive_entropy", "entropy_target"),
                             "`use_adaptive_entropy=True` (Skywork-OR1), `entropy_coef_min` 0 and `entropy_coef_max` "
                             "1 (TRL's); refused by engine grpolab"),
    "entropy_coef_delta": Mapped(("entropy_coef_delta",), "read under entropy_target"),
    "top_entropy_quantile": Mapped(("top_entropy_quantile",), "refused by engine grpolab"),
    "off_policy_mask_threshold": Mapped(("off_policy_mask_threshold",),
                                        "KL against vLLM's log-probs with `--use-vllm`, else against the "
                                        "sampling policy's"),
    "cispo_ratio_max": Mapped(("epsilon_high",), "under cispo"),
    "cispo_ratio_min": Mapped((), "TRL's CISPO has no lower bound: only unset is accepted"),
    "dual_clip_c": Mapped(("delta",), "TRL's two-sided clip: the same loss for c >= 1 + epsilon_high, refused below"),
    "mask_truncated_completions": Mapped(("mask_truncated_completions",)),
    "sampler_is_cap": Mapped(("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                              "vllm_importance_sampling_clip_max"),
                             "with vLLM: mode `token_truncate`, `clip_max` = the cap; unset: TRL's vLLM correction "
                             "is off"),
}

GRPOLAB_SIDE: dict[str, str] = {
    "model": "loaded by grpolab (load_policy) and handed to TRL as a model and tokenizer",
    "task": "the training prompts become TRL's dataset",
    "data": "read by the task", "prompt_column": "read by the task", "reference_column": "read by the task",
    "task_limit": "read by the task", "task_options": "read by the task",
    "verifier": "TRL's reward function scores with it",
    "advantage": "grpolab's estimator replaces TRL's advantages",
    "advantage_kwargs": "the estimator's hyper-parameters",
    "eval_every": "grpolab's own evaluation", "eval_samples": "grpolab's own evaluation",
    "eval_limit": "grpolab's own evaluation", "eval_start": "grpolab's own evaluation",
    "eval_split": "grpolab's own evaluation",
    "threads": "torch threads of the process", "progress": "grpolab's progress bar",
    "engine": "chooses this engine",
    "report_to": "grpolab's backends get metrics.jsonl's rows (runlog.open_backends); TRL's report_to is none",
    "tensorboard": "adds tensorboard to report_to",
    "keep_checkpoints": "grpolab keeps the newest N checkpoints, removing older ones only once the newest is sealed "
                        "with its checksums (trl_engine.checkpoints); TRL's save_total_limit is unset",
}

REFUSED: dict[str, str] = {
    "reward_granularity": "TRL trains on one advantage per completion",
    "budget": "TRL's trainer runs --steps steps; it cannot stop on a count of sampled completions or tokens",
    "stop_when_dead": "TRL's trainer runs --steps steps; grpolab's engine stops a run without signal",
    "sampler_dtype": "TRL samples with the model as loaded (or with vLLM)",
    "grad_analysis_every": "the gradient geometry needs grpolab's own update",
    "grad_analysis_params": "the gradient geometry needs grpolab's own update",
    "grad_analysis_sketch_dim": "the gradient geometry needs grpolab's own update",
    "grad_analysis_parts": "the gradient geometry needs grpolab's own update",
    "overlong_buffer": "TRL has no overlong reward shaping",
    "overlong_penalty": "TRL has no overlong reward shaping",
    **remedies.engine_refusals("trl"),  # each remedy's row says why TRL cannot run it (grpolab.remedies)
}

_LOSS_TYPES = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}
_DEFAULTS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _default(name: str) -> Any:
    f = _DEFAULTS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_for_trl_name(name: str) -> list[str]:
    """The grpolab settings whose first ``GRPOConfig`` target is ``name`` (``num_generations`` -> group_size,
    ``learning_rate`` -> lr; ``-`` and ``_`` alike), where grpolab spells it otherwise: what a TRL user typed."""
    wanted = name.replace("-", "_")
    return [setting for setting, mapped in MAPPED.items()
            if mapped.targets and mapped.targets[0] == wanted and setting != wanted]


def check_supported(config: TrainConfig) -> None:
    """Refuse, in one line naming the setting and the engine, a setting TRL cannot honour; and, as grpolab's engine
    does, an unknown estimator or bad ``--advantage-kwargs`` (``trainer.check_estimator``), before anything runs."""
    from grpolab.train.trainer import check_estimator

    check_estimator(config)
    if config.group_size < 2:
        raise UserError(f"group_size {config.group_size} is not supported by engine trl (TRL's GRPOTrainer needs at "
                        "least 2 generations per prompt); raise --group-size or use --engine grpolab")
    for name in (f.name for f in dataclasses.fields(config)):
        value = getattr(config, name)
        if name in MAPPED or name in GRPOLAB_SIDE or value == _default(name):
            continue
        why = REFUSED.get(name, "the TRL engine has no mapping for it yet")
        raise UserError(f"{name} {value!r} is not supported by engine trl ({why}); drop {_flag(name)} "
                        "or use --engine grpolab")
    per_token = capabilities.engine(config.engine).per_token_estimators
    if not per_token and advantage_registry.info(config.advantage).needs_token_statistics:
        from grpolab.integrations.trl import per_token_refusal  # imports trl: only on this refusal

        raise UserError(per_token_refusal(config.advantage))
    if config.loss_aggregation not in _LOSS_TYPES:
        raise UserError(f"loss_aggregation {config.loss_aggregation!r} is not supported by engine trl (TRL has no "
                        f"such loss); use one of {', '.join(_LOSS_TYPES)} or --engine grpolab")
    _check_loss_options(config)


def _check_loss_options(config: TrainConfig) -> None:
    """The loss options TRL can express only in part."""
    refusals = [
        (config.policy_loss == "cispo" and config.loss_aggregation != "token_mean", "policy_loss cispo",
         "TRL's CISPO aggregates over tokens only; add --loss-aggregation token_mean"),
        (config.policy_loss == "cispo" and config.cispo_ratio_min is not None, "cispo_ratio_min",
         "TRL's CISPO has no lower bound on the IS weight; drop --cispo-ratio-min"),
        (config.dual_clip_c is not None and config.dual_clip_c < 1 + config.clip_high, "dual_clip_c",
         "TRL's two-sided clip (delta) equals the dual clip only from 1 + epsilon_high up; raise it"),
        (config.policy_loss in ("sapo", "luspo") and config.loss_aggregation != "seq_mean_token_mean",
         f"policy_loss {config.policy_loss}", f"TRL's {config.policy_loss} averages over sequences as grpolab's "
         f"{config.policy_loss} does under --loss-aggregation seq_mean_token_mean; add it"),
        (config.policy_loss == "vespo" and config.loss_aggregation != "token_mean", "policy_loss vespo",
         "TRL's VESPO aggregates over tokens only; add --loss-aggregation token_mean"),
        ((config.entropy_coef > 0 or config.entropy_target is not None) and config.loss_aggregation != "token_mean",
         "entropy_coef", "TRL's entropy bonus is a token mean whatever the loss; add --loss-aggregation token_mean"),
        (config.sampler_is_cap is not None and not config.use_vllm, "sampler_is_cap",
         "without vLLM TRL samples with the trained model itself, so there is no sampler mismatch to correct; "
         "add --use-vllm or drop it"),
    ]
    for refused, setting, why in refusals:
        if refused:
            raise UserError(f"{setting} is not supported by engine trl as set: {why} (or use --engine grpolab)")


def _loss(config: TrainConfig) -> dict[str, Any]:
    """``loss_type`` and the ratio bounds: the clipped surrogate (aggregation as set), CISPO, or TRL's sapo / luspo
    / vespo with their parameters; the entropy terms."""
    options = {"sapo_temperature_pos": config.sapo_temperature_pos, "sapo_temperature_neg": config.sapo_temperature_neg,
               "vespo_k_pos": config.vespo_k_pos, "vespo_lambda_pos": config.vespo_lambda_pos,
               "vespo_k_neg": config.vespo_k_neg, "vespo_lambda_neg": config.vespo_lambda_neg, **_entropy(config),
               "off_policy_mask_threshold": config.off_policy_mask_threshold}
    if config.policy_loss == "cispo":
        return {"loss_type": "cispo", "epsilon": config.epsilon_low, "epsilon_high": config.cispo_ratio_max, **options}
    loss_type = config.policy_loss if config.policy_loss != "clip" else _LOSS_TYPES[config.loss_aggregation]
    return {"loss_type": loss_type, "epsilon": config.epsilon_low, "epsilon_high": config.clip_high,
            "delta": config.dual_clip_c, **options}


def _entropy(config: TrainConfig) -> dict[str, Any]:
    """The entropy bonus (fixed, or Skywork-OR1's adaptive control under ``entropy_target``) and the top-entropy
    token selection of "Beyond the 80/20 Rule"."""
    adaptive = config.entropy_target is not None
    return {"entropy_coef": config.entropy_coef, "use_adaptive_entropy": adaptive,
            "entropy_target": config.entropy_target if adaptive else 0.2,
            "entropy_coef_delta": config.entropy_coef_delta, "entropy_coef_min": 0.0, "entropy_coef_max": 1.0,
            "top_entropy_quantile": config.top_entropy_quantile}


def _sampler_correction(config: TrainConfig) -> dict[str, Any]:
    """grpolab's truncated importance sampling (per token, capped) as TRL's vLLM correction; off without it."""
    if config.sampler_is_cap is None:
        return {"vllm_importance_sampling_correction": False}
    return {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_truncate",
            "vllm_importance_sampling_clip_max": config.sampler_is_cap}


def batch_layout(config: TrainConfig, num_processes: int) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps): one rollout batch of B = P * G completions
    split over ``num_processes`` and trained in micro-batches of at most ``micro_batch_size``."""
    total = config.completions_per_step
    if total % num_processes:
        raise UserError(f"prompts_per_step x group_size = {total} completions do not split over {num_processes} "
                        "processes under engine trl; make it a multiple of the process count")
    local = total // num_processes
    per_device = max(d for d in range(1, min(config.micro_batch_size, local) + 1) if local % d == 0)
    return per_device, local // per_device


def _schedule(config: TrainConfig) -> str:
    if config.lr_schedule == "constant":
        return "constant_with_warmup" if config.warmup_steps else "constant"
    return config.lr_schedule


def _checkpoints(config: TrainConfig) -> dict[str, Any]:
    """TRL saves every ``checkpoint_every`` grpolab steps (the last step's save is the engine's callback)."""
    if not config.checkpoint_every:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": config.checkpoint_every * config.num_iterations}


def _no_activation_checkpointing() -> dict[str, Any]:
    """Activation checkpointing off, by the name the installed transformers reads: ``activation_checkpointing``
    where ``TrainingArguments`` has it (its old name ``gradient_checkpointing`` then warns a ``FutureWarning`` on
    every run), else the old name."""
    from transformers import TrainingArguments

    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}


def grpo_arguments(config: TrainConfig, *, output_dir: str, num_processes: int, max_new_tokens: int) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments of ``config`` (checked with ``check_supported`` first). TRL reports
    to no backend: the run's ``MetricsLog`` sends its rows to the backends of ``report_to``."""
    check_supported(config)
    per_device, accumulation = batch_layout(config, num_processes)
    mu = config.num_iterations
    return {
        "output_dir": output_dir, "max_steps": config.steps * mu, "num_generations": config.group_size,
        "per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation, "num_iterations": mu,
        "learning_rate": config.lr, "lr_scheduler_type": _schedule(config), "warmup_steps": config.warmup_steps * mu,
        "weight_decay": config.weight_decay, "adam_beta1": config.adam_betas[0], "adam_beta2": config.adam_betas[1],
        "optim": "adamw_torch", "max_grad_norm": config.max_grad_norm,
        **_loss(config), "beta": config.beta, "use_bias_correction_kl": False,
        "importance_sampling_level": config.importance_sampling_level,
        "mask_truncated_completions": config.mask_truncated_completions, **_sampler_correction(config),
        "temperature": config.temperature, "top_p": config.top_p, "top_k": 0,
        "max_completion_length": max_new_tokens, "bf16": config.dtype == "bfloat16", "fp16": False,
        "seed": config.seed, "data_seed": config.seed, "use_vllm": config.use_vllm, "vllm_mode": config.vllm_mode,
        "use_cpu": devices.resolve(config.device).type == "cpu",  # else accelerate's (run.py makes the GPU current)
        **_checkpoints(config),
        "scale_rewards": "group",  # TRL's default, not read: grpolab's estimator makes the advantages
        **_no_activation_checkpointing(), "logging_steps": 1, "logging_strategy": "steps", "eval_strategy": "no",
        "report_to": ["none"], "disable_tqdm": True, "log_completions": False, "save_only_model": False,
        "remove_unused_columns": False, "dataloader_pin_memory": False,
        "shuffle_dataset": False,  # the dataset holds every step's prompts in step order (trl_engine.run)
    }


def lora_config(config: TrainConfig, model: Any) -> Any:
    """peft's ``LoraConfig`` of ``config`` on the target modules present in ``model``, or None without LoRA
    (the same adapters as grpolab's ``wrap_lora``: no dropout)."""
    if not config.lora:
        return None
    from peft import LoraConfig

    wanted = [name.strip() for name in config.lora_targets.split(",") if name.strip()]
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [name for name in wanted if name in present]
    if not targets:
        raise UserError(f"none of the LoRA target modules {wanted} exist in this model; pass --lora-targets with "
                        f"names from: {', '.join(sorted(n for n in present if n)[:20])}")
    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, target_modules=targets, lora_dropout=0.0,
                      task_type="CAUSAL_LM")


def render_markdown() -> str:
    """The mapping as ``docs/integrations.md`` holds it (a test keeps the two equal), in the schema's field order."""
    order = {f.name: i for i, f in enumerate(dataclasses.fields(TrainConfig))}  # the schema's, whatever the dicts'
    mapped, side, refused = (sorted(table.items(), key=lambda item: order.get(item[0], len(order)))
                             for table in (MAPPED, GRPOLAB_SIDE, REFUSED))
    lines = ["| grpolab setting | TRL 1.16 arguments | how |", "|---|---|---|"]
    for name, entry in mapped:
        targets = ", ".join(f"`{t}`" for t in entry.targets) or "-"
        lines.append(f"| `{name}` | {targets} | {entry.how} |")
    lines += ["", "Kept on grpolab's side:", ""]
    lines += [f"- `{name}`: {why}" for name, why in side]
    lines += ["", "Refused under `--engine trl` at any value but the default:", ""]
    lines += [f"- `{name}`: {why}" for name, why in refused]
    return "\n".join(lines) + "\n"
