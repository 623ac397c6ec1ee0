"""The pieces of one training step: the batch being trained on, the optimizer and the policy update
(the starvation metrics are ``grpolab.diagnostics.starvation_metrics``). Shapes: P groups, G completions
each, B = P * G, T completion tokens.

``rollout/sampler_kl`` is the mean per-token KL(sampler || trainer) over the completions the update
forwards (so it is absent on a step that trains none): the sampler may run other kernels and weights
in bfloat16 (``fast_decode``), and this says how far its distribution is from the one being trained,
as trainers that sample with vLLM report it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.engine import prefix_packing
from grpolab.engine.rollout import Rollout, token_logprobs
from grpolab.errors import UserError
from grpolab.losses import PolicyLossTerms, aggregate, aggregation_denominator, policy_loss, truncated_is_weights
from grpolab.overlong import overlong_penalty, shape_rewards
from grpolab.process_rewards import token_advantages
from grpolab.tasks import Problem

__all__ = ["StepBatch", "build_optimizer", "sampler_kl", "step_advantages", "update_policy"]


def _pad_to(tensor: torch.Tensor, width: int, *, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    pad = tensor.new_zeros((tensor.shape[0], missing))
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


@dataclass
class StepBatch:
    """The groups a step trains on (rows p*G .. p*G+G-1 belong to problem p).

    Attributes:
        problems: the P problems.
        prompt_ids, prompt_mask: [B, Lp] left-padded prompts.
        completion_ids, completion_mask: [B, T] right-padded completions.
        rewards: [P, G] float64, NaN = unscorable.
        texts: B completion texts.
        truncated: [B] bool.
        entropy: [B, T] sampling entropy per token.
        sampler_logprobs: [B, T] the sampler's log-probability of each token, or None.
        token_rewards: [B, T] float64 per-token rewards (NaN: unrewarded) under --reward-granularity token,
            else None.
    """

    problems: list[Problem]
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    rewards: np.ndarray
    texts: list[str]
    truncated: torch.Tensor
    entropy: torch.Tensor
    sampler_logprobs: torch.Tensor | None = None
    token_rewards: torch.Tensor | None = None

    @classmethod
    def make(cls, problems: list[Problem], rollout: Rollout, rewards: np.ndarray,
             token_rewards: torch.Tensor | None = None) -> StepBatch:
        return cls(problems, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                   rollout.completion_mask, rewards, list(rollout.texts), rollout.truncated, rollout.entropy,
                   rollout.logprobs, token_rewards)

    @property
    def group_size(self) -> int:
        return self.rewards.shape[1]

    @property
    def num_groups(self) -> int:
        return len(self.problems)

    @property
    def size(self) -> int:
        return len(self.texts)

    @property
    def lengths(self) -> np.ndarray:
        """[P, G] completion lengths in tokens."""
        return self.completion_mask.sum(dim=1).numpy().reshape(self.rewards.shape)

    def select_groups(self, groups: list[int]) -> StepBatch:
        g = self.group_size
        rows = [p * g + i for p in groups for i in range(g)]
        return StepBatch([self.problems[p] for p in groups], self.prompt_ids[rows], self.prompt_mask[rows],
                         self.completion_ids[rows], self.completion_mask[rows], self.rewards[groups],
                         [self.texts[r] for r in rows], self.truncated[rows], self.entropy[rows],
                         None if self.sampler_logprobs is None else self.sampler_logprobs[rows],
                         None if self.token_rewards is None else self.token_rewards[rows])

    def non_degenerate(self) -> StepBatch:
        """Only the groups whose scorable rewards are not all equal (DAPO's dynamic-sampling filter)."""
        keep = [p for p, row in enumerate(self.rewards) if len(set(row[~np.isnan(row)].tolist())) > 1]
        return self.select_groups(keep)

    def first(self, num_groups: int) -> StepBatch:
        return self.select_groups(list(range(min(num_groups, self.num_groups))))

    def concat(self, other: StepBatch) -> StepBatch:
        lp = max(self.prompt_ids.shape[1], other.prompt_ids.shape[1])
        t = max(self.completion_ids.shape[1], other.completion_ids.shape[1])

        def join(a: torch.Tensor, b: torch.Tensor, width: int, left: bool) -> torch.Tensor:
            return torch.cat([_pad_to(a, width, left=left), _pad_to(b, width, left=left)])

        return replace(
            self, problems=self.problems + other.problems,
            prompt_ids=join(self.prompt_ids, other.prompt_ids, lp, True),
            prompt_mask=join(self.prompt_mask, other.prompt_mask, lp, True),
            completion_ids=join(self.completion_ids, other.completion_ids, t, False),
            completion_mask=join(self.completion_mask, other.completion_mask, t, False),
            rewards=np.concatenate([self.rewards, other.rewards]), texts=self.texts + other.texts,
            truncated=torch.cat([self.truncated, other.truncated]),
            entropy=join(self.entropy, other.entropy, t, False),
            sampler_logprobs=None if self.sampler_logprobs is None or other.sampler_logprobs is None
            else join(self.sampler_logprobs, other.sampler_logprobs, t, False),
        )

    def rollout_metrics(self, completions_generated: int) -> dict[str, float]:
        rewards = self.rewards[~np.isnan(self.rewards)]
        tokens = self.completion_mask.sum().clamp(min=1)
        return {
            "rollout/reward_mean": float(rewards.mean()) if rewards.size else 0.0,
            "rollout/accuracy": float((rewards >= 0.5).mean()) if rewards.size else 0.0,
            "rollout/completion_length": float(self.lengths.mean()) if self.size else 0.0,
            "rollout/truncated": float(self.truncated.float().mean()) if self.size else 0.0,
            "rollout/entropy": float((self.entropy * self.completion_mask).sum() / tokens),
            "rollout/groups": float(self.num_groups),
            "rollout/completions_generated": float(completions_generated),
        }


def step_advantages(batch: StepBatch, config: TrainConfig, *, max_length: int | None = None) -> torch.Tensor:
    """The advantages of a batch under the config's estimator: [P, G] of the outcome rewards, or [B, T] of the
    per-token rewards (``--reward-granularity token``). With ``overlong_buffer`` the outcome rewards first get
    DAPO's overlong penalty against the token cap ``max_length`` (``grpolab.overlong``). Raises a ``UserError``
    when the estimator refuses the rewards or the advantages overflow float32 (the loss's dtype)."""
    try:
        if batch.token_rewards is not None:
            advantages = token_advantages(config.advantage, batch.token_rewards, batch.completion_mask,
                                          batch.group_size, **config.advantage_kwargs)
        else:
            advantages = compute_advantages(config.advantage, _outcome_rewards(batch, config, max_length),
                                            **config.advantage_kwargs)
        if not torch.isfinite(advantages.float()).all():
            raise ValueError(f"advantages up to {advantages.abs().max().item():.3g} overflow float32")
    except ValueError as error:
        raise UserError(str(error)) from None
    return advantages


def _outcome_rewards(batch: StepBatch, config: TrainConfig, max_length: int | None) -> np.ndarray:
    """The rewards [P, G] the estimator sees: the batch's, with DAPO's overlong penalty under ``overlong_buffer``."""
    if config.overlong_buffer is None:
        return batch.rewards
    if max_length is None:
        raise ValueError("overlong_buffer needs the completion length cap (max_length)")
    return shape_rewards(batch.rewards, batch.lengths, max_length=max_length, buffer=config.overlong_buffer,
                         penalty=config.overlong_penalty)


def loss_mask(batch: StepBatch, config: TrainConfig) -> torch.Tensor:
    """[B, T] float mask of the tokens that count in the loss: the completion tokens, less those of truncated
    completions under ``mask_truncated_completions`` (DAPO's overlong filtering)."""
    mask = batch.completion_mask.float()
    if config.mask_truncated_completions:
        mask = mask * (~batch.truncated.bool()).float().unsqueeze(1)
    return mask


def build_optimizer(params: dict[str, torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with torch's fused kernel (one call for all parameters; on the embedded model's 20 tensors
    0.31 ms a step against 0.83 ms for ``foreach`` and 0.94 ms for the per-tensor loop, one thread), or
    ``foreach`` where the fused kernel does not take the parameters."""
    kinds = {(p.device.type, p.dtype) for p in params.values()}
    fused = all(device == "cpu" and dtype in _FUSED_DTYPES for device, dtype in kinds)
    return torch.optim.AdamW(list(params.values()), lr=config.lr, betas=config.adam_betas,
                             weight_decay=config.weight_decay, **({"fused": True} if fused else {"foreach": True}))


_FUSED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _autocast(config: TrainConfig) -> contextlib.AbstractContextManager:
    if config.dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _logprobs(model: torch.nn.Module, batch: StepBatch, rows: list[int], config: TrainConfig) -> torch.Tensor:
    """[len(rows), T] log-probs of the rows' completions, 0 where the completion mask is 0. Llama-family
    models forward each prompt once with its rows' completions packed behind it (``prefix_packing``).
    Otherwise only the columns some of these rows use are forwarded: leading prompt columns that are
    padding in every row and trailing completion columns past every row's end are cut (they change no
    valid position's logits) and the masked tail is returned as 0."""
    prompt_mask, completion_mask = batch.prompt_mask[rows], batch.completion_mask[rows]
    with _autocast(config):
        packed = prefix_packing.logprobs(model, batch.prompt_ids[rows], prompt_mask, batch.completion_ids[rows],
                                         completion_mask, temperature=config.temperature)
    if packed is not None:
        return packed
    width = completion_mask.shape[1]
    start = min(int((prompt_mask.sum(dim=0) == 0).cumprod(dim=0).sum()), prompt_mask.shape[1] - 1)
    columns = completion_mask.any(dim=0).nonzero()
    used = int(columns.max()) + 1 if len(columns) else 1
    ids = torch.cat([batch.prompt_ids[rows, start:], batch.completion_ids[rows, :used]], dim=1)
    mask = torch.cat([prompt_mask[:, start:], completion_mask[:, :used]], dim=1)
    with _autocast(config):
        logprobs, _ = token_logprobs(model, ids, mask, used, temperature=config.temperature)
    return F.pad(logprobs.float(), (0, width - used))


@torch.no_grad()
def _frozen_logprobs(model: torch.nn.Module, batch: StepBatch, chunks: list[list[int]], config: TrainConfig) -> dict:
    return {tuple(rows): _logprobs(model, batch, rows, config) for rows in chunks}


def update_policy(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: StepBatch, advantages: torch.Tensor,
    config: TrainConfig, *, lr: float, max_length: int, reference: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """``num_iterations`` optimizer steps on ``batch`` with advantages [P, G] (outcome) or [B, T] (per token);
    returns ``loss/*`` metrics."""
    mask = loss_mask(batch, config)
    per_token = tuple(advantages.shape) == tuple(mask.shape)
    flat = advantages.float() if per_token else advantages.reshape(-1).float()  # [B, T] or [B]
    denominator = aggregation_denominator(mask, config.loss_aggregation, max_length=max_length)
    carries = (flat * mask).abs().sum(dim=1) > 0 if per_token else flat != 0  # [B]
    rows = list(range(batch.size)) if config.beta > 0 else torch.nonzero(carries).flatten().tolist()
    if config.mask_truncated_completions:
        rows = [row for row in rows if mask[row].any()]  # a masked completion has no loss token, not even a KL one
    chunks = [rows[i : i + config.micro_batch_size] for i in range(0, len(rows), config.micro_batch_size)]
    old = _frozen_logprobs(model, batch, chunks, config) if config.num_iterations > 1 else None
    ref = _frozen_logprobs(reference, batch, chunks, config) if reference is not None else None
    for group in optimizer.param_groups:
        group["lr"] = lr
    params = [p for group in optimizer.param_groups for p in group["params"]]
    totals = dict.fromkeys(_TOTALS, 0.0)
    for _ in range(config.num_iterations):
        _zero_grads(params)
        totals = dict.fromkeys(_TOTALS, 0.0)
        for rows_chunk in chunks:
            _micro_step(model, batch, rows_chunk, flat, mask, config, denominator, old, ref, totals)
        grad_norm = _clip(params, config.max_grad_norm)
        optimizer.step()
    tokens = float(mask[rows].sum()) if rows else 0.0
    metrics = {
        "loss/policy": totals["loss"], "loss/kl": totals["kl"] / max(tokens, 1.0),
        "loss/clip_fraction": totals["clipped"] / max(tokens, 1.0), "loss/grad_norm": grad_norm,
        "loss/lr": lr, "loss/trained_sequences": float(len(rows)), "loss/train_tokens": tokens,
    }
    if batch.sampler_logprobs is not None and tokens > 0:
        metrics["rollout/sampler_kl"] = totals["sampler_kl"] / tokens
    metrics.update(loss_option_metrics(totals, batch, mask, config, tokens=tokens, max_length=max_length))
    return metrics


# the sums each micro-step adds to (per-token sums over the loss mask, except "loss" and "is_weight_max")
_TOTALS = ("loss", "kl", "clipped", "sampler_kl", "clipped_low", "clipped_high", "clipped_dual", "is_weight",
           "is_weight_max")


def _micro_step(model, batch, rows, flat, mask, config, denominator, old, ref, totals) -> None:
    key = tuple(rows)
    logprobs = _logprobs(model, batch, rows, config)
    before = old[key] if old is not None else logprobs.detach()  # the policy that sampled, pre-update
    is_weights = _is_weights(batch, rows, before, config)
    terms = _policy_loss_terms(logprobs, before, flat[rows], mask[rows], config, is_weights,
                               ref[key] if ref is not None else None)
    loss = aggregate(terms.loss, mask[rows], config.loss_aggregation, denominator=denominator)
    loss.backward()
    totals["loss"] += float(loss.detach())
    totals["kl"] += float((terms.kl * mask[rows]).sum())
    totals["clipped"] += float((terms.clipped * mask[rows]).sum())
    for bound in ("low", "high", "dual"):
        totals[f"clipped_{bound}"] += float((getattr(terms, f"clipped_{bound}") * mask[rows]).sum())
    if is_weights is not None and mask[rows].any():
        totals["is_weight"] += float((is_weights * mask[rows]).sum())
        totals["is_weight_max"] = max(totals["is_weight_max"], float(is_weights[mask[rows] > 0].max()))
    if batch.sampler_logprobs is not None:
        totals["sampler_kl"] += float((sampler_kl(batch.sampler_logprobs[rows], before) * mask[rows]).sum())


def _policy_loss_terms(logprobs: torch.Tensor, before: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                       config: TrainConfig, is_weights: torch.Tensor | None,
                       ref_logprobs: torch.Tensor | None) -> PolicyLossTerms:
    """The per-token policy loss [b, T] of a micro-batch under the config's loss settings (docs/losses.md)."""
    return policy_loss(
        logprobs, before, advantages, epsilon_low=config.epsilon_low, epsilon_high=config.epsilon_high,
        ref_logprobs=ref_logprobs, beta=config.beta, objective=config.policy_loss,
        importance_sampling_level=config.importance_sampling_level, mask=mask, dual_clip_c=config.dual_clip_c,
        cispo_ratio_min=config.cispo_ratio_min, cispo_ratio_max=config.cispo_ratio_max, is_weights=is_weights,
    )


def _is_weights(batch: StepBatch, rows: list[int], before: torch.Tensor, config: TrainConfig) -> torch.Tensor | None:
    """TIS weights [b, T] of the rows under ``sampler_is_cap`` (trainer's pre-update log-probs against the
    sampler's), else None."""
    if config.sampler_is_cap is None:
        return None
    if batch.sampler_logprobs is None:
        raise UserError("sampler_is_cap needs the sampler's log-probs, and this batch has none; drop --sampler-is-cap")
    return truncated_is_weights(before, batch.sampler_logprobs[rows], config.sampler_is_cap)


def loss_option_metrics(totals: dict[str, float], batch: StepBatch, mask: torch.Tensor, config: TrainConfig, *,
                        tokens: float, max_length: int) -> dict[str, float]:
    """What the loss options did in the last iteration: shares of the trained tokens clipped by each bound,
    the share of completion tokens masked for truncation, the TIS weights' mean and maximum and the mean
    overlong penalty (each only when its option is on; see docs/losses.md)."""
    share = max(tokens, 1.0)
    metrics = {"loss/clipped_low": totals["clipped_low"] / share, "loss/clipped_high": totals["clipped_high"] / share}
    if config.dual_clip_c is not None:
        metrics["loss/clipped_dual"] = totals["clipped_dual"] / share
    if config.mask_truncated_completions:
        completion_tokens = float(batch.completion_mask.sum())
        metrics["loss/masked_truncated"] = 1.0 - float(mask.sum()) / max(completion_tokens, 1.0)
    if config.sampler_is_cap is not None and tokens > 0:
        metrics["loss/is_weight_mean"] = totals["is_weight"] / tokens
        metrics["loss/is_weight_max"] = totals["is_weight_max"]
    if config.overlong_buffer is not None and batch.size:
        penalty = overlong_penalty(batch.lengths, max_length=max_length, buffer=config.overlong_buffer,
                                   penalty=config.overlong_penalty)
        metrics["rollout/overlong_penalty"] = float(penalty.mean())
    return metrics


def sampler_kl(sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token estimate [B, T] of KL(sampler || trainer) from the log-probs [B, T] both give the tokens
    the sampler drew: Schulman's k3, exp(d) - 1 - d with d = trainer - sampler (unbiased, >= 0)."""
    log_ratio = trainer_logprobs.float() - sampler_logprobs.float()
    return torch.expm1(log_ratio) - log_ratio


def _zero_grads(params: list[torch.nn.Parameter]) -> None:
    """Zero (and create) every gradient, so that a step with no trained rows is an AdamW step with a
    zero gradient, exactly as if the zero-advantage rows had been computed."""
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        else:
            param.grad.zero_()


def _clip(params: list[torch.nn.Parameter], max_norm: float) -> float:
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    grads = [p.grad.detach().norm() for p in params if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0
