"""The TRL engine's settings table (grpolab.train.trl_engine.arguments): every TrainConfig field is mapped, kept
on grpolab's side or refused; the GRPOConfig built from a config has the same effective hyper-parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pytest.importorskip("trl")

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.trl_engine.arguments import (
    GRPOLAB_SIDE,
    MAPPED,
    REFUSED,
    batch_layout,
    check_supported,
    grpo_arguments,
    lora_config,
)

FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def test_every_field_is_in_exactly_one_table() -> None:
    tables = [set(MAPPED), set(GRPOLAB_SIDE), set(REFUSED)]
    for name in FIELDS:
        assert sum(name in table for table in tables) == 1, f"{name}: classify it for engine trl"
    assert set().union(*tables) == set(FIELDS), "a table names a field TrainConfig does not have"


def test_an_unclassified_field_is_refused_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.train.trl_engine import arguments

    monkeypatch.delitem(arguments.GRPOLAB_SIDE, "eval_limit")  # as if eval_limit were a new, unmapped field
    check_supported(TrainConfig(engine="trl"))  # at its default: fine
    with pytest.raises(UserError, match=r"^eval_limit 5 is not supported by engine trl \(the TRL engine has no "
                                        r"mapping for it yet\); drop --eval-limit or use --engine grpolab$"):
        check_supported(TrainConfig(engine="trl", eval_limit=5))


@pytest.mark.parametrize(("changes", "words"), [
    ({"advantage": "nosuch"}, "unknown advantage estimator 'nosuch'"),
    ({"advantage": "passk", "advantage_kwargs": {"k": 5}}, "fix --advantage-kwargs"),
    ({"advantage": "sign", "group_size": 1}, "group_size 1 is not supported by engine trl"),
])
def test_what_grpolabs_engine_refuses_before_it_starts_trl_refuses_too(changes: dict[str, Any], words: str) -> None:
    """Was: a 30-line traceback, or one in TRL's training step after the start evaluation had run."""
    with pytest.raises(UserError) as error:
        check_supported(TrainConfig(engine="trl", **changes))
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(("changes", "setting"), [
    ({"dynamic_sampling": True}, "dynamic_sampling"),
    ({"reward_granularity": "token", "advantage": "grpo"}, "reward_granularity"),
    ({"sampler_dtype": "bfloat16"}, "sampler_dtype"),
    ({"grad_analysis_every": 2}, "grad_analysis_every"),
    ({"loss_aggregation": "seq_mean_token_sum"}, "loss_aggregation"),
    ({"overlong_buffer": 4, "advantage": "grpo"}, "overlong_buffer"),
    ({"policy_loss": "cispo", "loss_aggregation": "seq_mean_token_mean"}, "policy_loss cispo"),
    ({"policy_loss": "cispo", "cispo_ratio_min": 0.5}, "cispo_ratio_min"),
    ({"dual_clip_c": 1.1}, "dual_clip_c"),
    ({"sampler_is_cap": 2.0}, "sampler_is_cap"),
    ({"policy_loss": "sapo"}, "policy_loss sapo"),
    ({"policy_loss": "luspo", "loss_aggregation": "seq_mean_token_sum_norm"}, "policy_loss luspo"),
    ({"policy_loss": "vespo", "loss_aggregation": "seq_mean_token_mean"}, "policy_loss vespo"),
    ({"entropy_coef": 0.01, "loss_aggregation": "seq_mean_token_mean"}, "entropy_coef"),
    ({"entropy_target": 0.3, "loss_aggregation": "seq_mean_token_sum_norm"}, "entropy_coef"),
])
def test_refused_settings_name_the_setting_and_the_engine(changes: dict[str, Any], setting: str) -> None:
    with pytest.raises(UserError) as error:
        check_supported(TrainConfig(engine="trl", **changes))
    message = str(error.value)
    assert message.startswith(setting) and "engine trl" in message and "\n" not in message


