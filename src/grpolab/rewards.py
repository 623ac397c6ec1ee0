"""Scoring a batch of completions with a verifier, without letting one bad completion stop a run.

A verifier that returns None, NaN or +-inf, returns a non-number, raises, or (a user verifier) does not
return within its time limit marks that completion unscorable: its reward is NaN (which every advantage
estimator turns into advantage 0 and leaves out of group statistics). Unscorable completions are counted
in ``rollout/unscorable``; the calls that raised or returned a non-number also in
``rollout/verifier_errors``, the calls that timed out in ``rollout/verifier_timeouts``. A verifier that
fails on most of a batch is a broken verifier, not bad completions: ``check_scores`` stops the run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from grpolab.errors import UserError
from grpolab.verifiers import VerifierTimeout

__all__ = ["Scores", "check_scores", "score_batch"]


@dataclass
class Scores:
    """Rewards of a batch and what went wrong while scoring it.

    Attributes:
        rewards: [B] float64, NaN where unscorable.
        errors: how many verifier calls raised (or returned a non-number).
        first_error: the message of the first exception (for the log), or None.
        timeouts: how many verifier calls did not return within the time limit.
        first_timeout: the message of the first time-out (it names the verifier and the limit), or None.
    """

    rewards: np.ndarray
    errors: int
    first_error: str | None
    timeouts: int = 0
    first_timeout: str | None = None

    @property
    def unscorable(self) -> int:
        return int(np.isnan(self.rewards).sum())


def score_batch(
    verifier: Callable[[str, str], float | None], completions: Sequence[str], references: Sequence[str]
) -> Scores:
    """Score completion i against reference i with ``verifier``; never raises for a verifier's fault."""
    rewards = np.full(len(completions), np.nan)
    errors, first_error, timeouts, first_timeout = 0, None, 0, None
    for i, (completion, reference) in enumerate(zip(completions, references, strict=True)):
        try:
            value = verifier(completion, reference)
            value = None if value is None else float(value)  # a str, list or huge int fails here
        except VerifierTimeout as timeout:
            timeouts += 1
            if first_timeout is None:
                first_timeout = str(timeout)
                warnings.warn(f"{timeout}; the completion is scored None (unscorable) and the run goes on",
                              RuntimeWarning, stacklevel=2)
            continue
        except Exception as error:  # a user verifier may raise or return anything; the run must go on
            errors += 1
            first_error = first_error or f"{type(error).__name__}: {error}"
            continue
        if value is not None and math.isfinite(value):
            rewards[i] = value
    return Scores(rewards, errors, first_error, timeouts, first_timeout)


def check_scores(scores: Scores, *, verifier_name: str, where: str) -> None:
    """Raise a ``UserError`` when the verifier raised or timed out on more than half of the batch: the
    rewards would be mostly NaN, so a run would train (or an evaluation score) on next to nothing.

    Args:
        scores: a scored batch (``score_batch``).
        verifier_name: the verifier's name or dotted path, for the message.
        where: what was being scored, e.g. ``step 3``.
    """
    total = len(scores.rewards)
    if not total or (scores.errors + scores.timeouts) * 2 <= total:
        return
    if scores.timeouts >= scores.errors:
        raise UserError(f"{where}: the verifier {verifier_name} timed out on {scores.timeouts} of {total} "
                        f"completions ({scores.first_timeout}); make it return faster: every call must finish "
                        "within that limit")
    also = f" (and timed out on {scores.timeouts})" if scores.timeouts else ""
    raise UserError(f"{where}: the verifier {verifier_name} failed on {scores.errors} of {total} completions{also}, "
                    f"first with {scores.first_error}; fix the verifier, which must be "
                    "fn(completion, reference) -> float | None")
