"""Checks of a ``TrainConfig``'s values: bounds, choices and patterns read from each field's metadata
(``check_settings``, also run by ``CompareConfig``), ranges, finite numbers, task options, and config-file types.

Every check raises a ``UserError`` that names the setting, so that a value the engine would clip, ignore or
crash on is refused before a run starts. The checks read a config by attribute and never import the schema
they check (``schema`` imports them), so ``config`` is typed ``Any`` here: it is a ``TrainConfig``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from grpolab import capabilities, remedies
from grpolab.config.fields import choices, lower_bounds, value_checks
from grpolab.errors import UserError

__all__ = ["MAX_SEED", "REPORT_BACKENDS", "check_seed", "check_settings", "check_types", "check_variance_share",
           "report_backends", "validate"]

MAX_SEED = 2**32 - 1
"""The largest seed: numpy's legacy bound, far inside torch's 64 bits, so that the step seeds derived from it
(``seed * 1_000_003 + index``) stay in range."""

_HINTS = {"eval_limit": "; to use every prompt, leave --eval-limit out (grpolab eval and preflight take them all by "
                        "default) or set eval_limit: null in a --config file",
          "runs_per_gpu": "; 1 gives each run its GPU alone, K puts K runs on each GPU"}


def _one_of(names: tuple[str, ...]) -> str:
    """``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def check_settings(config: Any) -> None:
    """What each field's metadata says of its values (``grpolab.config.fields``): its lower bound, its choices and
    its pattern check, for a ``TrainConfig`` or a ``CompareConfig``."""
    for name, least in lower_bounds(config).items():
        value = getattr(config, name)
        if value is not None and value < least:
            raise UserError(f"{name} must be >= {least:g}, got {value}{_HINTS.get(name, '')}")
    for name, allowed in choices(config).items():
        value = getattr(config, name)
        if value not in allowed:
            raise UserError(f"{name} must be {_one_of(allowed)}, got {value!r}")
    for name, check in value_checks(config).items():
        check(getattr(config, name))


def check_seed(seed: int) -> None:
    """A seed is an integer in [0, ``MAX_SEED``]: torch and numpy refuse larger ones with a traceback."""
    if seed > MAX_SEED:
        raise UserError(f"seed must be at most {MAX_SEED} (2**32 - 1), got {seed}; pick a smaller seed")


def check_variance_share(share: float) -> None:
    """The reward-variance filter keeps a share p in (0, 1] of the batch's reward variance."""
    if not 0 < share <= 1:
        raise UserError(f"variance_filter_p must be in (0, 1] (the share of the batch's reward variance the kept "
                        f"groups reach), got {share}; pick e.g. 0.9")


def validate(config: Any) -> None:
    """Raise a ``UserError`` naming the setting when a value is out of range or would crash a run."""
    check_settings(config)
    if config.lr <= 0:
        raise UserError(f"lr must be > 0, got {config.lr}")
    if not 0 < config.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1] (the nucleus' share of probability), got {config.top_p}; "
                        "1 samples from the whole distribution")
    if not config.temperature > 0:
        raise UserError(f"temperature must be > 0, got {config.temperature}; grpolab samples every completion (greedy "
                        "decoding, temperature 0, would make a group's G completions one), e.g. 1.0")
    if config.beta < 0 or config.epsilon_low < 0 or config.clip_high < 0:
        raise UserError("beta, epsilon_low and epsilon_high must be >= 0")
    _validate_mappings(config)
    _validate_ranges(config)
    report_backends(config)
    capabilities.engine(config.engine).check(config)  # what the engine refuses (the rest when a run or sweep starts)


# setting -> an example of its value, for the error message
_MAPPINGS = {"task_options": '{"max_new_tokens": 64}', "advantage_kwargs": '{"k": 2}'}


def _validate_mappings(config: Any) -> None:
    """``task_options`` and ``advantage_kwargs`` become keyword arguments: a mapping with names as keys."""
    for name, example in _MAPPINGS.items():
        value = getattr(config, name)
        if not isinstance(value, dict):
            raise UserError(f"{name} must be a mapping of names to values such as {example}, "
                            f"got {value!r} ({type(value).__name__})")
        keys = [key for key in value if not isinstance(key, str)]
        if keys:
            raise UserError(f"{name} keys must be names (text), got {keys[0]!r} ({type(keys[0]).__name__}); "
                            f"write {name} as a mapping such as {example}")


