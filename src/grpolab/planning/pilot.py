"""Reading a pilot ``grpolab compare`` folder: each arm's end-score variance split into its sources, and the seeds
each compared pair needs (``planning.power``).

An arm is one (variant, estimator, G); its runs differ by training seed s. Run s's score is its pass@1 on the
same P test prompts, the mean over prompts of k_i / n (k_i correct of n samples): X_s = mu + T_s + E_s, with
T_s the training seed's effect and E_s the evaluation-sampling noise, independent. Per arm:

* ``sampling``: Var(E_s) = (1 / P^2) sum_i p_i (1 - p_i) / n, estimated without bias by E[p(1 - p)] / (n P) with
  E[p(1 - p)] the unbiased mean of k_i (n - k_i) / (n (n - 1)) (``diagnostics.variance.mean_success_variance``),
  averaged over the arm's runs. 0 for a greedy score (n = 0: deterministic decoding).
* ``total``: the sample variance of X_s over the arm's seeds (NaN with one seed).
* ``training_seed``: total - sampling (method of moments, clipped at 0); NaN with one seed: one run per arm
  cannot separate a seed's effect from nothing. Then the plan assumes it is 0 (the sampling noise alone), says
  so, and its seed counts are a lower bound.
* ``prompt``: what a fresh draw of P test prompts would add, Var_i(p_i) / P, estimated by (the variance over
  prompts of k_i / n minus E[p(1 - p)] / n) / P, clipped at 0 and averaged over the runs. Every run of a
  comparison is scored on the same prompts, so this part is shared by both arms of a pair and is not in the
  paired test's noise; it is the error of generalising the scores to other prompts of the task.

Pairs: the report's own rows (``report.comparisons.comparisons``): the primary pair at every G (one Holm family)
and the other tested pairs (the secondary family). A pair's SD is that of its per-seed differences where the
seeds pair, else sqrt(v_a + v_b) with each arm's v its ``total`` (two seeds or more) or, for an arm of one seed,
its ``sampling`` alone (assumed: a lower bound). Where one seed leaves no variance to go on (greedy scores, whose
sampling part is 0, or one sample per prompt), the pair has no SD and no plan: ``--sd`` gives one. A pair whose
seeds do not pair (the report's Welch rows) is planned as if they did, with this SD: the paired t's seeds are
then a little more than Welch's test needs, never fewer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from grpolab.diagnostics.variance import mean_success_variance
from grpolab.errors import UserError
from grpolab.planning.power import floored_power, seeds_needed
from grpolab.report.comparisons import comparisons
from grpolab.report.tables import run_table, score
from grpolab.stats import PAIRED_TESTS

__all__ = ["ARM_KEYS", "pair_plans", "read_pilot", "variance_components"]

ARM_KEYS = ["variant", "estimator", "group_size"]
ONE_SEED = ("one seed per arm: the training-seed variance cannot be estimated; assumed 0 (the evaluation-sampling "
            "variance alone), so the seeds below are a lower bound (pass --sd to plan from a known SD)")


def read_pilot(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``results.parquet`` and the settings of ``compare.yaml`` (``{}`` when absent) of a compare folder."""
    out = Path(folder)
    if not (out / "results.parquet").is_file():
        raise UserError(f"{out} holds no results.parquet, so it is no finished grpolab compare output")
    try:
        results = pd.read_parquet(out / "results.parquet")
    except (OSError, ValueError) as error:
        raise UserError(f"{out / 'results.parquet'} cannot be read ({' '.join(str(error).split())[:160]})") from None
    settings = out / "compare.yaml"
    config = yaml.safe_load(settings.read_text(encoding="utf-8")) if settings.is_file() else {}
    return results, config or {}


def _run_parts(row: pd.Series) -> tuple[float, float]:
    """(sampling, prompt) variance of one run's end score from its per-prompt counts (none recorded: NaN)."""
    counts = row.get("successes")
    n, successes = int(row["n"]), np.asarray([] if counts is None else counts, dtype=float)
    if n < 2 or successes.size == 0:
        return (0.0 if n == 0 else math.nan), math.nan
    within = mean_success_variance(successes, n)
    spread = float(np.var(successes / n, ddof=1)) if successes.size > 1 else math.nan
    return within / (n * successes.size), max(spread - within / n, 0.0) / successes.size


