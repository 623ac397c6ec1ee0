"""The sampled-evaluation statistics papers report, each with its standard error over prompts.

For prompt i with n_i samples of which c_i are correct (k <= min_i n_i):

* ``avg@n``: c_i / n_i, the mean success of the samples (= pass@1 = maj@1; lighteval's ``avg@n``);
* ``pass@k``: 1 - C(n - c, k) / C(n, k), the chance that a random k-subset holds a correct sample (the
  unbiased estimator of Chen et al. 2021, arXiv 2107.03374; ``grpolab.diagnostics.passk``);
* ``pass^k``: C(c, k) / C(n, k), the chance that all k samples of a random k-subset are correct (the
  unbiased estimator of tau-bench's pass^k, Yao et al. 2024, arXiv 2406.12045);
* ``maj@k``: the expected majority vote over a random k-subset, ties shared (``grpolab.diagnostics.majority``).

Each metric is the mean of its per-prompt values over the P prompts; its standard error is
std(per-prompt values, ddof = 1) / sqrt(P), the spread over prompts only (the per-prompt estimators are
unbiased, so their sampling noise is inside that spread; seeds of training are not). With one prompt the
standard error is NaN. ``METRICS`` is the one table of the families: their names, formulas and lighteval's
names for the same numbers. lighteval samples one n for every document, so where the prompts' n differ the names
that carry an n (``avg@n:n=``, ``pass@k:...&n=``) are not given: no lighteval number is this mean over mixed n.

Shapes: n, c [P]; votes: one ``majority.Votes`` per prompt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grpolab.diagnostics._arrays import as_int_vector
from grpolab.diagnostics.majority import Votes, maj_at_k_curves
from grpolab.diagnostics.passk import pass_at_k
from grpolab.errors import UserError

__all__ = ["METRICS", "Estimate", "SampledMetric", "SampledMetrics", "pass_hat_k", "sampled_metrics",
           "standard_error"]


@dataclass(frozen=True)
class SampledMetric:
    """One family of sampled metrics.

    family: the name pattern (``pass@k``); a metric's key puts k in it (``pass@4``), ``avg@n`` stays as it is.
    formula: the per-prompt value, for the docs and the help.
    lighteval: lighteval 0.13's name of the same number (``{k}``, ``{n}`` filled in), or "" when it has none.
    """

    family: str
    formula: str
    lighteval: str

    def key(self, k: int) -> str:
        return self.family.replace("@k", f"@{k}").replace("^k", f"^{k}")


METRICS: tuple[SampledMetric, ...] = (
    SampledMetric("avg@n", "c / n", "avg@n:n={n}"),
    SampledMetric("pass@k", "1 - C(n - c, k) / C(n, k)", "pass@k:k={k}&n={n}"),
    SampledMetric("maj@k", "E over k-subsets of the plurality vote, ties shared", "maj@n:n={k}"),
    SampledMetric("pass^k", "C(c, k) / C(n, k)", ""),
)
"""The families, in the order they are reported."""


@dataclass(frozen=True)
class Estimate:
    """A mean over prompts and its standard error (NaN with fewer than two prompts)."""

    mean: float
    se: float


@dataclass
class SampledMetrics:
    """The metrics of one evaluation: ``values`` maps each key (``avg@n``, ``pass@1``, ``maj@4``, ``pass^2``)
    to its ``Estimate``; ``lighteval`` maps a key to lighteval's name for it where lighteval has one."""

    n: int
    prompts: int
    values: dict[str, Estimate] = field(default_factory=dict)
    lighteval: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``metrics`` and ``se`` keyed like ``values`` (a NaN standard error is None)."""
        return {"n": self.n, "prompts": self.prompts,
                "metrics": {key: e.mean for key, e in self.values.items()},
                "se": {key: None if math.isnan(e.se) else e.se for key, e in self.values.items()},
                "lighteval": dict(self.lighteval)}


def standard_error(values: Any) -> float:
    """std(values, ddof = 1) / sqrt(P) for values [P]; NaN when P < 2."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.std(ddof=1) / math.sqrt(array.size)) if array.size >= 2 else math.nan


def pass_hat_k(n: Any, c: Any, k: int) -> np.ndarray:
    """Unbiased pass^k per prompt, C(c, k) / C(n, k) = 1 - pass@k(n, n - c, k): [P] float64."""
    n_arr, c_arr = np.broadcast_arrays(as_int_vector(n, "n"), as_int_vector(c, "c"))
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        raise UserError("pass^k needs 0 <= c <= n (correct samples cannot exceed samples)")
    return 1.0 - np.atleast_1d(pass_at_k(n_arr, n_arr - c_arr, k))


def _estimate(values: np.ndarray) -> Estimate:
    return Estimate(float(values.mean()), standard_error(values))


def _per_prompt(family: str, n: np.ndarray, c: np.ndarray, k: int, maj: np.ndarray | None) -> np.ndarray | None:
    if family == "pass@k":
        return np.atleast_1d(pass_at_k(n, c, k))
    if family == "pass^k":
        return pass_hat_k(n, c, k)
    return None if maj is None else maj[:, k - 1]


def _majority_matrix(votes: Sequence[Votes] | None, n: np.ndarray, c: np.ndarray, kmax: int) -> np.ndarray | None:
    """maj@k per prompt for k = 1..kmax: [P, kmax], or None without votes."""
    if votes is None:
        return None
    if len(votes) != len(n) or any(v.n != n_i or v.correct != c_i for v, n_i, c_i in zip(votes, n, c, strict=True)):
        raise UserError("the votes must hold each prompt's n samples and c correct ones")
    return np.stack([curve[:kmax] for curve in maj_at_k_curves(votes)])


def sampled_metrics(n: Any, c: Any, votes: Sequence[Votes] | None = None, ks: Sequence[int] | None = None
                    ) -> SampledMetrics:
    """avg@n, then pass@k, maj@k (only with ``votes``) and pass^k for each k in ``ks`` (default 1..min n),
    each with its standard error over prompts. n, c: [P]; votes: one per prompt, or None."""
    n_arr, c_arr = np.broadcast_arrays(as_int_vector(n, "n"), as_int_vector(c, "c"))
    if n_arr.size == 0:
        raise UserError("sampled metrics need at least one prompt")
    if np.any(n_arr < 1) or np.any((c_arr < 0) | (c_arr > n_arr)):
        raise UserError("sampled metrics need n >= 1 and 0 <= c <= n for every prompt")
    ks_list = list(range(1, int(n_arr.min()) + 1)) if ks is None else sorted({int(k) for k in ks})
    if not ks_list or ks_list[0] < 1 or ks_list[-1] > n_arr.min():
        raise UserError(f"sampled metrics need 1 <= k <= n for every prompt; the smallest n is {int(n_arr.min())}")
    maj = _majority_matrix(votes, n_arr, c_arr, max(ks_list))
    n_label, one_n = int(n_arr.min()), bool(n_arr.min() == n_arr.max())
    result = SampledMetrics(n=n_label, prompts=int(n_arr.size))
    for metric in METRICS:
        for k in [n_label] if metric.family == "avg@n" else ks_list:
            values = c_arr / n_arr if metric.family == "avg@n" else _per_prompt(metric.family, n_arr, c_arr, k, maj)
            if values is None:
                continue
            key = metric.key(k)
            result.values[key] = _estimate(values)
            if metric.lighteval and ("{n}" not in metric.lighteval or one_n):  # lighteval runs one n for all
                result.lighteval[key] = metric.lighteval.format(k=k, n=n_label)
    return result