def _validate_ranges(config: Any) -> None:
    """Non-finite numbers, bad betas, task options and settings that would crash mid-run."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{f.name} must be a finite number, got {value}")
    if len(config.adam_betas) != 2 or not all(0 <= b < 1 for b in config.adam_betas):
        raise UserError(f"adam_betas must be two numbers in [0, 1) such as 0.9,0.99, got {config.adam_betas}")
    tokens = config.task_options.get("max_new_tokens", 1)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise UserError(f"task_options max_new_tokens must be an integer >= 1, got {tokens!r}")
    if not isinstance(config.task_options.get("use_chat_template", True), bool):
        raise UserError("task_options use_chat_template must be true or false, "
                        f"got {config.task_options['use_chat_template']!r}")
    _validate_granularity(config)
    _validate_loss_options(config)


def _validate_loss_options(config: Any) -> None:
    """The loss options of docs/losses.md: bounds, and the combinations that mean nothing (their names are the
    fields' choices)."""
    if config.dual_clip_c is not None and config.dual_clip_c <= 1:
        raise UserError(f"dual_clip_c must be > 1 (Ye et al. use 3), got {config.dual_clip_c}")
    if config.dual_clip_c is not None and config.policy_loss in ("cispo", "sapo", "vespo"):
        raise UserError(f"dual_clip_c caps the clipped objective's loss; {config.policy_loss} has none: drop "
                        "--dual-clip-c or use --policy-loss clip")
    if config.cispo_ratio_max <= 1 or (config.cispo_ratio_min is not None and config.cispo_ratio_min >= 1):
        raise UserError(f"need cispo_ratio_min < 1 < cispo_ratio_max, got {config.cispo_ratio_min}, "
                        f"{config.cispo_ratio_max}")
    if config.sampler_is_cap is not None and config.sampler_is_cap <= 0:
        raise UserError(f"sampler_is_cap must be > 0 (TRL's default is 3), got {config.sampler_is_cap}")
    _validate_trl_losses(config)
    _validate_overlong(config)


def _validate_trl_losses(config: Any) -> None:
    """The options of TRL 1.16's losses (sapo, vespo, the entropy terms): bounds beyond the fields' own."""
    if min(config.sapo_temperature_pos, config.sapo_temperature_neg) <= 0:
        raise UserError("sapo_temperature_pos and sapo_temperature_neg must be > 0 (TRL: 1.0 and 1.05), got "
                        f"{config.sapo_temperature_pos} and {config.sapo_temperature_neg}")
    if config.policy_loss == "vespo" and config.importance_sampling_level != "token":
        raise UserError("vespo computes its own sequence weight from the token ratios: drop "
                        "--importance-sampling-level sequence")
    if config.top_entropy_quantile > 1:
        raise UserError(f"top_entropy_quantile must be in [0, 1] (1 = every token), got {config.top_entropy_quantile}")


def _validate_overlong(config: Any) -> None:
    """The overlong reward shaping changes outcome rewards, which must then be allowed to leave {0, 1}."""
    if config.overlong_buffer is None:
        return
    if config.reward_granularity != "outcome":
        raise UserError("overlong_buffer shapes outcome rewards; use it with reward_granularity outcome")
    from grpolab.advantages import info

    try:
        binary_only = info(config.advantage).binary_only
    except ValueError:
        return  # an unknown estimator is reported where the estimator is resolved
    if binary_only:
        raise UserError(f"overlong_buffer makes the rewards non-binary, and advantage {config.advantage!r} is defined "
                        "only for binary rewards; pick an estimator such as grpo, dr_grpo, rloo or batch_std")


def _validate_granularity(config: Any) -> None:
    if config.reward_granularity == "token":
        from grpolab.process_rewards import check_token_estimator

        check_token_estimator(config.advantage)
    remedies.check(config)  # each active remedy's refusals (grpolab.remedies)


def check_types(values: dict[str, Any], cls: type) -> None:
    """A clear error naming the setting when a config-file value has the wrong type."""
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        kind = hints[name]
        optional = typing.get_origin(kind) in (typing.Union, types.UnionType)
        if optional and value is None:
            continue
        base = next(a for a in typing.get_args(kind) if a is not type(None)) if optional else kind
        base = typing.get_origin(base) or base
        ok = isinstance(value, base) and not (isinstance(value, bool) and base is not bool)
        if base is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise UserError(f"setting {name} must be of type {getattr(base, '__name__', base)}, "
                            f"got {value!r} ({type(value).__name__}); fix it in the config file or flag")


REPORT_BACKENDS = ("tensorboard", "wandb", "trackio")
"""The names ``report_to`` accepts besides ``none`` (TRL's names for the same integrations)."""


def report_backends(config: Any) -> list[str]:
    """The metrics backends of a ``TrainConfig``: the names of ``report_to`` (comma-separated; ``none``, the
    default: no backend), plus ``tensorboard`` when the older ``tensorboard: true`` is set (so saved configs
    with ``tensorboard: true`` and ``report_to: none`` keep writing TensorBoard files).

    Raises:
        UserError: an unknown or empty name, or ``none`` listed together with a backend.
    """
    if not isinstance(config.report_to, str):
        raise UserError(f"report_to must be text such as tensorboard,wandb, got {config.report_to!r}")
    names = [name.strip().lower() for name in config.report_to.split(",")]
    unknown = [name for name in names if name not in (*REPORT_BACKENDS, "none")]
    if unknown:
        raise UserError(f"report_to: unknown backend {unknown[0]!r}; use a comma-separated list of "
                        f"{', '.join(REPORT_BACKENDS)}, or none")
    backends = list(dict.fromkeys(name for name in names if name != "none"))
    if "none" in names and backends:
        raise UserError(f"report_to {config.report_to!r} says none and also {', '.join(backends)}; "
                        "drop none, or drop the backends")
    if config.tensorboard and "tensorboard" not in backends:
        backends.insert(0, "tensorboard")
    return backends