def _effective_trl(args: Any, peft: Any) -> dict[str, Any]:
    """The hyper-parameters a GRPOConfig trains with, in grpolab's terms (one process)."""
    mu = args.num_iterations
    cispo = args.loss_type == "cispo"
    schedule = {"constant_with_warmup": "constant"}.get(args.lr_scheduler_type.value, args.lr_scheduler_type.value)
    aggregation = {"dapo": "token_mean", "grpo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum_norm"}
    return {
        "group_size": args.num_generations,
        "prompts_per_step": args.generation_batch_size // args.num_generations,
        "micro_batch_size": args.per_device_train_batch_size, "steps": args.max_steps // mu, "seed": args.seed,
        "lr": args.learning_rate, "lr_schedule": schedule, "warmup_steps": args.warmup_steps // mu,
        "weight_decay": args.weight_decay, "adam_betas": (args.adam_beta1, args.adam_beta2),
        "max_grad_norm": args.max_grad_norm, "num_iterations": mu, "epsilon_low": args.epsilon,
        "clip_high": None if cispo else args.epsilon_high, "beta": args.beta,
        "k3_without_ratio": not args.use_bias_correction_kl,
        "loss_aggregation": "token_mean" if cispo else aggregation[args.loss_type],
        "policy_loss": "cispo" if cispo else "clip", "cispo_ratio_max": args.epsilon_high if cispo else None,
        "dual_clip_c": args.delta, "importance_sampling_level": args.importance_sampling_level,
        "mask_truncated_completions": args.mask_truncated_completions,
        "sampler_is_cap": args.vllm_importance_sampling_clip_max if args.vllm_importance_sampling_correction
        and args.vllm_importance_sampling_mode == "token_truncate" else None,
        "temperature": args.temperature, "top_p": args.top_p,
        "max_new_tokens": args.max_completion_length,
        "dtype": "bfloat16" if args.bf16 else "float32", "fp16": args.fp16,
        "optimizer_steps_per_rollout": args.gradient_accumulation_steps // args.steps_per_generation,
        "checkpoint_every": args.save_steps // mu if args.save_strategy.value == "steps" else 0,
        "save_total_limit": args.save_total_limit,  # unset: grpolab rotates after sealing (trl_engine.checkpoints)
        "report_to": sorted(args.report_to),
        "lora": peft is not None, "lora_r": getattr(peft, "r", None), "lora_alpha": getattr(peft, "lora_alpha", None),
        "lora_targets": sorted(getattr(peft, "target_modules", None) or []),
    }


def _effective_grpolab(config: TrainConfig, micro: int) -> dict[str, Any]:
    cispo = config.policy_loss == "cispo"
    return {
        "group_size": config.group_size, "prompts_per_step": config.prompts_per_step, "micro_batch_size": micro,
        "steps": config.steps, "seed": config.seed, "lr": config.lr, "lr_schedule": config.lr_schedule,
        "warmup_steps": config.warmup_steps, "weight_decay": config.weight_decay, "adam_betas": config.adam_betas,
        "max_grad_norm": config.max_grad_norm, "num_iterations": config.num_iterations,
        "epsilon_low": config.epsilon_low, "clip_high": None if cispo else config.clip_high, "beta": config.beta,
        "k3_without_ratio": True, "loss_aggregation": config.loss_aggregation, "policy_loss": config.policy_loss,
        "cispo_ratio_max": config.cispo_ratio_max if cispo else None, "dual_clip_c": config.dual_clip_c,
        "importance_sampling_level": config.importance_sampling_level,
        "mask_truncated_completions": config.mask_truncated_completions, "sampler_is_cap": config.sampler_is_cap,
        "temperature": config.temperature,
        "top_p": config.top_p, "max_new_tokens": config.max_new_tokens, "dtype": config.dtype, "fp16": False,
        "optimizer_steps_per_rollout": 1,
        "checkpoint_every": config.checkpoint_every,
        "save_total_limit": None,
        "report_to": [],  # TRL reports nowhere: grpolab's MetricsLog sends the rows to report_to's backends
        "lora": config.lora, "lora_r": config.lora_r if config.lora else None,
        "lora_alpha": config.lora_alpha if config.lora else None,
        "lora_targets": sorted(config.lora_targets.split(",")) if config.lora else [],
    }


class _Model:
    """Stands in for a model for ``lora_config``: the module names it has."""

    def named_modules(self) -> list[tuple[str, None]]:
        names = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj".split(",")
        return [(f"layers.0.{n}", None) for n in names]


