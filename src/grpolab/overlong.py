"""DAPO's soft overlong punishment: a length penalty added to the outcome rewards before the advantages.

Yu et al. 2025, DAPO (arXiv 2503.14476), eq. 13. With the completion cap ``L_max`` (the token cap) and a buffer
of ``L_cache`` tokens before it, a completion of ``|y|`` tokens gets

    0                                   if |y| <= L_max - L_cache,
    penalty * ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max,

so the penalty falls linearly from 0 to ``-penalty`` at the cap. DAPO's ``-1`` beyond ``L_max`` never occurs
here: the sampler stops at the cap.

Departures from the paper: the maximum penalty is a setting (DAPO uses 1; verl's ``penalty_factor``); an
unscorable completion (NaN reward) stays unscorable. The shaped rewards are no longer in {0, 1}, so the config
refuses the shaping with estimators defined only for binary rewards (``sign``, ``passk``, ...) rather than
turning it into an advantage-side term the papers do not define.
"""

from __future__ import annotations

import numpy as np

__all__ = ["overlong_penalty", "shape_rewards"]


def overlong_penalty(lengths: np.ndarray, *, max_length: int, buffer: int, penalty: float) -> np.ndarray:
    """The (<= 0) penalty of each completion, same shape as ``lengths`` (token counts, e.g. [P, G])."""
    if buffer < 1 or max_length < 1:
        raise ValueError(f"overlong_penalty needs buffer >= 1 and max_length >= 1, got {buffer}, {max_length}")
    start = max_length - buffer  # where the penalty begins
    over = np.clip(np.asarray(lengths, dtype=np.float64) - start, 0.0, None)
    return -penalty * np.minimum(over, buffer) / buffer


def shape_rewards(rewards: np.ndarray, lengths: np.ndarray, *, max_length: int, buffer: int,
                  penalty: float) -> np.ndarray:
    """``rewards[P, G]`` plus the overlong penalty of ``lengths[P, G]``; NaN (unscorable) stays NaN."""
    return rewards + overlong_penalty(lengths, max_length=max_length, buffer=buffer, penalty=penalty)
