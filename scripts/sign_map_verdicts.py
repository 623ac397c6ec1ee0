"""The sign map's verdicts under the report's rules: each estimator against dr_grpo in the 16 cells (4 difficulty
levels x G 2, 4 x clipping on / off), paired by seed, Holm-corrected over the 16 cells, on pass@1 and on greedy
accuracy, with TOST at a 5-point margin for the cells that show no difference.

    python scripts/sign_map_verdicts.py            # prints the table and writes experiments/sign-map/verdicts.md

Reads the committed per-run tables ``experiments/sign-map/runs/*.csv`` (``scripts/sign_map.py table`` writes
them from the sweeps). Every estimator and dr_grpo ran seeds 0-9 in every cell, so each test is the paired t-test
of the per-seed differences (``grpolab.stats.compare_pair(paired=True)``); Welch's p is shown beside it. The family
of an estimator is its 16 cells (Holm 1979). A cell is "better" / "worse" when its Holm-adjusted p < 0.05,
"equivalent" when its Holm-adjusted TOST p < 0.05 (Schuirmann 1987; +-5 points), else "no evidence either way".
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab import stats

REFERENCE = "dr_grpo"
ESTIMATORS = ("sign", "reinforce", "nsr")
METRICS = {"pass@1": "end_pass_at_1", "greedy": "end_greedy"}
MARGIN = 0.05
ALPHA = 0.05


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("experiments/sign-map/runs"), help="the per-run tables")
    parser.add_argument("--dest", type=Path, default=Path("experiments/sign-map/verdicts.md"))
    return parser.parse_args()


def _cells(folder: Path) -> list[tuple[str, str, int, pd.DataFrame]]:
    """(level, clipping, G, result runs) for every table in ``folder`` (named LEVEL-CLIPPING.csv)."""
    cells = []
    for path in sorted(folder.glob("*.csv")):
        level, clipping = path.stem.rsplit("-", 1)
        runs = pd.read_csv(path)
        runs = runs[runs["role"] == "result"]
        cells += [(level, clipping, int(size), group) for size, group in runs.groupby("group_size")]
    return cells


def _pair(group: pd.DataFrame, estimator: str, column: str) -> dict[str, float]:
    mine = group[group["estimator"] == estimator].set_index("seed")[column].sort_index()
    reference = group[group["estimator"] == REFERENCE].set_index("seed")[column].sort_index()
    if list(mine.index) != list(reference.index):
        raise SystemExit(f"{estimator} and {REFERENCE} ran different seeds; this script pairs them by seed")
    return stats.compare_pair(mine.to_numpy(float), reference.to_numpy(float), paired=True, margin=MARGIN)


def verdict_table(folder: Path) -> pd.DataFrame:
    """One row per (estimator, metric, level, clipping, G): the paired difference, its interval, the paired and
    Welch p, the Holm-adjusted paired and TOST p over the estimator's 16 cells, and the verdict."""
    rows = []
    for level, clipping, size, group in _cells(folder):
        start = float(group["start_pass_at_1"].mean())
        for estimator in ESTIMATORS:
            for metric, column in METRICS.items():
                result = _pair(group, estimator, column)
                rows.append({"estimator": estimator, "metric": metric, "level": level, "clipping": clipping,
                             "G": size, "start_p": start, "difference": result["mean_difference"],
                             "low": result["difference_low"], "high": result["difference_high"],
                             "paired_p": result["p"], "welch_p": result["welch_p"], "tost_p": result["tost_p"],
                             "n": result["n_a"]})
    table = pd.DataFrame(rows)
    for _, family in table.groupby(["estimator", "metric"]):
        table.loc[family.index, "holm_p"] = stats.holm_correction(family["paired_p"])
        table.loc[family.index, "holm_tost_p"] = stats.holm_correction(family["tost_p"])
    table["verdict"] = np.where(table["holm_p"] < ALPHA, np.where(table["difference"] > 0, "better", "worse"),
                                np.where(table["holm_tost_p"] < ALPHA, "equivalent", "no evidence either way"))
    return table


def _counts(table: pd.DataFrame) -> list[str]:
    lines = []
    for (estimator, metric), family in table.groupby(["estimator", "metric"], sort=False):
        raw = int(((family["paired_p"] < ALPHA) & (family["difference"] > 0)).sum())
        welch = int(((stats.holm_correction(family["welch_p"]) < ALPHA) & (family["difference"] > 0)).sum())
        said = family["verdict"].value_counts()
        lines.append(f"- {estimator} vs {REFERENCE}, {metric}: better in {said.get('better', 0)} of {len(family)} "
                     f"cells after Holm (paired; {welch} with Welch's test, {raw} before any correction), worse in "
                     f"{said.get('worse', 0)}, equivalent within +-{100 * MARGIN:.0f} points in "
                     f"{said.get('equivalent', 0)}, no evidence either way in {said.get('no evidence either way', 0)}.")
    return lines


def _markdown(table: pd.DataFrame) -> str:
    shown = table.assign(
        start_p=(100 * table["start_p"]).round(1), difference=(100 * table["difference"]).round(1),
        ci=[f"[{100 * lo:+.1f}, {100 * hi:+.1f}]" for lo, hi in zip(table["low"], table["high"], strict=True)],
        paired_p=table["paired_p"].map(lambda v: f"{v:.2g}"), holm_p=table["holm_p"].map(lambda v: f"{v:.2g}"),
        holm_tost_p=table["holm_tost_p"].map(lambda v: f"{v:.2g}"))
    columns = ["estimator", "metric", "level", "clipping", "G", "start_p", "difference", "ci", "paired_p", "holm_p",
               "holm_tost_p", "verdict"]
    header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(str(row[c]) for c in columns) + " |\n" for _, row in shown.iterrows())
    return ("# The sign map's verdicts: paired by seed, Holm over each estimator's 16 cells\n\n"
            "`python scripts/sign_map_verdicts.py` (from experiments/sign-map/runs/*.csv). Each estimator against "
            f"dr_grpo, n = 10 seeds per arm; difference and 95% paired t interval in points; TOST margin "
            f"+-{100 * MARGIN:.0f} points.\n\n" + "\n".join(_counts(table)) + "\n\n" + header + body)


def main() -> None:
    arguments = _arguments()
    table = verdict_table(arguments.runs)
    text = _markdown(table)
    arguments.dest.write_text(text)
    print("\n".join(_counts(table)))
    print(f"wrote {arguments.dest}")


if __name__ == "__main__":
    main()
