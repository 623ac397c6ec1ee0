"""The variance view's batch SNR² ratio on SmolLM2's start policy, from the start evaluation's per-prompt counts.

    python scripts/smollm2_start_variance.py --seeds 0        # about 13 minutes per seed on 2 busy CPU cores

Repeats the start evaluation of ``experiments/smollm2/compare.yaml`` (SmolLM2-135M in bfloat16, two-digit additions
in words, 200 test prompts, n = 2 samples at temperature 0.7, the run's seed) and prints, per seed, pass@1 (to
check it against ``experiments/smollm2/runs.csv``), the unbiased E[p_i (1 - p_i)] over the prompts
(``grpolab.diagnostics.variance.mean_success_variance``) beside pbar (1 - pbar), and each fixed baseline's predicted
SNR² over dr_grpo at G = 4 from the counts (``snr_ratio_from_counts``) and from pbar alone. With n = 2 the
estimate of E[p_i (1 - p_i)] is unbiased but noisy: it can exceed pbar (1 - pbar), which the true value cannot.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from grpolab.config import TrainConfig
from grpolab.diagnostics.variance import (
    FIXED_BASELINES,
    mean_success_variance,
    snr_ratio_fixed_vs_centred,
    snr_ratio_from_counts,
)
from grpolab.evaluation import evaluate
from grpolab.models import load_policy
from grpolab.train.lifecycle import load_task_for

TASK_OPTIONS = {"digits": [2, 2], "operators": "+", "operands": 2, "word_problems": True, "use_chat_template": True,
                "max_new_tokens": 32, "num_train": 1000, "num_test": 200}  # experiments/smollm2/compare.yaml
SAMPLES, LIMIT, TEMPERATURE, GROUP_SIZE = 2, 200, 0.7, 4


def start_counts(policy, seed: int) -> tuple[np.ndarray, float]:
    """(per-prompt successes [200], greedy accuracy) of the start evaluation of the run with ``seed``."""
    config = TrainConfig(model="smollm2-135m", task="arith", task_options=TASK_OPTIONS, verifier="gsm8k", seed=seed,
                         eval_samples=SAMPLES, eval_limit=LIMIT, temperature=TEMPERATURE)
    result = evaluate(policy, load_task_for(config), n=SAMPLES, limit=LIMIT, seed=seed, temperature=TEMPERATURE)
    return np.asarray(result.successes, dtype=float), result.greedy_accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds")
    seeds = [int(seed) for seed in parser.parse_args().seeds.split(",")]
    policy = load_policy("smollm2-135m")
    policy.model.to(torch.bfloat16)  # the sweep's dtype
    for seed in seeds:
        counts, _ = start_counts(policy, seed)
        p_bar = float(counts.mean() / SAMPLES)
        ratios = ", ".join(f"{name} {snr_ratio_from_counts(counts, SAMPLES, GROUP_SIZE, b):.3f} "
                           f"(pbar {snr_ratio_fixed_vs_centred(p_bar, GROUP_SIZE, b):.3f})"
                           for name, b in FIXED_BASELINES.items())
        print(f"seed {seed}: pass@1 {p_bar:.4f}, E[p(1-p)] {mean_success_variance(counts, SAMPLES):.4f}, "
              f"pbar(1-pbar) {p_bar * (1 - p_bar):.4f}; SNR² over dr_grpo at G = {GROUP_SIZE}: {ratios}", flush=True)


if __name__ == "__main__":
    main()
