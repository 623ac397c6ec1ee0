"""The batch-size test of the variance account: does the sign - dr_grpo gap shrink as the prompts per step grow?

    python scripts/batch_size.py select --out runs/batch-size   # lr selection at P = 16 (select.yaml)
    python scripts/batch_size.py run --out runs/batch-size      # the grid at the lrs chosen at P = 16 (compare.yaml)
    python scripts/batch_size.py check --out runs/batch-size    # the lr check at P = 256 (check.yaml)
    python scripts/batch_size.py table --out runs/batch-size    # experiments/batch-size/*.csv and table.md

The design and the statistics were fixed before the runs in experiments/batch-size/README.md. ``select``,
``run`` and ``check`` drive ``grpolab compare`` once per start level (the embedded ``reverse`` task's difficulty
levels of docs/when-sign-helps.md); ``run`` reads each estimator's lr chosen at P = 16 from the selection's ``runs.csv``
and runs estimators that share an lr in one ``compare`` (``--lr``, no selection). A finished sweep is skipped.

``table`` reads each grid's ``runs.csv`` (end pass@1 and greedy accuracy per run) and ``metrics.parquet``
(``loss/clipped`` and ``grad/half_batch_cosine`` per step) and writes

* ``runs.csv``: one row per run (the inputs of every other table);
* ``cells.csv``: one row per (level, P, estimator): means over seeds, the lr, the clipped share, the cosine
  (means over the steps where it is defined) and the share of steps where it is not (a half without gradient);
* ``gaps.csv``: the paired gap sign - dr_grpo (and reinforce - dr_grpo) per (level, P), with t intervals;
* ``interaction.csv``: the primary analysis, the per-seed slope of the gap on log2 P, on end pass@1 (primary),
  greedy accuracy and the step-5 evaluation (reported only), and on the log-error ratio
  log(1 - pass@1 of sign) - log(1 - pass@1 of dr_grpo) (added after the runs, exploratory: at the ceiling a gap
  in points must shrink whatever its cause, a ratio of remaining errors need not);
* ``snr.csv``: the measured SNR^2 ratio over dr_grpo against the gain, and Spearman's rho with its exact
  permutation p (the secondary question);
* ``lr.csv``: the lr each (level, estimator, P) chose in the selection (P = 16) and the check (P = 256);
* ``table.md``: all of it, in Markdown.

The interaction and the paired tests are here, not in ``grpolab.stats``: a slope per seed, then a one-sample t
over seeds (Student t, df = seeds - 1), and Holm over each family (``grpolab.stats.holm_correction``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from grpolab.diagnostics.variance import snr_ratio_fixed_vs_centred
from grpolab.stats import holm_correction, t_interval

LEVELS = {
    "star-len6": {"markers": "*", "lengths": [6, 6]},
    "mixed": {"markers": "+*", "lengths": [3, 6]},
}
ESTIMATORS = ("sign", "dr_grpo", "reinforce")
REFERENCE = "dr_grpo"
BASELINES = {"sign": 0.5, "reinforce": 0.0}  # A = r - b
PROMPTS = (16, 64, 256)
SELECT_AT = 16
EARLY_STEPS = 5  # the SNR secondary: the mean cosine over steps 1..EARLY_STEPS
EXPERIMENT = Path("experiments/batch-size")
RUN_COLUMNS = ("level", "prompts", "estimator", "seed", "lr", "start_pass_at_1", "start_p_var", "end_pass_at_1",
               "end_greedy", "step5_pass_at_1", "step5_greedy", "clipped", "cosine_early", "cosine_all",
               "cosine_undefined")
ERROR_FLOOR = 1 / 3200  # half of one sample of 8 x 200: the floor of 1 - pass@1 in the log-error ratio


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["select", "run", "check", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/batch-size"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=EXPERIMENT, help="where table writes")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated level names")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--seeds 2' (smoke tests)")
    return parser.parse_args()


def _levels(args: argparse.Namespace) -> list[str]:
    return args.levels.split(",")


def _compare(args: argparse.Namespace, config: str, level: str, out: Path, *more: str) -> None:
    command = [str(Path(sys.executable).with_name("grpolab")), "compare", "--config", str(EXPERIMENT / config),
               "--task-options", json.dumps(LEVELS[level]), "--out", str(out), "--workers", str(args.workers),
               "--no-report", *more, *args.extra.split()]
    if (out / "runs.csv").is_file():
        print(f"done already: {out}", flush=True)
        return
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=False)


def select(args: argparse.Namespace) -> None:
    for level in _levels(args):
        _compare(args, "select.yaml", level, args.out / f"select-{level}")


def check(args: argparse.Namespace) -> None:
    for level in _levels(args):
        _compare(args, "check.yaml", level, args.out / f"check-{level}")


def _chosen_lrs(args: argparse.Namespace, level: str, prompts: int) -> dict[str, float]:
    """estimator -> the lr its selection chose at ``prompts`` prompts per step (from the result runs' lr)."""
    runs = pd.read_csv(args.out / f"select-{level}" / "runs.csv")
    results = runs[(runs["role"] == "result") & (runs["variant"] == f"prompts_per_step={prompts}")]
    return {str(e): float(arm["lr"].iloc[0]) for e, arm in results.groupby("estimator")}


def run(args: argparse.Namespace) -> None:
    for level in _levels(args):
        lrs = _chosen_lrs(args, level, SELECT_AT)
        for lr, names in itertools.groupby(sorted(lrs, key=lambda e: lrs[e]), key=lambda e: lrs[e]):
            names = list(names)
            _compare(args, "compare.yaml", level, args.out / f"grid-{level}-lr{lr:g}", "--estimators", ",".join(names),
                     "--lr", repr(lr))


# ---------------------------------------------------------------- statistics


def t_summary(values: np.ndarray) -> dict[str, float]:
    """Mean of ``values`` [n] with its Student-t 95% interval (``grpolab.stats.t_interval``) and the two-sided
    one-sample t p for mean = 0 (no spread: 1 if the mean is 0, else 0)."""
    values = np.asarray(values, dtype=float)
    mean, low, high = (float(v) for v in t_interval(values))
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    if len(values) < 2:
        p = math.nan
    elif se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * scipy_stats.t.sf(abs(mean) / se, len(values) - 1))
    return {"mean": mean, "low": low, "high": high, "p": p, "n": len(values)}


