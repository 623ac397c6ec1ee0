"""Recompute, from the committed tables under experiments/, the numbers the docs quote when they weigh a claim.

    python scripts/doc_claims.py               # every check below
    python scripts/doc_claims.py snr-order     # one of them

* ``snr-order`` (experiments/batch-size/cells.csv): across the 9 (estimator, P) cells of each start level, Spearman's
  rho between the measured SNR^2 of the cell, 2c / (1 - c) with c the half-batch cosine over steps 1-5, and its
  step-5 and end pass@1; and in how many of the 3 batch sizes the estimators' SNR^2 order is their pass@1 order.
  Exploratory: chosen after the runs.
* ``replication`` (experiments/sign-map/runs/mixed-clip1.csv): sign - dr_grpo on seeds 5-9 alone, paired by seed,
  Holm over G = 2 and 4, on end pass@1 and greedy accuracy; and how many of seeds 0-4 differ from the demo's
  runs when a demo's ``runs.csv`` is given (``--demo-runs``).
* ``lowp-paired`` (experiments/smollm2/lowp_runs.csv): each SmolLM2 low-p arm against dr_grpo at step 30, paired
  by seed (paired t), Holm over the four arms, beside Welch's test.
* ``adam-steps`` (experiments/smollm2/updates/.../mechanism_runs.csv): Adam's first moment over its noise floor
  per checkpoint, sign against dr_grpo, paired by seed and by Welch, unadjusted.
* ``sign-map`` (experiments/sign-map/verdicts.md's table): the (level, G) conditions where sign beats dr_grpo on
  pass@1 after Holm, with the pass@1 and greedy differences of those cells.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from grpolab.stats import holm_correction, paired_interval, paired_t_test

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
ADAM_RUNS = EXPERIMENTS / "smollm2" / "updates" / "mask_truncated_completions=false" / "mechanism_runs.csv"


def measured_snr2(cosine: pd.Series) -> pd.Series:
    """SNR^2 of a gradient from the cosine c of its two half-batch estimates: 2c / (1 - c)."""
    return 2 * cosine / (1 - cosine)


def _order(cells: pd.DataFrame, column: str) -> list[str]:
    return cells.sort_values(column)["estimator"].tolist()


def snr_order(cells: pd.DataFrame) -> pd.DataFrame:
    """Per level: Spearman's rho of the measured SNR^2 against step-5 and end pass@1 over its (estimator, P)
    cells, and the batch sizes where the estimators' SNR^2 order is their step-5 pass@1 order."""
    rows = []
    for level, cell in cells.assign(snr2=measured_snr2(cells["cosine_early"])).groupby("level"):
        same_order = sum(_order(at, "snr2") == _order(at, "step5_pass_at_1") for _, at in cell.groupby("prompts"))
        rows.append(
            {
                "level": level,
                "cells": len(cell),
                "rho_step5": float(scipy_stats.spearmanr(cell["snr2"], cell["step5_pass_at_1"]).statistic),
                "rho_end": float(scipy_stats.spearmanr(cell["snr2"], cell["end_pass_at_1"]).statistic),
                "same_order_within_p": same_order,
                "batch_sizes": cell["prompts"].nunique(),
            }
        )
    return pd.DataFrame(rows)


def _arm(runs: pd.DataFrame, estimator: str, column: str) -> np.ndarray:
    return runs[runs["estimator"] == estimator].sort_values("seed")[column].to_numpy()


def replication(runs: pd.DataFrame, seeds: range = range(5, 10)) -> pd.DataFrame:
    """sign - dr_grpo on the given seeds of the result runs, paired by seed, Holm over the group sizes."""
    runs = runs[(runs["role"] == "result") & runs["seed"].isin(seeds)]
    rows = []
    for metric in ("end_pass_at_1", "end_greedy"):
        for size, at in runs.groupby("group_size"):
            sign, dr_grpo = _arm(at, "sign", metric), _arm(at, "dr_grpo", metric)
            mean, low, high = paired_interval(sign, dr_grpo)
            rows.append(
                {
                    "metric": metric,
                    "G": int(size),
                    "n": len(sign),
                    "difference": mean,
                    "low": low,
                    "high": high,
                    "paired_p": paired_t_test(sign, dr_grpo)[2],
                }
            )
    table = pd.DataFrame(rows)
    for _, family in table.groupby("metric"):
        table.loc[family.index, "holm_p"] = holm_correction(family["paired_p"].tolist())
    return table


def differing_runs(map_runs: pd.DataFrame, demo_runs: pd.DataFrame, column: str = "end_pass_at_1") -> pd.DataFrame:
    """The sign and dr_grpo result runs that both tables hold (same estimator, G and seed) whose scores differ."""
    keys = ["estimator", "group_size", "seed"]
    pick = [*keys, column]
    both = map_runs[map_runs["role"] == "result"][pick].merge(
        demo_runs[demo_runs["role"] == "result"][pick], on=keys, suffixes=("_map", "_demo")
    )
    both = both[both["estimator"].isin(["sign", "dr_grpo"])]
    both["difference"] = both[f"{column}_map"] - both[f"{column}_demo"]
    return both.assign(shared=len(both))[both["difference"] != 0]


