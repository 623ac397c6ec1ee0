"""The remedies map's primary cells again, with every arm held to the same number of trained completion tokens.

    python scripts/remedies_trained.py dry-run   # sign at equal completions, 20 steps: N per cell (budgets.csv)
    python scripts/remedies_trained.py run       # every arm under --budget trained_tokens=N, --steps 500 the bound
    python scripts/remedies_trained.py table     # experiments/remedies-trained/runs.csv, tests.csv, table.md
    python scripts/remedies_trained.py table --runs experiments/remedies-trained/runs.csv   # again from kept rows

Pre-registered in experiments/remedies-trained/README.md. The remedies map (``scripts/remedies_map.py``) held the
completions sampled equal; grpolab's update skips zero-advantage rows, so there ``sign`` backpropagated several
times the tokens of ``dr_grpo``. Here each run of a cell stops after the step at which it has backpropagated N
completion tokens (``--budget trained_tokens=N``, ``grpolab.config.budget``), N being the least, over seeds 0-9, of
what ``sign`` trained in the map's 20 steps (measured by ``dry-run``), each arm at the lr the map selected for it
(experiments/remedies/cells.csv, reused, not reselected). ``run`` drives one ``grpolab compare`` per (level, G, lr)
with that lr's arms, ``--workers 1 --threads 1``; a finished sweep is skipped, so an interrupted ``run`` resumes.

``table`` writes one row per run (``runs.csv``: run id, arm, seed, level, G, lr, steps run, the compute counters,
whether the run reached N, end pass@1 and greedy accuracy), the paired tests of the map's primary family
(``tests.csv``: each remedy vs dr_grpo and vs sign per cell, paired by seed with ``grpolab.pairing.compare_arms``,
the paired t p raised to the floor 2 / 2^n of n seeds, Holm over the family with ``grpolab.stats.holm_correction``;
greedy accuracy reported, not tested) with each comparison's verdict against the map's reading of it
(``VERDICTS``), and ``table.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.pairing import compare_arms
from grpolab.stats import holm_correction

sys.path.insert(0, str(Path(__file__).resolve().parent))
from remedies_map import LEVELS, REFERENCES, REMEDIES, _markdown, budget, reading, verdict  # the map's

CELLS = (("star-len6", 2), ("star-len6", 4), ("mixed", 2), ("mixed", 4))  # the map's primary cells, running order
ARMS = ("dr_grpo", *REMEDIES, "sign")  # the arms of the map's primary family
SEEDS = 10
STEPS_BOUND = 500  # README.md, "Timing and the cut": 200 was too few for dr_grpo at G = 2
FOLDER = Path("experiments/remedies-trained")
MAP_FOLDER = Path("experiments/remedies")
COMPUTE = ("optimizer_steps", "trained_sequences", "trained_tokens", "forward_tokens", "sampled_tokens")
VERDICTS = ("holds", "reverses", "becomes no evidence either way", "still no evidence either way", "newly resolved")
"""The verdict on one primary comparison, its reading here against the map's (README.md, "Verdict rule")."""
NO_EVIDENCE = "no evidence either way"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["dry-run", "run", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/remedies-trained"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=FOLDER, help="where budgets.csv and the tables are written")
    parser.add_argument(
        "--cells",
        default=",".join(f"{level}-G{g}" for level, g in CELLS),
        help="comma-separated LEVEL-G{2,4} cells, in running order (default: all four)",
    )
    parser.add_argument("--map-folder", type=Path, default=MAP_FOLDER, help="the map's cells.csv and tests.csv")
    parser.add_argument("--runs", type=Path, default=None, help="table: rebuild from this runs.csv instead of --out")
    parser.add_argument("--extra", default="", help="more compare flags (smoke tests), e.g. '--eval-limit 8'")
    return parser.parse_args()


def parse_cells(text: str) -> list[tuple[str, int]]:
    """'star-len6-G2,mixed-G4' -> [('star-len6', 2), ('mixed', 4)]; an unknown cell is refused in one line."""
    cells = []
    for name in text.split(","):
        level, _, g = name.rpartition("-G")
        if level not in LEVELS or g not in ("2", "4"):
            raise SystemExit(f"unknown cell {name!r}: use LEVEL-G2 or LEVEL-G4 with LEVEL one of {', '.join(LEVELS)}")
        cells.append((level, int(g)))
    return cells


def map_lrs(map_folder: Path) -> dict[tuple[str, int, str], float]:
    """(level, G, arm) -> the lr the map selected (its cells.csv), for the arms and cells run here."""
    cells = pd.read_csv(map_folder / "cells.csv")
    return {
        (r.level, int(r.group_size), r.estimator): float(r.lr)
        for r in cells.itertuples()
        if (r.level, int(r.group_size)) in CELLS and r.estimator in ARMS
    }


def _compare(
    out: Path, level: str, group_size: int, arms: list[str], lr: float, steps: int, spend: str, extra: str
) -> list[str]:
    """The grpolab compare command of one sweep: ``arms`` at one fixed lr (no selection), seeds 0-9."""
    return [
        str(Path(sys.executable).with_name("grpolab")),
        "compare",
        "--estimators",
        ",".join(arms),
        "--lrs",
        "",
        "--lr",
        str(lr),
        "--seeds",
        str(SEEDS),
        "--group-sizes",
        str(group_size),
        "--steps",
        str(steps),
        "--prompts-per-step",
        "16",
        "--max-grad-norm",
        "1.0",
        "--checkpoint-every",
        "0",
        "--task-options",
        json.dumps(LEVELS[level]),
        "--budget",
        spend,
        "--out",
        str(out),
        "--workers",
        "1",
        "--threads",
        "1",
        "--no-report",
        "--no-progress",
        *extra.split(),
    ]


def _launch(command: list[str], out: Path) -> None:
    if (out / "runs.csv").is_file():
        print(f"done already: {out}", flush=True)
        return
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=False)


