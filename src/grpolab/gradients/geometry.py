"""Gradient geometry of a GRPO rollout batch: effective rank, the rank-2 check, sparsity, credit assignment.

``analyze_gradients`` returns ``grad/*`` metrics from the per-completion gradients g_i of
``grpolab.gradients.rows`` ([B, K]) and the advantages A [P, G]. The paper (GRPO policy-gradient
foundations) says "the gradient matrix has effective rank about 2 for R in {2, 4, 8}" without saying which
matrix or which rank measure, so several candidate matrices are measured (docs/gradient-geometry.md):

* ``weighted``: rows A_i g_i for the whole batch [B, K]; ``weighted_group``: the same per group [G, K]
  (mean over groups with a nonzero matrix).
* ``raw``: rows g_i [B, K]; ``raw_group``: per group [G, K] (mean over all groups).
* ``group_sum``: one row per group, its policy gradient h_p = sum_i A_i g_i [P', K] (nonzero h_p only).
* ``split_group``: per mixed group the two rows [S+, S-] (sums of the gradients of the correct and of the
  wrong completions); at most 2 by construction, mean over mixed groups.
* ``layer``: each 2-D weight's summed policy gradient sum_i A_i dlogpi_i/dW as an [m, n] matrix (the
  GaLore-style "gradient matrix"), mean over weights.

Rank measures (``grpolab.diagnostics.spectrum``): Roy & Vetterli effective rank, stable rank, energy90/99.

Per-token advantages A [B, T] (``--reward-granularity token``, the paper's own falsification test) replace
A_i g_i by w_i = sum_t A_i,t dlog pi_i,t/dtheta in every weighted matrix, h = sum_i w_i per group, and the
rank-2 checks measure how far h leaves span(S+, S-) (S+/S-: by the outcome reward); ``all_sum_share`` is
NaN there (it is defined through per-completion advantages).

The algebra behind the rank-2 claim, for one group with binary rewards: every correct completion has the same
advantage a+ and every wrong one a-, so h = a+ S+ + a- S- lies in span(S+, S-) (``rank2_residual`` = 0,
for any estimator that is a function of the reward, ``sign`` included). Writing h = alpha d + beta s with
d = S+/n+ - S-/n- and s = S+ + S-, beta = (n+ a+ + n- a-) / G: a zero-sum estimator has beta = 0, so h is
along the single direction d (``rank1_residual`` = 0), while ``sign`` has beta = 2 p - 1 and a component
along the sum of all gradients (``all_sum_share`` > 0).

Departures from the paper: ranks are of per-completion (sequence-level) gradients of summed log-probs, not of
the clipped token-mean loss; "per group" metrics are means over groups, and degenerate groups (all equal
rewards, zero-sum estimator) are left out of the weighted per-group and group-sum matrices because their
matrix is exactly 0 (rank 0 by definition).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from grpolab.config import TrainConfig
from grpolab.diagnostics import gradient_sparsity, spectrum, zero_advantage_fraction
from grpolab.errors import UserError
from grpolab.gradients.halves import half_batch_cosine
from grpolab.gradients.rows import (
    as_batch,
    per_completion_gradients,
    summed_policy_gradient,
    token_advantages,
)
from grpolab.process_rewards import is_per_token

__all__ = [
    "analyze_gradients",
    "decompose_group_gradient",
    "gradient_metrics_for_step",
    "projection_residual",
    "split_sums",
]

RANK_KEYS = ("effective_rank", "stable_rank", "energy90", "energy99")
SPARSITY_THRESHOLD = 1e-3  # |g| <= this fraction of max |g| counts as (near) zero in grad/sparsity


def projection_residual(vector: torch.Tensor, basis: torch.Tensor) -> float:
    """||v - P v|| / ||v|| where P projects onto the row span of ``basis`` [m, K]; 0 for a zero vector."""
    v = vector.double()
    norm = float(v.norm())
    if norm == 0.0:
        return 0.0
    b = basis.double()
    b = b[b.norm(dim=1) > 0]
    if b.shape[0] == 0:
        return 1.0
    coefficients = torch.linalg.lstsq(b.T, v.unsqueeze(1)).solution  # [m, 1]
    return float((v - (b.T @ coefficients).squeeze(1)).norm()) / norm


def split_sums(rows: torch.Tensor, rewards: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(S+, S-) [K] each: sums of the rows of one group [G, K] with reward 1 and with reward 0 (NaN: neither)."""
    correct = torch.from_numpy(rewards == 1)
    wrong = torch.from_numpy(rewards == 0)
    return rows[correct].sum(dim=0), rows[wrong].sum(dim=0)


