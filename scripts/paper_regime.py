"""Paper 1's optimiser regime on SmolLM2-135M: the per-run rows and the pre-registered readings
(experiments/paper-regime-smollm2/README.md) from what ``scripts/gpu_paper_regime.sh run`` brought back.

    python scripts/paper_regime.py rows --out DIR    # DIR/lr*/ from the GPU call -> experiments/.../runs.csv
    python scripts/paper_regime.py table             # runs.csv -> results.csv and table.md beside it
    python scripts/paper_regime.py probe --out SWEEP --wall S   # the probe's timing -> a 200-step run's estimate

``rows`` reads each sweep's ``runs.csv`` (its result runs), each run's ``eval.jsonl`` (pass@1 and greedy accuracy at
steps 0, 100 and 200) and ``metrics.parquet`` (the mean of ``starvation/all_wrong`` over the run's steps). ``table``
applies the readings fixed before the runs, at each peak lr, on the change in pass@1 from step 0 to step 200 of each
run, in points:

* a change "lies within +-m" when Schuirmann's TOST (``grpolab.stats.equivalence_test``, paired: the run's step-200
  score against its own step-0 score) gives p < 0.05 at margin m; the difference of the estimators' changes is paired
  by seed in the same way. With 3 seeds these rest on the t-test's normal model: the pre-registration reads them
  unfloored and says so, where the project's paired tests floor p at 2 / 2^n (0.25 at 3 seeds);
* **the paper's pattern reproduces**: ``sign``'s mean change >= 10 points and ``dr_grpo``'s within +-3;
* **the tiny lr freezes both**: both within +-3;
* **no sign advantage**: both outside +-3 (neither TOST passes) and ``sign`` - ``dr_grpo`` within +-5;
* otherwise no reading ("described, no reading").
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "experiments" / "paper-regime-smollm2"
EVAL_STEPS = (0, 100, 200)
ALPHA = 0.05
STILL = 0.03  # a change within +-3 points of the start
GAIN = 0.10  # sign's mean change of at least 10 points
SAME = 0.05  # sign - dr_grpo within +-5 points
ESTIMATORS = ("sign", "dr_grpo")
PAPER = "the paper's pattern reproduces"
FROZEN = "the tiny lr freezes both"
NO_ADVANTAGE = "no sign advantage"
NO_READING = "described, no reading"


def _evaluations(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {pass_at_1, greedy} of a run's held-out evaluations (none when its eval.jsonl did not come back)."""
    path = run_dir / "eval.jsonl"
    if not path.is_file():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        found[int(row["step"])] = {"pass_at_1": float(row["pass_at_k"]["1"]), "greedy": float(row["greedy_accuracy"])}
    return found


def _all_wrong(steps: pd.DataFrame, run_id: str) -> float:
    mine = steps[steps["run_id"] == run_id]
    if "starvation/all_wrong" not in mine or mine.empty:
        return math.nan
    return float(mine["starvation/all_wrong"].mean())


def sweep_rows(folder: Path) -> list[dict[str, object]]:
    """The result runs of one sweep folder (``lr<peak>/``): lr, estimator, seed, pass@1 and greedy accuracy at the
    evaluation steps, the mean all-wrong share."""
    runs = pd.read_csv(folder / "runs.csv")
    metrics = folder / "metrics.parquet"
    steps = pd.read_parquet(metrics) if metrics.is_file() else pd.DataFrame({"run_id": []})
    rows = []
    for _, run in runs[runs["role"] == "result"].iterrows():
        scores = _evaluations(folder / str(run["run_id"]))
        row: dict[str, object] = {"lr": float(run["lr"]), "estimator": run["estimator"], "seed": int(run["seed"]),
                                  "status": run["status"]}
        for step in EVAL_STEPS:
            row[f"pass_at_1_step{step}"] = scores.get(step, {}).get("pass_at_1", math.nan)
            row[f"greedy_step{step}"] = scores.get(step, {}).get("greedy", math.nan)
        row["all_wrong_mean"] = _all_wrong(steps, str(run["run_id"]))
        rows.append(row)
    return rows


def read_runs(out: Path) -> pd.DataFrame:
    rows = [row for folder in sorted(out.glob("lr*")) if (folder / "runs.csv").is_file() for row in sweep_rows(folder)]
    if not rows:
        raise SystemExit(f"no sweep under {out} (expected {out}/lr1e-6/runs.csv, ...); run "
                         "scripts/gpu_paper_regime.sh run on a GPU machine first")
    return pd.DataFrame(rows).sort_values(["lr", "estimator", "seed"], kind="stable")


def _tost(end: pd.Series, start: pd.Series, margin: float) -> float:
    from grpolab.stats import equivalence_test

    return equivalence_test(end.to_numpy(), start.to_numpy(), margin, paired=True)


def reading(sign_change_mean: float, sign_still: bool, dr_grpo_still: bool, same: bool) -> str:
    """The pre-registered reading of one lr from its four facts (module docstring)."""
    if sign_change_mean >= GAIN and dr_grpo_still:
        return PAPER
    if sign_still and dr_grpo_still:
        return FROZEN
    if not sign_still and not dr_grpo_still and same:
        return NO_ADVANTAGE
    return NO_READING


