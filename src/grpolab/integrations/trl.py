"""TRL adapter: ``trl.GRPOTrainer`` with grpolab's advantage estimators and starvation metrics.

``GRPOTrainer(advantage="sign", ...)`` is TRL's trainer with one change: after TRL has generated,
scored and *gathered* the rewards of every process (``_calculate_rewards`` returns the rewards of the
whole generation batch on every rank), grpolab recomputes the advantages from those rewards and hands
each process its own slice, the slice TRL itself uses (``process_index * local_batch`` onwards).
Generation, vLLM, DeepSpeed/FSDP, the loss and the optimiser are TRL's, untouched. TRL 1.16 has no
advantage hook (its maintainers point to overriding ``_generate_and_score_completions``), so this
wraps that method and ``_calculate_rewards``; it never copies TRL's advantage code.

Metrics go through TRL's own logger (``self._metrics[mode]``): ``grpolab.diagnostics.starvation_metrics``
of the generation batch (with the completion lengths gathered from every process), the same ``starvation/*``
keys as grpolab's trainer; ``last_groups`` keeps the newest batch's grouped rewards, advantages and lengths.
The advantages handed back to TRL stay on the training device; what is logged or diagnosed crosses to the host
once, through ``grpolab.devices.to_host``, right after the gather.
pbar of ``d_iid`` comes from
a window of the most recent generation batches holding at least 64 groups (one per mode), so it does not
depend on how many prompts a batch holds.
The ``advantage`` column of TRL's completion logs (``log_completions=True``) holds grpolab's advantages.

Departures from TRL (and from the papers):

* The reward of a completion is TRL's weighted sum over reward functions (``reward_weights``), with
  NaN when every reward function returned ``None``; the estimator then sees NaN (advantage 0).
* ``scale_rewards`` and ``multi_objective_aggregation`` are TRL's advantage knobs and do not apply;
  ``multi_objective_aggregation="normalize_then_sum"`` is refused rather than silently ignored, and so is a
  ``scale_rewards`` other than ``"group"`` with ``advantage="grpo"`` (the default), which it would contradict
  (``dr_grpo`` is ``"none"``, ``batch_std`` is ``"batch"``).
* With ``advantage="grpo"`` (sample std, eps 1e-4; grpolab's defaults) the advantages equal TRL's
  default ``scale_rewards="group"`` ones up to float rounding: tests/integrations/test_trl.py checks it.
* An estimator that weighs completions by length (``opo``) gets the gathered completion lengths [P, G] (tokens
  as generated, also under ``mask_truncated_completions``, which zeroes a truncated one's ``completion_mask``) as
  ``lengths``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from grpolab import advantages as advantage_registry
from grpolab import diagnostics
from grpolab.devices import to_host

try:
    from trl import GRPOTrainer as _TRLGRPOTrainer
except ImportError as _error:  # pragma: no cover - depends on the optional extra
    raise ImportError(
        "grpolab.integrations.trl needs TRL, which is an optional extra: pip install 'grpolab[trl]'"
    ) from _error

__all__ = ["STARVATION_METRICS", "GRPOTrainer", "GroupedBatch", "resolve_advantage"]

AdvantageFn = Callable[..., torch.Tensor]
STARVATION_METRICS = diagnostics.STARVATION_KEYS


def resolve_advantage(advantage: str | AdvantageFn) -> tuple[str, AdvantageFn]:
    """(display name, callable) for a registry name or a callable ``fn(rewards[P, G], **hp) -> [P, G]``."""
    if callable(advantage):
        return getattr(advantage, "__name__", "custom"), advantage
    if not isinstance(advantage, str):
        raise TypeError(f"advantage must be a registry name or a callable, got {type(advantage).__name__}")
    if advantage_registry.info(advantage).needs_token_statistics:  # info: ValueError listing the known names
        raise ValueError(per_token_refusal(advantage))
    return advantage, advantage_registry.get(advantage)


def per_token_refusal(advantage: str) -> str:
    """Why TRL cannot run an estimator with a per-token baseline (one line)."""
    return (f"advantage {advantage!r} gives each token its own advantage from the sampling policy's per-token "
            "probabilities, and TRL's GRPOTrainer takes one advantage per completion; use --engine grpolab")


def group_rewards(
    rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, num_generations: int
) -> torch.Tensor:
    """Weighted reward per completion, grouped: [N, F] -> [P, G] with N = P * G; NaN if all F are NaN.

    TRL's sampler puts the G completions of a prompt next to each other in the gathered batch, which
    is what TRL's own ``view(-1, num_generations)`` relies on too.
    """
    weights = reward_weights.to(rewards_per_func.device, rewards_per_func.dtype)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)  # [N]
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = float("nan")
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    return rewards.view(-1, num_generations)  # [P, G]


@dataclass
class GroupedBatch:
    """The newest generation batch of every process, grouped: rewards, advantages and completion lengths
    [P, G], host (CPU) tensors whatever device trained, and its ``starvation/*`` metrics
    (``GRPOTrainer.last_groups``)."""

    rewards: torch.Tensor
    advantages: torch.Tensor
    lengths: torch.Tensor
    starvation: dict[str, float]


class GRPOTrainer(_TRLGRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a grpolab estimator.

    Args:
        *args, **kwargs: passed to ``trl.GRPOTrainer`` unchanged.
        advantage: a name from ``grpolab.advantages.available()`` ("grpo", "sign", ...) or a callable
            ``fn(rewards[P, G], **advantage_kwargs) -> advantages[P, G]``.
        advantage_kwargs: the estimator's keyword hyper-parameters (e.g. ``{"k": 4}`` for ``passk``).
    """

    def __init__(
        self,
        *args: Any,
        advantage: str | AdvantageFn = "grpo",
        advantage_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.advantage_name, self.advantage_fn = resolve_advantage(advantage)
        self.advantage_kwargs = dict(advantage_kwargs or {})
        entry = advantage_registry.info(advantage) if isinstance(advantage, str) else None
        self._needs_lengths = entry is not None and entry.needs_lengths  # opo: lengths [P, G] with the rewards
        self._gathered_rewards: torch.Tensor | None = None
        self._local_lengths: list[int] = []
        self.last_groups: GroupedBatch | None = None  # the newest generation batch, grouped
        self._success_windows = {"train": diagnostics.SuccessWindow(), "eval": diagnostics.SuccessWindow()}
        super().__init__(*args, **kwargs)
        if self.advantage_name == "grpo" and self.scale_rewards != "group":  # the default estimator scales by group
            raise ValueError(
                f"scale_rewards={self.scale_rewards!r} does not apply: grpolab's GRPOTrainer makes the advantages "
                "with its advantage= estimator, here 'grpo' (each group's std); pass advantage='dr_grpo' for "
                "r - mean (scale_rewards='none') or advantage='batch_std' (scale_rewards='batch')"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "grpolab's GRPOTrainer computes advantages from the weighted sum of the rewards; "
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported, "
                "use 'sum_then_normalize' (TRL's default)"
            )

    def success_window_state(self) -> list[list[float]]:
        """The training success window behind ``starvation/d_iid`` and ``jensen_gap`` (``SuccessWindow.state``), for
        a checkpoint to keep."""
        return self._success_windows["train"].state()

    def load_success_window(self, state: list[list[float]]) -> None:
        """Restore the training success window a checkpoint kept (``success_window_state``)."""
        self._success_windows["train"].load_state(state)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func  # [N_all_processes, F], same on every rank
        # this process's lengths as generated: under mask_truncated_completions TRL zeroes a truncated completion's
        # completion_mask, which would make its length 0 (and opo's baseline, and the token counts, wrong)
        self._local_lengths = [len(ids) for ids in completion_ids_list]
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        output = super()._generate_and_score_completions(inputs)
        if self._gathered_rewards is None:
            raise RuntimeError("TRL did not call _calculate_rewards; this TRL version is not supported")
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = group_rewards(rewards_per_func, self.reward_weights, num_generations)  # [P, G], on the device
        local_lengths = torch.tensor(self._local_lengths, device=output["completion_mask"].device)
        lengths = self.accelerator.gather(local_lengths).view_as(rewards)  # [P, G] tokens
        extra = {"lengths": lengths} if self._needs_lengths else {}
        advantages = self.advantage_fn(rewards, **self.advantage_kwargs, **extra)  # [P, G]
        all_advantages = advantages.reshape(-1).to(rewards_per_func.dtype)  # [N_all]
        local = output["advantages"]
        start = self.accelerator.process_index * len(local)  # TRL's process_slice
        output["advantages"] = all_advantages[start : start + len(local)].to(local.device, local.dtype)
        # the one crossing to the host: everything below is logs and diagnostics, in numpy and Python numbers
        rewards, advantages, lengths, all_advantages = (to_host(t) for t in (rewards, advantages, lengths,
                                                                             all_advantages))
        self._replace_logged_advantages(all_advantages)
        scored = rewards.double().numpy()  # [P, G], converted once for both diagnostics
        window = self._success_windows[mode]
        window.add(diagnostics.success_rates(scored))
        starvation = diagnostics.starvation_metrics(scored, advantages, lengths=lengths, window=window)
        for name, value in starvation.items():
            self._metrics[mode][name].append(value)
        self.last_groups = GroupedBatch(rewards, advantages, lengths, starvation)
        return output

    def _replace_logged_advantages(self, all_advantages: torch.Tensor) -> None:
        """Put grpolab's advantages [N_all] (on the host) where TRL just logged its own (the last N of the
        completion log)."""
        logged = self._logs["advantages"]
        count = min(len(all_advantages), len(logged))
        for _ in range(count):
            logged.pop()
        logged.extend(all_advantages[len(all_advantages) - count :].tolist())