def dry_run(args: argparse.Namespace) -> None:
    """sign at the map's lr and budget (20 steps): what it trains is N (``budgets``)."""
    lrs = map_lrs(args.map_folder)
    for level, g in parse_cells(args.cells):
        out = args.out / "dry-run" / f"{level}-G{g}"
        _launch(
            _compare(out, level, g, ["sign"], lrs[level, g, "sign"], 20, f"completions={budget(g)}", args.extra), out
        )
    frame = pd.concat(
        [
            read_sweep(args.out / "dry-run" / f"{level}-G{g}", level)
            for level, g in parse_cells(args.cells)
            if (args.out / "dry-run" / f"{level}-G{g}" / "runs.csv").is_file()
        ]
    )
    args.dest.mkdir(parents=True, exist_ok=True)
    budgets(frame).to_csv(args.dest / "budgets.csv", index=False)
    print(f"wrote {args.dest}/budgets.csv")


def budgets(dry: pd.DataFrame) -> pd.DataFrame:
    """Per cell, from sign's dry-run rows: N = the least trained tokens over seeds (README.md), with the mean and
    the most beside it, and the steps sign ran (20 on every seed where its budget held)."""
    grouped = dry.groupby(["level", "group_size"], sort=False)
    return (
        grouped.agg(
            trained_tokens_budget=("trained_tokens", "min"),
            sign_trained_tokens_mean=("trained_tokens", "mean"),
            sign_trained_tokens_max=("trained_tokens", "max"),
            sign_steps_run=("steps_run", "max"),
            seeds=("seed", "count"),
        )
        .reset_index()
        .astype({"trained_tokens_budget": int})
    )


def run(args: argparse.Namespace) -> None:
    lrs, table_of_n = map_lrs(args.map_folder), pd.read_csv(args.dest / "budgets.csv")
    for level, g in parse_cells(args.cells):
        row = table_of_n[(table_of_n["level"] == level) & (table_of_n["group_size"] == g)]
        if row.empty:
            raise SystemExit(f"no N for {level}-G{g} in {args.dest}/budgets.csv: run dry-run for it first")
        spend = f"trained_tokens={int(row['trained_tokens_budget'].iloc[0])}"
        for lr in sorted({lrs[level, g, arm] for arm in ARMS}):
            arms = [arm for arm in ARMS if lrs[level, g, arm] == lr]
            out = args.out / f"{level}-G{g}-lr{lr:g}"
            _launch(_compare(out, level, g, arms, lr, STEPS_BOUND, spend, args.extra), out)


# ---------------------------------------------------------------- reading the runs


def read_sweep(folder: Path, level: str) -> pd.DataFrame:
    """One row per result run of one sweep: its id, arm, seed, level, G, lr, steps run, the compute counters,
    completions sampled, end pass@1 and greedy accuracy."""
    runs = pd.read_csv(folder / "runs.csv")
    runs = runs[runs["role"] == "result"]
    metrics = pd.read_parquet(folder / "metrics.parquet", columns=["run_id", "step", "rollout/completions_generated"])
    spent = metrics.groupby("run_id").agg(
        steps_run=("step", "max"), sampled_completions=("rollout/completions_generated", "max")
    )
    runs = runs.join(spent, on="run_id").rename(columns={"estimator": "arm"})
    runs.insert(0, "level", level)
    return runs[
        [
            "run_id",
            "arm",
            "seed",
            "level",
            "group_size",
            "lr",
            "status",
            "steps_run",
            *COMPUTE,
            "sampled_completions",
            "end_pass_at_1",
            "end_greedy",
        ]
    ]