def lr_result(runs: pd.DataFrame) -> dict[str, object]:
    """One lr's row: each estimator's mean change and its TOST p against +-3 points, the paired difference of the
    changes and its TOST p against +-5 points, and the reading. Seeds missing a step-0 or step-200 score are left
    out of everything, and counted."""
    start, end = "pass_at_1_step0", "pass_at_1_step200"
    complete = runs.dropna(subset=[start, end])
    arms = {name: complete[complete["estimator"] == name].set_index("seed").sort_index() for name in ESTIMATORS}
    seeds = sorted(set(arms["sign"].index) & set(arms["dr_grpo"].index))
    row: dict[str, object] = {"lr": float(runs["lr"].iloc[0]), "seeds": len(seeds),
                              "runs_left_out": len(runs) - len(complete)}
    still = {}
    for name, arm in arms.items():
        arm = arm.loc[seeds]
        row[f"{name}_change"] = float((arm[end] - arm[start]).mean())
        row[f"{name}_still_p"] = _tost(arm[end], arm[start], STILL) if len(seeds) >= 2 else math.nan
        still[name] = bool(row[f"{name}_still_p"] < ALPHA)
    changes = {name: (arm.loc[seeds, end] - arm.loc[seeds, start]) for name, arm in arms.items()}
    row["difference"] = float((changes["sign"] - changes["dr_grpo"]).mean())
    row["same_p"] = _tost(changes["sign"], changes["dr_grpo"], SAME) if len(seeds) >= 2 else math.nan
    row["reading"] = reading(float(row["sign_change"]), still["sign"], still["dr_grpo"], bool(row["same_p"] < ALPHA))
    return row


def results(runs: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([lr_result(group) for _, group in runs.groupby("lr", sort=True)])


def markdown(table: pd.DataFrame) -> str:
    lines = ["| peak lr | seeds | sign change (points) | p, within +-3 | dr_grpo change (points) | p, within +-3 | "
             "sign - dr_grpo (points) | p, within +-5 | reading |", "|---|---|---|---|---|---|---|---|---|"]
    for _, row in table.iterrows():
        lines.append(f"| {row['lr']:g} | {row['seeds']} | {100 * row['sign_change']:+.1f} | "
                     f"{row['sign_still_p']:.3f} | {100 * row['dr_grpo_change']:+.1f} | {row['dr_grpo_still_p']:.3f} | "
                     f"{100 * row['difference']:+.1f} | {row['same_p']:.3f} | {row['reading']} |")
    lines += ["", "p: TOST by the paired t-test (3 seeds, unfloored, as pre-registered: the project's paired tests "
              "floor p at 2 / 2^n = 0.25 at 3 seeds)."]
    return "\n".join(lines) + "\n"


PERF = ("perf/step_time", "perf/rollout_time", "perf/update_time")


def probe_timing(steps: pd.DataFrame, wall_s: float, probe_steps: int, full_steps: int = 200) -> pd.DataFrame:
    """Per estimator of the probe's sweep (10 steps, evaluations at steps 0 and 10, all runs at once): the median
    step, rollout and update times, and a full run's estimate: the probe's wall time with its steps replaced by
    ``full_steps`` steps at the median, plus a third evaluation costed as the mean of the two (the wall time less the
    steps, half of it)."""
    rows = []
    for estimator, mine in steps.groupby("estimator", sort=True):
        medians = {key: float(mine[key].median()) for key in PERF if key in mine}
        stepping = probe_steps * medians["perf/step_time"]
        other = max(wall_s - stepping, 0.0)
        rows.append({"estimator": estimator, **medians,
                     "full_run_estimate_s": other * 1.5 + full_steps * medians["perf/step_time"]})
    return pd.DataFrame(rows)


def probe_report(out: Path, wall_s: float) -> str:
    steps = pd.read_parquet(out / "metrics.parquet")
    if "estimator" not in steps:
        runs = pd.read_csv(out / "runs.csv")
        steps = steps.merge(runs[["run_id", "estimator"]], on="run_id")
    probe_steps = int(steps["step"].max())
    timing = probe_timing(steps, wall_s, probe_steps)
    lines = [f"probe: {wall_s:.0f} s wall, {probe_steps} steps, {steps['run_id'].nunique()} runs"]
    lines += [f"  {row.estimator}: " + ", ".join(f"{key.split('/')[1]} {row[key]:.3f} s" for key in PERF if key in row)
              + f"; 200 steps and 3 evaluations at this concurrency: about {row.full_run_estimate_s:.0f} s"
              for _, row in timing.iterrows()]
    return "\n".join(lines)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("rows", "table", "probe"))
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "paper-regime-smollm2",
                        help="the folder the GPU call brought back (lr1e-6/, lr1e-5/)")
    parser.add_argument("--dest", type=Path, default=DEST, help="where runs.csv, results.csv and table.md go")
    parser.add_argument("--wall", type=float, default=math.nan, help="probe: the probe sweep's wall seconds")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.what == "probe":
        if math.isnan(args.wall):
            raise SystemExit("probe needs --wall S, the probe sweep's wall seconds "
                             "(scripts/gpu_paper_regime.sh gives it)")
        print(probe_report(args.out, args.wall))
        return
    if args.what == "rows":
        read_runs(args.out).to_csv(args.dest / "runs.csv", index=False)
        print(f"wrote {args.dest / 'runs.csv'}")
        return
    table = results(pd.read_csv(args.dest / "runs.csv"))
    table.to_csv(args.dest / "results.csv", index=False)
    (args.dest / "table.md").write_text(markdown(table))
    print(markdown(table))


if __name__ == "__main__":
    main()
