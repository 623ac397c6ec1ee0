"""The remedies map: every remedy for gradient starvation beside sign, reinforce and PKPO at equal completions.

    python scripts/remedies_map.py run --out runs/remedies     # one grpolab compare per (level, G), --workers 1
    python scripts/remedies_map.py table --out runs/remedies   # experiments/remedies/*.csv and table.md
    python scripts/remedies_map.py run --map curriculum     # its curriculum column: runs/remedies-curriculum
    python scripts/remedies_map.py table --map curriculum   # experiments/remedies-curriculum/*.csv and table.md
    python scripts/remedies_map.py run --map new            # the newer remedies at one level: runs/remedies-new
    python scripts/remedies_map.py table --map new          # experiments/remedies-new/*.csv and table.md
    python scripts/remedies_map.py table --runs experiments/remedies/runs.csv   # the tables again from kept rows

The design and the statistics were fixed before the runs in experiments/remedies/README.md. ``run`` drives
``grpolab compare --config experiments/remedies/compare.yaml`` once per (difficulty level, G): the embedded
``reverse`` task at the sign map's levels (``scripts/sign_map.py`` ``LEVELS``), with ``--budget
completions=N``, N = steps x P x G, so that every arm samples the completions that 20 steps of ``dr_grpo``
sample (``dr_grpo+dynamic`` runs fewer steps); ``--budget`` sets another (``trained_tokens=N`` holds the tokens
trained equal instead: ``grpolab.config.budget``). A finished sweep is skipped, so an interrupted ``run`` resumes.
``dr_grpo+curriculum`` is not an arm of that map: ``reverse`` streams its prompts and grpolab refuses the
curriculum there. ``--map curriculum`` is its column, pre-registered in experiments/remedies-curriculum/README.md:
the same levels with a fixed train pool (task option ``train_pool``), arms ``dr_grpo``, ``dr_grpo+curriculum`` and
``sign``, the same budget, lr selection and statistics (a ``Map`` says what differs). ``--map new`` is pre-registered in
experiments/remedies-new/README.md: the reward-variance filter, AVSPO's virtual samples and a sign/dr_grpo mix at
the lowest level, beside ``dr_grpo``, ``sign``, ``grpo`` and ``dr_grpo+mask``.

``table`` reads each sweep's ``runs.csv`` (end pass@1 and greedy accuracy per result run, and the compute each run
spent: ``TRAINED``, columns of ``grpolab compare``'s runs.csv) and ``metrics.parquet`` (completions sampled and steps
run), or with ``--runs`` a ``runs.csv`` it wrote before, and writes

* ``runs.csv``: one row per result run (the inputs of every other table);
* ``cells.csv``: one row per (level, G, arm): the lr and whether it is bracketed, the means over seeds of end
  pass@1, greedy accuracy, completions, steps and ``TRAINED`` (optimizer steps, sequences and tokens trained, tokens
  forwarded and sampled; empty, "not recorded" in table.md, for runs made before grpolab counted them);
* ``tests.csv``: the paired differences (arm - versus, same seed) with Student-t 95% intervals, the paired t p
  raised to the floor 2 / 2^n of what n seeds can carry (``test`` says which: "paired t" or "paired t (floored)")
  and Holm p of those within each family (primary: each remedy vs dr_grpo and vs sign per cell; secondary: sign
  vs dr_grpo, and in the remedies map reinforce and pkpo vs dr_grpo and vs sign), on end pass@1, and the same
  on greedy accuracy (reported, not tested: no Holm);
* ``table.md``: all of it, in Markdown, and the pre-registered verdict per remedy.

The paired test is ``grpolab.stats.paired_within_floor`` (the paired t-test and its interval, its p never below
``sign_flip_floor(n)``, the least p an exact sign-flip test of n pairs can give; docs/report-statistics.md), the rule
``grpolab compare``'s report follows; Holm is ``grpolab.stats.holm_correction``, over the floored p's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from grpolab.stats import holm_correction, paired_within_floor

LEVELS = {  # the sign map's (scripts/sign_map.py)
    "star-len6": {"markers": "*", "lengths": [6, 6]},
    "mixed": {"markers": "+*", "lengths": [3, 6]},
    "star-len4": {"markers": "*", "lengths": [4, 4]},
    "plus": {"markers": "+", "lengths": [3, 6]},
}
BY_START_P = ("star-len6", "star-len4", "mixed", "plus")  # start pass@1 0.05, 0.20, 0.46, 0.83
PREREGISTERED = ("star-len6", "mixed")  # the levels kept by the cut; the other two are families of their own
RESTORED = " (restored levels)"
GROUP_SIZES = (2, 4)
STEPS, PROMPTS = 20, 16
REMEDIES = ("dr_grpo+dynamic", "dr_grpo+mask", "dr_grpo+replay")
REFERENCES = ("dr_grpo", "sign")
ARMS = ("dr_grpo", *REMEDIES, "sign", "reinforce", "pkpo")
EXPERIMENT = Path("experiments/remedies")
TRAINED = ("optimizer_steps", "trained_sequences", "trained_tokens", "forward_tokens", "sampled_tokens")
"""The compute columns of grpolab compare's runs.csv (``grpolab.metric_keys.COMPUTE``) the tables carry."""
NOT_RECORDED = "not recorded"
ALPHA = 0.05