def read_runs(args: argparse.Namespace) -> pd.DataFrame:
    """Every finished sweep's rows, with ``reached_budget`` (trained tokens >= the cell's N) and N itself."""
    table_of_n = pd.read_csv(args.dest / "budgets.csv")
    frames = [
        read_sweep(folder, level)
        for level, g in parse_cells(args.cells)
        for folder in sorted(args.out.glob(f"{level}-G{g}-lr*"))
        if (folder / "runs.csv").is_file()
    ]
    if not frames:
        raise SystemExit(f"no finished sweep under {args.out}: run `python scripts/remedies_trained.py run` first")
    runs = pd.concat(frames, ignore_index=True).merge(
        table_of_n[["level", "group_size", "trained_tokens_budget"]], on=["level", "group_size"]
    )
    runs["reached_budget"] = runs["trained_tokens"] >= runs["trained_tokens_budget"]
    return runs


# ---------------------------------------------------------------- statistics


def paired(cell: pd.DataFrame, arm: str, versus: str, metric: str) -> dict:
    """``arm`` - ``versus`` on ``metric`` within one cell, paired by seed (``grpolab.pairing.compare_arms``): the mean
    difference, its 95% interval, the test and its p (the paired t p raised to 2 / 2^n where it falls below)."""
    a, b = (cell[cell["arm"] == name].set_index("seed")[metric] for name in (arm, versus))
    result = compare_arms(a, b)
    return {
        "mean": result["mean_difference"],
        "low": result["difference_low"],
        "high": result["difference_high"],
        "test": result["test"],
        "p": result["p"],
        "n": min(result["n_a"], result["n_b"]),
    }


def tests_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The map's primary comparisons per cell on end pass@1 (Holm over all of them) and on greedy accuracy
    (reported, no Holm), with ``short_seeds``: the seeds of either arm that did not reach the budget."""
    rows = []
    for metric in ("end_pass_at_1", "end_greedy"):
        for (level, g), cell in runs.groupby(["level", "group_size"], sort=False):
            short = cell[~cell["reached_budget"]].groupby("arm")["seed"].count()
            for arm in REMEDIES:
                for versus in REFERENCES:
                    rows.append(
                        {
                            "metric": metric,
                            "family": "primary" if metric == "end_pass_at_1" else "reported",
                            "level": level,
                            "group_size": int(g),
                            "arm": arm,
                            "versus": versus,
                            **paired(cell, arm, versus, metric),
                            "short_seeds": int(short.get(arm, 0) + short.get(versus, 0)),
                        }
                    )
    tests = pd.DataFrame(rows)
    primary = tests["family"] == "primary"
    tests["p_holm"] = np.nan
    tests.loc[primary, "p_holm"] = holm_correction(tests.loc[primary, "p"].to_numpy())
    tests["reading"] = [
        reading(r.mean, r.p_holm, r.arm, r.versus) if r.family == "primary" else "" for r in tests.itertuples()
    ]
    return tests


def survival(map_reading: str, new_reading: str) -> str:
    """One of ``VERDICTS``: the reading at equal trained tokens against the map's reading of the same comparison."""
    if map_reading == NO_EVIDENCE:
        return "still no evidence either way" if new_reading == NO_EVIDENCE else "newly resolved"
    if new_reading == NO_EVIDENCE:
        return "becomes no evidence either way"
    return "holds" if new_reading == map_reading else "reverses"


def verdicts_table(tests: pd.DataFrame, map_tests: pd.DataFrame) -> pd.DataFrame:
    """Per primary comparison: the map's reading (its tests.csv, family primary), this one and the verdict, marked
    where a seed of either arm did not reach the budget."""
    keys = ["level", "group_size", "arm", "versus"]
    before = map_tests[map_tests["family"] == "primary"][[*keys, "mean", "p_holm", "reading"]]
    now = tests[tests["family"] == "primary"][[*keys, "mean", "low", "high", "p_holm", "reading", "short_seeds"]]
    table = now.merge(before, on=keys, suffixes=("", "_map"), validate="one_to_one")
    table["verdict"] = [survival(r.reading_map, r.reading) for r in table.itertuples()]
    table["budget"] = [
        "reached" if r.short_seeds == 0 else f"budget not reached on {r.short_seeds} seeds" for r in table.itertuples()
    ]
    return table[
        [
            *keys,
            "mean_map",
            "p_holm_map",
            "reading_map",
            "mean",
            "low",
            "high",
            "p_holm",
            "reading",
            "verdict",
            "budget",
        ]
    ]


