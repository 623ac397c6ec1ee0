"""Paper 1's own numbers read with the variance view (docs/when-sign-helps.md, "Paper 1, read with these tools").

    python scripts/paper1_arithmetic.py

Paper 1 (gradient starvation and the sign advantage, Qwen3.5-9B on GSM8K) reports, at its training start with
G = 2 (its Fig. 2), a measured degeneracy D_real = 0.90 against the i.i.d. prediction D_iid = 0.56; at G = 4 a
logged degeneracy D_4 = 0.69; and a final GSM8K test accuracy of 73.8% for sign against 28.4% for DrGRPO at G = 4.
For success rates p_i over prompts:

* at G = 2 the degenerate share is p^2 + (1 - p)^2 = 1 - 2 p (1 - p), so E[p (1 - p)] = (1 - D_real) / 2, and
  p-bar solves p-bar (1 - p-bar) = (1 - D_iid) / 2 (the root below 1/2: 57.5% of its prompts have p = 0);
* at G = 4 the degenerate share is p^4 + (1 - p)^4 = 1 - 4q + 2q^2 with q = p (1 - p) in [0, 1/4], so
  1 - D_4 = E[4q - 2q^2] lies between 3.5 E[q] and 4 E[q], which bounds E[q];
* the variance view's SNR^2 of sign over a group-centred estimator is 4 E[p (1 - p)] / (1 - 1/G) for a batch
  (``grpolab.diagnostics.variance``), 4 p-bar (1 - p-bar) / (1 - 1/G) when the spread of the p_i is ignored.

It also prints SmolLM2's dr_grpo start and end pass@1 from experiments/smollm2/runs.csv (the result runs).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from grpolab.diagnostics.variance import snr_ratio_sign_vs_centred

D_REAL_G2 = 0.90  # paper 1, Fig. 2, right: measured degeneracy at the training start, G = 2
D_IID_G2 = 0.56  # paper 1, Fig. 2, right: the i.i.d. prediction p-bar^2 + (1 - p-bar)^2
D_REAL_G4 = 0.69  # paper 1, abstract: degeneracy at G = 4 in its Qwen3.5-9B training logs
DR_GRPO_FINAL = 0.284  # paper 1, abstract: DrGRPO's GSM8K test accuracy at G = 4
SIGN_FINAL = 0.738  # paper 1, abstract: sign's
SMOLLM2_RUNS = Path(__file__).resolve().parents[1] / "experiments" / "smollm2" / "runs.csv"


def mean_variance_from_g2(degenerate: float) -> float:
    """E[p (1 - p)] from the degenerate share at G = 2: (1 - D) / 2."""
    return (1.0 - degenerate) / 2.0


def mean_success_from_iid(degenerate_iid: float) -> float:
    """p-bar (the root below 1/2) from the i.i.d. prediction at G = 2, p-bar^2 + (1 - p-bar)^2 = D_iid."""
    product = (1.0 - degenerate_iid) / 2.0
    return (1.0 - math.sqrt(1.0 - 4.0 * product)) / 2.0


def mean_variance_bounds_from_g4(degenerate: float) -> tuple[float, float]:
    """Bounds on E[q], q = p (1 - p), from the degenerate share at G = 4: 1 - D = E[4q - 2q^2] and
    3.5 q <= 4q - 2q^2 <= 4q on [0, 1/4]."""
    informative = 1.0 - degenerate
    return informative / 4.0, informative / 3.5


def batch_ratio(mean_variance: float, group_size: int) -> float:
    """The variance view's SNR^2 of sign over dr_grpo for a batch: 4 E[p (1 - p)] / (1 - 1/G)."""
    return 4.0 * mean_variance / (1.0 - 1.0 / group_size)


def smollm2_dr_grpo(path: Path = SMOLLM2_RUNS) -> tuple[float, float]:
    """Mean start and end held-out pass@1 of SmolLM2's dr_grpo result runs."""
    runs = pd.read_csv(path)
    runs = runs[(runs["role"] == "result") & (runs["estimator"] == "dr_grpo")]
    return float(runs["start_pass_at_1"].mean()), float(runs["end_pass_at_1"].mean())


def lines() -> list[str]:
    q2 = mean_variance_from_g2(D_REAL_G2)
    p_bar = mean_success_from_iid(D_IID_G2)
    low, high = mean_variance_bounds_from_g4(D_REAL_G4)
    ratios_g4 = [batch_ratio(q, 4) for q in (q2, low, high)]
    start, end = smollm2_dr_grpo()
    return [
        f"E[p(1-p)] from D_real = {D_REAL_G2} at G = 2: {q2:.4f}",
        f"p-bar from D_iid = {D_IID_G2} at G = 2: {p_bar:.4f}",
        f"batch ratio at G = 2, 4E[p(1-p)]/(1-1/G): {batch_ratio(q2, 2):.4f}",
        f"p-bar formula at G = 2: {float(snr_ratio_sign_vs_centred(p_bar, 2)):.4f}",
        f"E[p(1-p)] bounds from D_4 = {D_REAL_G4} at G = 4: {low:.4f} to {high:.4f}",
        f"batch ratio at G = 4 from the G = 2 start: {ratios_g4[0]:.4f}",
        f"batch ratio at G = 4 from D_4: {ratios_g4[1]:.4f} to {ratios_g4[2]:.4f}",
        f"batch ratio at G = 4, all: {min(ratios_g4):.4f} to {max(ratios_g4):.4f}",
        f"p-bar formula at G = 4: {float(snr_ratio_sign_vs_centred(p_bar, 4)):.4f}",
        f"DrGRPO final accuracy minus p-bar: {DR_GRPO_FINAL - p_bar:+.4f}",
        f"sign final accuracy minus p-bar: {SIGN_FINAL - p_bar:+.4f}",
        f"SmolLM2 dr_grpo pass@1, start and end: {start:.4f} to {end:.4f}",
    ]


def main() -> None:
    print("\n".join(lines()))


if __name__ == "__main__":
    main()
