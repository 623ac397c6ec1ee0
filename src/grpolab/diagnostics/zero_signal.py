"""Advantage and gradient sparsity: how much of a batch actually carries learning signal.

Under output-only rewards every token of a completion shares its completion's advantage (policy-gradient
foundations paper, "GRPO ... Credit Assignment, Gradient Sparsity, and Rank Collapse"), so a completion with
advantage 0 contributes no gradient from any of its tokens. The token-level fraction weights each completion
by its length, which is what a token-mean loss actually sees. The paper's "gradient sparsity" is a claim
about the gradient; ``gradient_sparsity`` measures it directly as the share of entries with |g| <= threshold.

Departures: NaN/inf advantages (unscorable completions) count as zero-advantage, because they produce no
gradient; the threshold is absolute unless ``relative=True`` (then it is a fraction of max |g|).

Shapes: advantages, lengths [P, G]; gradients any shape (or a list of tensors, e.g. per parameter).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from grpolab.diagnostics._arrays import as_float_matrix
from grpolab.errors import UserError


def zero_advantage_fraction(advantages: Any, lengths: Any = None, *, atol: float = 0.0) -> dict[str, float]:
    """Share of completions (and, with ``lengths`` [P, G], of tokens) whose |advantage| <= atol.

    Returns {"completions": ..., "tokens": ...}; "tokens" is only present when lengths are given.
    """
    adv = as_float_matrix(advantages, "advantages")  # [P, G]
    zero = ~np.isfinite(adv) | (np.abs(np.nan_to_num(adv)) <= atol)
    out = {"completions": float(zero.mean()) if zero.size else 0.0}
    if lengths is not None:
        tokens = as_float_matrix(lengths, "lengths")
        if tokens.shape != adv.shape:
            raise UserError(f"lengths shape {tokens.shape} must match advantages shape {adv.shape}")
        if np.any(tokens < 0):
            raise UserError("completion lengths must be >= 0")
        total = tokens.sum()
        out["tokens"] = float((tokens * zero).sum() / total) if total > 0 else 0.0
    return out


def _as_tensors(gradients: Any) -> list[torch.Tensor]:
    if isinstance(gradients, torch.Tensor):
        return [gradients]
    if isinstance(gradients, np.ndarray):
        return [torch.from_numpy(gradients)]
    if isinstance(gradients, Iterable):
        return [
            g if g is None or isinstance(g, torch.Tensor) else torch.as_tensor(np.asarray(g))
            for g in gradients
        ]
    raise UserError(f"gradients must be a tensor, an array or a list of them, got {type(gradients).__name__}")


def gradient_sparsity(gradients: Any, *, threshold: float = 0.0, relative: bool = False) -> float:
    """Fraction of gradient entries with |g| <= threshold (threshold * max|g| when ``relative``).

    ``gradients``: one tensor/array of any shape, or a list of them (entries pooled). None entries (parameters
    without a gradient) are skipped. An empty input gives 0.0.
    """
    tensors = [t.detach() for t in _as_tensors(gradients) if t is not None]
    total = sum(t.numel() for t in tensors)
    if total == 0:
        return 0.0
    limit = float(threshold)
    if relative:
        limit *= max(float(t.abs().max()) for t in tensors if t.numel())
    below = sum(int((t.abs() <= limit).sum()) for t in tensors)
    return below / total
