"""The update of one training step: the advantages of the step's batch (``grpolab.train.batch.StepBatch``), the
optimizer and the policy update (the starvation metrics are ``grpolab.diagnostics.starvation_metrics``). Shapes:
P groups, G completions each, B = P * G, T completion tokens.

``update_policy`` trains on the ``StepBatch`` under ``UpdateSettings`` (the config's fields the update reads, and
only those; the advantages and the optimizer still take the ``TrainConfig``): it cuts the trained rows
into ``MicroBatch``es (``micro_batch_size`` rows each; the loss of each is normalised by the whole batch's
denominator, so their gradients add up to the whole batch's) and sums their ``LossTotals``.

Departure from the papers, exact in its result: with beta = 0 the rows whose advantage is 0 on every
completion token are not forwarded (their gradient is exactly 0, and they still count in the loss's
denominator), so that a starved group costs no compute.

The loss options (docs/losses.md) enter at three places: ``step_advantages`` (DAPO's overlong reward shaping,
``grpolab.overlong``), ``loss_mask`` (DAPO's truncation masking) and ``_policy_loss_terms`` (GSPO, CISPO, the
dual clip and the TIS weights against the sampler's log-probs); ``loss_option_metrics`` logs what they did.

Devices: the ``StepBatch`` stays on the host, where the sampler returns it and the verifiers read it; each
micro-batch's rows, advantages, masks and frozen log-probs go to the model's device when the update forwards
them, and only the loss sums come back (``LossTotals``), summed on the device and read in one host copy per
optimizer step.

``rollout/sampler_kl`` is the mean per-token KL(sampler || trainer) over the completions the update
forwards (so it is absent on a step that trains none): the sampler may run other kernels and weights
in bfloat16 (``fast_decode``), and this says how far its distribution is from the one being trained,
as trainers that sample with vLLM report it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from grpolab import advantages as advantage_registry
from grpolab.advantages import TokenStatistics, compute_advantages
from grpolab.config import TrainConfig
from grpolab.devices import model_device
from grpolab.engine import prefix_packing
from grpolab.engine.rollout import token_logprobs, token_statistics
from grpolab.errors import UserError
from grpolab.losses import (
    PolicyLossTerms,
    aggregate,
    aggregation_denominator,
    entropy_bonus,
    policy_loss,
    rows_with_gradient,
    truncated_is_weights,
)
from grpolab.overlong import overlong_penalty, shape_rewards
from grpolab.process_rewards import completion_advantages, is_per_token, token_advantages
from grpolab.train.batch import StepBatch

__all__ = ["LossTotals", "MicroBatch", "UpdateSettings", "build_optimizer", "completion_view", "estimator_statistics",
           "loss_mask", "loss_option_metrics", "policy_token_statistics", "sampler_kl", "step_advantages",
           "trained_rows", "update_policy"]


@dataclass(frozen=True)
class UpdateSettings:
    """The settings the update reads, and only those (``UpdateSettings.of`` takes them from a ``TrainConfig``; each
    field means what the config's field of the same name means, docs/configuration.md). The loop: the iterations,
    the micro-batch rows, the clip norm, the autocast dtype and the sampling temperature the log-probs are taken
    at. The loss (``grpolab.losses``, docs/losses.md): its objective and aggregation, the clip bounds, the KL
    weight, the entropy bonus and the options of each objective. The masks and weights: DAPO's truncation mask,
    the TIS cap against the sampler and the off-policy mask. The overlong buffer only for its metric (the
    penalty itself enters the rewards in ``step_advantages``). No defaults: the config's are the only ones."""

    num_iterations: int
    micro_batch_size: int
    max_grad_norm: float
    dtype: str
    temperature: float
    policy_loss: str
    loss_aggregation: str
    epsilon_low: float
    epsilon_high: float | None
    beta: float
    entropy_coef: float
    importance_sampling_level: str
    dual_clip_c: float | None
    cispo_ratio_min: float | None
    cispo_ratio_max: float | None
    sapo_temperature_pos: float
    sapo_temperature_neg: float
    vespo_k_pos: float
    vespo_lambda_pos: float
    vespo_k_neg: float
    vespo_lambda_neg: float
    mask_truncated_completions: bool
    sampler_is_cap: float | None
    off_policy_mask_threshold: float | None
    overlong_buffer: int | None
    overlong_penalty: float

    @classmethod
    def of(cls, config: TrainConfig) -> UpdateSettings:
        """The update's settings from a run's config."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


def step_advantages(batch: StepBatch, config: TrainConfig, *, max_length: int | None = None,
                    statistics: TokenStatistics | None = None) -> torch.Tensor:
    """The advantages of a batch under the config's estimator: [P, G] of the outcome rewards, or [B, T] of the
    per-token rewards (``--reward-granularity token``) or of an estimator with a per-token baseline (``statistics``:
    ``policy_token_statistics``). With ``overlong_buffer`` the outcome rewards first get DAPO's overlong penalty
    against the token cap ``max_length`` (``grpolab.overlong``). Raises a ``UserError`` when the estimator refuses
    the rewards or the advantages overflow float32 (the loss's dtype)."""
    try:
        if batch.token_rewards is not None:
            advantages = token_advantages(config.advantage, batch.token_rewards, batch.completion_mask,
                                          batch.group_size, **config.advantage_kwargs)
        else:
            advantages = compute_advantages(config.advantage, _outcome_rewards(batch, config, max_length),
                                            lengths=batch.lengths, token_statistics=statistics,
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


def loss_mask(batch: StepBatch, settings: UpdateSettings) -> torch.Tensor:
    """[B, T] float mask of the tokens that count in the loss: the completion tokens, less those of truncated
    completions under ``mask_truncated_completions`` (DAPO's overlong filtering)."""
    mask = batch.completion_mask.float()
    if settings.mask_truncated_completions:
        mask = mask * (~batch.truncated.bool()).float().unsqueeze(1)
    return mask


def completion_view(batch: StepBatch, advantages: torch.Tensor) -> torch.Tensor:
    """Per-completion advantages [P, G] for logs and starvation metrics: the outcome advantages themselves, or
    per token the mean over each completion's tokens (``process_rewards.completion_advantages``)."""
    if not is_per_token(advantages, batch.completion_mask):
        return advantages
    return completion_advantages(advantages, batch.completion_mask, batch.rewards.shape)


def build_optimizer(params: dict[str, torch.nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with torch's fused kernel (one call for all parameters; on the embedded model's 20 tensors
    0.31 ms a step against 0.83 ms for ``foreach`` and 0.94 ms for the per-tensor loop, one thread), or
    ``foreach`` where the fused kernel does not take the parameters."""
    kinds = {(p.device.type, p.dtype) for p in params.values()}
    fused = all(device in ("cpu", "cuda") and dtype in _FUSED_DTYPES for device, dtype in kinds)
    return torch.optim.AdamW(list(params.values()), lr=config.lr, betas=config.adam_betas,
                             weight_decay=config.weight_decay, **({"fused": True} if fused else {"foreach": True}))


_FUSED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _autocast(settings: UpdateSettings, device: torch.device) -> contextlib.AbstractContextManager:
    if settings.dtype == "bfloat16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _logprobs(model: torch.nn.Module, batch: StepBatch, rows: list[int], settings: UpdateSettings) -> torch.Tensor:
    """[len(rows), T] log-probs of the rows' completions, 0 where the completion mask is 0. Llama-family
    models forward each prompt once with its rows' completions packed behind it (``prefix_packing``).
    Otherwise only the columns some of these rows use are forwarded: leading prompt columns that are
    padding in every row and trailing completion columns past every row's end are cut (they change no
    valid position's logits) and the masked tail is returned as 0."""
    prompt_mask, completion_mask = batch.prompt_mask[rows], batch.completion_mask[rows]
    device = model_device(model)
    with _autocast(settings, device):
        packed = prefix_packing.logprobs(model, batch.prompt_ids[rows], prompt_mask, batch.completion_ids[rows],
                                         completion_mask, temperature=settings.temperature)
    if packed is not None:
        return packed
    return _unpacked_logprobs(model, batch, rows, settings)[0]


def _logprobs_and_entropy(model: torch.nn.Module, batch: StepBatch, rows: list[int],
                          settings: UpdateSettings) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_logprobs`` and, under the entropy bonus (``entropy_coef`` > 0), the entropy [len(rows), T] of the
    policy at each completion token (with autograd, 0 past each row's end); the bonus needs the whole
    distribution, so those rows are forwarded without prefix packing."""
    if settings.entropy_coef <= 0:
        return _logprobs(model, batch, rows, settings), None
    return _unpacked_logprobs(model, batch, rows, settings, with_entropy=True)


def _unpacked_logprobs(model: torch.nn.Module, batch: StepBatch, rows: list[int], settings: UpdateSettings, *,
                       with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_logprobs`` without prefix packing, and the entropy [len(rows), T] under ``with_entropy`` (else None)."""
    return _unpacked_forward(model, batch, rows, settings,
                             functools.partial(token_logprobs, with_entropy=with_entropy))


def _unpacked_forward(model: torch.nn.Module, batch: StepBatch, rows: list[int], settings: UpdateSettings,
                      forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``forward(model, ids, mask, used, temperature=)`` (``token_logprobs`` or ``token_statistics``) on the rows'
    used columns: leading prompt columns that are padding in every row and trailing completion columns past every
    row's end are cut; its two [len(rows), used] results come back float32, 0-padded to the batch's T columns."""
    prompt_mask, completion_mask = batch.prompt_mask[rows], batch.completion_mask[rows]
    device = model_device(model)
    width = completion_mask.shape[1]
    start = min(int((prompt_mask.sum(dim=0) == 0).cumprod(dim=0).sum()), prompt_mask.shape[1] - 1)
    columns = completion_mask.any(dim=0).nonzero()
    used = int(columns.max()) + 1 if len(columns) else 1
    ids = torch.cat([batch.prompt_ids[rows, start:], batch.completion_ids[rows, :used]], dim=1).to(device)
    mask = torch.cat([prompt_mask[:, start:], completion_mask[:, :used]], dim=1).to(device)
    with _autocast(settings, device):
        first, second = forward(model, ids, mask, used, temperature=settings.temperature)
    pad = (0, width - used)
    return F.pad(first.float(), pad), None if second is None else F.pad(second.float(), pad)


@torch.no_grad()
def _frozen_logprobs(model: torch.nn.Module, batch: StepBatch, chunks: list[list[int]],
                     settings: UpdateSettings) -> dict:
    return {tuple(rows): _logprobs(model, batch, rows, settings) for rows in chunks}


def estimator_statistics(model: torch.nn.Module, batch: StepBatch, config: TrainConfig) -> TokenStatistics | None:
    """The policy's per-token statistics of the batch (``policy_token_statistics``) where the config's estimator
    has a per-token baseline (``optimal_token_baseline``), else None: ``step_advantages``' ``statistics``."""
    if not advantage_registry.info(config.advantage).needs_token_statistics:
        return None
    return policy_token_statistics(model, batch, UpdateSettings.of(config))


@torch.no_grad()
def policy_token_statistics(model: torch.nn.Module, batch: StepBatch, settings: UpdateSettings) -> TokenStatistics:
    """The sampling policy's ``TokenStatistics`` of the batch (the optimal token baseline's inputs): every row
    forwarded once without autograd, ``micro_batch_size`` rows at a time and without prefix packing (it needs the
    whole distribution at each token), at the sampling temperature. On the host, like the batch."""
    logprobs, squares = [], []
    for start in range(0, batch.size, settings.micro_batch_size):
        rows = list(range(start, min(start + settings.micro_batch_size, batch.size)))
        part = _unpacked_forward(model, batch, rows, settings, token_statistics)
        logprobs.append(part[0])
        squares.append(part[1])
    mask = batch.completion_mask.float()
    if not logprobs:  # an empty batch (dynamic sampling that found no informative group)
        return TokenStatistics(mask, torch.zeros_like(mask), torch.zeros_like(mask))
    drawn = torch.cat(logprobs).cpu().clamp(max=0.0)  # float32 rounding of logit - logsumexp can pass 0
    return TokenStatistics(mask, drawn * mask, torch.cat(squares).cpu().clamp(0.0, 1.0) * mask)


@dataclass(frozen=True)
class MicroBatch:
    """The rows of one forward and backward pass of the update, and everything their loss needs besides the
    model. Shapes: b rows, T completion tokens.

    Attributes:
        rows: the batch rows (indices into the ``StepBatch``) forwarded together.
        advantages: [b] one per completion (outcome rewards) or [b, T] per token.
        mask: [b, T] float completion mask (1 = a token that counts in the loss).
        denominator: the whole batch's normaliser of the loss aggregation (``aggregation_denominator``), so
            that the micro-batch losses add up to the loss of the whole batch.
        old_logprobs: [b, T] frozen log-probs of the policy that sampled (when ``num_iterations`` > 1), else
            None: the current log-probs, detached, take their place.
        ref_logprobs: [b, T] frozen log-probs of the reference policy (beta > 0), else None.
        sampler_logprobs: [b, T] the sampler's own log-probs, else None.
        is_weights: [b, T] TIS weights against the sampler (``sampler_is_cap``), else None: computed in the
            micro-step, from the policy that sampled.
    """

    rows: list[int]
    advantages: torch.Tensor
    mask: torch.Tensor
    denominator: float
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    sampler_logprobs: torch.Tensor | None = None


@dataclass(frozen=True)
class LossTotals:
    """Sums over the micro-batches of one optimizer step: the aggregated loss, and the masked per-token sums
    of the KL to the reference, of the clipped indicators (any bound, and each bound), of the sampler KL and
    of the TIS weights, the entropy bonus subtracted, the tokens the off-policy mask dropped and the entropy (under
    the bonus); ``is_weight_max`` is a maximum, not a sum."""

    loss: float = 0.0
    kl: float = 0.0
    clipped: float = 0.0
    sampler_kl: float = 0.0
    clipped_low: float = 0.0
    clipped_high: float = 0.0
    clipped_dual: float = 0.0
    is_weight: float = 0.0
    is_weight_max: float = 0.0
    entropy_bonus: float = 0.0
    off_policy_masked: float = 0.0
    entropy: float = 0.0

    def __add__(self, other: LossTotals) -> LossTotals:
        sums = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return LossTotals(**{**sums, "is_weight_max": max(self.is_weight_max, other.is_weight_max)})


_TOTALS = tuple(f.name for f in fields(LossTotals))


def _device_totals(parts: list[dict[str, torch.Tensor]]) -> LossTotals:
    """The ``LossTotals`` of micro-batch sums kept as 0-dim device tensors: summed (``is_weight_max``: maximised)
    on the device, then read back in one host copy for the whole step."""
    if not parts:
        return LossTotals()
    values = {name: torch.stack([part[name].float() for part in parts]) for name in _TOTALS}  # [micro-batches]
    row = torch.stack([values[name].max() if name == "is_weight_max" else values[name].sum() for name in _TOTALS])
    return LossTotals(**dict(zip(_TOTALS, row.tolist(), strict=True)))


def update_policy(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: StepBatch, advantages: torch.Tensor,
    settings: UpdateSettings, *, lr: float, max_length: int, reference: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """``num_iterations`` optimizer steps on ``batch`` with advantages [P, G] (outcome) or [B, T] (per token);
    returns ``loss/*`` metrics. Only the rows the loss gives a gradient are forwarded (``trained_rows``)."""
    mask = loss_mask(batch, settings)
    rows = trained_rows(batch, advantages, settings)
    micro_batches = _micro_batches(model, batch, advantages, rows, settings, max_length=max_length,
                                   reference=reference)
    for group in optimizer.param_groups:
        group["lr"] = lr
    params = [p for group in optimizer.param_groups for p in group["params"]]
    totals = LossTotals()
    for _ in range(settings.num_iterations):
        _zero_grads(params)
        totals = _device_totals([_micro_step(model, batch, micro, settings) for micro in micro_batches])
        grad_norm = _clip(params, settings.max_grad_norm)
        optimizer.step()
    tokens = float(mask[rows].sum()) if rows else 0.0
    metrics = {
        "loss/total": totals.loss, "loss/kl": totals.kl / max(tokens, 1.0),
        "loss/clip_fraction": totals.clipped / max(tokens, 1.0), "loss/grad_norm": grad_norm,
        "loss/lr": lr, "loss/trained_sequences": float(len(rows)), "loss/train_tokens": tokens,
    }
    metrics["loss/clipped"] = float(0 < settings.max_grad_norm < grad_norm)  # loss/grad_norm is the pre-clip norm
    if batch.sampler_logprobs is not None and tokens > 0:
        metrics["rollout/sampler_kl"] = totals.sampler_kl / tokens
    metrics.update(loss_option_metrics(totals, batch, mask, settings, tokens=tokens, max_length=max_length))
    return metrics


def loss_option_metrics(totals: LossTotals, batch: StepBatch, mask: torch.Tensor, settings: UpdateSettings, *,
                        tokens: float, max_length: int) -> dict[str, float]:
    """What the loss options did in the last iteration (docs/losses.md): shares of the trained tokens clipped by
    each bound, the share of completion tokens masked for truncation, the TIS weights' mean and maximum and the
    mean overlong penalty (the last four only when their option is on)."""
    share = max(tokens, 1.0)
    metrics = {"loss/clip_fraction_low": totals.clipped_low / share,
               "loss/clip_fraction_high": totals.clipped_high / share}
    if settings.dual_clip_c is not None:
        metrics["loss/clip_fraction_dual"] = totals.clipped_dual / share
    if settings.mask_truncated_completions:
        metrics["loss/masked_truncated"] = 1.0 - float(mask.sum()) / max(float(batch.completion_mask.sum()), 1.0)
    if settings.entropy_coef > 0:
        metrics["loss/entropy_bonus"] = totals.entropy_bonus
        if tokens > 0:
            metrics["loss/entropy"] = totals.entropy / tokens
    if settings.off_policy_mask_threshold is not None:
        metrics["loss/off_policy_masked"] = totals.off_policy_masked / share
    if settings.sampler_is_cap is not None and tokens > 0:
        metrics["loss/is_weight_mean"] = totals.is_weight / tokens
        metrics["loss/is_weight_max"] = totals.is_weight_max
    if settings.overlong_buffer is not None and batch.size:
        penalty = overlong_penalty(batch.lengths, max_length=max_length, buffer=settings.overlong_buffer,
                                   penalty=settings.overlong_penalty)
        metrics["rollout/overlong_penalty"] = float(penalty.mean())
    return metrics


def _row_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Float advantages per row: [B, T] when per token (shaped like ``mask``), else [B] from [P, G]."""
    per_token = tuple(advantages.shape) == tuple(mask.shape)
    return advantages.float() if per_token else advantages.reshape(-1).float()


def trained_rows(batch: StepBatch, advantages: torch.Tensor, settings: UpdateSettings) -> list[int]:
    """The rows the update forwards: those the loss gives a gradient (``grpolab.losses.rows_with_gradient``,
    decided by the loss's own terms); the others contribute an exactly 0 gradient."""
    mask = loss_mask(batch, settings)
    carries = rows_with_gradient(_row_advantages(advantages, mask), mask, beta=settings.beta,
                                 entropy_coef=settings.entropy_coef)  # [B]
    return torch.nonzero(carries).flatten().tolist()


def _micro_batches(model: torch.nn.Module, batch: StepBatch, advantages: torch.Tensor, rows: list[int],
                   settings: UpdateSettings, *, max_length: int, reference: torch.nn.Module | None) -> list[MicroBatch]:
    """``rows`` cut into micro-batches of ``micro_batch_size``, with their frozen log-probs computed once."""
    mask = loss_mask(batch, settings)
    flat = _row_advantages(advantages, mask)  # [B] or [B, T]
    denominator = aggregation_denominator(mask, settings.loss_aggregation, max_length=max_length)
    chunks = [rows[i : i + settings.micro_batch_size] for i in range(0, len(rows), settings.micro_batch_size)]
    old = _frozen_logprobs(model, batch, chunks, settings) if settings.num_iterations > 1 else None
    ref = _frozen_logprobs(reference, batch, chunks, settings) if reference is not None else None
    sampler, device = batch.sampler_logprobs, model_device(model)
    return [MicroBatch(rows=chunk, advantages=flat[chunk].to(device), mask=mask[chunk].to(device),
                       denominator=denominator, old_logprobs=None if old is None else old[tuple(chunk)],
                       ref_logprobs=None if ref is None else ref[tuple(chunk)],
                       sampler_logprobs=None if sampler is None else sampler[chunk].to(device))
            for chunk in chunks]


def _micro_step(model: torch.nn.Module, batch: StepBatch, micro: MicroBatch,
                settings: UpdateSettings) -> dict[str, torch.Tensor]:
    """Forward ``micro``'s rows, backpropagate their share of the loss (gradients accumulate) and return
    their sums: ``LossTotals``' fields as 0-dim tensors on the model's device (no host round trip)."""
    logprobs, entropy = _logprobs_and_entropy(model, batch, micro.rows, settings)
    before = micro.old_logprobs if micro.old_logprobs is not None else logprobs.detach()  # the sampling policy
    is_weights = _is_weights(before, micro, settings)
    terms = _policy_loss_terms(logprobs, before, micro, settings, is_weights)
    loss = aggregate(terms.loss, micro.mask, settings.loss_aggregation, denominator=micro.denominator)
    zero = micro.mask.new_zeros(())
    bonus = entropy_sum = zero
    if entropy is not None:
        entropy_sum = (entropy.detach() * micro.mask).sum()
        bonus = entropy_bonus(entropy, micro.mask, settings.loss_aggregation, settings.entropy_coef,
                              denominator=micro.denominator)
        loss = loss - bonus
    loss.backward()
    sampler = zero
    if micro.sampler_logprobs is not None:
        sampler = (sampler_kl(micro.sampler_logprobs, before) * micro.mask).sum()
    return {"loss": loss.detach(), "kl": (terms.kl * micro.mask).sum(), "clipped": (terms.clipped * micro.mask).sum(),
            "sampler_kl": sampler, "entropy_bonus": bonus.detach(), "entropy": entropy_sum,
            **_option_sums(terms, is_weights, micro.mask, zero)}


def _policy_loss_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, micro: MicroBatch,
                       settings: UpdateSettings, is_weights: torch.Tensor | None = None) -> PolicyLossTerms:
    """The per-token policy loss [b, T] of a micro-batch under the config's loss settings (docs/losses.md): the
    one place the update calls ``grpolab.losses``' policy loss."""
    return policy_loss(
        logprobs, old_logprobs, micro.advantages, epsilon_low=settings.epsilon_low, epsilon_high=settings.epsilon_high,
        ref_logprobs=micro.ref_logprobs, beta=settings.beta, objective=settings.policy_loss,
        importance_sampling_level=settings.importance_sampling_level, mask=micro.mask, dual_clip_c=settings.dual_clip_c,
        cispo_ratio_min=settings.cispo_ratio_min, cispo_ratio_max=settings.cispo_ratio_max, is_weights=is_weights,
        sapo_temperatures=(settings.sapo_temperature_pos, settings.sapo_temperature_neg),
        vespo_shape=(settings.vespo_k_pos, settings.vespo_lambda_pos, settings.vespo_k_neg, settings.vespo_lambda_neg),
        off_policy_threshold=settings.off_policy_mask_threshold, sampling_logprobs=micro.sampler_logprobs,
    )


def _is_weights(before: torch.Tensor, micro: MicroBatch, settings: UpdateSettings) -> torch.Tensor | None:
    """TIS weights [b, T] under ``sampler_is_cap``: the trainer's pre-update log-probs ``before`` against the
    sampler's; else None."""
    if settings.sampler_is_cap is None:
        return None
    if micro.sampler_logprobs is None:
        raise UserError("sampler_is_cap needs the sampler's log-probs, and this batch has none; drop --sampler-is-cap")
    return truncated_is_weights(before, micro.sampler_logprobs, settings.sampler_is_cap)


def _option_sums(terms: PolicyLossTerms, is_weights: torch.Tensor | None, mask: torch.Tensor,
                 zero: torch.Tensor) -> dict[str, torch.Tensor]:
    """The masked sums of each bound's clipped indicator and of the TIS weights, and the weights' maximum over the
    masked tokens (0 without any: the weights are >= 0), as 0-dim device tensors."""
    sums = {f"clipped_{bound}": (getattr(terms, f"clipped_{bound}") * mask).sum() for bound in ("low", "high", "dual")}
    sums.update(is_weight=zero, is_weight_max=zero, off_policy_masked=(terms.off_policy_masked * mask).sum())
    if is_weights is not None and mask.numel():
        sums.update(is_weight=(is_weights * mask).sum(),
                    is_weight_max=torch.where(mask > 0, is_weights.float(), 0.0).max())
    return sums


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