def seed_slopes(gaps: pd.DataFrame) -> np.ndarray:
    """Per seed, the least-squares slope of the gap on log2 P; ``gaps`` has columns seed, prompts, gap."""
    slopes = []
    for _, arm in gaps.groupby("seed"):
        x = np.log2(arm["prompts"].to_numpy(dtype=float))
        y = arm["gap"].to_numpy(dtype=float)
        if len(x) >= 2:
            slopes.append(float(np.polyfit(x, y, 1)[0]))
    return np.asarray(slopes)


def spearman_exact(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spearman's rho and its two-sided permutation p (exact up to 9 points, else 100,000 random permutations)."""
    rx, ry = scipy_stats.rankdata(x), scipy_stats.rankdata(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    if len(x) <= 9:
        null = np.array([np.corrcoef(rx, np.array(perm))[0, 1] for perm in itertools.permutations(ry)])
    else:
        generator = np.random.default_rng(0)
        null = np.array([np.corrcoef(rx, generator.permutation(ry))[0, 1] for _ in range(100_000)])
    return rho, float(np.mean(np.abs(null) >= abs(rho) - 1e-12))


# ---------------------------------------------------------------- reading the runs


def _prompts(variant: str) -> int:
    return int(str(variant).split("=")[1])


def start_moments(successes: list[int], samples: int) -> tuple[float, float]:
    """(mean p, E[p (1 - p)]) over prompts from the start evaluation's per-prompt success counts k of n samples,
    each unbiased: k / n and k (n - k) / (n (n - 1))."""
    k, n = np.asarray(successes, dtype=float), float(samples)
    return float(np.mean(k / n)), float(np.mean(k * (n - k) / (n * (n - 1))))


def predicted_ratio(mean_p: float, spread: float, group_size: int, baseline: float) -> float:
    """The variance view's SNR^2 of A = r - b over dr_grpo's for a batch of prompts with success rates p_i:
    E[p(1 - p)] / ((1 - 1/G) E[p (1 - b)^2 + (1 - p) b^2]); 4 E[p(1 - p)] / (1 - 1/G) for sign (b = 1/2)."""
    return spread / ((1 - 1 / group_size) * (mean_p * (1 - baseline) ** 2 + (1 - mean_p) * baseline ** 2))


def _start_counts(run_dir: Path) -> tuple[list[int], int]:
    for line in (run_dir / "eval.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("step") == 0:
            return list(row["successes"]), int(row["n"])
    raise SystemExit(f"{run_dir}: no start evaluation in eval.jsonl")


def _step_scores(run_dir: Path, step: int) -> tuple[float, float]:
    """(pass@1, greedy accuracy) of a run's evaluation at ``step`` (NaN if absent)."""
    path = run_dir / "eval.jsonl"
    if not path.is_file():
        return math.nan, math.nan
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("step") == step:
            return float(row["pass_at_k"]["1"]), float(row["greedy_accuracy"])
    return math.nan, math.nan


def read_runs(args: argparse.Namespace) -> pd.DataFrame:
    """One row per result run of every grid: level, estimator, seed, prompts, lr, scores, clipped share, cosine."""
    frames = []
    for level in _levels(args):
        for folder in sorted(args.out.glob(f"grid-{level}-lr*")):
            runs = pd.read_csv(folder / "runs.csv")
            runs = runs[runs["role"] == "result"].copy()
            steps = pd.read_parquet(folder / "metrics.parquet")
            per_run = steps.groupby("run_id").agg(
                clipped=("loss/clipped", "mean"),
                cosine_all=("grad/half_batch_cosine", "mean"),
                cosine_undefined=("grad/half_batch_cosine", lambda c: float(c.isna().mean())))
            early = steps[steps["step"] <= EARLY_STEPS].groupby("run_id")["grad/half_batch_cosine"].mean()
            runs = runs.join(per_run, on="run_id").join(early.rename("cosine_early"), on="run_id")
            scores = [_step_scores(folder / "runs" / run_id, 5) for run_id in runs["run_id"]]
            runs["step5_pass_at_1"] = [s[0] for s in scores]
            runs["step5_greedy"] = [s[1] for s in scores]
            runs["start_mean_p"], runs["start_p_var"] = zip(*(start_moments(*_start_counts(folder / "runs" / r))
                                                              for r in runs["run_id"]), strict=True)
            runs["end_log_error"] = np.log(np.maximum(1 - runs["end_pass_at_1"], ERROR_FLOOR))
            runs["level"] = level
            runs["prompts"] = runs["variant"].map(_prompts)
            frames.append(runs)
    if not frames:
        raise SystemExit(f"no finished grid under {args.out}; run: python scripts/batch_size.py run --out {args.out}")
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- the tables


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (level, prompts, estimator), arm in runs.groupby(["level", "prompts", "estimator"]):
        rows.append({"level": level, "prompts": int(prompts), "estimator": estimator, "n": len(arm),
                     "lr": float(arm["lr"].iloc[0]), "start_pass_at_1": arm["start_pass_at_1"].mean(),
                     "start_p_var": arm["start_p_var"].mean(),
                     "end_pass_at_1": arm["end_pass_at_1"].mean(), "end_pass_at_1_sd": arm["end_pass_at_1"].std(),
                     "end_greedy": arm["end_greedy"].mean(), "step5_pass_at_1": arm["step5_pass_at_1"].mean(),
                     "clipped_share": arm["clipped"].mean(), "cosine_early": arm["cosine_early"].mean(),
                     "cosine_all": arm["cosine_all"].mean(), "cosine_undefined": arm["cosine_undefined"].mean()})
    return pd.DataFrame(rows)


def _paired(runs: pd.DataFrame, level: str, prompts: int, estimator: str, column: str) -> pd.DataFrame:
    cell = runs[(runs["level"] == level) & (runs["prompts"] == prompts)]
    a = cell[cell["estimator"] == estimator].set_index("seed")[column]
    b = cell[cell["estimator"] == REFERENCE].set_index("seed")[column]
    both = a.index.intersection(b.index)
    return pd.DataFrame({"seed": both, "prompts": prompts, "gap": (a[both] - b[both]).to_numpy()})


def gap_table(runs: pd.DataFrame, levels: list[str]) -> pd.DataFrame:
    rows = []
    for estimator in (e for e in ESTIMATORS if e != REFERENCE):
        for level, prompts in itertools.product(levels, PROMPTS):
            for column in ("end_pass_at_1", "end_greedy", "end_log_error"):
                gaps = _paired(runs, level, prompts, estimator, column)
                if len(gaps):
                    rows.append({"estimator": estimator, "level": level, "prompts": prompts, "metric": column,
                                 **t_summary(gaps["gap"].to_numpy())})
    table = pd.DataFrame(rows)
    family = (table["estimator"] == "sign") & (table["metric"] == "end_pass_at_1")
    table["p_holm"] = math.nan
    table.loc[family, "p_holm"] = holm_correction(table.loc[family, "p"].tolist())
    return table


def interaction_table(runs: pd.DataFrame, levels: list[str]) -> pd.DataFrame:
    rows = []
    for estimator in (e for e in ESTIMATORS if e != REFERENCE):
        for column in ("end_pass_at_1", "end_greedy", "step5_pass_at_1", "end_log_error"):
            for level in levels:
                gaps = pd.concat([_paired(runs, level, p, estimator, column) for p in PROMPTS])
                slopes = seed_slopes(gaps)
                if len(slopes):
                    rows.append({"estimator": estimator, "metric": column, "level": level,
                                 **t_summary(slopes)})
    table = pd.DataFrame(rows)
    primary = (table["estimator"] == "sign") & (table["metric"] == "end_pass_at_1")
    table["p_holm"] = math.nan
    table.loc[primary, "p_holm"] = holm_correction(table.loc[primary, "p"].tolist())
    return table


def _snr2(cosine: float) -> float:
    return 2 * cosine / (1 - cosine) if cosine > 0 else math.nan


def snr_table(cells: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    rows = []
    for (level, prompts), cell in cells.groupby(["level", "prompts"]):
        reference = cell[cell["estimator"] == REFERENCE].iloc[0]
        for _, arm in cell[cell["estimator"] != REFERENCE].iterrows():
            start_p, spread = float(reference["start_pass_at_1"]), float(reference["start_p_var"])
            rows.append({"level": level, "prompts": int(prompts), "estimator": arm["estimator"],
                         "cosine_early": arm["cosine_early"], "cosine_early_dr_grpo": reference["cosine_early"],
                         "measured_snr2_ratio": _snr2(arm["cosine_early"]) / _snr2(reference["cosine_early"]),
                         "predicted_snr2_ratio": predicted_ratio(start_p, spread, 2, BASELINES[arm["estimator"]]),
                         "predicted_from_mean_p": float(snr_ratio_fixed_vs_centred(
                             start_p, 2, BASELINES[arm["estimator"]])),
                         "gain_end_pass_at_1": arm["end_pass_at_1"] - reference["end_pass_at_1"]})
    table = pd.DataFrame(rows)
    usable = table.dropna(subset=["measured_snr2_ratio"])
    rho, p = spearman_exact(np.log(usable["measured_snr2_ratio"].to_numpy()), usable["gain_end_pass_at_1"].to_numpy())
    return table, {"rho": rho, "p": p, "cells": len(usable), "left_out": len(table) - len(usable)}


def lr_table(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for level, sweep in itertools.product(_levels(args), ("select", "check")):
        path = args.out / f"{sweep}-{level}" / "runs.csv"
        if not path.is_file():
            continue
        runs = pd.read_csv(path)
        for (variant, estimator), arm in runs.groupby(["variant", "estimator"]):
            tried = sorted(arm[arm["role"] == "selection"]["lr"].unique())
            chosen = float(arm[arm["role"] == "result"]["lr"].iloc[0])
            means = arm[arm["role"] == "selection"].groupby("lr")["end_pass_at_1"].mean()
            rows.append({"level": level, "prompts": _prompts(variant), "estimator": estimator, "chosen_lr": chosen,
                         "interior": bool(tried) and tried[0] < chosen < tried[-1],
                         "tried": " ".join(f"{lr:g}" for lr in tried),
                         "validation_pass_at_1": " ".join(f"{means[lr]:.3f}" for lr in tried)})
    return pd.DataFrame(rows)


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(none found)"
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def _points(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``columns`` in points (x 100), except on log-error rows, which stay natural-log ratios."""
    scale = np.where(frame["metric"] == "end_log_error", 1.0, 100.0) if "metric" in frame else 100.0
    return frame.assign(**{c: (scale * frame[c]).round(3) for c in columns if c in frame})


def table(args: argparse.Namespace) -> None:
    runs = read_runs(args)
    levels = [level for level in _levels(args) if level in set(runs["level"])]
    cells, gaps, interaction = cell_table(runs), gap_table(runs, levels), interaction_table(runs, levels)
    snr, spearman = snr_table(cells)
    lrs = lr_table(args)
    args.dest.mkdir(parents=True, exist_ok=True)
    per_run = runs[list(RUN_COLUMNS)].sort_values(["level", "prompts", "estimator", "seed"])
    for name, frame in (("runs", per_run), ("cells", cells), ("gaps", gaps), ("interaction", interaction),
                        ("snr", snr), ("lr", lrs)):
        frame.to_csv(args.dest / f"{name}.csv", index=False)
    score = ("start_pass_at_1", "end_pass_at_1", "end_pass_at_1_sd", "end_greedy", "step5_pass_at_1", "mean", "low",
             "high", "gain_end_pass_at_1", "clipped_share")
    parts = [
        "# Batch-size experiment: tables", "",
        "Written by `python scripts/batch_size.py table --out runs/batch-size`; scores in points (pass@1 x 100); "
        "end_log_error rows (exploratory, added after the runs) are natural-log ratios of remaining errors, "
        "log(1 - pass@1) of the estimator minus that of dr_grpo.",
        "", "## Primary: per-seed slope of the gap over dr_grpo on log2 P (points per doubling)", "",
        "Student-t 95% interval over seeds; p_holm: Holm over the two levels, sign on end pass@1 only (the "
        "primary family); the other rows are reported, not tested as primaries.", "",
        _markdown(_points(interaction, score)), "",
        "## Gap over dr_grpo per (level, P), paired by seed", "",
        "p_holm: Holm over the six sign-on-end-pass@1 cells (the secondary family).", "",
        _markdown(_points(gaps, score)), "",
        "## Cells (means over seeds)", "", _markdown(_points(cells, score)), "",
        "## Secondary: does the measured SNR order the gains?", "",
        f"Spearman's rho between log measured SNR² ratio and the gain in end pass@1 over {spearman['cells']} cells: "
        f"{spearman['rho']:.3f}, permutation p = {spearman['p']:.3g} ({spearman['left_out']} cells left out: a "
        "mean early cosine <= 0).", "", _markdown(_points(snr, score)), "",
        "## lr selection at P = 16 and check at P = 256 (validation split, 2 selection seeds)", "", _markdown(lrs), ""]
    text = "\n".join(parts)
    (args.dest / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    arguments = _arguments()
    {"select": select, "run": run, "check": check, "table": table}[arguments.action](arguments)
