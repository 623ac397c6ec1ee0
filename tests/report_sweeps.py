"""A fake ``grpolab compare`` sweep for the report tests: results, metrics and config with hand-chosen finals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpolab.advantages import entry_for
from grpolab.diagnostics import pass_at_k_curve

# Final score (pass@1 = greedy accuracy here) per (estimator, G) and seed: the hand-computed means below come
# from these.
FINALS = {
    ("sign", 2): [0.70, 0.74, 0.78],
    ("sign", 4): [0.76, 0.80, 0.78],
    ("dr_grpo", 2): [0.28, 0.30, 0.32],
    ("dr_grpo", 4): [0.30, 0.26, 0.31],
    ("grpo", 2): [0.29, 0.33, 0.34],
    ("grpo", 4): [0.31, 0.30, 0.35],
    ("dr_grpo+dynamic", 2): [0.50, 0.46, 0.54],
    ("dr_grpo+dynamic", 4): [0.60, 0.52, 0.56],
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
            row["grad/effective_rank"] = rank if tracked else np.nan
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
                final = FINALS[(estimator, size)][s]
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
