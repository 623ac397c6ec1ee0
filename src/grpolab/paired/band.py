"""Paired comparisons of pass@k on the same prompts: the difference for every k with a simultaneous band over k,
and the seed-level interval of the same difference when each arm has several training runs.

**Prompt level** (``paired_band``). Two evaluations A and B of the same P prompts give per-prompt counts
(n_i^A, c_i^A) and (n_i^B, c_i^B). For k = 1..K, K = min_i min(n_i^A, n_i^B), the per-prompt difference of the
unbiased estimators (Chen et al. 2021, arXiv 2107.03374; ``grpolab.diagnostics.passk``) is

    d_ik = pass@k(n_i^A, c_i^A) - pass@k(n_i^B, c_i^B),      D_k = mean_i d_ik.

The band is a paired nonparametric bootstrap over prompts (Efron & Tibshirani 1993, "An Introduction to the
Bootstrap", ch. 6 and 12): a resample draws P prompt indices with replacement, the same indices for A and B, so
each prompt's two counts stay together, and gives D*_k for every k at once (as multinomial weights over the rows of
d, [B, P] @ [P, K]). With se_k the bootstrap standard deviation of D*_k, the studentised deviations are
T*_k = (D*_k - D_k) / se_k and the simultaneous band is the sup-t band of Montiel Olea & Plagborg-Moller (2019,
"Simultaneous confidence bands: theory, implementation, and an application to SVARs", J. Appl. Econometrics 34):

    D_k +- c se_k,   c = the (1 - alpha) quantile of max_k |T*_k|,

which covers the whole vector (D_1..D_K) with probability 1 - alpha (asymptotically in P). The pointwise interval
at k uses c_k, the (1 - alpha) quantile of |T*_k| alone; since max_k |T*_k| >= |T*_k| in every resample, c >= c_k
and the band is never narrower than any pointwise interval. A k at which every prompt has the same d_ik (se_k = 0)
has a band of width 0 there and is left out of the maximum. Deterministic given ``seed`` (numpy's
``default_rng``).

What it supports: a claim about *these two checkpoints* (or these two pools of samples) on prompts like these.
It treats the prompts as the random part; it knows nothing of the training seed that produced a checkpoint.

**Seed level** (``seed_differences``). When each arm has S runs paired by seed (seed s of A and of B start from the
same policy), the per-seed difference of mean pass@k, e_sk = pass@k_A(s) - pass@k_B(s), has a Student-t interval
over seeds for each k (n - 1 degrees of freedom, ``grpolab.stats.paired_interval``) and a paired t-test whose
p-values are Holm-adjusted over the K values of k (Holm 1979). As in the report's paired rows
(``stats.paired_within_floor``), a p below 2 / 2^S, the least any exact test of S pairs can give, is raised to it,
and a k whose differences have no spread over seeds gets no interval (None in ``to_dict``; a zero-width interval
would read as certainty). This is the uncertainty a prompt-level band leaves
out, and the one that supports a claim about *the estimator* (a training method), since a new run of it is a new
seed.

Departure: the issue that asked for this named "passk-inference, arXiv 2609.22547"; no text of it could be
found, so the method above (paired prompt bootstrap with a sup-t band) is implemented and cited instead.

Shapes: n, c [P] per arm; d [P, K]; curves [S, K] per arm (S seeds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grpolab import stats
from grpolab.diagnostics.passk import pass_at_k
from grpolab.errors import UserError

METHOD = "paired bootstrap over prompts, sup-t simultaneous band (Montiel Olea & Plagborg-Moller 2019)"

__all__ = ["METHOD", "PairedBand", "SeedDifferences", "paired_band", "per_prompt_pass_at_k", "seed_differences"]


def per_prompt_pass_at_k(n: Any, c: Any, ks: list[int]) -> np.ndarray:
    """Unbiased pass@k of every prompt for each k: [P, K] (column j is k = ks[j])."""
    return np.stack([np.atleast_1d(pass_at_k(n, c, k)) for k in ks], axis=1)  # pass_at_k checks the counts


@dataclass
class PairedBand:
    """The paired difference A - B of mean pass@k for k = ks, with pointwise intervals and the simultaneous band.

    All arrays are [K]. ``critical`` is the sup-t critical value c; ``pointwise_critical`` the c_k.
    """

    ks: list[int]
    prompts: int
    pass_a: np.ndarray
    pass_b: np.ndarray
    difference: np.ndarray
    se: np.ndarray
    pointwise_low: np.ndarray
    pointwise_high: np.ndarray
    band_low: np.ndarray
    band_high: np.ndarray
    critical: float
    pointwise_critical: np.ndarray
    level: float
    resamples: int
    seed: int

    def excludes_zero(self) -> list[int]:
        """The k at which the simultaneous band lies wholly above or below 0. Where every prompt's difference is
        the same (no spread: the band has zero width) a nonzero difference counts only when the exact sign-flip
        test of that many prompts could reject at the band's level (2 / 2^prompts < 1 - level): three prompts
        each solved by A and never by B are no evidence (p = 0.25)."""
        exact = stats.sign_flip_floor(self.prompts) < 1 - self.level
        return [k for k, low, high, se, d in zip(self.ks, self.band_low, self.band_high, self.se, self.difference,
                                                 strict=True)
                if (low > 0 or high < 0) and (se > 0 or (exact and d != 0))]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: one list per field, keyed by name, each [K] in the order of ``ks``."""
        arrays = ("pass_a", "pass_b", "difference", "se", "pointwise_low", "pointwise_high", "band_low", "band_high")
        return {"ks": list(self.ks), "prompts": self.prompts, "level": self.level, "resamples": self.resamples,
                "seed": self.seed, "critical": self.critical,
                "method": METHOD,
                **{name: [float(v) for v in getattr(self, name)] for name in arrays},
                "excludes_zero": self.excludes_zero()}


