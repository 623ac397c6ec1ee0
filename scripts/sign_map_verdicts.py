"""The sign map's verdicts under the report's rules: each estimator against dr_grpo in the 16 cells (4 difficulty
levels x G 2, 4 x clipping on / off), paired by seed, Holm-corrected over the estimator's distinct cells, on pass@1
and on greedy accuracy, with TOST at a margin relative to the headroom for the cells that show no difference.

    python scripts/sign_map_verdicts.py            # prints the counts and writes experiments/sign-map/verdicts.md
    python scripts/sign_map_verdicts.py --unpaired # Welch's test instead (it ignores the shared seeds; said so)

Reads the committed per-run tables ``experiments/sign-map/runs/*.csv`` (``scripts/sign_map.py table`` writes
them from the sweeps). Every estimator and dr_grpo ran seeds 0-9 in every cell, so each test is the paired t-test
of the per-seed differences (``grpolab.pairing.compare_arms``); Welch's p is shown beside it.

Counted once: the 16 cells are 8 conditions (level, G), each run with and without clipping. Where clipping never
fired, a condition's clip and no-clip runs are the same runs, and so the same test twice: a clip / no-clip pair of
cells whose two arms have identical per-seed scores is one test (one member of the Holm family, counted once).
The counts say in how many of the 8 conditions an estimator is better or worse (in either clipping), and how many
runs of each level are identical with and without clipping.

A cell is "better" / "worse" when its Holm-adjusted p < 0.05; else "both at the ceiling, cannot be resolved" when
both arms end within the margin of 100%; else "equivalent" when its Holm-adjusted TOST p < 0.05 (Schuirmann 1987);
else "no evidence either way". The margin of each metric is ``grpolab.equivalence.margin``: min(5 points, a quarter
of 100% - the level's start score on that metric). A better or worse cell whose difference is inside the margin is
counted as such.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from grpolab import equivalence, pairing, stats

REFERENCE = "dr_grpo"
ESTIMATORS = ("sign", "reinforce", "nsr")
METRICS = {"pass@1": ("end_pass_at_1", "start_pass_at_1"), "greedy": ("end_greedy", "start_greedy")}
MARGIN = 0.05
ALPHA = 0.05
CONDITION = ["level", "G"]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("experiments/sign-map/runs"), help="the per-run tables")
    parser.add_argument("--dest", type=Path, default=Path("experiments/sign-map/verdicts.md"))
    parser.add_argument(pairing.UNPAIRED_FLAG, action="store_true", dest="unpaired",
                        help="Welch's test although the arms share seeds (not the default; the output says so)")
    return parser.parse_args()


def _results(folder: Path) -> pd.DataFrame:
    """The result runs of every table in ``folder`` (named LEVEL-CLIPPING.csv), with their level and clipping."""
    tables = []
    for path in sorted(folder.glob("*.csv")):
        level, clipping = path.stem.rsplit("-", 1)
        runs = pd.read_csv(path)
        tables.append(runs[runs["role"] == "result"].assign(level=level, clipping=clipping))
    if not tables:
        raise SystemExit(f"no per-run table in {folder}; write them with: python scripts/sign_map.py table")
    return pd.concat(tables, ignore_index=True)


def _scores(cell: pd.DataFrame, estimator: str, column: str) -> pd.Series:
    return cell[cell["estimator"] == estimator].set_index("seed")[column].astype(float)


def _row(cell: pd.DataFrame, estimator: str, metric: str, unpaired: bool) -> dict:
    end, start = METRICS[metric]
    margin = equivalence.margin(MARGIN, float(cell[start].mean()))
    mine, reference = _scores(cell, estimator, end), _scores(cell, REFERENCE, end)
    result = pairing.compare_arms(mine, reference, unpaired=unpaired, margin=margin)
    return {"estimator": estimator, "metric": metric, "start": float(cell[start].mean()), "margin": margin,
            "mean_a": result["mean_a"], "mean_b": result["mean_b"], "difference": result["mean_difference"],
            "low": result["difference_low"], "high": result["difference_high"], "test": result["test"],
            "p": result["p"], "welch_p": result["welch_p"], "tost_p": result["tost_p"], "n": result["n_a"],
            "seeds_shared": result["seeds_shared"], "unpaired": result["unpaired"],
            "scores": tuple(mine.sort_index()) + tuple(reference.sort_index())}


def _mark_repeats(table: pd.DataFrame) -> pd.DataFrame:
    """``same_runs_as``: for a cell whose two arms score exactly as in another clipping of the same (estimator,
    metric, level, G), that clipping (its test is the same test, counted once); else ""."""
    table = table.assign(same_runs_as="")
    for _, group in table.groupby(["estimator", "metric", *CONDITION]):
        first = group.index[0]
        for index in group.index[1:]:
            if group.loc[index, "scores"] == group.loc[first, "scores"]:
                table.loc[index, "same_runs_as"] = group.loc[first, "clipping"]
    return table


def verdict_table(folder: Path, *, unpaired: bool = False) -> pd.DataFrame:
    """One row per (estimator, metric, level, clipping, G): the difference, its interval, the test and its p, Welch's
    p, the Holm-adjusted p and TOST p over the estimator's distinct cells, the margin and the verdict."""
    rows = []
    for (level, clipping, size), cell in _results(folder).groupby(["level", "clipping", "group_size"]):
        rows += [{"level": level, "clipping": clipping, "G": int(size), **_row(cell, estimator, metric, unpaired)}
                 for estimator in ESTIMATORS for metric in METRICS]
    table = _mark_repeats(pd.DataFrame(rows))
    for _, family in table.groupby(["estimator", "metric"]):
        distinct = family[family["same_runs_as"] == ""]
        table.loc[distinct.index, "holm_p"] = stats.holm_correction(distinct["p"])
        table.loc[distinct.index, "holm_tost_p"] = stats.holm_correction(distinct["tost_p"])
    for index, row in table[table["same_runs_as"] != ""].iterrows():  # a repeat reads its first test's numbers
        first = table[(table[["estimator", "metric", "level", "G"]] == row[["estimator", "metric", "level", "G"]])
                      .all(axis=1) & (table["clipping"] == row["same_runs_as"])].index[0]
        table.loc[index, ["holm_p", "holm_tost_p"]] = table.loc[first, ["holm_p", "holm_tost_p"]].to_numpy()
    table["verdict"] = [equivalence.verdict(r.holm_p, r.holm_tost_p, r.difference, r.mean_a, r.mean_b, r.margin,
                                            alpha=ALPHA) for r in table.itertuples()]
    return table.drop(columns="scores")