def _end_rows(results: pd.DataFrame) -> pd.DataFrame:
    status = results["status"].fillna("finished") if "status" in results.columns else "finished"
    end = results[(results["phase"] == "end") & (status != "diverged")].copy()
    end["variant"] = end["variant"].fillna("").astype(str) if "variant" in end.columns else ""
    end["score"] = [score(row) for _, row in end.iterrows()]
    return end


def variance_components(results: pd.DataFrame) -> pd.DataFrame:
    """One row per arm: variant, estimator, group_size, seeds, mean, total, sampling, training_seed, prompt
    (variances of the end score; see the module docstring)."""
    end = _end_rows(results)
    parts = [_run_parts(row) for _, row in end.iterrows()]
    end["sampling"], end["prompt"] = [p[0] for p in parts], [p[1] for p in parts]
    rows = []
    for key, arm in end.groupby(ARM_KEYS, sort=False):
        total = float(arm["score"].var(ddof=1)) if len(arm) > 1 else math.nan
        sampling = float(arm["sampling"].mean())
        rows.append({**dict(zip(ARM_KEYS, key, strict=True)), "seeds": len(arm), "mean": float(arm["score"].mean()),
                     "total": total, "sampling": sampling, "training_seed": max(total - sampling, 0.0),
                     "prompt": float(arm["prompt"].mean())})
    return pd.DataFrame(rows)


def _pair_sd(row: dict[str, Any], arms: pd.DataFrame) -> tuple[float, str]:
    """The SD of one seed's difference for a report row, and where it came from (NaN where one seed leaves none)."""
    if row.get("test") in PAIRED_TESTS and math.isfinite(row.get("difference_sd", math.nan)):
        return float(row["difference_sd"]), "the per-seed differences"
    found = arms.set_index(["estimator"])
    a, b = found.loc[row["name_a"]], found.loc[row["name_b"]]
    if a["seeds"] > 1 and b["seeds"] > 1:
        return math.sqrt(a["total"] + b["total"]), "the two arms' variances (seeds not paired)"
    single = [name for name, arm in ((row["name_a"], a), (row["name_b"], b)) if arm["seeds"] < 2]
    variance = sum(arm["total"] if arm["seeds"] > 1 else arm["sampling"] for arm in (a, b))
    if not (math.isfinite(variance) and variance > 0):
        return math.nan, (f"none: {' and '.join(single)} ran one seed, whose score shows no evaluation-sampling "
                          "variance either (greedy, or one sample per prompt)")
    return math.sqrt(variance), f"assumed: evaluation sampling only for {' and '.join(single)} (one seed)"


def pair_plans(results: pd.DataFrame, config: dict[str, Any], *, effect: float | None = None,
               power: float = 0.8, alpha: float = 0.05, sd: float | None = None) -> list[dict[str, Any]]:
    """One dict per primary or secondary pair of the report: variant, group_size, name_a, name_b, role,
    family_size, seeds_now, observed (mean difference), sd, sd_source, effect, seeds (per arm; None when the
    effect is 0, or too small for ``MOST_SEEDS``, or the SD is NaN), power_now (at the seeds it has, NaN below 2)."""
    rows, _ = comparisons(run_table(results), config)
    rows = [r for r in rows if r["role"] in ("primary", "secondary")]
    sizes = {role: sum(r["role"] == role for r in rows) for role in ("primary", "secondary")}
    components = variance_components(results)
    plans = []
    for row in rows:
        arms = components[(components["variant"] == row["variant"]) & (components["group_size"] == row["group_size"])]
        spread, source = (sd, "--sd") if sd is not None else _pair_sd(row, arms)
        wanted = row["mean_difference"] if effect is None else effect
        family, now = sizes[row["role"]], int(min(row["n_a"], row["n_b"]))
        plans.append({**{k: row[k] for k in ("variant", "group_size", "name_a", "name_b", "role")},
                      "family_size": family, "seeds_now": now, "observed": float(row["mean_difference"]),
                      "sd": spread, "sd_source": source, "effect": float(wanted),
                      "seeds": seeds_needed(wanted, spread, power=power, alpha=alpha, family=family)
                      if math.isfinite(spread) else None,
                      "power_now": floored_power(wanted, spread, now, alpha=alpha, family=family)
                      if now > 1 and math.isfinite(spread) else math.nan})
    return plans
