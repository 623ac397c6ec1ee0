"""Degeneracy (gradient starvation) of group-centred advantages, and the Jensen gap.

With the group-centred advantage A = (r - mean(r)) / std(r), a group of G completions that are all right or
all wrong has A = 0 for every member: the prompt contributes no gradient. For binary rewards and a prompt
whose success rate is p, the chance of such a group is p^G + (1 - p)^G (gradient-starvation paper,
arXiv 2605.07689). Over prompts x with success rates p_x, the observed rate is

    D_real = E_x[p_x^G + (1 - p_x)^G]  >=  pbar^G + (1 - pbar)^G = D_iid,  pbar = E_x[p_x],

by Jensen's inequality (t -> t^G + (1 - t)^G is convex); ``jensen_gap = D_real - D_iid``.

Departures from the paper, all documented choices:

* Unscorable completions (reward NaN) leave their group: a group is judged on its scorable members only.
  A group with one scorable member is uniform by definition, so it counts as all-correct or all-wrong; a
  group with none counts in ``unscorable_groups``, which is added to ``degenerate``. Without NaN rewards
  ``degenerate == all_correct + all_wrong`` exactly as in the paper.
* Non-binary rewards: a completion is a *success* when ``reward >= success_threshold``; degeneracy uses that
  notion. ``useful_fraction`` instead uses the raw rewards (a completion is useful when its group-centred
  advantage ``r - mean`` is non-zero), which for binary rewards is the same as "in a non-degenerate group".
* ``p_mean`` is the mean over prompts of the per-prompt rate c / n (not the pooled rate), matching the
  Jensen comparison above; G in ``d_iid`` is the nominal group size (the number of columns).
* ``expected_degeneracy`` uses the unbiased count estimator (C(c, G) + C(n - c, G)) / C(n, G), which needs
  n >= G: it is computed over fully scorable groups (NaN when there are none). With n == G it reproduces
  the observed rate of those groups; it becomes informative when more than G samples per prompt exist (e.g.
  an evaluation with n = 16 samples predicting the degeneracy at G = 4). The plug-in
  E[(c/n)^G + (1 - c/n)^G] is biased upwards and is returned as ``plugin_degeneracy``.

D_iid over a window (``SuccessWindow``, ``windowed_p_means``, ``starvation_metrics``): pbar must be the mean
success of the *policy*, not of one step's prompts. Estimated from one step, it depends on how many
prompts the step holds: with one prompt per step pbar is that prompt's own rate, D_iid collapses onto
D_real and the gap vanishes. So pbar is the mean per-group success rate over a window of at least
``DEFAULT_WINDOW_GROUPS`` (64) groups: the trainer and the TRL adapter keep the most recent whole steps
holding >= 64 groups (fewer at the start of a run, all groups seen so far); the audit, which sees the
whole run, uses the same trailing window and gives the steps before it first fills the first full
window (the whole run when it holds fewer than 64 groups).

Bias of the plug-in estimate D_iid = f(pbar_hat), f(t) = t^G + (1 - t)^G: pbar_hat, the mean of W
per-group rates, is unbiased for pbar, but f is convex, so E[f(pbar_hat)] ~ f(pbar) + f''(pbar) Var(pbar_hat)
/ 2 > f(pbar). Var(pbar_hat) <= 1 / (4 W) and f'' = G (G - 1) (t^(G-2) + (1 - t)^(G-2)) <= G (G - 1), so the
upward bias (and the downward bias of the Jensen gap) is at most G (G - 1) / (8 W): 0.023 at G = 4 and
W = 64, and much less when pbar is away from 0 and 1 (0.003 at pbar = 0.5, G = 8, W = 64). At W = 1 (one
prompt per step, per-step pbar) the "bias" is the whole gap. A window also spans policy drift: while
accuracy moves, pbar_hat averages over the window's policies, which is why it is kept short.

Shapes: rewards, advantages [P, G] (P prompts, G completions per prompt); c, n [P].
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from grpolab.diagnostics._arrays import as_float_matrix, as_int_vector
from grpolab.errors import UserError


def group_counts(rewards: Any, *, success_threshold: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Per-prompt scorable count n [P] and success count c [P] (success: reward >= threshold; NaN skipped)."""
    matrix = as_float_matrix(rewards, "rewards")  # [P, G]
    scorable = ~np.isnan(matrix)
    success = matrix >= success_threshold  # NaN compares False: unscorable is never a success
    return np.count_nonzero(scorable, axis=1), np.count_nonzero(success, axis=1)


