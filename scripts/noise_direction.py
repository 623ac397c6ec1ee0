"""Noise or direction, at matched measured SNR: is `sign`'s (and `reinforce`'s) gain over `dr_grpo` a better
signal-to-noise ratio of the gradient, or the direction of the push?

    python scripts/noise_direction.py snr --out runs/noise-direction    # phase 0: half-batch cosines, P* and P**
    python scripts/noise_direction.py run --out runs/noise-direction    # phase 1: the 5 arms per level
    python scripts/noise_direction.py rows --out runs/noise-direction   # experiments/noise-direction/runs.csv
    python scripts/noise_direction.py table                             # results.csv, table.md from the rows

The design, the arms and the decision rules were fixed before phase 1 in experiments/noise-direction/README.md.

* ``snr`` samples, per start level and P in ``PHASE0_PROMPTS``, ``PHASE0_BATCHES`` rollout batches of P prompts x
  G = 2 at the start policy (``grpolab gradients``' sampler: the prompts and samples of step 1 of seed b) and
  measures on each batch the half-batch gradient cosine c (``grpolab.gradients.halves``) of every estimator on the
  same completions. Per (level, estimator, P): SNR^2 = 2 c_bar / (1 - c_bar) of the mean cosine. The dr_grpo batch
  size matched to an estimator at P = 16 (P* for sign, P** for reinforce), rounded to an integer >= 2: by the
  measured rule (primary), where dr_grpo's measured SNR^2 curve reaches the estimator's measured SNR^2 at 16; by
  the fit rule (secondary), 16 k_e / k_dr_grpo with k the least-squares slope of SNR^2 = k P through the origin.
  A half with no gradient (every group of it degenerate under a zero-sum estimator) makes c undefined; it counts
  as c = 0 (the halves share no signal), and the share of such batches is reported.
* ``run`` drives ``grpolab compare`` twice per level: `sign`, `dr_grpo`, `reinforce` at P = 16, and `dr_grpo` at
  P* and P** of both rules (``compare.yaml``: lr 1e-3, 10 steps, evaluations every 2 steps, the half-batch
  cosine every step).
* ``rows`` reads each run's ``eval.jsonl`` and the sweeps' ``metrics.parquet`` into one row per run.
* ``table`` reads only the committed rows (``runs.csv``, ``snr_fit.csv``, ``snr_cells.csv``) and writes
  ``results.csv`` (one row per (rule, metric, level, estimator): the paired tests, Holm, TOST and the verdict) and
  ``table.md``.

The primary metric of a run is its mean held-out pass@1 over the evaluations at steps 2, 4, 6, 8, 10. Each
estimator e in {sign, reinforce} at P = 16 is compared, paired by seed (``grpolab.pairing.compare_arms``), with
`dr_grpo` at P = 16 and with `dr_grpo` at its matched P (P* for sign, P** for reinforce); each of the three
families (beats dr_grpo@16, beats dr_grpo@matched, TOST within +-3 points of dr_grpo@matched) is Holm-corrected
over the 4 (level, estimator) cells (``grpolab.stats.holm_correction``), separately per metric (pass@1, the
primary; greedy accuracy) and per match rule (measured, the primary; fit).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

LEVELS = {
    "star-len6": {"markers": "*", "lengths": [6, 6]},
    "mixed": {"markers": "+*", "lengths": [3, 6]},
}
ESTIMATORS = ("sign", "dr_grpo", "reinforce")
REFERENCE = "dr_grpo"
MATCH = {"sign": "p_star", "reinforce": "p_star_star"}  # estimator -> the dr_grpo batch size matched to it
BASE_PROMPTS = 16
GROUP_SIZE = 2
PHASE0_PROMPTS = (16, 24, 32, 48, 64, 96, 128)
PHASE0_BATCHES = 40
EVAL_STEPS = (0, 2, 4, 6, 8, 10)
PRIMARY_STEPS = (2, 4, 6, 8, 10)
EARLY_STEPS = 5  # the phase-1 check of the match: the mean cosine over steps 1..EARLY_STEPS
MARGIN = 0.03  # TOST margin, +-3 points of pass@1
ALPHA = 0.05
EXPERIMENT = Path("experiments/noise-direction")
NOISE, DIRECTION, NEITHER = "noise is supported", "direction is supported", "no evidence either way"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["snr", "run", "rows", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/noise-direction"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=EXPERIMENT, help="where snr, rows and table write")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated level names, in run order")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--seeds 6' or '--steps 2'")
    return parser.parse_args()


def _levels(args: argparse.Namespace) -> list[str]:
    unknown = [name for name in args.levels.split(",") if name not in LEVELS]
    if unknown:
        raise SystemExit(f"unknown level {unknown[0]!r}; use one of {', '.join(LEVELS)}")
    return args.levels.split(",")


# ---------------------------------------------------------------- phase 0: the half-batch cosine at the start


def measure_batches(level: str, prompts: int, batches: int) -> list[dict[str, object]]:
    """One row per (batch seed, estimator): the half-batch cosine of that estimator's policy gradient on a batch of
    ``prompts`` prompts x G = 2 sampled at the start policy (every estimator on the same completions)."""
    import torch

    from grpolab.commands.gradients import model_for, sample_batch
    from grpolab.config import TrainConfig
    from grpolab.gradients.halves import half_batch_cosine
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for
    from grpolab.train.shell import step_problems
    from grpolab.train.step_advantages import step_advantages

    torch.set_num_threads(1)
    config = TrainConfig(task_options=LEVELS[level], group_size=GROUP_SIZE, prompts_per_step=prompts, threads=1)
    policy = load_policy(config.model)
    model = model_for(config, policy)
    task = load_task_for(config)
    rows = []
    for seed in range(batches):
        torch.manual_seed(seed)
        seeded = config.replace(seed=seed)
        batch = sample_batch(seeded, policy, model, step_problems(task, seeded, 1))
        for estimator in ESTIMATORS:
            advantages = step_advantages(batch, config.replace(advantage=estimator, seed=seed))
            cosine = half_batch_cosine(model, batch, advantages, group_size=GROUP_SIZE)
            rows.append({"level": level, "prompts": prompts, "batch": seed, "estimator": estimator,
                         "cosine": cosine, "reward_mean": float(np.mean(batch.rewards))})
    return rows


def snr2(cosine: float) -> float:
    """SNR^2 of a full batch from the mean cosine c of its two halves: 2 c / (1 - c) (``grpolab.gradients.halves``)."""
    return 2 * cosine / (1 - cosine)


def slope_through_origin(prompts: np.ndarray, values: np.ndarray) -> float:
    """Least-squares k of values = k * prompts (no intercept): sum(P y) / sum(P^2)."""
    prompts, values = np.asarray(prompts, dtype=float), np.asarray(values, dtype=float)
    return float(prompts @ values / (prompts @ prompts))


def snr_cells(batches: pd.DataFrame) -> pd.DataFrame:
    """Per (level, estimator, P): mean cosine (undefined counted as 0), the undefined share, SNR^2."""
    filled = batches.assign(undefined=batches["cosine"].isna(), cosine=batches["cosine"].fillna(0.0))
    cells = filled.groupby(["level", "estimator", "prompts"], sort=False).agg(
        batches=("cosine", "size"), cosine=("cosine", "mean"), undefined=("undefined", "mean")).reset_index()
    cells["snr2"] = cells["cosine"].map(snr2)
    return cells


def matched_prompts(k_estimator: float, k_reference: float, base: int = BASE_PROMPTS) -> tuple[float, int]:
    """(exact, rounded) batch size at which the reference's fitted SNR^2 = k_ref P equals the estimator's fitted
    k_e ``base`` (the fit rule)."""
    exact = base * k_estimator / k_reference
    return exact, max(2, round(exact))


def crossing(prompts: np.ndarray, curve: np.ndarray, target: float) -> tuple[float, int]:
    """(exact, rounded) batch size where the measured SNR^2 ``curve`` [n] over ``prompts`` [n] (ascending), joined
    by straight lines, first reaches ``target`` (the measured rule); the first P where the curve is already at or
    above it when it starts there. Refused when the curve never reaches it."""
    prompts, curve = np.asarray(prompts, dtype=float), np.asarray(curve, dtype=float)
    if curve[0] >= target:
        return float(prompts[0]), int(prompts[0])
    for i in range(1, len(prompts)):
        if curve[i] >= target:
            exact = prompts[i - 1] + (prompts[i] - prompts[i - 1]) * (target - curve[i - 1]) / (curve[i] - curve[i - 1])
            return float(exact), max(2, round(exact))
    raise SystemExit(f"the reference's SNR^2 never reaches {target:.3g} up to P = {prompts[-1]:g}; measure larger P")


def snr_fit(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (level, estimator): the slope k of SNR^2 = k P; the dr_grpo batch size matched to the estimator at
    P = 16 by the measured rule (``crossing`` of dr_grpo's measured curve at the estimator's measured SNR^2 at 16,
    the primary) and by the fit rule (``matched_prompts``, secondary)."""
    rows = []
    for level, cell in cells.groupby("level", sort=False):
        slopes = {e: slope_through_origin(arm["prompts"], arm["snr2"]) for e, arm in cell.groupby("estimator")}
        reference = cell[cell["estimator"] == REFERENCE].sort_values("prompts")
        for estimator in ESTIMATORS:
            at_base = cell[(cell["estimator"] == estimator) & (cell["prompts"] == BASE_PROMPTS)]["snr2"].iloc[0]
            measured_exact, measured = crossing(reference["prompts"], reference["snr2"], at_base)
            fit_exact, fit = matched_prompts(slopes[estimator], slopes[REFERENCE])
            rows.append({"level": level, "estimator": estimator, "snr2_at_16": at_base, "k": slopes[estimator],
                         "k_ratio": slopes[estimator] / slopes[REFERENCE], "matched_exact": measured_exact,
                         "matched_prompts": measured, "matched_fit_exact": fit_exact, "matched_fit_prompts": fit})
    return pd.DataFrame(rows)


