"""A fake ``grpolab compare`` sweep for the report tests: results, metrics and config with hand-chosen finals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpolab.advantages import entry_for
from grpolab.diagnostics import pass_at_k_curve
from grpolab.metric_keys import GROUP_RANK

# Final score (pass@1 = greedy accuracy here) per (estimator, G) and seed: the hand-computed means below come
# from these.
FINALS = {
    ("sign", 2): [0.70, 0.74, 0.78],
    ("sign", 4): [0.76, 0.80, 0.78],
    ("dr_grpo", 2): [0.28, 0.30, 0.32],
    ("dr_grpo", 4): [0.30, 0.26, 0.31],
    ("grpo", 2): [0.29, 0.33, 0.34],
    ("grpo", 4): [0.31, 0.30, 0.35],
    ("rloo", 2): [0.27, 0.31, 0.35],
    ("rloo", 4): [0.28, 0.33, 0.32],
    ("dr_grpo+dynamic", 2): [0.50, 0.46, 0.54],
    ("dr_grpo+dynamic", 4): [0.60, 0.52, 0.56],
}
EXTRA_FINALS = {  # seeds 3-7, for a test that needs what 3 seeds cannot carry (p >= 1/4)
    ("sign", 2): [0.72, 0.76, 0.75, 0.74, 0.78],
    ("sign", 4): [0.77, 0.79, 0.81, 0.74, 0.78],
    ("dr_grpo", 2): [0.29, 0.31, 0.33, 0.30, 0.31],
    ("dr_grpo", 4): [0.28, 0.29, 0.27, 0.30, 0.31],
    ("grpo", 2): [0.30, 0.32, 0.31, 0.31, 0.33],
    ("grpo", 4): [0.33, 0.29, 0.32, 0.31, 0.33],
    ("rloo", 2): [0.30, 0.33, 0.29, 0.32, 0.30],
    ("rloo", 4): [0.31, 0.30, 0.29, 0.32, 0.30],
    ("dr_grpo+dynamic", 2): [0.52, 0.48, 0.51, 0.53, 0.55],
    ("dr_grpo+dynamic", 4): [0.58, 0.54, 0.57, 0.53, 0.55],
}
START_ACCURACY = 0.25
N_SAMPLES, N_PROMPTS, STEPS, PROMPTS_PER_STEP = 16, 40, 60, 8
EVAL_STEPS = (20, 40)


def _success_rates(rng: np.random.Generator, accuracy: float) -> np.ndarray:
    """Bimodal per-prompt success rates [P] (mass at 0 and 1, like the paper's Fig. 2), mean ~accuracy."""
    kind = rng.choice(3, size=N_PROMPTS, p=[max(0.05, 0.8 - accuracy), 0.2, min(0.75, accuracy)])
    return np.where(kind == 0, 0.0, np.where(kind == 2, 1.0, rng.uniform(0.1, 0.9, N_PROMPTS)))


def _evaluation(rng: np.random.Generator, base: dict, phase: str, step: int, accuracy: float) -> dict:
    successes = rng.binomial(N_SAMPLES, _success_rates(rng, accuracy))
    curve = pass_at_k_curve(N_SAMPLES, successes)
    cost = 1.6 if "+dynamic" in base["estimator"] else 1.0
    return {
        **base,
        "phase": phase,
        "step": step,
        "greedy_accuracy": accuracy,
        "n": N_SAMPLES,
        "completions_generated": int(step * PROMPTS_PER_STEP * base["group_size"] * cost),
        # pass@1 (the report's score) is the planned accuracy exactly, so the hand-computed means hold
        "pass_at_k": [accuracy, *list(curve.values())[1:]],
        "successes": successes.tolist(),
        "mean_length": 120.0,
    }


def _metrics_rows(rng: np.random.Generator, base: dict, final: float, with_rank: bool) -> list[dict]:
    rows, size = [], base["group_size"]
    cost = 1.6 if "+dynamic" in base["estimator"] else 1.0
    for step in range(1, STEPS + 1):
        progress = START_ACCURACY + (final - START_ACCURACY) * (1 - np.exp(-step / 15))
        rates = _success_rates(rng, float(np.clip(progress + rng.normal(0, 0.03), 0.01, 0.99)))  # [P]
        pbar, all_wrong, all_correct = rates.mean(), np.mean((1 - rates) ** size), np.mean(rates**size)
        row = {
            **{k: base[k] for k in ("run_id", "estimator", "seed", "group_size")},
            "step": step,
            "rollout/reward_mean": pbar,
            "rollout/accuracy": pbar,
            "rollout/completions_generated": int(step * PROMPTS_PER_STEP * size * cost),
            "starvation/all_wrong": all_wrong,
            "starvation/all_correct": all_correct,
            "starvation/degenerate": all_wrong + all_correct,
            "starvation/d_iid": pbar**size + (1 - pbar) ** size,
            "loss/grad_norm": 1.0,
            "perf/step_time": 0.5,
        }
        if with_rank:
            zero_sum = (entry := entry_for(base["estimator"])) is not None and entry.zero_sum
            tracked = step % 10 == 0
            rank = (1.9 if zero_sum else 1.5 + size) + rng.normal(0, 0.05)
            row[GROUP_RANK] = rank if tracked else np.nan
        rows.append(row)
    return rows


def synthetic_sweep(
    estimators: tuple[str, ...] = ("sign", "dr_grpo", "grpo"),
    seeds: int = 3,
    sizes: tuple[int, ...] = (2, 4),
    with_rank: bool = False,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Results, metrics and config of a fake sweep; final accuracies from FINALS, start accuracy 0.25."""
    rng = np.random.default_rng(seed)
    results, metrics = [], []
    for estimator in estimators:
        for size in sizes:
            for s in range(seeds):
                final = (FINALS[(estimator, size)] + EXTRA_FINALS[(estimator, size)])[s]
                base = {
                    "run_id": f"{estimator}-G{size}-s{s}",
                    "estimator": estimator,
                    "seed": s,
                    "group_size": size,
                    "task": "arith",
                    "model": "tiny",
                    "steps": STEPS,
                }
                results.append(_evaluation(rng, base, "start", 0, START_ACCURACY))
                for step in EVAL_STEPS:
                    middle = START_ACCURACY + (final - START_ACCURACY) * step / STEPS
                    results.append(_evaluation(rng, base, "step", step, middle))
                results.append(_evaluation(rng, base, "end", STEPS, final))
                metrics += _metrics_rows(rng, base, final, with_rank)
    config = {
        "name": "synthetic",
        "estimators": list(estimators),
        "seeds": seeds,
        "group_sizes": list(sizes),
        "steps": STEPS,
        "eval": {"n": N_SAMPLES},
    }
    return pd.DataFrame(results), pd.DataFrame(metrics), config


def with_lrs(results: pd.DataFrame, lrs: dict[str, float]) -> pd.DataFrame:
    """``results`` with an ``lr`` column: each estimator at lrs[estimator]."""
    return results.assign(lr=results["estimator"].map(lrs).astype(float))


def with_diverged(results: pd.DataFrame, diverged: dict[tuple[str, int, int], int],
                  drop_end: bool = True) -> pd.DataFrame:
    """``results`` with the reliability contract's columns: status "diverged" and diverged_at_step for the runs
    keyed (estimator, G, seed) -> step, "finished" for the others; a diverged run keeps its evaluations up to
    that step (and no end evaluation when ``drop_end``)."""
    keys = list(zip(results["estimator"], results["group_size"], results["seed"], strict=True))
    at = pd.Series([diverged.get(key, np.nan) for key in keys], index=results.index, dtype=float)
    out = results.assign(status=np.where(at.notna(), "diverged", "finished"), diverged_at_step=at)
    if drop_end:
        out = out[~(at.notna() & (out["step"] > at))]
    return out.reset_index(drop=True)


def with_variants(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One table of several sweeps' results (or metrics), each tagged with its ``variant`` and its run ids made
    unique by it."""
    tagged = [frame.assign(variant=variant, run_id=frame["run_id"] + (f"-{variant}" if variant else ""))
              for variant, frame in frames.items()]
    return pd.concat(tagged, ignore_index=True)


def shifted(results: pd.DataFrame, estimator: str, points: float) -> pd.DataFrame:
    """``results`` with every evaluation of ``estimator`` scored ``points`` higher (pass@1 and greedy)."""
    out = results.copy()
    rows = out["estimator"] == estimator
    out.loc[rows, "greedy_accuracy"] = out.loc[rows, "greedy_accuracy"] + points
    out.loc[rows, "pass_at_k"] = pd.Series([[p[0] + points, *p[1:]] for p in out.loc[rows, "pass_at_k"]],
                                           index=out.index[rows], dtype=object)
    return out