def _bootstrap_means(d: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of d [P, K] over ``resamples`` paired resamples of the prompts: [B, K] (multinomial weights)."""
    prompts = d.shape[0]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(prompts, np.full(prompts, 1.0 / prompts), size=resamples)  # [B, P]
    return weights @ d / prompts


def _critical_values(deviations: np.ndarray, se: np.ndarray, level: float) -> tuple[float, np.ndarray]:
    """(sup-t critical value, pointwise critical values [K]) from bootstrap deviations [B, K]."""
    varying = se > 0
    t = np.zeros_like(deviations)
    t[:, varying] = np.abs(deviations[:, varying]) / se[varying]
    pointwise = np.quantile(t, level, axis=0)
    sup = float(np.quantile(t[:, varying].max(axis=1), level)) if varying.any() else 0.0
    return sup, pointwise


def _check_pair(n_a: np.ndarray, c_a: np.ndarray, n_b: np.ndarray, c_b: np.ndarray) -> None:
    if n_a.shape != n_b.shape:
        raise UserError(f"a paired comparison needs the same prompts on both sides: A has {n_a.size}, B {n_b.size}")
    if n_a.size < 2:
        raise UserError("a paired comparison of pass@k needs at least 2 prompts")
    for n, c, side in ((n_a, c_a, "A"), (n_b, c_b, "B")):
        if np.any(n < 1) or np.any((c < 0) | (c > n)):
            raise UserError(f"side {side}: every prompt needs n >= 1 samples and 0 <= c <= n correct")


def paired_band(n_a: Any, c_a: Any, n_b: Any, c_b: Any, *, level: float = 0.95, resamples: int = 2000,
                seed: int = 0) -> PairedBand:
    """Difference A - B of mean pass@k for k = 1..min n with its simultaneous ``level`` band over k.

    n_a, c_a, n_b, c_b: [P], prompt i of A paired with prompt i of B (n may differ per side and prompt).
    """
    n_a, c_a, n_b, c_b = (np.atleast_1d(np.asarray(x)) for x in (n_a, c_a, n_b, c_b))
    _check_pair(n_a, c_a, n_b, c_b)
    if not 0 < level < 1 or resamples < 100:
        raise UserError("the band needs 0 < level < 1 and at least 100 bootstrap resamples")
    ks = list(range(1, int(min(n_a.min(), n_b.min())) + 1))
    a, b = per_prompt_pass_at_k(n_a, c_a, ks), per_prompt_pass_at_k(n_b, c_b, ks)  # [P, K] each
    d = a - b
    difference = d.mean(axis=0)
    boot = _bootstrap_means(d, resamples, seed)
    deviations = boot - difference  # [B, K]
    se = deviations.std(axis=0, ddof=1)
    se[np.isclose(d.std(axis=0), 0.0, rtol=0.0, atol=1e-12)] = 0.0  # no spread over prompts: nothing to resample
    critical, pointwise = _critical_values(deviations, se, level)
    return PairedBand(ks, int(n_a.size), a.mean(axis=0), b.mean(axis=0), difference, se,
                      difference - pointwise * se, difference + pointwise * se,
                      difference - critical * se, difference + critical * se, critical, pointwise, level,
                      resamples, seed)


@dataclass
class SeedDifferences:
    """Per-seed differences of mean pass@k, A - B, over S seeds paired by seed: for each k [K] the mean, the
    Student-t interval over seeds (NaN where the differences have no spread), the paired t-test's p (floored at
    2 / 2^S) and its Holm adjustment over the K values of k."""

    ks: list[int]
    seeds: list[int]
    difference: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p: np.ndarray
    p_holm: np.ndarray
    level: float = 0.95
    per_seed: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # [S, K]

    def to_dict(self) -> dict[str, Any]:
        return {"ks": list(self.ks), "seeds": list(self.seeds), "level": self.level,
                "method": "Student t over seeds paired by seed, p floored at 2 / 2^seeds, Holm over k",
                **{name: [None if np.isnan(v) else float(v) for v in getattr(self, name)]
                   for name in ("difference", "low", "high", "p", "p_holm")}}


def seed_differences(curves_a: Any, curves_b: Any, seeds: list[int], *, level: float = 0.95) -> SeedDifferences:
    """curves_a, curves_b: [S, K] mean pass@k of each seed's run (row s of A paired with row s of B), k = 1..K."""
    a, b = np.asarray(curves_a, dtype=np.float64), np.asarray(curves_b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise UserError(f"seed-level pass@k needs [seeds, k] curves of one shape on both sides: {a.shape} vs {b.shape}")
    if a.shape[0] < 2:
        raise UserError(f"a seed-level interval needs at least 2 seeds run by both arms, got {a.shape[0]}")
    mean, low, high = (np.asarray(x, dtype=np.float64) for x in stats.t_interval((a - b).T, confidence=level))
    flat = stats.no_spread(a - b, a, b)
    low[flat] = high[flat] = np.nan
    p = np.array([stats.paired_t_test(a[:, j], b[:, j])[2] for j in range(a.shape[1])])
    p = np.maximum(p, stats.sign_flip_floor(a.shape[0]))  # paired_t_test gives no NaN (constant: 0 or 1)
    return SeedDifferences(list(range(1, a.shape[1] + 1)), list(seeds), mean, low, high, p,
                           stats.holm_correction(p), level, a - b)