def decompose_group_gradient(rows: torch.Tensor, rewards: np.ndarray, advantages: torch.Tensor) -> dict[str, float]:
    """For one group (rows [G, K], binary rewards [G], advantages [G]): the rank-2 diagnostics of h = sum A_i g_i.

    Keys: rank2_residual (h onto span(S+, S-)), rank1_residual (h onto d = S+/n+ - S-/n-; mixed groups only,
    else NaN), all_sum_share = ||beta s|| / ||h|| with h = alpha d + beta s, s = S+ + S- (NaN if not mixed).
    """
    rows = rows.double()
    weights = torch.as_tensor(advantages).reshape(-1).double()
    h = weights @ rows  # [K]
    plus, minus = split_sums(rows, rewards)
    out = {"rank2_residual": projection_residual(h, torch.stack([plus, minus]))}
    n_plus, n_minus = int((rewards == 1).sum()), int((rewards == 0).sum())
    if n_plus == 0 or n_minus == 0:
        return {**out, "rank1_residual": float("nan"), "all_sum_share": float("nan")}
    direction = plus / n_plus - minus / n_minus
    out["rank1_residual"] = projection_residual(h, direction.unsqueeze(0))
    scored = ~np.isnan(rewards)
    beta = float(weights[torch.from_numpy(scored)].sum()) / (n_plus + n_minus)
    norm = float(h.norm())
    out["all_sum_share"] = abs(beta) * float((plus + minus).norm()) / norm if norm > 0 else 0.0
    return out


def _rank_metrics(matrix: torch.Tensor, prefix: str) -> dict[str, float]:
    result = spectrum(matrix)
    return {f"grad/{prefix}_{key}": float(result[key]) for key in RANK_KEYS}


def _mean_rank_metrics(matrices: Sequence[torch.Tensor], prefix: str) -> dict[str, float]:
    """Mean over matrices of each rank measure (NaN when there are none)."""
    if not matrices:
        return {f"grad/{prefix}_{key}": float("nan") for key in RANK_KEYS}
    per = [_rank_metrics(m, prefix) for m in matrices]
    return {key: float(np.mean([p[key] for p in per])) for key in per[0]}


def _groups(rows: torch.Tensor, shape: tuple[int, int]) -> list[torch.Tensor]:
    p, g = shape
    return list(rows.reshape(p, g, -1).unbind(0))  # P x [G, K]


def _candidate_matrices(rows: torch.Tensor, rewards: np.ndarray, weighted: torch.Tensor) -> dict[str, Any]:
    """The candidate "gradient matrices" named in the module docstring (except ``layer``); ``weighted`` [B, K]
    holds the rows A_i g_i (or w_i under per-token advantages)."""
    weighted_groups = [w for w in _groups(weighted, rewards.shape) if bool(w.any())]
    sums = torch.stack([w.sum(dim=0) for w in weighted_groups]) if weighted_groups else weighted[:0]
    mixed = [p for p in range(rewards.shape[0]) if (rewards[p] == 1).any() and (rewards[p] == 0).any()]
    raw_groups = _groups(rows, rewards.shape)
    split = [torch.stack(split_sums(raw_groups[p], rewards[p])) for p in mixed]
    return {"weighted": weighted, "weighted_group": weighted_groups, "raw": rows, "raw_group": raw_groups,
            "group_sum": sums, "split_group": split}


def _rank_candidates(rows: torch.Tensor, rewards: np.ndarray, weighted: torch.Tensor) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for name, value in _candidate_matrices(rows, rewards, weighted).items():
        if isinstance(value, torch.Tensor):
            metrics.update(_rank_metrics(value, name))
        else:
            metrics.update(_mean_rank_metrics(value, name))
    return metrics