class Map(NamedTuple):  # a NamedTuple, not a dataclass: the tests load this script without registering it
    """One map: its folder (compare.yaml, README.md with the pre-registration, the tables), arms, tested
    comparisons per cell, the levels of its pre-registered families and the task options added to every level."""

    name: str
    folder: Path
    arms: tuple[str, ...]
    remedies: tuple[str, ...]  # primary family: each vs every reference
    secondary: tuple[tuple[str, str], ...]  # (arm, versus)
    preregistered: tuple[str, ...]  # the other levels' tests are families of their own (RESTORED)
    task_options: dict
    levels: tuple[str, ...] = tuple(LEVELS)  # the levels ``run`` and ``table`` cover unless --levels says otherwise


REMEDIES_MAP = Map("remedies", EXPERIMENT, ARMS, REMEDIES,
                   (("sign", "dr_grpo"), *((arm, versus) for arm in ("reinforce", "pkpo") for versus in REFERENCES)),
                   PREREGISTERED, {})
POOL = 64  # the curriculum column's train pool: 4 x P, each prompt drawn about 5 times in 20 steps
CURRICULUM_MAP = Map("curriculum", Path("experiments/remedies-curriculum"), ("dr_grpo", "dr_grpo+curriculum", "sign"),
                     ("dr_grpo+curriculum",), (("sign", "dr_grpo"),), tuple(LEVELS), {"train_pool": POOL})
NEW_ARMS = ("dr_grpo+varfilter", "avspo", "mix-sign-dr_grpo-0.5")
NEW_MAP = Map("new", Path("experiments/remedies-new"), ("dr_grpo", "sign", "grpo", "dr_grpo+mask", *NEW_ARMS), NEW_ARMS,
              (("sign", "dr_grpo"), ("avspo", "grpo"), ("dr_grpo+varfilter", "dr_grpo+mask")), ("star-len6",), {},
              ("star-len6",))