DEFAULT_WINDOW_GROUPS = 64
"""Fewest groups whose mean success rate estimates pbar for D_iid (see the module docstring)."""

ZERO_ADVANTAGE_ATOL = 1e-4
"""A group is degenerate when every |advantage| in it is at most this (float32 rounding of r - mean)."""


def iid_degeneracy(p_mean: float, group_size: int) -> float:
    """D_iid = pbar^G + (1 - pbar)^G: the degenerate-group rate if every prompt had success rate pbar."""
    return float(p_mean**group_size + (1.0 - p_mean) ** group_size)


def success_rates(rewards: Any, *, success_threshold: float = 0.5) -> np.ndarray:
    """Success rate c / n of each group with a scorable member, [P'] (P' <= P); rewards [P, G]."""
    n, c = group_counts(rewards, success_threshold=success_threshold)
    seen = n > 0
    return c[seen] / n[seen]


class SuccessWindow:
    """The per-group success rates of the most recent whole steps that hold at least ``min_groups`` groups.

    ``add`` one step's rates [P'] per step, in order; ``p_mean`` is then the mean rate over the window
    (all steps so far while they hold fewer than ``min_groups`` groups), the pbar of D_iid. Only each
    step's sum and count are kept; ``state`` / ``load_state`` carry them through a checkpoint, so that a
    resumed run logs exactly what an uninterrupted one would.
    """

    def __init__(self, min_groups: int = DEFAULT_WINDOW_GROUPS) -> None:
        if int(min_groups) < 1:
            raise UserError(f"the success window needs min_groups >= 1, got {min_groups}")
        self.min_groups = int(min_groups)
        self._steps: deque[tuple[float, int]] = deque()  # (sum of rates, groups) per step
        self._groups = 0

    def add(self, rates: Any) -> None:
        values = np.asarray(rates, dtype=np.float64).ravel()
        self._steps.append((float(values.sum()), int(values.size)))
        self._groups += values.size
        while self._steps and self._groups - self._steps[0][1] >= self.min_groups:
            self._groups -= self._steps.popleft()[1]

    def state(self) -> list[list[float]]:
        """The window as JSON-ready [sum of rates, groups] pairs, oldest step first."""
        return [[total, groups] for total, groups in self._steps]

    def load_state(self, state: list[list[float]]) -> None:
        """Replace the window by one saved with ``state``."""
        self._steps = deque((float(total), int(groups)) for total, groups in state)
        self._groups = sum(groups for _, groups in self._steps)

    @property
    def groups(self) -> int:
        """Groups in the window."""
        return self._groups

    @property
    def full(self) -> bool:
        return self._groups >= self.min_groups

    @property
    def p_mean(self) -> float:
        """Mean success rate over the window; NaN while it is empty."""
        return sum(total for total, _ in self._steps) / self._groups if self._groups else float("nan")


def windowed_p_means(rates_per_step: list[Any], min_groups: int = DEFAULT_WINDOW_GROUPS) -> np.ndarray:
    """pbar for each step of a whole run, [S]: the trailing ``SuccessWindow`` once it first holds
    ``min_groups`` groups; the steps before that get that first full window (the whole run when it never
    fills). ``rates_per_step``: per step, in training order, the success rates of its groups."""
    window = SuccessWindow(min_groups)
    means, first_full = [], None
    for index, rates in enumerate(rates_per_step):
        window.add(rates)
        means.append(window.p_mean)
        if first_full is None and window.full:
            first_full = index
    out = np.asarray(means, dtype=np.float64)
    fill = len(out) - 1 if first_full is None else first_full
    if out.size:
        out[:fill] = out[fill]
    return out


def expected_degeneracy(per_prompt_success_rates: Any, G: int) -> float:
    """E_x[p_x^G + (1 - p_x)^G] for success rates p [P]: the degeneracy rate those prompts imply."""
    rates = np.asarray(per_prompt_success_rates, dtype=np.float64).ravel()
    if rates.size == 0:
        raise UserError("expected_degeneracy needs at least one success rate")
    if np.any(~np.isfinite(rates)) or np.any((rates < 0) | (rates > 1)):
        raise UserError("success rates must lie in [0, 1]")
    if int(G) < 1:
        raise UserError(f"group size G must be >= 1, got {G}")
    return float(np.mean(rates**G + (1.0 - rates) ** G))


