"""Tests for ``grpolab.advantages``: hand-computed tables, plain-loop equivalence, properties, errors.

Shapes: rewards and advantages are [P, G] (P prompts, G completions per prompt).
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grpolab import advantages as adv
from grpolab.advantages import available, compute_advantages, get, info, register

pytestmark = pytest.mark.fast

NAN = math.nan
ALL = available()
GROUP = [name for name in ALL if info(name).needs_group]
BINARY_ONLY = [name for name in ALL if info(name).binary_only]
ZERO_SUM = [name for name in ALL if info(name).zero_sum]
SETTINGS = settings(max_examples=20, deadline=None, database=None)


def _binary_rewards(min_g: int = 2, max_g: int = 6, nan: bool = True) -> st.SearchStrategy[np.ndarray]:
    """[P, G] float64 arrays of 0 / 1 (and NaN when ``nan``)."""
    values = [0.0, 1.0, NAN] if nan else [0.0, 1.0]
    shapes = st.tuples(st.integers(1, 5), st.integers(min_g, max_g))
    return shapes.flatmap(lambda shape: hnp.arrays(np.float64, shape, elements=st.sampled_from(values)))


def _dyadic_rewards(nan: bool = True) -> st.SearchStrategy[np.ndarray]:
    """[P, G] arrays of multiples of 1/4 in [-2, 2] (exact in binary floating point), plus NaN."""
    values = [q / 4 for q in range(-8, 9)] + ([NAN] if nan else [])
    shapes = st.tuples(st.integers(1, 4), st.integers(2, 6))
    return shapes.flatmap(lambda shape: hnp.arrays(np.float64, shape, elements=st.sampled_from(values)))


def _extras(name: str, rewards: object) -> dict[str, object]:
    """The inputs besides the rewards that an estimator needs: ``lengths=`` for ``opo``, 1 + |reward| tokens (so
    that they move with the rewards under permutations and differ between right and wrong completions), and
    ``token_statistics=`` for a per-token estimator (``optimal_token_baseline``): one token per completion, whose
    statistics depend on its reward the same way (``_one_token_statistics``); {} for the others."""
    values = np.asarray(rewards.tolist() if isinstance(rewards, torch.Tensor) else rewards, dtype=np.float64)
    if info(name).needs_lengths:
        return {"lengths": 1.0 + np.abs(np.nan_to_num(values))}
    if info(name).needs_token_statistics:
        return {"token_statistics": _one_token_statistics(values)}
    return {}


# One token per completion: a right one drawn at pi = 0.5 with sum pi^2 = 0.5 (W = 1 - 2 pi + sum pi^2 = 0.5), any
# other at pi = 0.25 with sum pi^2 = 0.3 (W = 0.8). The optimal token baseline is then a W-weighted group mean.
W_RIGHT, W_OTHER = 0.5, 0.8


def _one_token_statistics(rewards: np.ndarray) -> adv.TokenStatistics:
    right = torch.from_numpy(np.nan_to_num(rewards, nan=0.0) == 1.0).reshape(-1, 1)  # [B, 1]
    def value(if_right: float, otherwise: float) -> torch.Tensor:
        return torch.where(right, torch.tensor(if_right, dtype=torch.float64), otherwise)

    return adv.TokenStatistics(torch.ones(right.shape), value(math.log(0.5), math.log(0.25)), value(0.5, 0.3))


def _result(name: str, rewards: object, **hyperparameters: object) -> torch.Tensor:
    """``compute_advantages`` with ``_extras``, per completion: a per-token estimator's [P * G, 1] as [P, G]."""
    result = compute_advantages(name, rewards, **{**_extras(name, rewards), **hyperparameters})
    shape = np.asarray(rewards.tolist() if isinstance(rewards, torch.Tensor) else rewards, dtype=np.float64).shape
    return result.reshape(shape) if info(name).needs_token_statistics else result


def _advantages(name: str, rewards: np.ndarray, **hyperparameters: object) -> np.ndarray:
    return _result(name, rewards, **hyperparameters).numpy()


# ---------------------------------------------------------------------------- hand-computed tables

# One table for every estimator, on the same four groups of G = 4:
#   row 0: one success  (mean 1/4), row 1: two successes (mean 1/2), row 2: all correct, row 3: all wrong.
HAND_REWARDS = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
S3 = math.sqrt(1 / 3)  # sample std of row 1: squares = 4 * 0.25 = 1, / (G - 1) = 1/3
POP_STD_PP = math.sqrt(1.75 / 16)  # reinforce_pp: see its table
NGRPO_STD = math.sqrt(0.24)  # ngrpo rows 0 and 1: see its table
AVSPO_STD = math.sqrt(2 / 9)  # avspo row 0: see its table
BATCH_STD = math.sqrt(0.2625)  # batch_std: see its table