MAPS = {m.name: m for m in (REMEDIES_MAP, CURRICULUM_MAP, NEW_MAP)}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["run", "table"])
    parser.add_argument("--map", choices=list(MAPS), default="remedies",
                        help="the remedies map, its curriculum column on a fixed train pool, or the new remedies")
    parser.add_argument("--out", type=Path, default=None, help="folder of the sweeps (runs/remedies[-curriculum])")
    parser.add_argument("--dest", type=Path, default=None, help="where table writes (the map's experiments folder)")
    parser.add_argument("--levels", default=None, help="comma-separated level names (default: the map's)")
    parser.add_argument("--group-sizes", default=",".join(map(str, GROUP_SIZES)), help="comma-separated G")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--seeds 2' (smoke tests)")
    parser.add_argument("--budget", default=None,
                        help="run: every cell's --budget instead of completions=320*G, e.g. trained_tokens=N to hold "
                             "the tokens trained equal (run each G on its own then, with its own N)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="table: rebuild the tables from this runs.csv (one this script wrote) instead of --out")
    args = parser.parse_args()
    args.map = MAPS[args.map]
    args.levels = args.levels or ",".join(args.map.levels)
    args.out = args.out or Path("runs") / args.map.folder.name
    args.dest = args.dest or args.map.folder
    return args


def _cells(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(level, G) in run order: every level at the first G, then at the next."""
    return [(level, int(g)) for g in args.group_sizes.split(",") for level in args.levels.split(",")]


def budget(group_size: int) -> int:
    """The completions 20 steps of P = 16 prompts sample at G: every arm's budget."""
    return STEPS * PROMPTS * group_size


def run(args: argparse.Namespace) -> None:
    for level, group_size in _cells(args):
        out = args.out / f"{level}-G{group_size}"
        if (out / "runs.csv").is_file():
            print(f"done already: {out}", flush=True)
            continue
        command = [str(Path(sys.executable).with_name("grpolab")), "compare", "--config",
                   str(args.map.folder / "compare.yaml"),
                   "--task-options", json.dumps({**LEVELS[level], **args.map.task_options}),
                   "--group-sizes", str(group_size), "--budget", args.budget or f"completions={budget(group_size)}",
                   "--out", str(out), "--workers", str(args.workers), "--no-report", *args.extra.split()]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=False)


# ---------------------------------------------------------------- statistics


def family_of(base: str, level: str, map_: Map = REMEDIES_MAP) -> str:
    """The Holm family of a test: the pre-registered levels' own, or the restored levels' (README.md)."""
    return base if level in map_.preregistered else base + RESTORED


def comparisons(map_: Map = REMEDIES_MAP) -> list[tuple[str, str, str]]:
    """(family, arm, versus) of the pre-registered tests within one cell: primary, each remedy vs dr_grpo and vs
    sign; secondary, the map's own (the remedies map: sign vs dr_grpo, then reinforce and pkpo vs dr_grpo and vs
    sign)."""
    primary = [("primary", arm, versus) for arm in map_.remedies for versus in REFERENCES]
    return primary + [("secondary", arm, versus) for arm, versus in map_.secondary]


def paired_difference(cell: pd.DataFrame, arm: str, versus: str, metric: str) -> dict[str, float | str]:
    """Mean over seeds of ``metric`` of ``arm`` - that of ``versus`` (the seeds both ran), with its Student-t 95%
    interval (NaN where every difference is the same: no spread to build one from) and the two-sided paired t p,
    raised to ``sign_flip_floor(n)`` where it falls below (``test`` "paired t (floored)"): the rule of
    ``grpolab.stats.paired_within_floor``; ``cell`` has columns estimator, seed and ``metric``."""
    wide = cell.pivot_table(index="seed", columns="estimator", values=metric)
    pairs = wide[[arm, versus]].dropna() if arm in wide and versus in wide else None
    if pairs is None or len(pairs) < 2:
        return {"mean": np.nan, "low": np.nan, "high": np.nan, "test": "", "p": np.nan,
                "n": 0 if pairs is None else len(pairs)}
    a, b = pairs[arm].to_numpy(dtype=float), pairs[versus].to_numpy(dtype=float)
    p, low, high, test = paired_within_floor(a, b)
    return {"mean": float((a - b).mean()), "low": float(low), "high": float(high), "test": test, "p": float(p),
            "n": len(pairs)}


def reading(difference: float, p_holm: float, arm: str, versus: str) -> str:
    """What one test says at Holm p < ALPHA, never more."""
    if not np.isfinite(p_holm) or p_holm >= ALPHA:
        return "no evidence either way"
    return f"{arm} above {versus}" if difference > 0 else f"{versus} above {arm}"


def tests_table(runs: pd.DataFrame, map_: Map = REMEDIES_MAP) -> pd.DataFrame:
    """One row per (metric, cell, comparison): the paired difference, its interval, raw p and, on end pass@1,
    Holm p within its family (over every cell); greedy accuracy is reported, not tested (no Holm)."""
    rows = []
    for metric in ("end_pass_at_1", "end_greedy"):
        for (level, group_size), cell in runs.groupby(["level", "group_size"], sort=False):
            for family, arm, versus in comparisons(map_):
                tested = family_of(family, level, map_) if metric == "end_pass_at_1" else "reported"
                rows.append({"metric": metric, "family": tested,
                             "level": level, "group_size": int(group_size), "arm": arm, "versus": versus,
                             **paired_difference(cell, arm, versus, metric)})
    tests = pd.DataFrame(rows)
    tests["p_holm"] = np.nan
    for family in ("primary", "secondary", "primary" + RESTORED, "secondary" + RESTORED):
        chosen = (tests["family"] == family) & tests["p"].notna()
        if chosen.any():
            tests.loc[chosen, "p_holm"] = holm_correction(tests.loc[chosen, "p"].to_numpy())
    tests["reading"] = [reading(r.mean, r.p_holm, r.arm, r.versus) if r.family != "reported" else ""
                        for r in tests.itertuples()]
    return tests


def verdict(tests: pd.DataFrame, remedy: str, families: tuple[str, ...] = ("primary",)) -> str:
    """The pre-registered verdict on "sign beats filtering" for one remedy, from its tests vs sign in
    ``families`` (each already Holm-corrected within itself)."""
    rows = tests[tests["family"].isin(families) & (tests["arm"] == remedy) & (tests["versus"] == "sign")]
    significant = rows[rows["p_holm"] < ALPHA]
    sign_wins, remedy_wins = int((significant["mean"] < 0).sum()), int((significant["mean"] > 0).sum())
    if sign_wins and remedy_wins:
        return "mixed"
    if sign_wins:
        return "supported"
    if remedy_wins:
        return "contradicted"
    return "untested at this n"


# ---------------------------------------------------------------- reading the runs


REPLACED = "rollout/curriculum_replaced"


def read_sweep(folder: Path, level: str, map_: Map = REMEDIES_MAP) -> pd.DataFrame:
    """The result runs of one sweep, with the lr, bracketing, end scores, completions sampled and steps run; in
    the curriculum column also the curriculum's replacements per step (mean over the run's steps)."""
    runs = pd.read_csv(folder / "runs.csv")
    runs = runs[runs["role"] == "result"]
    curriculum = map_ is CURRICULUM_MAP
    columns = ["run_id", "step", "rollout/completions_generated", *([REPLACED] if curriculum else [])]
    metrics = pd.read_parquet(folder / "metrics.parquet", columns=columns)
    spent = metrics.groupby("run_id").agg(steps_run=("step", "max"),
                                          completions=("rollout/completions_generated", "max"),
                                          **({"replaced_per_step": (REPLACED, "mean")} if curriculum else {}))
    runs = with_trained(runs.join(spent, on="run_id"))
    runs.insert(0, "level", level)
    return runs[["level", "group_size", "estimator", "seed", "lr", "bracketed", "status", "steps_run", "completions",
                 *(["replaced_per_step"] if curriculum else []), "end_pass_at_1", "end_greedy", *TRAINED]]


def with_trained(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every ``TRAINED`` column, empty (NaN) where its runs did not record it: never a made-up 0."""
    return runs.assign(**{name: runs[name] if name in runs else np.nan for name in TRAINED})


def read_runs(args: argparse.Namespace) -> pd.DataFrame:
    frames = [read_sweep(args.out / f"{level}-G{g}", level, args.map) for level, g in _cells(args)
              if (args.out / f"{level}-G{g}" / "runs.csv").is_file()]
    if not frames:
        raise SystemExit(f"no finished sweep under {args.out}")
    return pd.concat(frames, ignore_index=True)


def cells_table(runs: pd.DataFrame, map_: Map = REMEDIES_MAP) -> pd.DataFrame:
    grouped = runs.groupby(["level", "group_size", "estimator"], sort=False)
    cells = grouped.agg(lr=("lr", "first"), bracketed=("bracketed", "all"), seeds=("seed", "count"),
                        end_pass_at_1=("end_pass_at_1", "mean"), end_pass_at_1_sd=("end_pass_at_1", "std"),
                        end_greedy=("end_greedy", "mean"), completions=("completions", "mean"),
                        completions_max=("completions", "max"), steps_run=("steps_run", "mean"),
                        **{name: (name, _mean_if_recorded) for name in TRAINED},
                        **({"replaced_per_step": ("replaced_per_step", "mean")} if "replaced_per_step" in runs
                           else {})).reset_index()
    order = {**{arm: i for i, arm in enumerate(map_.arms)}, **{level: i for i, level in enumerate(BY_START_P)}}
    return cells.sort_values(["group_size", "level", "estimator"], key=lambda c: c if c.name == "group_size" else
                             c.map(order), kind="stable").reset_index(drop=True)


def _mean_if_recorded(values: pd.Series) -> float:
    """The mean over seeds, or NaN when some seed did not record the count (a mean of the others would pass for
    the arm's)."""
    return float("nan") if values.isna().any() else float(values.mean())


# ---------------------------------------------------------------- writing


def _number(value: float, digits: int) -> str:
    """A table cell: blank for NaN, 0 for float noise below 1e-12, small p values in g format."""
    if pd.isna(value):
        return ""
    if abs(value) < 1e-12:
        return "0"
    if abs(value) < 1e-3:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    shown = frame.copy()
    for column in shown.columns:
        if column in TRAINED:  # counts: in full, and named as missing rather than left blank
            shown[column] = shown[column].map(lambda v: NOT_RECORDED if pd.isna(v) else f"{v:.0f}")
        elif shown[column].dtype.kind == "f":
            if column in ("p", "p_holm"):  # 3 significant digits, so that 0.0503 never shows as 0.05
                shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.3g}")
            else:
                shown[column] = shown[column].map(lambda v: _number(v, digits))
    header = "| " + " | ".join(shown.columns) + " |\n|" + "---|" * len(shown.columns) + "\n"
    return header + "".join("| " + " | ".join(str(v) for v in row) + " |\n" for row in shown.itertuples(index=False))


def table(args: argparse.Namespace) -> None:
    runs, map_ = (with_trained(pd.read_csv(args.runs)) if args.runs else read_runs(args)), args.map
    cells, tests = cells_table(runs, map_), tests_table(runs, map_)
    args.dest.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.dest / "runs.csv", index=False)
    cells.to_csv(args.dest / "cells.csv", index=False)
    tests.to_csv(args.dest / "tests.csv", index=False)
    shown = ["level", "group_size", "arm", "versus", "mean", "low", "high", "test", "p", "p_holm", "reading"]
    pass_at_1 = tests[tests["metric"] == "end_pass_at_1"]
    flags = f"--out {args.out}" if map_ is REMEDIES_MAP else f"--map {map_.name} --out {args.out}"
    map_flag = "" if map_ is REMEDIES_MAP else f" --map {map_.name}"
    rebuilt = f" (rebuilt by `python scripts/remedies_map.py table{map_flag} --runs {args.runs}`)" if args.runs else ""
    title = {"remedies": "The remedies map", "curriculum": "The remedies map's curriculum column",
             "new": "The newer remedies at the remedies map's lowest level"}[map_.name]
    lines = [f"# {title}: tables", "",
             f"Written by `python scripts/remedies_map.py table {flags}` from the sweeps of",
             f"`python scripts/remedies_map.py run {flags}`{rebuilt}; design and statistics: README.md.",
             "Differences are in pass@1 (a fraction: 0.1 is 10 points; arm - versus, paired by seed) with",
             "Student-t 95% intervals (blank where every difference is the same); p is the paired t p, raised to",
             "2 / 2^n, the least p an exact sign-flip test of n seeds can give, where it falls below (test \"paired t",
             "(floored)\"); p_holm is Holm over those p's within the family the section names.", "",
             "## Per arm: lr, end scores (means over seeds) and the compute spent", "",
             "Compute: completions sampled and steps run (the budget held the completions equal), and the means over "
             "seeds of the optimizer steps, sequences and tokens trained (rows that reached the backward pass), "
             f"tokens forwarded and sampled; \"{NOT_RECORDED}\" where the runs predate these counters.", "",
             _markdown(cells)]
    titles = {"primary": "each remedy vs dr_grpo and vs sign",
              "secondary": "sign, reinforce and pkpo" if map_ is REMEDIES_MAP else
              ", ".join(f"{arm} vs {versus}" for arm, versus in map_.secondary)}
    for family in ("primary", "secondary", "primary" + RESTORED, "secondary" + RESTORED):
        rows = pass_at_1[pass_at_1["family"] == family]
        if len(rows):
            title = titles[family.removesuffix(RESTORED)]
            lines += [f"## {family.capitalize()}: {title}, end pass@1 (Holm over its {len(rows)} tests)", "",
                      _markdown(rows[shown])]
    lines += ["## Reported, not tested: the same differences on greedy accuracy", "",
              _markdown(tests[tests["metric"] == "end_greedy"][shown[:-4]]),
              "## Verdict on \"sign beats filtering\" per remedy (the rule of README.md)", ""]
    for label, families in (("pre-registered levels", ("primary",)), ("restored levels", ("primary" + RESTORED,)),
                            ("all four, as a reading of both", ("primary", "primary" + RESTORED))):
        if all(pass_at_1["family"].eq(family).any() for family in families):
            lines += [f"- `{remedy}`, {label}: {verdict(tests, remedy, families)}" for remedy in map_.remedies]
    (args.dest / "table.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.dest}/runs.csv, cells.csv, tests.csv, table.md")


def main() -> None:
    args = _arguments()
    {"run": run, "table": table}[args.action](args)


if __name__ == "__main__":
    main()
