"""Which pairs of estimators are the same update under Adam, so that the report names them instead of testing
them.

Adam (and AdamW: its decoupled weight decay does not see the gradient) is invariant to a positive rescaling of
the loss: the first moment and the square root of the second scale alike, so the step is unchanged up to
Adam's epsilon. With outcome rewards the loss is linear in the advantages, so two estimators whose advantages
are one positive multiple of each other on every reward pattern give the same update. For binary rewards the
patterns of a group of G are finite (2^G of them), so this is checked exhaustively from the estimator
registry (``grpolab.advantages``), degenerate all-equal groups included: rloo is G / (G - 1) times dr_grpo at
every G; grpo is 1 / (std + eps) times dr_grpo, one constant only at G = 2, where every mixed group has one
success; sign is 2 times fixed_baseline at its default b = 1/2.

The equivalence breaks where a term of the loss does not scale with the advantages (a KL penalty, beta > 0)
and where gradient clipping acts (clipping depends on the raw gradient norm, which does scale): callers state
the second and skip the check for the first (``same_update_ratio`` takes no hyper-parameters; estimators run
with their defaults).
"""

from __future__ import annotations

import functools

import numpy as np

from grpolab.advantages import compute_advantages, split_remedies

__all__ = ["MAX_GROUP_SIZE", "binary_patterns", "same_update_ratio"]

MAX_GROUP_SIZE = 12  # 2^12 reward patterns (a second for all estimators); beyond this nothing is claimed
_RELATIVE_TOLERANCE = 1e-9


def binary_patterns(group_size: int) -> np.ndarray:
    """Every binary reward pattern of a group: [2^G, G] float64, row k holding the bits of k."""
    return ((np.arange(2**group_size)[:, None] >> np.arange(group_size)) & 1).astype(np.float64)


@functools.lru_cache(maxsize=64)
def _advantages(name: str, group_size: int) -> np.ndarray | None:
    """The estimator's advantages [2^G, G] of every binary pattern at its default hyper-parameters, or None
    when it refuses them (unknown name, hyper-parameters it requires) or when a group's advantages depend on
    the other groups of the batch (a batch-normalised estimator: its scale changes from step to step, which
    Adam does not undo). The second is seen by computing up to 32 of the patterns alone, as batches of one
    group, and comparing."""
    rewards = binary_patterns(group_size)
    try:
        whole = compute_advantages(name, rewards).double().numpy()
        picked = range(0, rewards.shape[0], max(1, rewards.shape[0] // 32))
        alone = [compute_advantages(name, rewards[row : row + 1]).double().numpy()[0] for row in picked]
    except (ValueError, TypeError):
        return None
    if not np.allclose(whole[list(picked)], np.array(alone), rtol=_RELATIVE_TOLERANCE, atol=1e-12):
        return None
    return whole


def _split_suffix(name: str) -> tuple[str, tuple[str, ...]]:
    return split_remedies(name)


def _single_positive_ratio(first: np.ndarray, second: np.ndarray) -> float | None:
    """c > 0 with first == c * second everywhere (both [N, G]), or None."""
    scale = max(float(np.abs(first).max()), float(np.abs(second).max()), 1e-300)
    zero_first = np.abs(first) <= _RELATIVE_TOLERANCE * scale
    zero_second = np.abs(second) <= _RELATIVE_TOLERANCE * scale
    if np.any(zero_first != zero_second):
        return None
    if zero_second.all():
        return 1.0  # both estimators give no gradient on any pattern
    ratios = first[~zero_second] / second[~zero_second]
    ratio = float(ratios[0])
    if ratio <= 0 or not np.allclose(ratios, ratio, rtol=_RELATIVE_TOLERANCE, atol=0.0):
        return None
    return ratio


def same_update_ratio(name_a: str, name_b: str, group_size: int) -> float | None:
    """c > 0 such that estimator a's advantages are c times b's on every binary reward pattern of a group of
    ``group_size``, or None when there is no such c (or it cannot be checked: an unknown estimator, one that
    needs hyper-parameters, G > MAX_GROUP_SIZE). ``+dynamic`` / ``+mask`` names match only names with the same
    suffixes (a remedy changes which groups are trained)."""
    (base_a, suffix_a), (base_b, suffix_b) = _split_suffix(name_a), _split_suffix(name_b)
    if suffix_a != suffix_b or not 1 <= group_size <= MAX_GROUP_SIZE:
        return None
    first, second = _advantages(base_a, group_size), _advantages(base_b, group_size)
    if first is None or second is None:
        return None
    return _single_positive_ratio(first, second)