def identical_runs(folder: Path) -> list[str]:
    """Per level, how many result runs (estimator, G, seed) score the same with and without clipping."""
    runs = _results(folder)
    lines = []
    for level, group in runs.groupby("level", sort=False):
        wide = group.pivot_table(index=["estimator", "group_size", "seed"], columns="clipping",
                                 values=["end_pass_at_1", "end_greedy"])
        same = sum(all(row[(column, clip)] == row[(column, wide.columns[0][1])] for column, clip in wide.columns)
                   for _, row in wide.iterrows())
        lines.append(f"{level}: {same} of {len(wide)}")
    return lines


def _conditions(family: pd.DataFrame, verdict: str) -> tuple[int, int]:
    """(conditions with ``verdict`` in at least one clipping, those with it in every clipping)."""
    said = family.assign(hit=family["verdict"] == verdict).groupby(CONDITION)["hit"]
    return int(said.any().sum()), int(said.all().sum())


def _inside(family: pd.DataFrame) -> str:
    """The significant distinct cells whose difference is inside the margin, with their range in points."""
    found = family[family["verdict"].isin(["better", "worse"]) & (family["difference"].abs() < family["margin"])]
    if found.empty:
        return "none of them inside the margin"
    return (f"{len(found)} of them inside the margin ({100 * found['difference'].min():+.1f} to "
            f"{100 * found['difference'].max():+.1f} points, at {', '.join(sorted(set(found['level'])))})")