CONFIGS = [
    TrainConfig(engine="trl", max_new_tokens=16),
    TrainConfig(engine="trl", max_new_tokens=32, prompts_per_step=6, group_size=8, micro_batch_size=20, steps=7,
                seed=3, lr=3e-6, lr_schedule="cosine", warmup_steps=2, weight_decay=0.1, adam_betas=(0.9, 0.95),
                max_grad_norm=0.5, num_iterations=2, epsilon_low=0.1, epsilon_high=0.28, beta=0.04,
                loss_aggregation="seq_mean_token_mean", temperature=0.7, top_p=0.9, dtype="bfloat16",
                lora=True, lora_r=64, lora_alpha=128, checkpoint_every=3, keep_checkpoints=1, report_to="tensorboard"),
    TrainConfig(engine="trl", max_new_tokens=8, warmup_steps=5, checkpoint_every=0,
                loss_aggregation="seq_mean_token_sum_norm", lr_schedule="linear", dual_clip_c=3.0,
                importance_sampling_level="sequence", mask_truncated_completions=True),
    TrainConfig(engine="trl", max_new_tokens=8, policy_loss="cispo", cispo_ratio_max=4.0),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["defaults", "everything-set", "linear-dr-grpo-gspo", "cispo"])
def test_trl_trains_with_the_same_hyper_parameters(config: TrainConfig, tmp_path: Any) -> None:
    from trl import GRPOConfig

    kwargs = grpo_arguments(config, output_dir=str(tmp_path), num_processes=1, max_new_tokens=config.max_new_tokens)
    args = GRPOConfig(**kwargs)
    micro, accumulation = batch_layout(config, 1)
    assert micro * accumulation == config.completions_per_step and micro <= config.micro_batch_size
    assert _effective_trl(args, lora_config(config, _Model())) == _effective_grpolab(config, micro)


def test_constant_with_warm_up_and_the_batch_layout() -> None:
    kwargs = grpo_arguments(TrainConfig(engine="trl", warmup_steps=3), output_dir="x", num_processes=1,
                            max_new_tokens=8)
    assert kwargs["lr_scheduler_type"] == "constant_with_warmup" and kwargs["warmup_steps"] == 3
    config = TrainConfig(engine="trl", prompts_per_step=6, group_size=4, micro_batch_size=5)
    assert batch_layout(config, 1) == (4, 6)  # 24 completions: largest divisor <= 5 is 4
    assert batch_layout(config, 2) == (4, 3)  # 12 per process
    assert batch_layout(config, 3) == (4, 2)
    with pytest.raises(UserError, match="do not split over 5 processes under engine trl"):
        batch_layout(config, 5)


def test_engine_settings_are_checked() -> None:
    with pytest.raises(UserError, match="engine must be grpolab or trl"):
        TrainConfig(engine="verl")
    with pytest.raises(UserError, match=r"^use_vllm is not supported by engine grpolab"):
        TrainConfig(use_vllm=True)
    with pytest.raises(UserError, match="vllm_mode must be colocate or server"):
        TrainConfig(engine="trl", vllm_mode="remote")


def test_vllm_is_refused_in_one_line_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from grpolab.train.trl_engine.run import _check_vllm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"^use_vllm needs a CUDA GPU, which this machine lacks \(engine trl\)"):
        _check_vllm(TrainConfig(engine="trl", use_vllm=True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"^use_vllm needs the vllm package \(engine trl\)"):
        _check_vllm(TrainConfig(engine="trl", use_vllm=True, vllm_mode="server"))
    _check_vllm(TrainConfig(engine="trl"))  # no vLLM asked: nothing to check


def test_truncated_importance_sampling_is_trl_s_vllm_correction(monkeypatch: pytest.MonkeyPatch) -> None:
    config = TrainConfig(engine="trl", use_vllm=True, sampler_is_cap=2.0)
    kwargs = grpo_arguments(config, output_dir="x", num_processes=1, max_new_tokens=8)
    assert (kwargs["vllm_importance_sampling_correction"], kwargs["vllm_importance_sampling_mode"],
            kwargs["vllm_importance_sampling_clip_max"]) == (True, "token_truncate", 2.0)
    plain = grpo_arguments(TrainConfig(engine="trl", use_vllm=True), output_dir="x", num_processes=1,
                           max_new_tokens=8)
    assert plain["vllm_importance_sampling_correction"] is False  # grpolab's default: no correction


def test_the_arguments_use_no_deprecated_name(tmp_path: Any) -> None:
    # was: "gradient_checkpointing" (renamed activation_checkpointing in transformers 5): a FutureWarning per run
    import warnings

    from trl import GRPOConfig

    kwargs = grpo_arguments(TrainConfig(engine="trl"), output_dir=str(tmp_path), num_processes=1, max_new_tokens=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        args = GRPOConfig(**kwargs)
    assert args.gradient_checkpointing is False and getattr(args, "activation_checkpointing", False) is False