def _falling_ratio(c: np.ndarray, n: int, G: int) -> np.ndarray:
    """C(c, G) / C(n, G) = prod_{j<G} (c - j) / (n - j), elementwise over c; exactly 0 when c < G."""
    ratio = np.ones(c.shape, dtype=np.float64)
    for j in range(G):
        ratio *= np.maximum(c - j, 0) / (n - j)
    return ratio


def _degeneracy_table(n: int, G: int) -> np.ndarray:
    """Unbiased per-prompt estimate (C(c, G) + C(n - c, G)) / C(n, G) for c = 0..n; shape [n + 1]."""
    c = np.arange(n + 1)
    return _falling_ratio(c, n, G) + _falling_ratio(n - c, n, G)


def _checked_counts(c: Any, n: Any, G: int) -> tuple[np.ndarray, np.ndarray, int]:
    c_arr, n_arr = np.broadcast_arrays(as_int_vector(c, "c"), as_int_vector(n, "n"))
    G = int(G)
    if G < 1:
        raise UserError(f"group size G must be >= 1, got {G}")
    if c_arr.size == 0:
        raise UserError("expected_degeneracy_from_counts needs at least one prompt")
    if np.any(n_arr < G):
        raise UserError(f"unbiased estimate needs n >= G samples per prompt (G={G}, min n={n_arr.min()})")
    if np.any((c_arr < 0) | (c_arr > n_arr)):
        raise UserError("counts must satisfy 0 <= c <= n")
    return c_arr, n_arr, G


def _mean_over_prompts(c_arr: np.ndarray, n_arr: np.ndarray, table: Any) -> float:
    """Mean over prompts of ``table(n, G)[c]``, one table per distinct n (usually a single value)."""
    total = 0.0
    distinct = np.unique(n_arr)
    for n_value in distinct:
        members = c_arr if distinct.size == 1 else c_arr[n_arr == n_value]
        counts = np.bincount(members, minlength=int(n_value) + 1)
        total += float(counts @ table(int(n_value)))
    return total / c_arr.size


def degeneracy_per_prompt(c: Any, n: Any, G: int) -> np.ndarray:
    """Each prompt's unbiased estimate of p^G + (1 - p)^G, (C(c, G) + C(n - c, G)) / C(n, G), from its count c of
    n samples (n >= G): [P], whose mean is ``expected_degeneracy_from_counts`` and whose spread over prompts gives
    that mean's standard error."""
    c_arr, n_arr, G = _checked_counts(c, n, G)
    estimates = np.empty(c_arr.size, dtype=np.float64)
    for n_value in np.unique(n_arr):  # one table per distinct n (usually a single value)
        members = n_arr == n_value
        estimates[members] = _degeneracy_table(int(n_value), G)[c_arr[members]]
    return estimates


def expected_degeneracy_from_counts(c: Any, n: Any, G: int) -> float:
    """Unbiased estimate of E_x[p_x^G + (1 - p_x)^G] from counts c [P] successes of n [P] samples, n >= G.

    If c ~ Binomial(n, p) then E[C(c, G) / C(n, G)] = p^G (hypergeometric identity), so the average of
    (C(c, G) + C(n - c, G)) / C(n, G) over prompts is unbiased. Computed as products, no factorials.
    """
    c_arr, n_arr, G = _checked_counts(c, n, G)
    return _mean_over_prompts(c_arr, n_arr, lambda n_value: _degeneracy_table(n_value, G))


def expected_outcomes_from_counts(c: Any, n: Any, G: int) -> dict[str, float]:
    """The two parts of ``expected_degeneracy_from_counts``: ``all_right``, the unbiased E_x[p_x^G] (mean of
    C(c, G) / C(n, G)), and ``all_wrong``, E_x[(1 - p_x)^G] (mean of C(n - c, G) / C(n, G)); they sum to it.
    Counts c [P] of n [P] samples, n >= G."""
    c_arr, n_arr, G = _checked_counts(c, n, G)
    right = _mean_over_prompts(c_arr, n_arr, lambda n_value: _falling_ratio(np.arange(n_value + 1), n_value, G))
    wrong = _mean_over_prompts(c_arr, n_arr, lambda n_value: _falling_ratio(n_value - np.arange(n_value + 1),
                                                                            n_value, G))
    return {"all_right": right, "all_wrong": wrong}