def arms_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (level, G, arm): lr, seeds, seeds that reached N, means over seeds of the steps, compute and scores."""
    grouped = runs.groupby(["level", "group_size", "arm"], sort=False)
    cells = grouped.agg(
        lr=("lr", "first"),
        seeds=("seed", "count"),
        reached_budget=("reached_budget", "sum"),
        budget=("trained_tokens_budget", "first"),
        trained_tokens=("trained_tokens", "mean"),
        trained_tokens_max=("trained_tokens", "max"),
        steps_run=("steps_run", "mean"),
        steps_run_max=("steps_run", "max"),
        sampled_completions=("sampled_completions", "mean"),
        sampled_tokens=("sampled_tokens", "mean"),
        end_pass_at_1=("end_pass_at_1", "mean"),
        end_greedy=("end_greedy", "mean"),
    ).reset_index()
    place = [(CELLS.index((r.level, r.group_size)), ARMS.index(r.arm)) for r in cells.itertuples()]
    return cells.iloc[sorted(range(len(cells)), key=place.__getitem__)].reset_index(drop=True)  # CELLS, then ARMS


# ---------------------------------------------------------------- writing


def remedy_verdicts(tests: pd.DataFrame, map_tests: pd.DataFrame) -> list[str]:
    """The map's rule on "sign beats filtering" per remedy, here and in the map's primary family, one line each."""
    cells = set(zip(tests["level"], tests["group_size"], strict=True))
    same_cells = map_tests[[(r.level, r.group_size) in cells for r in map_tests.itertuples()]]
    return [
        f"- `{remedy}`: {verdict(tests, remedy)} at equal trained tokens (the map, at equal completions: "
        f"{verdict(same_cells, remedy)})"
        for remedy in REMEDIES
    ]


def build_tables(runs: pd.DataFrame, map_tests: pd.DataFrame, source: str) -> tuple[pd.DataFrame, str]:
    """The per-run rows and the map's tests.csv -> (tests.csv's rows, table.md's text); ``source`` names where the
    rows came from (``--out runs/...`` or ``--runs ...``)."""
    tests = tests_table(runs)
    verdicts = verdicts_table(tests, map_tests)
    counts = verdicts["verdict"].value_counts()
    cells = ", ".join(
        f"`{level}` G = {g}" for level, g in dict.fromkeys(zip(runs["level"], runs["group_size"], strict=True))
    )
    greedy = tests[tests["family"] == "reported"][["level", "group_size", "arm", "versus", "mean", "low", "high"]]
    lines = [
        "# The remedies map's primary cells at equal trained tokens: tables",
        "",
        f"Written by `python scripts/remedies_trained.py table {source}`; design, statistics and verdict rule:",
        f"README.md. Cells: {cells}. Differences are in pass@1 (a fraction; arm - versus, paired by seed) with",
        'Student-t 95% intervals; p is the paired t p, raised to 2 / 2^n where it falls below (test "paired t',
        f'(floored)"); p_holm is Holm over the {int((tests["family"] == "primary").sum())} primary tests here.',
        "",
        "## Per arm: lr (the map's), runs that reached the budget N, steps, compute and end scores (means over seeds)",
        "",
        _markdown(arms_table(runs)),
        "## Primary: each remedy vs dr_grpo and vs sign, end pass@1, against the map's reading",
        "",
        _markdown(verdicts),
        "Verdicts: " + ", ".join(f"{name} {int(counts.get(name, 0))}" for name in VERDICTS) + ".",
        "",
        "## Reported, not tested: the same differences on greedy accuracy",
        "",
        _markdown(greedy),
        '## "sign beats filtering" per remedy (the map\'s rule), over these cells',
        "",
        *remedy_verdicts(tests, map_tests),
    ]
    return tests, "\n".join(lines) + "\n"


def table(args: argparse.Namespace) -> None:
    runs = pd.read_csv(args.runs) if args.runs else read_runs(args)
    source = f"--runs {args.runs}" if args.runs else f"--out {args.out}"
    tests, text = build_tables(runs, pd.read_csv(args.map_folder / "tests.csv"), source)
    args.dest.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.dest / "runs.csv", index=False)
    tests.to_csv(args.dest / "tests.csv", index=False)
    (args.dest / "table.md").write_text(text)
    print(f"wrote {args.dest}/runs.csv, tests.csv, table.md")


def main() -> None:
    args = _arguments()
    {"dry-run": dry_run, "run": run, "table": table}[args.action](args)


if __name__ == "__main__":
    main()