def _counts(table: pd.DataFrame) -> list[str]:
    lines = []
    for (estimator, metric), family in table.groupby(["estimator", "metric"], sort=False):
        distinct = family[family["same_runs_as"] == ""]
        conditions = len(family.groupby(CONDITION))
        said = distinct["verdict"].value_counts()
        better, worse = _conditions(family, "better"), _conditions(family, "worse")
        repeats = len(family) - len(distinct)
        lines.append(
            f"- {estimator} vs {REFERENCE}, {metric}: better in {better[0]} of {conditions} conditions (in both "
            f"clippings in {better[1]}), worse in {worse[0]} (in both in {worse[1]}). Over the {len(distinct)} "
            f"distinct cells ({len(family)} cells, {repeats} clip / no-clip pair(s) with identical runs counted "
            "once): better in "
            f"{said.get('better', 0)}, worse in {said.get('worse', 0)} ({_inside(distinct)}), equivalent in "
            f"{said.get('equivalent', 0)}, both at the ceiling in {said.get(equivalence.AT_CEILING, 0)}, no evidence "
            f"either way in {said.get('no evidence either way', 0)}; Welch's test would call "
            f"{int(((stats.holm_correction(distinct['welch_p']) < ALPHA) & (distinct['difference'] > 0)).sum())} "
            "better.")
    return lines


def _markdown(table: pd.DataFrame, identical: list[str]) -> str:
    shown = table.assign(
        start=(100 * table["start"]).round(1), margin=(100 * table["margin"]).round(1),
        difference=(100 * table["difference"]).round(1),
        ci=[f"[{100 * lo:+.1f}, {100 * hi:+.1f}]" for lo, hi in zip(table["low"], table["high"], strict=True)],
        p=table["p"].map(lambda v: f"{v:.2g}"), holm_p=table["holm_p"].map(lambda v: f"{v:.2g}"),
        holm_tost_p=table["holm_tost_p"].map(lambda v: f"{v:.2g}"),
        same_runs_as=table["same_runs_as"].replace("", "—"))
    columns = ["estimator", "metric", "level", "clipping", "G", "start", "margin", "difference", "ci", "test", "p",
               "holm_p", "holm_tost_p", "same_runs_as", "verdict"]
    header = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(str(row[c]) for c in columns) + " |\n" for _, row in shown.iterrows())
    return ("# The sign map's verdicts: paired by seed, Holm over each estimator's distinct cells\n\n"
            "`python scripts/sign_map_verdicts.py` (from experiments/sign-map/runs/*.csv). Each estimator against "
            f"dr_grpo, n = {int(table['n'].max())} seeds per arm; difference and 95% interval in points. "
            f"{pairing.which_tests(table.to_dict('records'))} The TOST margin of each metric is min(5 points, 25% "
            "of 100% - its start score) (`grpolab.equivalence.margin`); where both arms end within it of 100% the "
            "verdict is 'both at the ceiling, cannot be resolved'.\n\n"
            "The 16 cells are 8 conditions (level, G), each with and without clipping. Result runs identical with "
            f"and without clipping, per level: {'; '.join(identical)}. A clip / no-clip pair of cells with "
            "identical scores in both arms is one test (`same_runs_as`), counted once in the Holm family and the "
            "counts.\n\n" + "\n".join(_counts(table)) + "\n\n" + header + body)


def main() -> None:
    arguments = _arguments()
    table = verdict_table(arguments.runs, unpaired=arguments.unpaired)
    identical = identical_runs(arguments.runs)
    arguments.dest.write_text(_markdown(table, identical))
    print(pairing.which_tests(table.to_dict("records")))
    print("\n".join(_counts(table)))
    print(f"wrote {arguments.dest}")


if __name__ == "__main__":
    main()