def _useful_fraction(matrix: np.ndarray, advantages: Any) -> float:
    """Share of the P*G completions with a non-zero finite advantage; unscorable ones are not useful."""
    if advantages is None:
        scorable = ~np.isnan(matrix)
        if scorable.all():  # fast path: r - mean != 0  <=>  r != mean in IEEE arithmetic
            return float(np.count_nonzero(matrix != matrix.mean(axis=1, keepdims=True)) / matrix.size)
        n = scorable.sum(axis=1, keepdims=True)
        means = np.where(n > 0, np.nansum(matrix, axis=1, keepdims=True) / np.maximum(n, 1), 0.0)
        centred = np.where(scorable, matrix - means, 0.0)  # [P, G] group-centred advantages (unscaled)
    else:
        centred = as_float_matrix(advantages, "advantages")
        if centred.shape != matrix.shape:
            raise UserError(f"advantages shape {centred.shape} must match rewards shape {matrix.shape}")
    useful = np.isfinite(centred) & (centred != 0)
    return float(useful.mean())


def outcome_shares(n: Any, c: Any) -> dict[str, float]:
    """Shares of groups by outcome, from scorable counts n [P] and success counts c [P] (``group_counts``):
    groups, all_correct, all_wrong, unscorable_groups (n = 0), uniform (the three together: what a
    group-centred estimator starves under binary rewards) and p_mean (mean c / n over scorable groups).
    The one implementation behind ``degeneracy``, ``starvation_metrics`` and ``grpolab audit``."""
    n, c = np.asarray(n), np.asarray(c)
    seen = n > 0
    all_correct, all_wrong = float(np.mean(seen & (c == n))), float(np.mean(seen & (c == 0)))
    unscorable = float(np.mean(~seen))
    return {"groups": float(n.size), "all_correct": all_correct, "all_wrong": all_wrong,
            "unscorable_groups": unscorable, "uniform": all_correct + all_wrong + unscorable,
            "p_mean": float(np.mean(c[seen] / n[seen])) if seen.any() else 0.0}


def _batch_shares(matrix: np.ndarray, advantages: Any,
                  success_threshold: float) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """What ``degeneracy`` and ``starvation_metrics`` share of one batch, rewards [P, G] and advantages [P, G]
    (or None) as float arrays: ``outcome_shares`` with ``useful_fraction`` and ``scorable_fraction``, and the
    counts n, c [P] (``group_counts``)."""
    P, G = matrix.shape
    if P == 0 or G == 0:
        raise UserError(f"degeneracy needs a non-empty [P, G] reward matrix, got shape {matrix.shape}")
    n, c = group_counts(matrix, success_threshold=success_threshold)
    shares = {**outcome_shares(n, c), "useful_fraction": _useful_fraction(matrix, advantages),
              "scorable_fraction": float(np.mean(~np.isnan(matrix)))}
    return shares, n, c


def degeneracy(rewards: Any, *, advantages: Any = None, success_threshold: float = 0.5) -> dict[str, float]:
    """Starvation summary of one batch of rewards [P, G] (see the module docstring for every choice).

    Keys: groups, all_correct, all_wrong, unscorable_groups, degenerate (fractions of groups), p_mean,
    d_iid, jensen_gap, expected_degeneracy, plugin_degeneracy, useful_fraction, scorable_fraction.
    """
    matrix = as_float_matrix(rewards, "rewards")  # [P, G]
    shares, n, c = _batch_shares(matrix, advantages, success_threshold)
    G = matrix.shape[1]
    degenerate, p_mean = shares["uniform"], shares["p_mean"]
    rates = c[n > 0] / n[n > 0]
    d_iid = iid_degeneracy(p_mean, G)
    full = n == G
    return {
        **{key: shares[key] for key in ("groups", "all_correct", "all_wrong", "unscorable_groups")},
        "degenerate": degenerate,
        "p_mean": p_mean,
        "d_iid": float(d_iid),
        "jensen_gap": float(degenerate - d_iid),
        "expected_degeneracy": (
            expected_degeneracy_from_counts(c[full], n[full], G) if full.any() else float("nan")
        ),
        "plugin_degeneracy": expected_degeneracy(rates, G) if rates.size else float("nan"),
        "useful_fraction": shares["useful_fraction"],
        "scorable_fraction": shares["scorable_fraction"],
    }


STARVATION_KEYS = (
    "groups", "all_correct", "all_wrong", "unscorable_groups", "uniform", "degenerate", "p_mean",
    "window_groups", "d_iid", "jensen_gap", "useful_fraction", "scorable_fraction",
)
"""The ``starvation/<key>`` metrics every producer logs (plus ``useful_token_fraction`` with lengths)."""