HAND_TABLES: list[tuple[str, dict, list[list[float]]]] = [
    # grpo, sample std, eps = 1e-4.
    # row 0: mean 0.25, deviations 0.75 / -0.25, squares 0.5625 + 3 * 0.0625 = 0.75,
    #        sample var 0.75 / 3 = 0.25, std 0.5.
    # row 1: mean 0.5, deviations +-0.5, std sqrt(1/3).  rows 2, 3: deviations 0 -> 0.
    (
        "grpo",
        {},
        [
            [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001],
            [0.5 / (S3 + 1e-4), 0.5 / (S3 + 1e-4), -0.5 / (S3 + 1e-4), -0.5 / (S3 + 1e-4)],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ],
    ),
    # grpo, population std, eps = 0: row 0 var 0.75 / 4 = 0.1875; row 1 var 1 / 4, std 0.5 -> +-1.
    (
        "grpo",
        {"std": "population", "eps": 0.0},
        [
            [
                0.75 / math.sqrt(0.1875),
                -0.25 / math.sqrt(0.1875),
                -0.25 / math.sqrt(0.1875),
                -0.25 / math.sqrt(0.1875),
            ],
            [1, 1, -1, -1],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ],
    ),
    # dr_grpo: r - mean.
    ("dr_grpo", {}, [[0.75, -0.25, -0.25, -0.25], [0.5, 0.5, -0.5, -0.5], [0, 0, 0, 0], [0, 0, 0, 0]]),
    # rloo: r_i - mean of the other three. row 0: 1 - 0 = 1, 0 - 1/3; row 1: 1 - 1/3 = 2/3, 0 - 2/3.
    ("rloo", {}, [[1, -1 / 3, -1 / 3, -1 / 3], [2 / 3, 2 / 3, -2 / 3, -2 / 3], [0, 0, 0, 0], [0, 0, 0, 0]]),
    # sign: 2r - 1.
    ("sign", {}, [[1, -1, -1, -1], [1, 1, -1, -1], [1, 1, 1, 1], [-1, -1, -1, -1]]),
    # fixed_baseline: r - b.
    ("fixed_baseline", {}, [[0.5, -0.5, -0.5, -0.5], [0.5, 0.5, -0.5, -0.5], [0.5] * 4, [-0.5] * 4]),
    (
        "fixed_baseline",
        {"baseline": 0.25},
        [[0.75, -0.25, -0.25, -0.25], [0.75, 0.75, -0.25, -0.25], [0.75] * 4, [-0.25] * 4],
    ),
    # reinforce: r.  nsr: r - 1.  w_reinforce: lambda (0.1, or 0.5) for correct, -1 for wrong.
    ("reinforce", {}, HAND_REWARDS),
    ("nsr", {}, [[0, -1, -1, -1], [0, 0, -1, -1], [0, 0, 0, 0], [-1, -1, -1, -1]]),
    ("w_reinforce", {}, [[0.1, -1, -1, -1], [0.1, 0.1, -1, -1], [0.1] * 4, [-1] * 4]),
    ("w_reinforce", {"lam": 0.5}, [[0.5, -1, -1, -1], [0.5, 0.5, -1, -1], [0.5] * 4, [-1] * 4]),
    # reinforce_pp: centred = dr_grpo values; batch mean 0;
    # population var = (0.5625 + 3 * 0.0625 + 4 * 0.25 + 8 * 0) / 16 = 1.75 / 16; A = centred / (std + 1e-6).
    (
        "reinforce_pp",
        {},
        [
            [c / (POP_STD_PP + 1e-6) for c in (0.75, -0.25, -0.25, -0.25)],
            [c / (POP_STD_PP + 1e-6) for c in (0.5, 0.5, -0.5, -0.5)],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ],
    ),
    # passk, k = 2: C(4, 2) = 6 pairs.
    # row 0: N_neg = 3, R = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2; A_pos = (1 - 1/2) / (1/2) = 1;
    #        A_neg = (1 - 1/2 - C(2,1)/C(3,1)) / (1/2) = (1/2 - 2/3) * 2 = -1/3.
    # row 1: N_neg = 2, R = 1 - 1/6 = 5/6, sigma = sqrt(5)/6; A_pos = (1/6) / (sqrt(5)/6) = 1/sqrt(5);
    #        A_neg = (1/6 - C(1,1)/C(3,1)) / (sqrt(5)/6) = -1/sqrt(5).   rows 2, 3: sigma = 0 -> 0.
    (
        "passk",
        {},
        [
            [1, -1 / 3, -1 / 3, -1 / 3],
            [1 / math.sqrt(5), 1 / math.sqrt(5), -1 / math.sqrt(5), -1 / math.sqrt(5)],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ],
    ),
    # passk, k = 4: the only subset is the whole group, so R = pass of the group and sigma = 0 -> all 0.
    ("passk", {"k": 4}, [[0] * 4] * 4),
    # ngrpo, max_reward 1, eps 1e-4: statistics over the group plus a virtual 1 (5 values, population std).
    # row 0: [1,0,0,0,1] mean 0.4, var (2 * 0.36 + 3 * 0.16) / 5 = 0.24;
    # row 1: [1,1,0,0,1] mean 0.6, var (3 * 0.16 + 2 * 0.36) / 5 = 0.24.
    # row 2: [1,1,1,1,1] -> 0.  row 3: [0,0,0,0,1] mean 0.2, var (4 * 0.04 + 0.64) / 5 = 0.16, std 0.4.
    (
        "ngrpo",
        {},
        [
            [0.6 / (NGRPO_STD + 1e-4)] + [-0.4 / (NGRPO_STD + 1e-4)] * 3,
            [0.4 / (NGRPO_STD + 1e-4)] * 2 + [-0.6 / (NGRPO_STD + 1e-4)] * 2,
            [0, 0, 0, 0],
            [-0.2 / 0.4001] * 4,
        ],
    ),
    # avspo, a virtual 0 and a virtual 1 in each group's statistics (6 values, population std), eps 1e-4.
    # row 0: [1,0,0,0,0,1] mean 1/3, var (2 * 4/9 + 4 * 1/9) / 6 = 2/9;  row 1: [1,1,0,0,0,1] mean 1/2, var 1/4;
    # row 2: [1,1,1,1,0,1] mean 5/6, var (5 * 1/36 + 25/36) / 6 = 5/36;  row 3: [0,0,0,0,0,1] mean 1/6, var 5/36.
    (
        "avspo",
        {},
        [
            [(2 / 3) / (AVSPO_STD + 1e-4)] + [(-1 / 3) / (AVSPO_STD + 1e-4)] * 3,
            [0.5 / 0.5001] * 2 + [-0.5 / 0.5001] * 2,
            [(1 / 6) / (math.sqrt(5) / 6 + 1e-4)] * 4,
            [(-1 / 6) / (math.sqrt(5) / 6 + 1e-4)] * 4,
        ],
    ),
    # maxrl: (r - mean) / mean. row 0: 0.75 / 0.25 = 3, -0.25 / 0.25 = -1; row 1: +-1; rows 2, 3: 0.
    ("maxrl", {}, [[3, -1, -1, -1], [1, 1, -1, -1], [0, 0, 0, 0], [0, 0, 0, 0]]),
    # pkpo, k = 2, n = 4, default baseline (loo_minus_one): A_pos = (k/n) C(n-c, 1) / C(n-1, 1), A_neg = 0.
    # row 0: c = 1: (1/2) * 3/3 = 1/2.  row 1: c = 2: (1/2) * 2/3 = 1/3.  row 2: C(0, 1) = 0.  row 3: no success.
    ("pkpo", {}, [[0.5, 0, 0, 0], [1 / 3, 1 / 3, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
    # pkpo, baseline none: s_pos = k/n = 1/2, s_neg = (1/2) (1 - C(n-c-1, 1) / C(3, 1)).
    # row 0: s_neg = (1/2)(1 - 2/3) = 1/6; row 1: (1/2)(1 - 1/3) = 1/3; row 2: all 1/2; row 3: (1/2)(1 - 1) = 0.
    ("pkpo", {"baseline": "none"}, [[0.5, 1 / 6, 1 / 6, 1 / 6], [0.5, 0.5, 1 / 3, 1 / 3], [0.5] * 4, [0] * 4]),
    # pkpo, baseline mean: s minus its group mean. row 0: mean (1/2 + 3/6) / 4 = 1/4 -> 1/4, -1/12;
    # row 1: mean 5/12 -> +-1/12 (rllm's example n = 4, c = 2, k = 2); rows 2, 3: 0.
    ("pkpo", {"baseline": "mean"}, [[0.25, -1 / 12, -1 / 12, -1 / 12], [1 / 12, 1 / 12, -1 / 12, -1 / 12],
                                    [0] * 4, [0] * 4]),
    # pkpo, k = G = 4, baseline mean: the only subset is the whole group, so every member's s is the group's pass
    # and the mean baseline leaves 0 in every row.
    ("pkpo", {"k": 4, "baseline": "mean"}, [[0] * 4] * 4),
    # grpo_passk (verl): only the unique best gets r_max - r_second, over (sample std + 1e-6).
    # row 0: gap 1, sample std 0.5 -> 1 / 0.500001; row 1: two best, gap 0; rows 2, 3: gap 0.
    ("grpo_passk", {}, [[1 / 0.500001, 0, 0, 0], [0] * 4, [0] * 4, [0] * 4]),
    ("grpo_passk", {"norm_by_std": False}, [[1, 0, 0, 0], [0] * 4, [0] * 4, [0] * 4]),
    # gpg: alpha = B / M = 16 scored / 7 non-zero rewards, times the dr_grpo values.
    ("gpg", {}, [[16 / 7 * c for c in (0.75, -0.25, -0.25, -0.25)], [16 / 7 * c for c in (0.5, 0.5, -0.5, -0.5)],
                 [0] * 4, [0] * 4]),
    ("gpg", {"f_norm": 2.0}, [[8 / 7 * c for c in (0.75, -0.25, -0.25, -0.25)],
                              [8 / 7 * c for c in (0.5, 0.5, -0.5, -0.5)], [0] * 4, [0] * 4]),
    # opo with these lengths per row: baseline sum(l r) / sum(l).
    # row 0: l = [2, 1, 1, 1]: b = 2/5 -> [0.6, -0.4, -0.4, -0.4];  row 1: l = [1, 2, 3, 4]: b = 3/10 -> 0.7, -0.3;
    # row 2: constant -> 0;  row 3: constant -> 0.
    ("opo", {"lengths": [[2, 1, 1, 1], [1, 2, 3, 4], [1, 1, 1, 1], [5, 5, 5, 5]]},
     [[0.6, -0.4, -0.4, -0.4], [0.7, 0.7, -0.3, -0.3], [0] * 4, [0] * 4]),
    # optimal_token_baseline, one token per completion (``_one_token_statistics``): b = sum r W / (sum W + 1e-8),
    # W = 0.5 for a right completion, 0.8 for a wrong one; A = r - b. Its per-token table: tests/test_token_baseline.py.
    ("optimal_token_baseline", {},
     [[1 - 0.5 / (2.9 + 1e-8), *[-0.5 / (2.9 + 1e-8)] * 3], [*[1 - 1 / (2.6 + 1e-8)] * 2, *[-1 / (2.6 + 1e-8)] * 2],
      [1 - 2 / (2 + 1e-8)] * 4, [0] * 4]),
    # batch_std: the dr_grpo values over the sample std of all 16 rewards (7 ones): mean 7/16,
    # squares 7 * (9/16)^2 + 9 * (7/16)^2 = 1008/256 = 3.9375, / 15 = 0.2625; eps 1e-4.
    (
        "batch_std",
        {},
        [
            [c / (BATCH_STD + 1e-4) for c in (0.75, -0.25, -0.25, -0.25)],
            [c / (BATCH_STD + 1e-4) for c in (0.5, 0.5, -0.5, -0.5)],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ],
    ),
]


@pytest.mark.parametrize(("name", "hyperparameters", "expected"), HAND_TABLES)
def test_hand_computed_table(name: str, hyperparameters: dict, expected: list[list[float]]) -> None:
    rewards = np.array(HAND_REWARDS, dtype=np.float64)
    np.testing.assert_allclose(_advantages(name, rewards, **hyperparameters), expected, rtol=1e-9, atol=1e-12)


def test_every_estimator_has_a_hand_table() -> None:
    assert {name for name, _, _ in HAND_TABLES} == set(ALL)


def test_hand_computed_grpo_with_an_unscorable_member() -> None:
    # Scored members [1, 0, 0]: mean 1/3, squares 4/9 + 2 * 1/9 = 2/3, sample var 1/3; the NaN gets 0.
    result = _advantages("grpo", np.array([[1.0, NAN, 0.0, 0.0]]))
    denominator = S3 + 1e-4
    np.testing.assert_allclose(
        result, [[(2 / 3) / denominator, 0, -(1 / 3) / denominator, -(1 / 3) / denominator]]
    )


def test_hand_computed_non_binary_rewards() -> None:
    # dr_grpo on [0.2, 0.6, 1.0]: mean 0.6 -> [-0.4, 0, 0.4]; rloo = 3/2 of that; maxrl = (r - 0.6) / 0.6.
    rewards = np.array([[0.2, 0.6, 1.0]])
    np.testing.assert_allclose(_advantages("dr_grpo", rewards), [[-0.4, 0, 0.4]], atol=1e-12)
    np.testing.assert_allclose(_advantages("rloo", rewards), [[-0.6, 0, 0.6]], atol=1e-12)
    np.testing.assert_allclose(_advantages("maxrl", rewards), [[-2 / 3, 0, 2 / 3]], atol=1e-12)


# ---------------------------------------------------------------------------- plain-loop references


def _scored(group: list[float]) -> list[float]:
    return [x for x in group if not math.isnan(x)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _pstd(values: list[float]) -> float:
    mu = _mean(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / len(values))


def _ratio(numerator: float, spread: float, eps: float) -> float:
    return numerator / (spread + eps) if spread > 0 else 0.0


def _loop_grpo(group: list[float], eps: float = 1e-4, std: str = "sample") -> list[float]:
    scored = _scored(group)
    if len(scored) < 2:
        return [0.0] * len(group)
    mu = _mean(scored)
    divisor = len(scored) - 1 if std == "sample" else len(scored)
    sigma = math.sqrt(sum((x - mu) ** 2 for x in scored) / divisor)
    return [_ratio(x - mu, sigma, eps) for x in group]


def _loop_dr_grpo(group: list[float]) -> list[float]:
    scored = _scored(group)
    return [x - _mean(scored) for x in group] if scored else [0.0] * len(group)


def _loop_rloo(group: list[float]) -> list[float]:
    out = []
    for i, x in enumerate(group):
        others = _scored(group[:i] + group[i + 1 :])
        out.append(x - _mean(others) if others else 0.0)
    return out


def _loop_passk(group: list[float], k: int = 2) -> list[float]:
    """Brute force: every k-subset of the scored members, subset reward = max of its members."""
    index = [i for i, x in enumerate(group) if not math.isnan(x)]
    subsets = list(itertools.combinations(index, k))
    if not subsets:
        return [0.0] * len(group)
    subset_reward = {s: max(group[i] for i in s) for s in subsets}
    mu = _mean(list(subset_reward.values()))
    sigma = _pstd(list(subset_reward.values()))
    if sigma == 0:
        return [0.0] * len(group)
    out = [0.0] * len(group)
    for i in index:
        containing = [s for s in subsets if i in s]
        out[i] = _mean([(subset_reward[s] - mu) / sigma for s in containing])
    return out


def _subset_pass(group: list[float], members: list[int], k: int) -> float:
    """The unbiased pass@k of ``members``: the mean over their k-subsets of the subset's best reward."""
    subsets = list(itertools.combinations(members, k))
    return _mean([max(group[i] for i in s) for s in subsets]) if subsets else 0.0


def _loop_pkpo(group: list[float], k: int = 2, baseline: str = "loo_minus_one") -> list[float]:
    """Brute force: s_i = (1 / C(n, k)) * sum over k-subsets holding i of their best reward, then the baseline."""
    index = [i for i, x in enumerate(group) if not math.isnan(x)]
    n = len(index)
    if n < k:
        return [0.0] * len(group)
    subsets = list(itertools.combinations(index, k))
    s = {i: sum(max(group[j] for j in sub) for sub in subsets if i in sub) / len(subsets) for i in index}
    out = [0.0] * len(group)
    for i in index:
        if baseline == "loo_minus_one":  # k/n times the pass@(k-1) of the other n - 1
            out[i] = s[i] - k / n * _subset_pass(group, [j for j in index if j != i], k - 1)
        elif baseline == "mean":
            out[i] = s[i] - _mean(list(s.values()))
        else:
            out[i] = s[i]
    return out


def _loop_grpo_passk(group: list[float], eps: float = 1e-6, norm_by_std: bool = True) -> list[float]:
    scored = _scored(group)
    out = [0.0] * len(group)
    if len(scored) < 2:
        return out
    ranked = sorted(scored, reverse=True)
    gap = ranked[0] - ranked[1]
    if norm_by_std:
        mu = _mean(scored)
        gap /= math.sqrt(sum((x - mu) ** 2 for x in scored) / (len(scored) - 1)) + eps
    out[group.index(ranked[0])] = gap  # ties have gap 0, so which best gets it does not matter
    return out


def _loop_opo(group: list[float], lengths: list[float]) -> list[float]:
    pairs = [(x, n) for x, n in zip(group, lengths, strict=True) if not math.isnan(x)]
    total = sum(n for _, n in pairs)
    if total == 0:
        return [0.0] * len(group)
    baseline = sum(x * n for x, n in pairs) / total
    return [x - baseline for x in group]


def _loop_ngrpo(group: list[float], max_reward: float = 1.0, eps: float = 1e-4) -> list[float]:
    augmented = [*_scored(group), max_reward]
    mu, sigma = _mean(augmented), _pstd(augmented)
    return [_ratio(x - mu, sigma, eps) for x in group]


def _loop_avspo(group: list[float], low: float = 0.0, high: float = 1.0, eps: float = 1e-4) -> list[float]:
    augmented = [*_scored(group), low, high]
    mu, sigma = _mean(augmented), _pstd(augmented)
    return [_ratio(x - mu, sigma, eps) for x in group]


def _loop_maxrl(group: list[float]) -> list[float]:
    scored = _scored(group)
    mu = _mean(scored) if scored else 0.0
    return [(x - mu) / mu if mu > 0 else 0.0 for x in group]


PER_GROUP = {
    "grpo": _loop_grpo,
    "dr_grpo": _loop_dr_grpo,
    "rloo": _loop_rloo,
    "passk": _loop_passk,
    "pkpo": _loop_pkpo,
    "grpo_passk": _loop_grpo_passk,
    "ngrpo": _loop_ngrpo,
    "avspo": _loop_avspo,
    "maxrl": _loop_maxrl,
    "sign": lambda g: [2 * x - 1 for x in g],
    "fixed_baseline": lambda g, baseline=0.5: [x - baseline for x in g],
    "reinforce": lambda g: list(g),
    "nsr": lambda g: [x - 1 for x in g],
    "w_reinforce": lambda g, lam=0.1: [lam if x == 1 else -1.0 for x in g],
}


def _loop_reinforce_pp(rewards: list[list[float]], eps: float = 1e-6) -> list[list[float]]:
    centred = [_loop_dr_grpo(group) for group in rewards]
    scored = [c for row in centred for c in row if not math.isnan(c)]
    if not scored:
        return [[0.0] * len(row) for row in rewards]
    mu, sigma = _mean(scored), _pstd(scored)
    return [[_ratio(c - mu, sigma, eps) for c in row] for row in centred]


def _loop_batch_std(rewards: list[list[float]], eps: float = 1e-4, std: str = "sample") -> list[list[float]]:
    centred = [_loop_dr_grpo(group) for group in rewards]
    scored = [x for row in rewards for x in row if not math.isnan(x)]
    if len(scored) < 2:
        return [[0.0] * len(row) for row in rewards]
    mu = _mean(scored)
    sigma = math.sqrt(sum((x - mu) ** 2 for x in scored) / (len(scored) - (1 if std == "sample" else 0)))
    return [[_ratio(c, sigma, eps) for c in row] for row in centred]


def _loop_gpg(rewards: list[list[float]], f_norm: float = 1.0) -> list[list[float]]:
    scored = [x for row in rewards for x in row if not math.isnan(x)]
    alpha = len(scored) / max(sum(1 for x in scored if x != 0), 1)
    return [[alpha * c / f_norm for c in _loop_dr_grpo(row)] for row in rewards]


def _loop(name: str, rewards: np.ndarray, **hyperparameters: object) -> np.ndarray:
    """The plain per-group Python loop; NaN rewards get 0."""
    rows = rewards.tolist()
    hyperparameters = {**_extras(name, rewards), **hyperparameters}
    if name == "reinforce_pp":
        out = _loop_reinforce_pp(rows, **hyperparameters)
    elif name == "batch_std":
        out = _loop_batch_std(rows, **hyperparameters)
    elif name == "gpg":
        out = _loop_gpg(rows, **hyperparameters)
    elif name == "opo":
        lengths = np.asarray(hyperparameters["lengths"], dtype=np.float64).tolist()
        out = [_loop_opo(row, row_lengths) for row, row_lengths in zip(rows, lengths, strict=True)]
    else:
        out = [PER_GROUP[name](row, **hyperparameters) for row in rows]
    return np.where(np.isnan(rewards), 0.0, np.array(out, dtype=np.float64))


EQUIVALENCE_CASES = [
    ("grpo", {}),
    ("grpo", {"eps": 0.0}),
    ("grpo", {"eps": 1e-2, "std": "population"}),
    ("grpo", {"std": "population"}),
    ("dr_grpo", {}),
    ("rloo", {}),
    ("sign", {}),
    ("fixed_baseline", {}),
    ("fixed_baseline", {"baseline": 0.0}),
    ("fixed_baseline", {"baseline": 0.3}),
    ("reinforce", {}),
    ("nsr", {}),
    ("w_reinforce", {}),
    ("w_reinforce", {"lam": 0.7}),
    ("reinforce_pp", {}),
    ("reinforce_pp", {"eps": 0.0}),
    ("passk", {}),
    ("passk", {"k": 1}),
    ("passk", {"k": 3}),
    ("passk", {"k": 5}),
    ("ngrpo", {}),
    ("ngrpo", {"max_reward": 2.0, "eps": 0.0}),
    ("avspo", {}),
    ("avspo", {"low": -1.0, "high": 2.0, "eps": 0.0}),
    ("maxrl", {}),
    ("batch_std", {}),
    ("batch_std", {"eps": 0.0, "std": "population"}),
    ("pkpo", {}),
    ("pkpo", {"k": 3}),
    ("pkpo", {"k": 1, "baseline": "none"}),
    ("pkpo", {"k": 3, "baseline": "mean"}),
    ("pkpo", {"k": 5, "baseline": "none"}),
    ("grpo_passk", {}),
    ("grpo_passk", {"norm_by_std": False}),
    ("grpo_passk", {"eps": 1e-2}),
    ("gpg", {}),
    ("gpg", {"f_norm": 0.5}),
    ("opo", {}),
]


def test_equivalence_cases_cover_every_estimator() -> None:
    # the per-token estimators' plain loop runs over tokens: tests/test_token_baseline.py
    per_token = {name for name in ALL if info(name).needs_token_statistics}
    assert per_token == {"optimal_token_baseline"}
    assert {name for name, _ in EQUIVALENCE_CASES} == set(ALL) - per_token


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("name", "hyperparameters"), EQUIVALENCE_CASES)
def test_vectorised_equals_plain_loop(name: str, hyperparameters: dict, seed: int) -> None:
    rng = np.random.default_rng(seed)
    binary = rng.integers(0, 2, size=(8, 6)).astype(np.float64)  # [P, G]
    binary[rng.random(binary.shape) < 0.2] = NAN
    binary[0] = 1.0  # an all-correct group
    binary[1] = 0.0  # an all-wrong group
    binary[2, :5] = NAN  # a group with a single scorable member
    batches = [binary]
    if not info(name).binary_only:
        continuous = rng.uniform(-1.0, 2.0, size=(5, 4))  # [P, G]
        continuous[rng.random(continuous.shape) < 0.2] = NAN
        batches.append(continuous)
    for rewards in batches:
        np.testing.assert_allclose(
            _advantages(name, rewards, **hyperparameters),
            _loop(name, rewards, **hyperparameters),
            rtol=1e-9,
            atol=1e-9,
        )


# ---------------------------------------------------------------------------- passk


@SETTINGS
@given(rewards=_binary_rewards(min_g=2, max_g=7), k_seed=st.integers(0, 100))
def test_passk_equals_brute_force_enumeration(rewards: np.ndarray, k_seed: int) -> None:
    k = 1 + k_seed % rewards.shape[1]
    np.testing.assert_allclose(_advantages("passk", rewards, k=k), _loop("passk", rewards, k=k), atol=1e-9)


@SETTINGS
@given(rewards=_binary_rewards())
def test_passk_with_k_1_is_grpo_with_population_std(rewards: np.ndarray) -> None:
    expected = _advantages("grpo", rewards, std="population", eps=0.0)
    np.testing.assert_allclose(_advantages("passk", rewards, k=1), expected, atol=1e-9)


def test_passk_group_with_fewer_than_k_scored_members_gets_zero() -> None:
    # Row 0 has one scored member (< k = 2): no pair exists, so 0; row 1 is unaffected by row 0.
    rewards = np.array([[1.0, NAN, NAN], [1.0, 0.0, 0.0]])
    result = _advantages("passk", rewards, k=2)
    np.testing.assert_array_equal(result[0], [0, 0, 0])
    np.testing.assert_allclose(result[1], _advantages("passk", rewards[1:], k=2)[0])


@pytest.mark.parametrize("k", [0, 4, 2.0, True, "2"])
def test_passk_rejects_bad_k(k: object) -> None:
    with pytest.raises(ValueError, match=r"'passk'.*k must be an integer"):
        compute_advantages("passk", [[1, 0, 0]], k=k)


def test_passk_accepts_numpy_integer_k() -> None:
    # [1, 0, 0], k = 2: pairs {1,0a}, {1,0b} -> 1, {0a,0b} -> 0; R = 2/3, sigma = sqrt(2/9) = sqrt(2)/3.
    # A_pos = (1/3) / sigma = 1/sqrt(2); a wrong member is in one pair of reward 1 and one of 0, so
    # A_neg = (1/2 - 2/3) / sigma = -1/(2 sqrt(2)).
    expected = [[2**-0.5, -(2**-0.5) / 2, -(2**-0.5) / 2]]
    np.testing.assert_allclose(_advantages("passk", np.array([[1.0, 0, 0]]), k=np.int64(2)), expected)


# ---------------------------------------------------------------------------- pkpo, grpo_passk, gpg, opo


@SETTINGS
@given(rewards=_binary_rewards(min_g=2, max_g=7), k_seed=st.integers(0, 100),
       baseline=st.sampled_from(["loo_minus_one", "mean", "none"]))
def test_pkpo_equals_brute_force_enumeration(rewards: np.ndarray, k_seed: int, baseline: str) -> None:
    lowest = 2 if baseline == "loo_minus_one" else 1
    k = lowest + k_seed % (rewards.shape[1] - lowest + 1)
    np.testing.assert_allclose(_advantages("pkpo", rewards, k=k, baseline=baseline),
                               _loop("pkpo", rewards, k=k, baseline=baseline), atol=1e-9)


@SETTINGS
@given(rewards=_binary_rewards(nan=False))
def test_pkpo_k1_mean_is_dr_grpo_over_g_and_loo_minus_one_never_pushes_down(rewards: np.ndarray) -> None:
    g = rewards.shape[1]
    np.testing.assert_allclose(_advantages("pkpo", rewards, k=1, baseline="mean"),
                               _advantages("dr_grpo", rewards) / g, atol=1e-12)
    default = _advantages("pkpo", rewards)
    assert (default[rewards == 0] == 0).all() and (default >= 0).all()


@pytest.mark.parametrize(("hyperparameters", "match"), [
    ({"k": 1}, r"'pkpo': k must be an integer with 2 <= k <= G = 3, got 1"),
    ({"k": 4, "baseline": "none"}, r"'pkpo': k must be an integer with 1 <= k <= G = 3, got 4"),
    ({"k": 2.0}, r"'pkpo': k must be an integer"),
    ({"baseline": "loo"}, r"'pkpo': baseline must be one of loo_minus_one, mean, none, got 'loo'"),
])
def test_pkpo_rejects_bad_hyperparameters(hyperparameters: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_advantages("pkpo", [[1, 0, 0]], **hyperparameters)


@SETTINGS
@given(rewards=_binary_rewards())
def test_grpo_passk_moves_only_a_unique_best(rewards: np.ndarray) -> None:
    result = _advantages("grpo_passk", rewards)
    for row, advantages in zip(rewards, result, strict=True):
        scored = row[~np.isnan(row)]
        moves = scored.size >= 2 and (scored == 1).sum() == 1
        assert (advantages != 0).sum() == (1 if moves else 0)
        if moves:
            assert advantages[row == 1][0] > 0


def test_gpg_rejects_a_zero_f_norm_and_scales_dr_grpo_by_b_over_m() -> None:
    with pytest.raises(ValueError, match=r"'gpg': f_norm must be a finite non-zero number, got 0\.0"):
        compute_advantages("gpg", [[1, 0]], f_norm=0)
    rewards = np.array([[1.0, 0.0, NAN], [0.0, 0.0, 0.0]])  # 5 scored, 1 non-zero: alpha 5
    np.testing.assert_allclose(_advantages("gpg", rewards), 5 * _advantages("dr_grpo", rewards), atol=1e-12)
    np.testing.assert_array_equal(_advantages("gpg", np.zeros((2, 3))), 0.0)  # no success: alpha B / 1, A 0


def test_opo_needs_lengths_of_the_rewards_shape() -> None:
    with pytest.raises(ValueError, match=r"'opo' weighs completions by their length: pass lengths\[P, G\]"):
        compute_advantages("opo", [[1, 0, 0]])
    with pytest.raises(ValueError, match=r"'opo': lengths must have the rewards' shape \(1, 3\), got \(1, 2\)"):
        compute_advantages("opo", [[1, 0, 0]], lengths=[[1, 2]])
    for bad in (-1.0, math.inf, NAN):
        with pytest.raises(ValueError, match="'opo': lengths must be finite token counts >= 0"):
            compute_advantages("opo", [[1, 0, 0]], lengths=[[1, bad, 2]])
    # a length where the reward is unscorable is never read
    result = compute_advantages("opo", [[1, NAN, 0]], lengths=[[1, NAN, 3]]).numpy()
    np.testing.assert_allclose(result, [[0.75, 0, -0.25]])
    # estimators without the flag ignore lengths, so callers may always pass them
    np.testing.assert_array_equal(compute_advantages("sign", [[1, 0]], lengths=[[3, 1]]).numpy(), [[1, -1]])


@SETTINGS
@given(rewards=_dyadic_rewards(), seed=st.integers(0, 2**32 - 1))
def test_opo_baseline_is_length_weighted(rewards: np.ndarray, seed: int) -> None:
    lengths = np.random.default_rng(seed).integers(0, 9, size=rewards.shape).astype(np.float64)  # [P, G]
    result = _advantages("opo", rewards, lengths=lengths)
    np.testing.assert_allclose(result, _loop("opo", rewards, lengths=lengths), atol=1e-9)
    weighted = np.where(np.isnan(rewards), 0.0, lengths * result).sum(axis=1)
    np.testing.assert_allclose(weighted, 0.0, atol=1e-9)  # sums to 0 weighted by length
    equal = np.ones_like(rewards)
    np.testing.assert_allclose(_advantages("opo", rewards, lengths=equal), _advantages("dr_grpo", rewards), atol=1e-12)


def test_unavailable_estimators_say_what_they_need(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(adv.UNAVAILABLE, "test_needs_more", "it needs per-token policy quantities")
    for call in (lambda: info("test_needs_more"), lambda: compute_advantages("test_needs_more", [[1, 0]]),
                 lambda: adv.parse_spec("test_needs_more+dynamic")):
        with pytest.raises(ValueError, match=r"'test_needs_more' is not available: it needs per-token policy"):
            call()
    assert "test_needs_more" not in available()


# ---------------------------------------------------------------------------- grpo std conventions


@SETTINGS
@given(rewards=_binary_rewards(nan=False))
def test_grpo_sample_std_equals_trl_formula(rewards: np.ndarray) -> None:
    r = torch.from_numpy(rewards).to(torch.float32)
    trl = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=True) + 1e-4)
    result = compute_advantages("grpo", r)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, trl, rtol=1e-6, atol=1e-7)
    r64 = torch.from_numpy(rewards)
    trl64 = (r64 - r64.mean(1, keepdim=True)) / (r64.std(1, keepdim=True, unbiased=True) + 1e-4)
    torch.testing.assert_close(compute_advantages("grpo", r64), trl64, rtol=1e-12, atol=1e-14)


@SETTINGS
@given(rewards=_binary_rewards(nan=False))
def test_batch_std_equals_trl_scale_rewards_batch(rewards: np.ndarray) -> None:
    # TRL's scale_rewards="batch": (r - group mean) / (std of the whole batch, unbiased + 1e-4).
    r = torch.from_numpy(rewards)
    trl = (r - r.mean(1, keepdim=True)) / (r.std() + 1e-4)
    if r.std() == 0:
        trl = torch.zeros_like(r)  # grpolab gives 0 where the batch has no spread, as TRL's numerator does
    torch.testing.assert_close(compute_advantages("batch_std", r), trl, rtol=1e-12, atol=1e-14)


def test_batch_std_differs_from_grpo_by_the_scale_only() -> None:
    # One mixed group (sample std sqrt(1/3)) among constant groups: grpo divides it by its own spread, batch_std
    # by the batch's (6 ones of 12: sample var 12 * 0.25 / 11 = 3/11); signs and ratios within the group stay.
    rewards = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=np.float64)
    grpo, batch = _advantages("grpo", rewards), _advantages("batch_std", rewards)
    np.testing.assert_allclose(batch[0] / grpo[0], np.full(4, (math.sqrt(1 / 3) + 1e-4) / (math.sqrt(3 / 11) + 1e-4)))
    assert (batch[1:] == 0).all()
    with pytest.raises(ValueError, match="'batch_std': std must be 'sample' or 'population'"):
        compute_advantages("batch_std", rewards, std="unbiased")


@SETTINGS
@given(rewards=_dyadic_rewards(nan=False))
def test_grpo_population_std_differs_by_sqrt_g_over_g_minus_1(rewards: np.ndarray) -> None:
    g = rewards.shape[1]
    sample = _advantages("grpo", rewards, eps=0.0)
    population = _advantages("grpo", rewards, eps=0.0, std="population")
    np.testing.assert_allclose(population, sample * math.sqrt(g / (g - 1)), rtol=1e-9, atol=1e-12)


def test_grpo_g2_one_success_sample_vs_population() -> None:
    # [1, 0]: deviations +-0.5; sample std sqrt(0.5) -> +-1/sqrt(2); population std 0.5 -> +-1.
    np.testing.assert_allclose(_advantages("grpo", np.array([[1.0, 0.0]]), eps=0.0), [[2**-0.5, -(2**-0.5)]])
    np.testing.assert_allclose(
        _advantages("grpo", np.array([[1.0, 0.0]]), eps=0.0, std="population"), [[1, -1]]
    )


def test_grpo_rejects_unknown_std() -> None:
    with pytest.raises(ValueError, match=r"'grpo'.*std must be"):
        compute_advantages("grpo", [[1, 0]], std="unbiased")


@pytest.mark.parametrize("name", ["grpo", "ngrpo", "reinforce_pp"])
def test_eps_zero_on_constant_groups_gives_zero_not_an_error(name: str) -> None:
    # With eps = 0 a zero-spread group used to give 0 / 0 -> "produced non-finite advantages".
    rewards = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(_advantages(name, rewards, eps=0.0), np.zeros((2, 3)))


# ---------------------------------------------------------------------------- properties


@SETTINGS
@pytest.mark.parametrize("name", ALL)
@given(rewards=_binary_rewards())
def test_never_nan_shape_kept_and_nan_gets_zero(name: str, rewards: np.ndarray) -> None:
    result = _result(name, rewards)
    assert result.shape == rewards.shape
    assert result.dtype == torch.float64
    assert torch.isfinite(result).all()
    assert (result.numpy()[np.isnan(rewards)] == 0).all()


@SETTINGS
@pytest.mark.parametrize("name", [n for n in ALL if not info(n).binary_only])
@given(rewards=_dyadic_rewards())
def test_non_binary_rewards_finite(name: str, rewards: np.ndarray) -> None:
    result = _result(name, rewards)
    assert result.shape == rewards.shape and torch.isfinite(result).all()


@pytest.mark.parametrize(
    ("rewards", "expected_dtype"),
    [
        (torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float32), torch.float32),
        (torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64), torch.float64),
        (torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float16), torch.float16),
        (torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.bfloat16), torch.bfloat16),
        (torch.tensor([[1, 0, 0]]), torch.float32),
        (torch.tensor([[True, False, False]]), torch.float32),
        (np.array([[1.0, 0.0, 0.0]], dtype=np.float64), torch.float64),
        (np.array([[1.0, 0.0, 0.0]], dtype=np.float32), torch.float32),
        (np.array([[1.0, 0.0, 0.0]], dtype=np.float16), torch.float16),
        (np.array([[1, 0, 0]]), torch.float32),
        ([[1, 0, 0]], torch.float32),
        ([[1.0, 0.0, 0.0]], torch.float32),
    ],
    ids=lambda value: str(getattr(value, "dtype", type(value).__name__)),
)
def test_input_types_and_dtype_rules(rewards: object, expected_dtype: torch.dtype) -> None:
    reference = {name: _result(name, np.array([[1.0, 0.0, 0.0]])) for name in ALL}
    for name in ALL:
        result = _result(name, rewards)
        assert isinstance(result, torch.Tensor)
        assert result.dtype == expected_dtype and result.shape == (1, 3), name
        torch.testing.assert_close(result.to(torch.float64), reference[name], rtol=1e-2, atol=1e-2)


