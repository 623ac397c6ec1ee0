"""The variance view's predicted SNR² ratios for the sign map's levels, from the start policy's per-prompt counts.

    python scripts/sign_map_variance.py       # prints the table and writes experiments/sign-map/variance.md

For each difficulty level of ``scripts/sign_map.py`` it repeats the sweeps' start evaluation (the embedded model
on ``reverse`` with the level's task options, the 200 test prompts, n = 8 samples at temperature 1, seeds 0-9:
the settings and seeds of the map's result runs) and computes, per G, each fixed-baseline estimator's predicted
SNR² over dr_grpo twice: from the batch's E_i[p_i (1 - p_i)], estimated without bias from the counts
(``grpolab.diagnostics.variance.snr_ratio_from_counts``), and from pbar alone (the formula the map used). It then
recounts the map's verdict (``experiments/sign-map/verdicts.md``, paired and Holm-corrected): in how many of the
cells where an estimator differs from dr_grpo the direction falls on the side of 1 each prediction gives.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.config import TrainConfig
from grpolab.diagnostics.variance import FIXED_BASELINES, snr_ratio_fixed_vs_centred, snr_ratio_from_counts
from grpolab.evaluation import evaluate
from grpolab.models import load_policy
from grpolab.train.lifecycle import load_task_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sign_map import LEVELS, SEEDS  # the map's levels and seeds
from sign_map_verdicts import verdict_table

SIZES = (2, 4)
SAMPLES, LIMIT = 8, 200


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="star-len6,star-len4,mixed,plus", help="comma-separated level names")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--dest", type=Path, default=Path("experiments/sign-map/variance.md"))
    return parser.parse_args()


def start_counts(level: str, seed: int) -> np.ndarray:
    """The start evaluation's per-prompt successes [200] of one map run (its level's task, its seed)."""
    config = TrainConfig(model="embedded", task="reverse", task_options=LEVELS[level], seed=seed,
                         eval_samples=SAMPLES, eval_limit=LIMIT)
    task = load_task_for(config)
    result = evaluate(load_policy("embedded"), task, n=SAMPLES, limit=LIMIT, seed=seed, temperature=1.0)
    return np.asarray(result.successes, dtype=float)


def ratio_table(levels: list[str], seeds: int) -> pd.DataFrame:
    """Per (level, G, estimator): pbar, E[p(1-p)] and the predicted SNR² ratio from each, means over seeds."""
    rows = []
    for level in levels:
        counts = [start_counts(level, seed) for seed in range(seeds)]
        p_bar = float(np.mean([c.mean() / SAMPLES for c in counts]))
        variance = float(np.mean([np.mean(c * (SAMPLES - c)) / (SAMPLES * (SAMPLES - 1)) for c in counts]))
        for size in SIZES:
            for estimator, baseline in FIXED_BASELINES.items():
                batch = float(np.mean([snr_ratio_from_counts(c, SAMPLES, size, baseline) for c in counts]))
                rows.append({"level": level, "G": size, "estimator": estimator, "start_p": p_bar,
                             "mean_p_variance": variance, "ratio_batch": batch,
                             "ratio_pbar": float(snr_ratio_fixed_vs_centred(p_bar, size, baseline))})
        print(f"{level}: pbar {p_bar:.3f}, E[p(1-p)] {variance:.3f}, pbar(1-pbar) {p_bar * (1 - p_bar):.3f}",
              flush=True)
    return pd.DataFrame(rows)


def agreement(ratios: pd.DataFrame, verdicts: pd.DataFrame) -> list[str]:
    """Per estimator: of the pass@1 cells that differ from dr_grpo after Holm, how many fall on the predicted
    side of 1 under each formula."""
    cells = verdicts[(verdicts["metric"] == "pass@1") & verdicts["verdict"].isin(["better", "worse"])]
    merged = cells.merge(ratios, on=["level", "G", "estimator"])
    lines = []
    for estimator, rows in merged.groupby("estimator", sort=False):
        won = rows["difference"] > 0
        batch, pbar = int((won == (rows["ratio_batch"] > 1)).sum()), int((won == (rows["ratio_pbar"] > 1)).sum())
        lines.append(f"- {estimator}: {len(rows)} cells differ from dr_grpo after Holm ({int(won.sum())} better); "
                     f"on the predicted side of 1 in {batch} by E[p(1-p)], in {pbar} by the pbar formula.")
    return lines


def main() -> None:
    arguments = _arguments()
    ratios = ratio_table(arguments.levels.split(","), arguments.seeds)
    lines = agreement(ratios, verdict_table(Path("experiments/sign-map/runs")))
    shown = ratios.round({"start_p": 3, "mean_p_variance": 4, "ratio_batch": 3, "ratio_pbar": 3})
    columns = list(shown.columns)
    table = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    table += "".join("| " + " | ".join(str(row[c]) for c in columns) + " |\n" for _, row in shown.iterrows())
    arguments.dest.write_text(
        "# The variance view's predicted SNR² ratios over dr_grpo, per sign-map level\n\n"
        "`python scripts/sign_map_variance.py`: the start evaluations of the map's result runs (seeds "
        f"0-{arguments.seeds - 1}, 200 test prompts, n = {SAMPLES}) repeated; ratio_batch uses the unbiased "
        "E[p_i(1-p_i)] over prompts, ratio_pbar the mean success alone. Means over seeds.\n\n"
        + "\n".join(lines) + "\n\n" + table)
    print("\n".join(lines))
    print(f"wrote {arguments.dest}")


if __name__ == "__main__":
    main()
