"""Per-token (process) rewards and their advantages: ``--reward-granularity token``.

Shapes: P groups of G completions, B = P * G rows (problem-major), T completion tokens.

1. ``token_rewards``: a process verifier (``grpolab.verifiers.process``) labels characters of each completion
   text; each label goes to the token whose decoded text holds that character. Token spans come from
   decoding every prefix of the completion's tokens (``token_ends``), so multi-byte characters split across
   byte-level tokens and tokenizers that merge characters are both handled; the end-of-text position goes to
   the completion's last token (its EOS when it has one). **A token's reward is the mean of its characters'
   labels** (one step, one reward, whatever the tokenizer's merges), NaN when it holds no label. The result
   is [B, T] float64 with NaN at unrewarded tokens.
2. ``token_advantages``: DeepSeekMath's process supervision (Shao et al. 2024, arXiv 2402.03300, §4.1.3):
   the step rewards of a group are normalised by the mean and standard deviation of *all* rewarded
   positions of that group, r~ = (r - mean) / std, and a token's advantage is the sum of the normalised
   rewards at and after it, A_t = sum_{t' >= t} r~_t'.

Estimators under token rewards (the registry entries with granularity ``token``), each the outcome estimator's
normalisation applied to the group's rewarded positions instead of its completions (the same registry function,
with the same input checks, runs on a [P, G*T] view: ``advantages.normalise_token_rewards``), then the
reward-to-go:

- ``grpo``: DeepSeekMath §4.1.3 as above (sample std by default, as ``grpo``; its ``eps`` and ``std`` apply);
- ``dr_grpo``: r~ = r - mean (Liu et al. 2025, arXiv 2503.20783: no std division);
- ``sign``: r~ = 2 r - 1 (the fixed-reference advantage of arXiv 2605.07689 per step; a token whose
  characters are partly right gets 2 * mean - 1).

Others are refused: ``rloo``'s leave-one-out and ``passk``'s subset counts are defined over completions, not
steps, and the group-free ones (``reinforce``, ``nsr``, ...) have no published per-step form.

Departures: DeepSeekMath's steps are reasoning steps scored by a learned reward model, here they are answer
characters labelled exactly; std is Bessel-corrected by default (as grpolab's ``grpo``). With every reward on
the last token this is exactly outcome GRPO broadcast over the tokens (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from grpolab import advantages as advantage_registry
from grpolab.errors import UserError
from grpolab.verifiers.process import CharRewards, ProcessVerifierFn

__all__ = ["check_token_estimator", "completion_advantages", "is_per_token", "token_advantages", "token_ends",
           "token_rewards", "token_rewards_of_row"]


def token_ends(tokenizer, ids: Sequence[int]) -> np.ndarray:
    """[L] end offset (exclusive, in characters) of each token in the decoded text of ``ids``: the length of
    the decoded prefix through that token, made non-decreasing."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    prefixes = tokenizer.batch_decode([list(ids[: k + 1]) for k in range(len(ids))], skip_special_tokens=True)
    return np.maximum.accumulate(np.array([len(text) for text in prefixes], dtype=np.int64))


def token_rewards_of_row(labels: CharRewards, ends: np.ndarray, text_length: int) -> np.ndarray:
    """[L] per-token rewards (mean of the token's character labels; NaN: none) of one completion whose tokens
    end at ``ends`` [L]; a label at ``text_length`` or beyond the last token goes to the last token."""
    length = len(ends)
    out = np.full(length, np.nan)
    if length == 0 or not labels:
        return out
    positions = np.array([pos for pos, _ in labels], dtype=np.int64)
    values = np.array([value for _, value in labels], dtype=np.float64)
    tokens = np.searchsorted(ends, positions, side="right")  # first token ending after the position
    tokens = np.where(positions >= text_length, length - 1, np.minimum(tokens, length - 1))
    sums = np.bincount(tokens, weights=values, minlength=length)
    counts = np.bincount(tokens, minlength=length)
    rewarded = counts > 0
    out[rewarded] = sums[rewarded] / counts[rewarded]
    return out


def token_rewards(tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor, texts: Sequence[str],
                  references: Sequence[str], verifier: ProcessVerifierFn) -> tuple[torch.Tensor, int]:
    """Per-token rewards [B, T] float64 (NaN: unrewarded token) of a rollout, and how many rows the process
    verifier raised on (those rows are left unrewarded; it never raises for the verifier's fault)."""
    rewards = torch.full(completion_ids.shape, float("nan"), dtype=torch.float64)
    errors = 0
    for row, (text, reference) in enumerate(zip(texts, references, strict=True)):
        try:
            labels = verifier(text, reference)
        except Exception:  # a bad text must not stop a run: the row simply gets no step rewards
            errors += 1
            continue
        if not labels:
            continue
        length = int(completion_mask[row].sum())
        ends = token_ends(tokenizer, completion_ids[row, :length].tolist())
        rewards[row, :length] = torch.from_numpy(token_rewards_of_row(labels, ends, len(text)))
    return rewards, errors


def check_token_estimator(name: str) -> None:
    """``UserError`` unless estimator ``name`` has a per-token form (granularity ``token`` in the registry)."""
    entry = advantage_registry.entry_for(name)
    if entry is None or "token" not in entry.granularities:
        raise UserError(f"advantage {name!r} has no per-token form; with --reward-granularity token use one of "
                        f"{', '.join(advantage_registry.token_estimators())}")


def token_advantages(name: str, rewards: torch.Tensor, completion_mask: torch.Tensor, group_size: int,
                     **hyperparameters) -> torch.Tensor:
    """Advantages [B, T] float32 from per-token rewards [B, T] (NaN: unrewarded) with groups of ``group_size``
    rows: the estimator's normalisation over each group's rewarded positions, then the reward-to-go."""
    check_token_estimator(name)
    rows, width = rewards.shape
    if rows % group_size:
        raise ValueError(f"{rows} rows do not split into groups of {group_size}")
    values = rewards.detach().to(torch.float64).reshape(rows // group_size, group_size * width)  # [P, G*T]
    normalised = advantage_registry.normalise_token_rewards(name, values, **hyperparameters)  # 0 at NaN
    normalised = normalised.reshape(rows, width)  # [B, T]
    to_go = normalised.flip(1).cumsum(1).flip(1)  # [B, T]: sum over t' >= t
    return (to_go * completion_mask.to(torch.float64)).float()


def is_per_token(advantages: torch.Tensor, completion_mask: torch.Tensor) -> bool:
    """Whether ``advantages`` are per token [B, T] rather than per completion [P, G] (when the two shapes
    coincide, G = T = 1, both readings give the same per-token values)."""
    return advantages.dim() == 2 and tuple(advantages.shape) == tuple(completion_mask.shape)


def completion_advantages(advantages: torch.Tensor, completion_mask: torch.Tensor, shape: tuple[int, int]
                          ) -> torch.Tensor:
    """Per-completion advantages [P, G] for logs and starvation metrics from per-token advantages [B, T]: the
    mean over each completion's tokens. (Outcome advantages are per completion already: don't call this.)"""
    if not is_per_token(advantages, completion_mask):
        raise ValueError(f"completion_advantages takes per-token advantages shaped like the completion mask "
                         f"{tuple(completion_mask.shape)}, got {tuple(advantages.shape)}")
    mask = completion_mask.to(advantages.dtype)
    return ((advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).reshape(shape)