def test_none_in_a_nested_list_is_unscorable() -> None:
    torch.testing.assert_close(
        compute_advantages("grpo", [[1, None, 0]]), compute_advantages("grpo", [[1, NAN, 0]]), rtol=0, atol=0
    )


def test_torch_input_with_grad_is_accepted_and_not_tracked() -> None:
    rewards = torch.tensor([[1.0, 0.0]], requires_grad=True)
    assert not compute_advantages("grpo", rewards).requires_grad


@SETTINGS
@pytest.mark.parametrize("name", ZERO_SUM)
@given(shape=st.tuples(st.integers(1, 4), st.integers(2, 6)), value=st.sampled_from([0.0, 1.0]))
def test_constant_groups_give_zero_for_centred_estimators(
    name: str, shape: tuple[int, int], value: float
) -> None:
    """Every estimator the registry flags zero-sum (a new one included): a constant group's members are alike
    and sum to 0, so each gets 0."""
    assert {"grpo", "dr_grpo", "rloo"} <= set(ZERO_SUM)
    np.testing.assert_array_equal(_advantages(name, np.full(shape, value)), np.zeros(shape))


@SETTINGS
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "maxrl", "ngrpo"])
@given(
    shape=st.tuples(st.integers(1, 4), st.integers(2, 6)),
    value=st.sampled_from([0.1, 0.25, 1 / 3, 2.0, 3.75]),
)
def test_constant_non_binary_groups(name: str, shape: tuple[int, int], value: float) -> None:
    # ngrpo: the virtual sample is max_reward, so a constant group gives 0 only when value == max_reward.
    hyperparameters = {"max_reward": value} if name == "ngrpo" else {}
    np.testing.assert_array_equal(_advantages(name, np.full(shape, value), **hyperparameters), 0.0)