def lowp_paired(
    runs: pd.DataFrame,
    arms: tuple[str, ...] = ("reinforce", "fixed_baseline (b=0.1)", "sign", "nsr"),
    reference: str = "dr_grpo",
) -> pd.DataFrame:
    """Each arm's end pass@1 at step 30 against the reference's, paired by seed and by Welch, Holm over the arms."""
    runs = runs.assign(seed=runs["run"].str.extract(r"seed(\d+)", expand=False).astype(int))
    base = runs[runs["arm"] == reference].sort_values("seed")["end_pass_at_1"].to_numpy()
    rows = []
    for arm in arms:
        values = runs[runs["arm"] == arm].sort_values("seed")["end_pass_at_1"].to_numpy()
        rows.append(
            {
                "arm": arm,
                "n": len(values),
                "difference": float((values - base).mean()),
                "paired_p": paired_t_test(values, base)[2],
                "welch_p": float(scipy_stats.ttest_ind(values, base, equal_var=False).pvalue),
            }
        )
    table = pd.DataFrame(rows)
    table["paired_holm"] = holm_correction(table["paired_p"].tolist())
    table["welch_holm"] = holm_correction(table["welch_p"].tolist())
    return table


def adam_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """dr_grpo's and sign's Adam first moment over its noise floor per checkpoint, with unadjusted paired and
    Welch p of the difference."""
    per_step = runs[(runs["measure"] == "adam_over_floor") & runs["phase"].notna()]
    rows = []
    for phase, at in per_step.groupby("phase", sort=False):
        sign = at[at["estimator"] == "sign"].sort_values("seed")["value"].to_numpy()
        dr_grpo = at[at["estimator"] == "dr_grpo"].sort_values("seed")["value"].to_numpy()
        rows.append(
            {
                "checkpoint": phase,
                "n": len(sign),
                "sign": sign.mean(),
                "dr_grpo": dr_grpo.mean(),
                "paired_p": paired_t_test(dr_grpo, sign)[2],
                "welch_p": float(scipy_stats.ttest_ind(dr_grpo, sign, equal_var=False).pvalue),
            }
        )
    return pd.DataFrame(rows)


def sign_map_wins(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The cells where sign beats dr_grpo on pass@1 after Holm, with the greedy difference of each."""
    sign = verdicts[verdicts["estimator"] == "sign"]
    keys = ["level", "clipping", "G"]
    wins = sign[(sign["metric"] == "pass@1") & (sign["verdict"] == "better")]
    greedy = sign[sign["metric"] == "greedy"][[*keys, "difference", "verdict"]]
    return wins[[*keys, "difference"]].merge(greedy, on=keys, suffixes=("", "_greedy"))


def read_verdicts(path: Path) -> pd.DataFrame:
    """The per-cell table of verdicts.md (a Markdown table) as a data frame."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    table = pd.DataFrame(rows, columns=header)
    return table.astype({"G": int, "difference": float})


def _print(title: str, table: pd.DataFrame) -> None:
    print(f"## {title}\n{table.to_string(index=False, float_format=lambda x: f'{x:.4g}')}\n")


def run(check: str, demo_runs: Path | None) -> None:
    if check in ("all", "snr-order"):
        _print("snr-order", snr_order(pd.read_csv(EXPERIMENTS / "batch-size" / "cells.csv")))
    if check in ("all", "replication"):
        map_runs = pd.read_csv(EXPERIMENTS / "sign-map" / "runs" / "mixed-clip1.csv")
        _print("replication", replication(map_runs))
        if demo_runs is not None:
            differing = differing_runs(map_runs, pd.read_csv(demo_runs))
            _print("replication: seeds 0-4 that differ from the demo's", differing)
    if check in ("all", "lowp-paired"):
        _print("lowp-paired", lowp_paired(pd.read_csv(EXPERIMENTS / "smollm2" / "lowp_runs.csv")))
    if check in ("all", "adam-steps"):
        _print("adam-steps", adam_steps(pd.read_csv(ADAM_RUNS)))
    if check in ("all", "sign-map"):
        _print("sign-map", sign_map_wins(read_verdicts(EXPERIMENTS / "sign-map" / "verdicts.md")))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "check",
        nargs="?",
        default="all",
        choices=["all", "snr-order", "replication", "lowp-paired", "adam-steps", "sign-map"],
    )
    parser.add_argument(
        "--demo-runs",
        type=Path,
        help="a demo's runs.csv (experiments/demo/runs.csv; runs/compare/runs.csv after make demo)",
    )
    args = parser.parse_args(argv)
    run(args.check, args.demo_runs)


if __name__ == "__main__":
    main()