def _token_level_decomposition(rows: torch.Tensor, rewards: np.ndarray, weighted: torch.Tensor) -> dict[str, float]:
    """``decompose_group_gradient`` for one group whose gradient h = sum of the ``weighted`` rows [G, K] comes
    from per-token advantages (all_sum_share NaN: it is defined through per-completion advantages)."""
    h = weighted.double().sum(dim=0)
    plus, minus = split_sums(rows.double(), rewards)
    out = {"rank2_residual": projection_residual(h, torch.stack([plus, minus])), "all_sum_share": float("nan")}
    n_plus, n_minus = int((rewards == 1).sum()), int((rewards == 0).sum())
    mixed = n_plus > 0 and n_minus > 0
    direction = plus / max(n_plus, 1) - minus / max(n_minus, 1)
    out["rank1_residual"] = projection_residual(h, direction.unsqueeze(0)) if mixed else float("nan")
    return out


def _rank2_checks(rows: torch.Tensor, rewards: np.ndarray, advantages: torch.Tensor,
                  weighted: torch.Tensor | None = None) -> dict[str, float]:
    """grad/rank2_residual (max over groups), grad/rank1_residual and grad/all_sum_share (means, mixed groups);
    with ``weighted`` rows (per-token advantages) h is their group sum."""
    if weighted is None:
        per = [decompose_group_gradient(g, rewards[p], advantages[p])
               for p, g in enumerate(_groups(rows, rewards.shape)) if bool(advantages[p].any())]
    else:
        per = [_token_level_decomposition(g, rewards[p], w)
               for p, (g, w) in enumerate(zip(_groups(rows, rewards.shape), _groups(weighted, rewards.shape),
                                              strict=True)) if bool(w.any())]
    mixed = [d for d in per if not np.isnan(d["rank1_residual"])]
    return {
        "grad/rank2_residual": max((d["rank2_residual"] for d in per), default=0.0),
        "grad/rank1_residual": float(np.mean([d["rank1_residual"] for d in mixed])) if mixed else float("nan"),
        "grad/all_sum_share": float(np.mean([d["all_sum_share"] for d in mixed])) if mixed and weighted is None
        else float("nan"),
        "grad/mixed_groups": float(len(mixed)),
    }


def _summed_gradient_metrics(summed: dict[str, torch.Tensor]) -> dict[str, float]:
    """Sparsity of sum_i A_i g_i and the mean rank measures of its 2-D weight matrices (``layer``)."""
    grads = list(summed.values())
    matrices = [g for g in grads if g.ndim == 2 and bool(g.any())]
    return {
        "grad/sparsity": gradient_sparsity(grads, threshold=SPARSITY_THRESHOLD, relative=True),
        "grad/sparsity_exact_zero": gradient_sparsity(grads, threshold=0.0),
        "grad/norm": float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads))),
        **_mean_rank_metrics(matrices, "layer"),
    }


def _credit_metrics(batch: Any, advantages: torch.Tensor, shape: tuple[int, int]) -> dict[str, float]:
    """Zero-advantage shares and the within-completion spread of the per-token advantages (0 by design under
    outcome rewards); a completion counts as zero-advantage when all its tokens are."""
    mask = batch.completion_mask
    per_token = token_advantages(advantages, mask)  # [B, T]
    lengths = mask.sum(dim=1).clamp(min=1)
    mean = per_token.sum(dim=1) / lengths
    spread = (((per_token - mean[:, None]) ** 2) * mask).sum(dim=1) / lengths  # [B]
    carries = per_token.abs().amax(dim=1).reshape(shape) if per_token.shape[1] else torch.zeros(shape)  # [P, G]
    shares = zero_advantage_fraction(carries, mask.sum(dim=1).reshape(shape))
    return {
        "grad/token_advantage_within_completion_std": float(spread.sqrt().max()) if spread.numel() else 0.0,
        "grad/zero_advantage_completions": shares["completions"],
        "grad/zero_advantage_tokens": shares["tokens"],
    }