def degenerate_groups(rewards: Any, advantages: Any = None) -> np.ndarray:
    """[P] bool: groups whose every advantage is zero (|A| <= ``ZERO_ADVANTAGE_ATOL``, NaN as 0), or,
    without advantages, whose scorable rewards are all equal (or none is scorable)."""
    if advantages is not None:
        magnitude = np.abs(np.nan_to_num(as_float_matrix(advantages, "advantages"), nan=0.0))  # [P, G]
        return magnitude.max(axis=1, initial=0.0) <= ZERO_ADVANTAGE_ATOL
    matrix = as_float_matrix(rewards, "rewards")  # [P, G]
    scored = ~np.isnan(matrix)
    low = np.where(scored, matrix, np.inf).min(axis=1, initial=np.inf)
    high = np.where(scored, matrix, -np.inf).max(axis=1, initial=-np.inf)
    return ~scored.any(axis=1) | (low == high)


def starvation_metrics(
    rewards: Any,
    advantages: Any = None,
    *,
    lengths: Any = None,
    window: SuccessWindow | None = None,
    success_threshold: float = 0.5,
) -> dict[str, float]:
    """The ``starvation/*`` metrics of one batch, rewards and advantages [P, G], lengths [P, G] tokens.

    ``uniform`` = all_correct + all_wrong + unscorable_groups (the paper's D_real: what a group-centred
    estimator starves under binary rewards); ``degenerate``: groups whose advantages are all zero (as
    trained; without advantages, whose rewards are all equal); ``d_iid`` from pbar over ``window``, which
    must already hold this batch (``window.add(success_rates(rewards))``; None: this batch alone);
    ``jensen_gap = uniform - d_iid``. Keys: ``STARVATION_KEYS``, plus ``useful_token_fraction``.
    """
    rewards = as_float_matrix(rewards, "rewards")  # [P, G], converted once for every figure below
    advantages = None if advantages is None else as_float_matrix(advantages, "advantages")  # [P, G]
    stats, _, _ = _batch_shares(rewards, advantages, success_threshold)  # not degeneracy's unbiased estimates
    group_size = rewards.shape[1]
    use_window = window is not None and window.groups > 0
    p_window = window.p_mean if use_window else stats["p_mean"]  # type: ignore[union-attr]
    d_iid = iid_degeneracy(p_window, group_size)
    values = {
        **{key: stats[key] for key in ("groups", "all_correct", "all_wrong", "unscorable_groups", "p_mean")},
        "uniform": stats["uniform"],
        "degenerate": float(degenerate_groups(rewards, advantages).mean()),
        "window_groups": float(window.groups if use_window else stats["groups"]),  # type: ignore[union-attr]
        "d_iid": d_iid,
        "jensen_gap": stats["uniform"] - d_iid,
        "useful_fraction": stats["useful_fraction"],
        "scorable_fraction": stats["scorable_fraction"],
    }
    metrics = {f"starvation/{key}": float(values[key]) for key in STARVATION_KEYS}
    if advantages is not None and lengths is not None:
        tokens = as_float_matrix(lengths, "lengths")  # [P, G], a tensor on any device crosses to the host here
        useful = np.abs(advantages) > 0
        if tokens.sum() > 0:
            metrics["starvation/useful_token_fraction"] = float(tokens[useful].sum() / tokens.sum())
    return metrics


def success_histogram(c: Any, n: Any, bins: int = 10) -> dict[str, Any]:
    """Per-prompt success-rate histogram for reports. c, n: [P] (prompts with n == 0 are skipped).

    When every prompt has the same n, the histogram is exact: ``counts[j]`` prompts had j = 0..n successes
    and ``rates = j / n``. Otherwise rates c / n are binned into ``bins`` equal bins on [0, 1] and ``rates``
    holds the bin centres. Keys: exact (bool), rates [B], edges [B + 1] (None when exact), counts [B],
    fractions [B].
    """
    c_arr, n_arr = np.broadcast_arrays(as_int_vector(c, "c"), as_int_vector(n, "n"))
    keep = n_arr > 0
    c_arr, n_arr = c_arr[keep], n_arr[keep]
    if c_arr.size and n_arr.min() == n_arr.max():
        n_value = int(n_arr[0])
        counts = np.bincount(c_arr, minlength=n_value + 1)
        rates, edges, exact = np.arange(n_value + 1) / n_value, None, True
    else:
        counts, edges = np.histogram(c_arr / np.maximum(n_arr, 1), bins=bins, range=(0.0, 1.0))
        rates, exact = (edges[:-1] + edges[1:]) / 2, False
    total = max(int(counts.sum()), 1)
    return {"exact": exact, "rates": rates, "edges": edges, "counts": counts, "fractions": counts / total}