@pytest.mark.parametrize("name", ["grpo", "reinforce_pp"])
@pytest.mark.parametrize("value", [0.1, -2.0 * 13.314301209144567, 1 / 3])
def test_eps_zero_constant_groups_of_inexact_values_give_zero(name: str, value: float) -> None:
    # Regression: the mean of five copies of 0.1 used to differ from 0.1 by rounding, and with eps = 0 the
    # ratio of that noise to an equally tiny std gave advantages of +-0.89 instead of 0.
    rewards = np.array([[value] * 5, [0.0, 1.0, 0.0, 1.0, 1.0]])
    result = _advantages(name, rewards, eps=0.0)
    np.testing.assert_allclose(result[0], np.zeros(5), atol=1e-12)  # reinforce_pp: batch mean ~ 1e-17
    np.testing.assert_array_equal(_advantages(name, np.full((3, 5), value), eps=0.0), np.zeros((3, 5)))


@pytest.mark.parametrize("g", [2, 3, 8])
def test_ngrpo_constant_groups(g: int) -> None:
    assert (_advantages("ngrpo", np.ones((2, g))) == 0).all()  # all correct: 0
    assert (_advantages("ngrpo", np.zeros((2, g))) < 0).all()  # all wrong: negative, no starvation


@pytest.mark.parametrize("g", [2, 3, 8])
def test_avspo_constant_groups_are_not_starved(g: int) -> None:
    assert (_advantages("avspo", np.ones((2, g))) > 0).all()  # all correct: pushed up
    assert (_advantages("avspo", np.zeros((2, g))) < 0).all()  # all wrong: pushed down
    mixed = np.array([[1.0, 0.0] * (g // 2) + [0.0] * (g % 2)])  # the virtual 0 and 1 keep a mixed group's order
    advantages = _advantages("avspo", mixed)
    assert (advantages[mixed == 1] > 0).all() and (advantages[mixed == 0] < 0).all()


@pytest.mark.parametrize("g", [1, 2, 5])
def test_sign_on_constant_groups_is_plus_minus_one(g: int) -> None:
    np.testing.assert_array_equal(_advantages("sign", np.ones((3, g))), np.ones((3, g)))
    np.testing.assert_array_equal(_advantages("sign", np.zeros((3, g))), -np.ones((3, g)))


@SETTINGS
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
@given(rewards=_dyadic_rewards(), shift=st.sampled_from([-3.0, -0.5, 0.25, 1.0, 7.5]))
def test_shift_invariance(name: str, rewards: np.ndarray, shift: float) -> None:
    np.testing.assert_allclose(_advantages(name, rewards + shift), _advantages(name, rewards), atol=1e-8)


@SETTINGS
@given(rewards=_dyadic_rewards(), scale=st.floats(0.01, 100.0))
def test_grpo_scale_invariance(rewards: np.ndarray, scale: float) -> None:
    # Exact with eps = 0; with eps > 0 the invariance is only approximate (eps does not scale).
    np.testing.assert_allclose(
        _advantages("grpo", rewards * scale, eps=0.0),
        _advantages("grpo", rewards, eps=0.0),
        rtol=1e-9,
        atol=1e-9,
    )


@SETTINGS
@pytest.mark.parametrize("name", ALL)
@given(rewards=_binary_rewards(), seed=st.integers(0, 2**32 - 1))
def test_permutation_equivariance_within_groups(name: str, rewards: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random(rewards.shape), axis=1)  # [P, G] an independent permutation per group
    permuted = np.take_along_axis(rewards, order, axis=1)
    expected = np.take_along_axis(_advantages(name, rewards), order, axis=1)
    np.testing.assert_allclose(_advantages(name, permuted), expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(rewards=_dyadic_rewards(nan=False))
def test_rloo_is_g_over_g_minus_1_times_dr_grpo(rewards: np.ndarray) -> None:
    g = rewards.shape[1]
    np.testing.assert_allclose(
        _advantages("rloo", rewards), g / (g - 1) * _advantages("dr_grpo", rewards), atol=1e-12
    )


@SETTINGS
@pytest.mark.parametrize("name", ZERO_SUM)
@given(rewards=_binary_rewards(nan=False))
def test_zero_sum_estimators_sum_to_zero_per_group(name: str, rewards: np.ndarray) -> None:
    np.testing.assert_allclose(_advantages(name, rewards).sum(axis=1), 0.0, atol=1e-9)


def test_zero_sum_flag_matches_behaviour() -> None:
    # Every estimator that is not flagged fails to sum to 0 on some fully scored binary group (the flagged
    # ones sum to 0 on every group: test_zero_sum_estimators_sum_to_zero_per_group).
    assert ZERO_SUM and set(ZERO_SUM) != set(ALL)
    rewards = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    for name in set(ALL) - set(ZERO_SUM):
        assert np.abs(_advantages(name, rewards).sum(axis=1)).max() > 0.1, name


@SETTINGS
@given(rewards=_binary_rewards())
def test_sign_is_twice_fixed_baseline_at_one_half(rewards: np.ndarray) -> None:
    np.testing.assert_array_equal(
        _advantages("sign", rewards), 2 * _advantages("fixed_baseline", rewards, baseline=0.5)
    )


@SETTINGS
@given(rewards=_binary_rewards())
def test_reinforce_pp_batch_mean_zero_std_one(rewards: np.ndarray) -> None:
    centred = _advantages("dr_grpo", rewards)[~np.isnan(rewards)]
    assume(centred.size > 0 and centred.std() >= 1e-3)  # else every group is constant and every advantage 0
    scored = _advantages("reinforce_pp", rewards)[~np.isnan(rewards)]
    assert abs(scored.mean()) < 1e-9
    assert abs(scored.std() - 1.0) < 1e-4  # population std; eps = 1e-6 in the divisor


# ---------------------------------------------------------------------------- NaN rules


@SETTINGS
@pytest.mark.parametrize("name", ALL)
@given(
    group=hnp.arrays(np.float64, st.integers(3, 7), elements=st.sampled_from([0.0, 1.0])),
    position=st.integers(0, 6),
)
def test_nan_member_is_left_out_of_group_statistics(name: str, group: np.ndarray, position: int) -> None:
    position %= group.size
    with_nan = group.copy()
    with_nan[position] = NAN
    without = np.delete(group, position)
    result = _advantages(name, with_nan[None, :])[0]  # [G]
    assert result[position] == 0
    np.testing.assert_allclose(
        np.delete(result, position), _advantages(name, without[None, :])[0], atol=1e-12
    )


def test_all_nan_group_gets_zero_and_leaves_other_groups_alone() -> None:
    rewards = np.array([[NAN, NAN, NAN], [1.0, 0.0, 0.0]])
    for name in ALL:
        result = _advantages(name, rewards)
        np.testing.assert_array_equal(result[0], [0, 0, 0])
        np.testing.assert_allclose(result[1], _advantages(name, rewards[1:])[0], atol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------- errors and registry


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_infinite_rewards_rejected(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match=rf"'{name}'.*inf"):
        compute_advantages(name, [[1.0, bad, 0.0]])


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("rewards", [[1.0, 0.0], [[[1.0, 0.0]]], 1.0], ids=["1-D", "3-D", "0-D"])
def test_wrong_rank_rejected(name: str, rewards: object) -> None:
    with pytest.raises(ValueError, match=rf"'{name}'.*shape \[P, G\]"):
        compute_advantages(name, rewards)


@pytest.mark.parametrize("name", GROUP)
def test_group_of_one_rejected_for_group_estimators(name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' needs groups of G >= 2.*G = 1"):
        compute_advantages(name, [[1.0], [0.0]])


def test_estimators_without_the_group_flag_take_groups_of_one() -> None:
    assert GROUP and set(GROUP) != set(ALL)
    for name in set(ALL) - set(GROUP):
        assert compute_advantages(name, [[1.0], [0.0]]).shape == (2, 1)


@pytest.mark.parametrize("name", BINARY_ONLY)
@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0])
def test_non_binary_rejected_for_binary_only_estimators(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' is defined only for binary rewards.*{bad}"):
        compute_advantages(name, [[1.0, bad, 0.0]])


def test_non_numeric_rewards_rejected() -> None:
    with pytest.raises(ValueError, match=r"'grpo'.*must be numbers"):
        compute_advantages("grpo", [["right", "wrong"]])


def test_bad_hyperparameter_rejected_with_estimator_name() -> None:
    with pytest.raises(ValueError, match=r"'dr_grpo'.*bad hyper-parameters"):
        compute_advantages("dr_grpo", [[1, 0]], eps=0.1)


def test_unknown_estimator_lists_available_names() -> None:
    for call in (lambda: compute_advantages("gpro", [[1, 0]]), lambda: info("gpro"), lambda: get("gpro")):
        with pytest.raises(ValueError, match="unknown advantage estimator 'gpro'") as error:
            call()
        assert all(name in str(error.value) for name in ALL)


def test_duplicate_register_rejected() -> None:
    before = dict(adv._REGISTRY)
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register("grpo")(lambda rewards: rewards)
    assert adv._REGISTRY == before


def test_get_validates_like_compute_advantages() -> None:
    fn = get("passk")
    torch.testing.assert_close(fn([[1, 0, 0]], k=2), compute_advantages("passk", [[1, 0, 0]], k=2))
    with pytest.raises(ValueError, match="'passk' is defined only for binary"):
        fn([[0.5, 0, 0]])


@pytest.fixture
def scratch_registry():
    """Lets a test register estimators; removes whatever it added afterwards."""
    before = set(adv._REGISTRY)
    yield
    for name in set(adv._REGISTRY) - before:
        del adv._REGISTRY[name]


@pytest.mark.usefixtures("scratch_registry")
def test_user_registered_estimator_works_through_compute_advantages() -> None:
    @register("test_median_baseline", needs_group=True, zero_sum=False)
    def median_baseline(rewards: torch.Tensor, *, offset: float = 0.0) -> torch.Tensor:
        return rewards - rewards.nanmedian(dim=1, keepdim=True).values + offset

    assert "test_median_baseline" in available()
    assert info("test_median_baseline").needs_group
    # [1, 0, 0] median 0 -> [1, 0, 0] + 0.5; the NaN member gets 0; the registry's input rules apply.
    result = compute_advantages("test_median_baseline", [[1, 0, 0], [1, 1, NAN]], offset=0.5)
    np.testing.assert_allclose(result.numpy(), [[1.5, 0.5, 0.5], [0.5, 0.5, 0.0]])
    with pytest.raises(ValueError, match="'test_median_baseline' needs groups"):
        compute_advantages("test_median_baseline", [[1.0]])
    with pytest.raises(ValueError, match="'test_median_baseline' is already registered"):
        register("test_median_baseline")(median_baseline)


def test_scratch_registry_fixture_cleaned_up() -> None:
    assert "test_median_baseline" not in available()


def test_parse_arm_reads_every_remedy_suffix_in_any_order() -> None:
    assert adv.parse_arm("dr_grpo+mask") == ("dr_grpo", ("+mask",))
    assert adv.parse_arm("dr_grpo+mask+dynamic") == adv.parse_arm("dr_grpo+dynamic+mask") == (
        "dr_grpo", ("+dynamic", "+mask"))
    assert adv.parse_arm("sign") == ("sign", ())
    assert adv.parse_spec("dr_grpo+dynamic+mask") == ("dr_grpo", True)
    assert adv.parse_arm("sign+replay+curriculum") == ("sign", ("+curriculum", "+replay"))
    with pytest.raises(ValueError, match=r"unknown estimator 'dr_grpo\+replays'"):
        adv.parse_arm("dr_grpo+replays")


def test_parse_spec_reads_the_dynamic_suffix_and_rejects_unknown_names() -> None:
    assert adv.parse_spec("dr_grpo+dynamic") == ("dr_grpo", True)
    assert adv.parse_spec("sign") == ("sign", False)
    with pytest.raises(ValueError, match="unknown estimator 'nope\\+dynamic'"):
        adv.parse_spec("nope+dynamic")
    for name in ("pkpo", "grpo_passk", "gpg", "opo"):  # compare arms, plain and with dynamic sampling
        assert adv.parse_spec(name) == (name, False) and adv.parse_spec(f"{name}+dynamic") == (name, True)


def test_display_order_and_colours_come_from_the_registry() -> None:
    from grpolab.advantages import display_colors, display_order, entry_for, info

    names = ["grpo", "zzz_unknown", "sign+dynamic", "sign", "dr_grpo", "grpo"]
    assert display_order(names) == ["sign", "sign+dynamic", "dr_grpo", "grpo", "zzz_unknown"]
    colors = display_colors(names)
    assert colors["sign"] == info("sign").color and colors["grpo"] == info("grpo").color
    assert colors["sign+dynamic"] != colors["sign"] and colors["zzz_unknown"] not in (colors["sign"], colors["grpo"])
    assert entry_for("dr_grpo+dynamic") is info("dr_grpo") and entry_for("zzz_unknown") is None


def test_every_estimator_has_its_own_colour_and_display_order() -> None:
    """Two estimators of one colour, or of one order, would be told apart in no figure and no table."""
    entries = [info(name) for name in ALL]
    colours = [entry.color for entry in entries]
    orders = [entry.order for entry in entries]
    assert all(colours) and len(set(colours)) == len(colours), sorted(c for c in colours if colours.count(c) > 1)
    assert len(set(orders)) == len(orders), sorted(o for o in orders if orders.count(o) > 1)


def test_a_colour_already_registered_is_refused() -> None:
    from grpolab.advantages.registry import register

    with pytest.raises(ValueError, match=r"colour 'tab:blue' is sign's; pick another colour"):
        register("zzz_same_colour", color="tab:blue")(lambda rewards: rewards)
    assert "zzz_same_colour" not in available()


@pytest.mark.parametrize("name", sorted(set(ALL) - set(BINARY_ONLY)))
def test_estimators_without_the_binary_flag_take_non_binary_rewards(name: str) -> None:
    assert np.isfinite(_advantages(name, [[1.0, 0.5, 0.0]])).all()


@pytest.mark.parametrize("name", ALL)
def test_every_builtin_estimator_names_its_paper(name: str) -> None:
    paper = info(name).paper
    assert paper is not None and len(paper.title) > 10
    assert re.fullmatch(r"\d{4}\.\d{5}", paper.arxiv), paper.arxiv
    assert paper.year == 2000 + int(paper.arxiv[:2])  # arXiv ids start with the year of submission
    assert paper.citation == f"{paper.title} (arXiv {paper.arxiv}, {paper.year})"
    assert set(info(name).granularities) <= set(adv.GRANULARITIES) and "outcome" in info(name).granularities


def test_token_estimators_are_those_with_the_token_granularity() -> None:
    assert adv.token_estimators() == adv.display_order(n for n in ALL if "token" in info(n).granularities)
    assert adv.token_estimators()  # at least one estimator has a per-token form
    with pytest.raises(ValueError, match=r"'rloo' has no per-token form; .*use one of sign, dr_grpo, grpo"):
        adv.normalise_token_rewards("rloo", torch.zeros(1, 4, dtype=torch.float64))


def test_a_granularity_without_outcome_or_unknown_is_refused() -> None:
    for granularities in (("token",), ("outcome", "sentence")):
        with pytest.raises(ValueError, match="granularities must include 'outcome'"):
            register("test_bad_granularity", granularities=granularities)


def test_a_bad_std_kind_names_the_estimator() -> None:
    from grpolab.advantages.group import _std

    with pytest.raises(ValueError, match="'my_estimator': std must be 'sample' or 'population', got 'median'"):
        _std(torch.ones(1, 1), torch.ones(1, 1), "median", "my_estimator")
    with pytest.raises(ValueError, match="'grpo': std must be"):
        compute_advantages("grpo", [[1.0, 0.0]], std="median")


# ---------------------------------------------------------------------------- mixes of two estimators

MIX_REWARDS = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, NAN]], dtype=np.float64)


@pytest.mark.parametrize(("first", "second", "weight"),
                         [("sign", "dr_grpo", 0.5), ("sign", "dr_grpo", 0.25), ("grpo", "opo", 0.7),
                          ("avspo", "rloo", 0.0), ("reinforce", "maxrl", 1.0)])
def test_a_mix_is_the_weighted_sum_of_its_parts(first: str, second: str, weight: float) -> None:
    name = f"mix-{first}-{second}-{weight}"
    expected = weight * _advantages(first, MIX_REWARDS) + (1 - weight) * _advantages(second, MIX_REWARDS)
    np.testing.assert_allclose(_advantages(name, MIX_REWARDS), expected, rtol=1e-12, atol=1e-12)
    assert adv.parse_arm(f"{name}+mask") == (name, ("+mask",))


def test_a_mix_combines_its_parts_flags() -> None:
    entry = info("mix-sign-dr_grpo-0.5")
    assert entry.binary_only and entry.needs_group and not entry.zero_sum and entry.paper is None
    assert entry.granularities == ("outcome", "token") and not entry.needs_lengths
    assert info("mix-grpo-dr_grpo-0.3").zero_sum and info("mix-sign-dr_grpo-0").zero_sum  # sign weighs 0
    assert not info("mix-sign-dr_grpo-1").zero_sum
    assert info("mix-sign-opo-0.5").needs_lengths and info("mix-sign-opo-0.5").granularities == ("outcome",)
    assert "mix-sign-dr_grpo-0.5" not in available()  # resolved on lookup, never registered


@pytest.mark.parametrize(("name", "match"), [
    ("mix-sign-dr_grpo-1.5", "lambda must be a number in \\[0, 1\\]"),
    ("mix-sign-dr_grpo--0.5", "not a mix of two estimators"),
    ("mix-sign-dr_grpo-nan", "lambda must be a number in \\[0, 1\\]"),
    ("mix-sign-dr_grpo-half", "lambda must be a number in \\[0, 1\\]"),
    ("mix-sign-nope-0.5", "unknown part 'nope'"),
    ("mix-mix-sign-grpo-0.5-dr_grpo-0.5", "cannot hold another mix"),
    ("mix-sign-0.5", "not a mix of two estimators"),
    ("mix-sign-optimal_token_baseline-0.5", "gives each token its own advantage"),
])
def test_a_malformed_mix_is_refused_in_one_line(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        info(name)
    assert "\n" not in str(error.value) and repr(name) in str(error.value)
    with pytest.raises(ValueError, match=match):
        adv.parse_arm(f"{name}+mask")
    assert adv.entry_for(name) is None


def test_a_mix_takes_no_hyperparameters() -> None:
    with pytest.raises(ValueError, match=r"a mix takes no hyper-parameters .* got eps"):
        compute_advantages("mix-sign-grpo-0.5", MIX_REWARDS, eps=0.1)


def test_part_metrics_are_each_parts_mean_weighted_magnitude() -> None:
    from grpolab.advantages.mix import part_metrics

    lengths = np.ones_like(MIX_REWARDS)
    metrics = part_metrics("mix-sign-dr_grpo-0.25", MIX_REWARDS, lengths)
    # 15 scored rewards: sign's |A| is 1 each; dr_grpo's row 0: 0.75 + 3 * 0.25, row 1: 4 * 0.5, rows 2, 3: 0
    first, second = 0.25, 0.75 * (1.5 + 2.0) / 15
    assert metrics == pytest.approx({"loss/mix_first": first, "loss/mix_second": second,
                                     "loss/mix_first_share": first / (first + second)}, rel=1e-12)
    assert part_metrics("dr_grpo", MIX_REWARDS, lengths) == {}
    degenerate = part_metrics("mix-grpo-dr_grpo-0.5", np.zeros((2, 3)), np.ones((2, 3)))
    assert degenerate == {"loss/mix_first": 0.0, "loss/mix_second": 0.0}  # no share of nothing


@pytest.mark.parametrize("group_size", [3, 5, 6, 7])
def test_reinforce_pp_leaves_all_equal_groups_at_exactly_zero(group_size: int) -> None:
    """Was: the batch mean of the centred values, rounding of about 1e-17 at G not a power of two, was subtracted,
    so all-equal groups got tiny non-zero advantages: trained by the engine's skip, and counted useful by
    ``starvation/useful_fraction`` beside ``degenerate`` 0.75."""
    rewards = torch.zeros(4, group_size, dtype=torch.float64)
    rewards[0] = 1.0
    rewards[2, 0] = 1.0  # the one mixed group
    advantages = compute_advantages("reinforce_pp", rewards)
    assert (advantages[[0, 1, 3]] == 0).all() and (advantages[2] != 0).all()
    centred = rewards[2] - rewards[2].mean()
    spread = torch.cat([centred, torch.zeros(3 * group_size, dtype=torch.float64)]).std(unbiased=False)
    torch.testing.assert_close(advantages[2], centred / (spread + 1e-6))  # eps 1e-6