def _rewards_of(batch: Any, advantages: torch.Tensor, rewards: Any, per_token: bool) -> np.ndarray:
    """Rewards [P, G] from the argument, the batch, or (failing both, outcome advantages [P, G] only) the sign
    of the advantages."""
    if rewards is None:
        rewards = getattr(batch, "rewards", None)
    if rewards is None and per_token:
        raise UserError("per-token advantages [B, T] need the outcome rewards [P, G]: pass rewards= or a batch "
                        "with .rewards")
    if rewards is None:
        return (advantages > 0).double().numpy()
    array = np.asarray(rewards, dtype=np.float64)
    return array if per_token else array.reshape(advantages.shape)


def analyze_gradients(
    model: torch.nn.Module, batch: Any, advantages: torch.Tensor, *, params: str | Sequence[str] | None = None,
    sketch_dim: int | None = None, seed: int = 0, rewards: Any = None, temperature: float = 1.0,
) -> dict[str, float]:
    """``grad/*`` metrics of one rollout batch (B = P * G completions) with advantages [P, G], or per-token
    advantages [B, T] (then ``rewards`` [P, G] or ``batch.rewards`` must give the groups' outcome rewards).

    ``params``: see ``grpolab.gradients.select_parameters``; ``sketch_dim``: CountSketch width (None = exact
    rows when they fit); ``rewards`` [P, G]: default ``batch.rewards``. Uses B + 1 forward/backward passes.
    """
    started = time.perf_counter()
    batch = as_batch(batch)
    advantages = torch.as_tensor(advantages).detach().float().cpu()
    per_token = is_per_token(advantages, batch.completion_mask)
    reward_matrix = _rewards_of(batch, advantages, rewards, per_token)
    found = per_completion_gradients(model, batch, params=params, sketch_dim=sketch_dim, seed=seed,
                                     temperature=temperature, token_weights=advantages if per_token else None)
    summed = summed_policy_gradient(model, batch, advantages, params=params, temperature=temperature)
    rows = found.rows
    weighted = found.weighted if per_token else rows * advantages.reshape(-1, 1)  # [B, K]
    metrics = {**_rank_candidates(rows, reward_matrix, weighted),
               **_rank2_checks(rows, reward_matrix, advantages, found.weighted if per_token else None),
               **_summed_gradient_metrics(summed), **_credit_metrics(batch, advantages, reward_matrix.shape)}
    reference = found.project(list(summed.values()))
    from_rows = weighted.sum(dim=0)
    metrics["grad/row_sum_error"] = float((from_rows - reference).norm() / reference.norm().clamp(min=1e-30))
    metrics.update({"grad/dim": float(found.dim), "grad/sketch_dim": float(found.sketch_dim or 0),
                    "grad/seconds": time.perf_counter() - started})
    return metrics


def gradient_metrics_for_step(model: torch.nn.Module, batch: Any, advantages: torch.Tensor,
                              config: TrainConfig) -> dict[str, float]:
    """The training hook: ``grad/half_batch_cosine`` (``grpolab.gradients.halves``) and, unless the config's
    ``grad_analysis_parts`` is half_batch, ``analyze_gradients`` with the config's ``grad_analysis_params``,
    ``grad_analysis_sketch_dim``, ``seed`` and ``temperature``. Both measure in float32 whatever the run's ``dtype``:
    under bfloat16 autocast the rounding of the logits adds noise of its own to each half's gradient, and the
    cosine is meant to measure the sampling noise. The model is put in eval mode for the analysis and its mode
    restored; parameter ``.grad`` fields are never touched.
    """
    was_training = model.training
    model.eval()
    try:
        return _step_gradient_metrics(model, batch, advantages, config)
    finally:
        model.train(was_training)


def _step_gradient_metrics(model: torch.nn.Module, batch: Any, advantages: torch.Tensor,
                           config: TrainConfig) -> dict[str, float]:
    metrics = {} if config.grad_analysis_parts == "half_batch" else analyze_gradients(
        model, batch, advantages, params=config.grad_analysis_params,
        sketch_dim=config.grad_analysis_sketch_dim, seed=config.seed, temperature=config.temperature)
    groups = getattr(batch, "group_size", None) or config.group_size
    metrics["grad/half_batch_cosine"] = half_batch_cosine(
        model, batch, advantages, group_size=groups, params=config.grad_analysis_params,
        temperature=config.temperature) if batch.completion_ids.shape[0] >= 2 * groups else float("nan")
    return metrics