def measure(args: argparse.Namespace) -> None:
    rows = []
    for level in _levels(args):
        for prompts in PHASE0_PROMPTS:
            rows += measure_batches(level, prompts, PHASE0_BATCHES)
            print(f"{level} P={prompts}: done", flush=True)
    batches = pd.DataFrame(rows)
    args.dest.mkdir(parents=True, exist_ok=True)
    batches.to_csv(args.dest / "snr_batches.csv", index=False)
    cells = snr_cells(batches)
    cells.to_csv(args.dest / "snr_cells.csv", index=False)
    fit = snr_fit(cells)
    fit.to_csv(args.dest / "snr_fit.csv", index=False)
    print(cells.to_string(), fit.to_string(), sep="\n\n")


# ---------------------------------------------------------------- phase 1: the runs


RULES = {"measured": "matched_prompts", "fit": "matched_fit_prompts"}  # match rule -> its snr_fit.csv column


def matched_sizes(fit: pd.DataFrame, level: str) -> list[int]:
    """Every dr_grpo batch size that phase 1 runs at ``level``: each estimator's match under each rule."""
    cells = fit[(fit["level"] == level) & fit["estimator"].isin(list(MATCH))]
    return sorted({int(size) for column in RULES.values() for size in cells[column]})


def _compare(args: argparse.Namespace, level: str, out: Path, *more: str) -> None:
    command = [str(Path(sys.executable).with_name("grpolab")), "compare", "--config", str(EXPERIMENT / "compare.yaml"),
               "--task-options", json.dumps(LEVELS[level]), "--out", str(out), "--workers", str(args.workers),
               "--threads", "1", "--no-report", *more, *args.extra.split()]
    if (out / "runs.csv").is_file():
        print(f"done already: {out}", flush=True)
        return
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=False)


