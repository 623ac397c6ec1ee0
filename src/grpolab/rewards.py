"""Scoring a batch of completions with a verifier, without letting one bad completion stop a run.

A verifier that returns None, NaN or +-inf, or returns a non-number or raises, marks that completion
unscorable: its reward is NaN (which every advantage estimator turns into advantage 0 and leaves out of
group statistics). Unscorable completions are counted in ``rollout/unscorable``; the calls that raised or
returned a non-number also in ``rollout/verifier_errors``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Scores", "score_batch"]


@dataclass
class Scores:
    """Rewards of a batch and what went wrong while scoring it.

    Attributes:
        rewards: [B] float64, NaN where unscorable.
        errors: how many verifier calls raised.
        first_error: the message of the first exception (for the log), or None.
    """

    rewards: np.ndarray
    errors: int
    first_error: str | None

    @property
    def unscorable(self) -> int:
        return int(np.isnan(self.rewards).sum())


def score_batch(
    verifier: Callable[[str, str], float | None], completions: Sequence[str], references: Sequence[str]
) -> Scores:
    """Score completion i against reference i with ``verifier``; never raises for a verifier's fault."""
    rewards = np.full(len(completions), np.nan)
    errors, first_error = 0, None
    for i, (completion, reference) in enumerate(zip(completions, references, strict=True)):
        try:
            value = verifier(completion, reference)
            value = None if value is None else float(value)  # a str, list or huge int fails here
        except Exception as error:  # a user verifier may raise or return anything; the run must go on
            errors += 1
            first_error = first_error or f"{type(error).__name__}: {error}"
            continue
        if value is not None and math.isfinite(value):
            rewards[i] = value
    return Scores(rewards, errors, first_error)