def run(args: argparse.Namespace) -> None:
    for level in _levels(args):
        _compare(args, level, args.out / f"{level}-p{BASE_PROMPTS}", "--estimators", ",".join(ESTIMATORS),
                 "--vary", f"prompts_per_step={BASE_PROMPTS}")
        sizes = matched_sizes(pd.read_csv(args.dest / "snr_fit.csv"), level)
        _compare(args, level, args.out / f"{level}-matched", "--estimators", REFERENCE,
                 "--vary", "prompts_per_step=" + ",".join(map(str, sizes)))


def _evaluations(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {pass_at_1, greedy} of a run's evaluations."""
    found = {}
    for line in (run_dir / "eval.jsonl").read_text().splitlines():
        row = json.loads(line)
        found[int(row["step"])] = {"pass_at_1": float(row["pass_at_k"]["1"]), "greedy": float(row["greedy_accuracy"])}
    return found


def read_runs(args: argparse.Namespace) -> pd.DataFrame:
    """One row per result run: level, estimator, prompts, seed, lr, pass@1 and greedy at each evaluation step, the
    mean half-batch cosine over steps 1..EARLY_STEPS and over all steps, the clipped share."""
    rows = []
    for level in _levels(args):
        for folder in sorted(args.out.glob(f"{level}-*")):
            if not (folder / "runs.csv").is_file():
                continue
            runs = pd.read_csv(folder / "runs.csv")
            steps = pd.read_parquet(folder / "metrics.parquet")
            cosine = steps.groupby("run_id")["grad/half_batch_cosine"]
            early = steps[steps["step"] <= EARLY_STEPS].groupby("run_id")["grad/half_batch_cosine"]
            for _, run_row in runs[runs["role"] == "result"].iterrows():
                run_id = run_row["run_id"]
                scores = _evaluations(folder / "runs" / run_id)
                row = {"level": level, "estimator": run_row["estimator"],
                       "prompts": int(str(run_row["variant"]).split("=")[1]), "seed": int(run_row["seed"]),
                       "lr": float(run_row["lr"])}
                for step in EVAL_STEPS:
                    row[f"pass_at_1_step{step}"] = scores.get(step, {}).get("pass_at_1", math.nan)
                    row[f"greedy_step{step}"] = scores.get(step, {}).get("greedy", math.nan)
                row["cosine_early"] = float(early.get_group(run_id).fillna(0.0).mean())
                row["cosine_all"] = float(cosine.get_group(run_id).fillna(0.0).mean())
                row["clipped"] = float(steps.loc[steps["run_id"] == run_id, "loss/clipped"].mean())
                rows.append(row)
    if not rows:
        raise SystemExit(f"no finished sweep under {args.out}; run: python scripts/noise_direction.py run")
    return pd.DataFrame(rows).sort_values(["level", "estimator", "prompts", "seed"], kind="stable")


def rows(args: argparse.Namespace) -> None:
    read_runs(args).to_csv(args.dest / "runs.csv", index=False)
    print(f"wrote {args.dest / 'runs.csv'}")


# ---------------------------------------------------------------- the table and the verdicts


def primary_scores(runs: pd.DataFrame, metric: str = "pass_at_1") -> pd.Series:
    """Per run, the mean of ``metric`` over the evaluations at PRIMARY_STEPS."""
    return runs[[f"{metric}_step{step}" for step in PRIMARY_STEPS]].mean(axis=1)


def _arm(runs: pd.DataFrame, level: str, estimator: str, prompts: int, metric: str) -> pd.Series:
    arm = runs[(runs["level"] == level) & (runs["estimator"] == estimator) & (runs["prompts"] == prompts)]
    return pd.Series(primary_scores(arm, metric).to_numpy(), index=arm["seed"].to_numpy())


def decide(beats_base: bool, equivalent_matched: bool, beats_matched: bool) -> str:
    """The pre-registered reading of one (level, estimator) cell."""
    found = [NOISE] if beats_base and equivalent_matched else []
    found += [DIRECTION] if beats_matched else []
    return " and ".join(found) if found else NEITHER


def comparisons(runs: pd.DataFrame, fit: pd.DataFrame, metric: str = "pass_at_1",
                rule: str = "measured") -> pd.DataFrame:
    """One row per (level, estimator in MATCH) present in ``runs``: the paired tests against dr_grpo@16 and against
    dr_grpo at the batch size the match ``rule`` gives, Holm over the cells of each family, and the verdict."""
    from grpolab.pairing import compare_arms
    from grpolab.stats import holm_correction

    result = []
    matched = fit.set_index(["level", "estimator"])[RULES[rule]]
    for level in (name for name in LEVELS if name in set(runs["level"])):
        for estimator in MATCH:
            size = int(matched[(level, estimator)])
            arm = _arm(runs, level, estimator, BASE_PROMPTS, metric)
            base = _arm(runs, level, REFERENCE, BASE_PROMPTS, metric)
            other = _arm(runs, level, REFERENCE, size, metric)
            if min(len(arm), len(base), len(other)) < 2:
                continue
            versus_base = compare_arms(arm, base, margin=MARGIN)
            versus_matched = compare_arms(arm, other, margin=MARGIN)
            result.append({
                "rule": rule, "metric": metric, "level": level, "estimator": estimator, "matched_prompts": size,
                "n": versus_base["n_a"], "mean": versus_base["mean_a"], "mean_dr_grpo_16": versus_base["mean_b"],
                "mean_dr_grpo_matched": versus_matched["mean_b"],
                "gain_vs_16": versus_base["mean_difference"], "gain_vs_16_low": versus_base["difference_low"],
                "gain_vs_16_high": versus_base["difference_high"], "p_vs_16": versus_base["p"],
                "gain_vs_matched": versus_matched["mean_difference"],
                "gain_vs_matched_low": versus_matched["difference_low"],
                "gain_vs_matched_high": versus_matched["difference_high"], "p_vs_matched": versus_matched["p"],
                "tost_p_matched": versus_matched["tost_p"]})
    table = pd.DataFrame(result)
    if table.empty:
        return table
    for column in ("p_vs_16", "p_vs_matched", "tost_p_matched"):
        table[f"{column}_holm"] = holm_correction(table[column].tolist())
    table["verdict"] = [decide(row.gain_vs_16 > 0 and row.p_vs_16_holm < ALPHA, row.tost_p_matched_holm < ALPHA,
                               row.gain_vs_matched > 0 and row.p_vs_matched_holm < ALPHA)
                        for row in table.itertuples()]
    return table


def arm_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (level, estimator, P): seeds, mean primary pass@1 and greedy, start and end pass@1, the early cosine
    (the phase-1 check that the matched arms match) and its SNR^2."""
    frame = runs.assign(primary=primary_scores(runs), primary_greedy=primary_scores(runs, "greedy"))
    cells = frame.groupby(["level", "estimator", "prompts"], sort=False).agg(
        n=("seed", "size"), start_pass_at_1=("pass_at_1_step0", "mean"), primary_pass_at_1=("primary", "mean"),
        primary_greedy=("primary_greedy", "mean"), end_pass_at_1=("pass_at_1_step10", "mean"),
        cosine_early=("cosine_early", "mean"), clipped=("clipped", "mean")).reset_index()
    cells["snr2_early"] = cells["cosine_early"].map(snr2)
    return cells


def _markdown(frame: pd.DataFrame) -> str:
    def cell(value: object) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _points(frame: pd.DataFrame) -> pd.DataFrame:
    """Scores and gains in points (x 100)."""
    scaled = frame.copy()
    for column in scaled.columns:
        if any(column.startswith(prefix) for prefix in ("mean", "gain", "start_", "primary_", "end_")):
            scaled[column] = scaled[column] * 100
    return scaled


def build_tables(runs: pd.DataFrame, fit: pd.DataFrame, cells: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """results (the primary comparisons and the greedy ones beside them) and table.md's text."""
    results = pd.concat([comparisons(runs, fit, metric, rule) for rule in RULES for metric in ("pass_at_1", "greedy")],
                        ignore_index=True)
    shown = ["rule", "metric", "level", "estimator", "matched_prompts", "n", "mean", "mean_dr_grpo_16",
             "mean_dr_grpo_matched", "gain_vs_16", "gain_vs_16_low", "gain_vs_16_high", "p_vs_16_holm",
             "gain_vs_matched", "gain_vs_matched_low", "gain_vs_matched_high", "p_vs_matched_holm",
             "tost_p_matched_holm", "verdict"]
    text = "\n".join([
        "# Noise or direction: tables", "",
        "Written by `python scripts/noise_direction.py table` from `runs.csv`, `snr_fit.csv` and `snr_cells.csv`; "
        "scores in points (x 100). Primary: the measured rule's rows on pass@1 (mean held-out pass@1 over the "
        "evaluations at steps 2-10), paired by seed; p_*_holm: Holm over the (level, estimator) cells of each family "
        "(one family per rule, metric and test); TOST margin +-3 points. The greedy rows and the fit rule's rows are "
        "reported beside the primary ones with the same tests, not as primaries.", "",
        "## Comparisons and verdicts", "", _markdown(_points(results[shown])), "",
        "## Arms (means over seeds)", "",
        "cosine_early: the mean half-batch cosine over steps 1-5 of the runs (undefined counted as 0); snr2_early "
        "= 2c/(1 - c), the check that dr_grpo at the matched P has the estimator's SNR at P = 16.", "",
        _markdown(_points(arm_table(runs))), "",
        "## Phase 0: the fit SNR^2 = k P at the start policy", "", _markdown(fit), "",
        "## Phase 0: per (level, estimator, P)", "", _markdown(cells), ""])
    return results, text


def table(args: argparse.Namespace) -> None:
    runs = pd.read_csv(args.dest / "runs.csv")
    fit = pd.read_csv(args.dest / "snr_fit.csv")
    cells = pd.read_csv(args.dest / "snr_cells.csv")
    results, text = build_tables(runs, fit, cells)
    results.to_csv(args.dest / "results.csv", index=False)
    (args.dest / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    arguments = _arguments()
    {"snr": measure, "run": run, "rows": rows, "table": table}[arguments.action](arguments)
