"""The low-p regime on SmolLM2-135M (docs/when-sign-helps.md, docs/losses.md): the baselines beside sign and
dr_grpo, sign run on to 60 steps, and the truncation ablation.

    python scripts/smollm2_lowp.py run --out runs/smollm2-lowp     # the sweeps (resumable; ~2 h on 2 cores)
    python scripts/smollm2_lowp.py table --out runs/smollm2-lowp   # experiments/smollm2/lowp.csv and lowp.md
    python scripts/smollm2_lowp.py table --from-runs experiments/smollm2/lowp_runs.csv   # the same from the runs' table

``run`` makes three ``grpolab compare`` sweeps at the validated lr 2e-4 (3 seeds each, the settings of
experiments/smollm2/compare.yaml, checkpoints every 5 steps for ``grpolab mechanism --parts updates``):

* ``truncation``: sign and dr_grpo with and without ``mask_truncated_completions`` (one ``--vary`` axis);
* ``baselines``: reinforce (baseline 0) and nsr;
* ``fixed-baseline``: fixed_baseline at b = 0.1;

then copies the three sign runs without the mask to ``sign60/`` and resumes them side by side with ``--steps 60``
(a constant lr, so steps 1-30 are those runs' own; the step-30 evaluation stays as a step evaluation).

``table`` writes one row per arm: the start and end held-out pass@1 and pass@2 (2 samples per prompt at the
training temperature, 200 test prompts) and greedy accuracy, mean with a Student-t 95% interval over seeds;
the end pass@1 difference from dr_grpo, and for a masked arm from the same estimator without the mask, each paired
by seed (``grpolab.pairing``: the paired t-test and its 95% interval; Welch's only with ``--unpaired``, and the table
says which ran), the estimators' differences from dr_grpo at 30 steps also Holm-adjusted as one family; and the
share of training completions cut at the token cap in the
first 5 steps and the last 5 before the evaluation. sign at 60 steps is read from its evaluations at steps 30
and 60.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.pairing import UNPAIRED_FLAG, compare_arms, which_tests
from grpolab.stats import holm_correction, sign_flip_floor, t_interval

SWEEPS = {
    "truncation": ["--config", "experiments/smollm2/truncation.yaml"],
    "baselines": ["--config", "experiments/smollm2/baselines.yaml"],
    "fixed-baseline": ["--config", "experiments/smollm2/baselines.yaml", "--estimators", "fixed_baseline",
                       "--advantage-kwargs", '{"baseline": 0.1}'],
}
NO_MASK, MASK = "mask_truncated_completions=false", "mask_truncated_completions=true"
LONG_STEPS = 60
ESTIMATOR_ORDER = ["dr_grpo", "sign", "reinforce", "fixed_baseline", "nsr"]
HOLM_FAMILY = ("sign", "reinforce", "fixed_baseline (b=0.1)", "nsr")  # the estimators against dr_grpo at 30 steps


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["run", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2-lowp"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=Path("experiments/smollm2"), help="where table writes")
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--eval-limit 20' (smoke tests)")
    parser.add_argument("--from-runs", type=Path, help="table: build it from a per-run table (lowp_runs.csv) instead "
                        "of the run folders")
    parser.add_argument(UNPAIRED_FLAG, action="store_true", dest="unpaired",
                        help="table: Welch's test although the arms share seeds (not the default; the table says so)")
    return parser.parse_args()


def _grpolab() -> list[str]:
    return [sys.executable, "-m", "grpolab"]


def run(args: argparse.Namespace) -> None:
    for name, flags in SWEEPS.items():
        command = [*_grpolab(), "compare", *flags, "--out", str(args.out / name), *args.extra.split()]
        print("$", " ".join(command[2:]), flush=True)
        subprocess.run(command, check=True)
    extend_sign(args.out)


def extend_sign(out: Path) -> None:
    """Copy the sign runs without the mask to ``sign60/`` and resume them, side by side, to 60 steps."""
    jobs = []
    for seed_dir in sorted((out / "truncation" / "runs").glob(f"sign-*-{NO_MASK}")):
        long_dir = out / "sign60" / seed_dir.name
        if not long_dir.exists():
            shutil.copytree(seed_dir, long_dir)
        command = [*_grpolab(), "train", "--out", str(long_dir), "--resume", "--steps", str(LONG_STEPS),
                   "--threads", "1"]
        print("$", " ".join(command[2:]), flush=True)
        jobs.append(subprocess.Popen(command))
    if any(job.wait() != 0 for job in jobs):
        raise SystemExit("a 60-step sign run failed; rerun the same command to resume it")


# ------------------------------------------------------------------------------------------------ the table


def _evaluations(run_dir: Path) -> dict[int, dict]:
    """The run's held-out evaluations by step (the start's is step 0)."""
    rows = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines() if line.strip()]
    return {int(row["step"]): row for row in rows}


def _truncated(run_dir: Path, until: int, window: int = 5) -> tuple[float, float]:
    """The mean share of training completions cut at the token cap over the first ``window`` steps and over the
    last ``window`` steps up to step ``until``."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    shares = [row["rollout/truncated"] for row in rows if row["step"] <= until]
    return float(np.mean(shares[:window])), float(np.mean(shares[-window:]))


def _run_row(arm: str, run_dir: Path, step: int) -> dict:
    evaluations = _evaluations(run_dir)
    start, end = evaluations[0], evaluations[step]
    first, last = _truncated(run_dir, step)
    return {"arm": arm, "run": run_dir.name, "step": step,
            "start_pass_at_1": start["pass_at_k"]["1"], "end_pass_at_1": end["pass_at_k"]["1"],
            "end_pass_at_2": end["pass_at_k"]["2"], "end_greedy": end["greedy_accuracy"],
            "truncated_first5": first, "truncated_last5": last}


def _arms(out: Path) -> list[tuple[str, Path, int]]:
    """(arm label, run directory, evaluation step) of every finished run."""
    found = []
    for name, pattern, label in (("truncation", f"*-{NO_MASK}", None), ("truncation", f"*-{MASK}", "+mask"),
                                 ("baselines", "*", None), ("fixed-baseline", "*", "(b=0.1)")):
        for run_dir in sorted((out / name / "runs").glob(pattern)):
            if (run_dir / "summary.json").is_file():
                estimator = run_dir.name.split("-G")[0]
                found.append((f"{estimator} {label}" if label else estimator, run_dir, 30))
    for run_dir in sorted((out / "sign60").glob("*")):
        if (run_dir / "summary.json").is_file():
            found += [("sign (60-step runs, at step 30)", run_dir, 30), ("sign (60-step runs, at step 60)",
                                                                         run_dir, LONG_STEPS)]
    return found


def _seeds(runs: pd.DataFrame) -> pd.Series:
    """The runs' end pass@1 indexed by seed (read from the run's name, ``...-seed<N>...``)."""
    seeds = runs["run"].str.extract(r"-seed(\d+)", expand=False).astype(int)
    return pd.Series(runs["end_pass_at_1"].to_numpy(float), index=seeds.to_numpy())


def _versus(prefix: str, end: pd.Series, reference: pd.Series, unpaired: bool) -> dict:
    """The difference of the end pass@1 from ``reference``, paired by seed where the two share seeds
    (``grpolab.pairing.compare_arms``; Welch with ``unpaired``): its 95% interval, p and test (empty with fewer than
    2 runs on a side)."""
    if len(reference) < 2 or len(end) < 2:
        return {}
    result = compare_arms(end, reference, unpaired=unpaired)
    return {prefix: result["mean_difference"], f"{prefix}_low": result["difference_low"],
            f"{prefix}_high": result["difference_high"], f"{prefix}_p": result["p"], f"{prefix}_t_p": result["t_p"],
            f"{prefix}_test": result["test"],
            f"{prefix}_seeds_shared": result["seeds_shared"], f"{prefix}_unpaired": result["unpaired"]}


def _summary_row(arm: str, runs: pd.DataFrame, reference: pd.Series, unmasked: pd.Series, unpaired: bool) -> dict:
    end = runs["end_pass_at_1"].to_numpy()
    mean, low, high = t_interval(end)
    row = {"arm": arm, "n": len(runs), "start_pass_at_1": runs["start_pass_at_1"].mean(),
           "end_pass_at_1": mean, "end_ci_low": low, "end_ci_high": high,
           "end_pass_at_2": runs["end_pass_at_2"].mean(), "end_greedy": runs["end_greedy"].mean(),
           "truncated_first5": runs["truncated_first5"].mean(), "truncated_last5": runs["truncated_last5"].mean()}
    return {**row, **_versus("vs_dr_grpo", _seeds(runs), reference, unpaired),
            **_versus("mask_effect", _seeds(runs), unmasked, unpaired)}


def lowp_table(out: Path, *, unpaired: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per arm, one row per run) of the sweeps under ``out``."""
    per_run = pd.DataFrame([_run_row(arm, run_dir, step) for arm, run_dir, step in _arms(out)])
    if per_run.empty:
        raise SystemExit(f"no finished run under {out}; run: python scripts/smollm2_lowp.py run --out {out}")
    return arm_table(per_run, unpaired=unpaired), per_run


def arm_table(per_run: pd.DataFrame, *, unpaired: bool = False) -> pd.DataFrame:
    """One row per arm of the per-run table (``lowp_runs.csv``): the end pass@1 with its t interval, the difference
    from dr_grpo (Holm-adjusted over the estimators at 30 steps, ``HOLM_FAMILY``) and the mask's effect."""
    ends = {arm: _seeds(runs) for arm, runs in per_run.groupby("arm", sort=False)}
    none = pd.Series(dtype=float)
    arms = [_summary_row(arm, runs, ends.get("dr_grpo", none),
                         ends.get(arm.removesuffix(" +mask"), none) if arm.endswith(" +mask") else none, unpaired)
            for arm, runs in per_run.groupby("arm", sort=False)]
    table = pd.DataFrame(sorted(arms, key=lambda row: _arm_order(row["arm"])))
    family = table["arm"].isin(HOLM_FAMILY) & table["vs_dr_grpo_p"].notna()
    for column in ("vs_dr_grpo_p", "vs_dr_grpo_t_p"):
        table.loc[family, f"{column}_holm"] = holm_correction(table.loc[family, column])
    return table


def _arm_order(arm: str) -> tuple[int, int, str]:
    """The reference first, then the estimators at 30 steps, the masked arms, and sign's longer runs."""
    estimator = arm.split(" ")[0]
    group = 2 if "60-step" in arm else 1 if "+mask" in arm else 0
    return group, ESTIMATOR_ORDER.index(estimator) if estimator in ESTIMATOR_ORDER else 99, arm


def _percent(value: float) -> str:
    return "—" if pd.isna(value) else f"{100 * value:.1f}"


def _markdown(arms: pd.DataFrame) -> str:
    lines = ["| arm | seeds | start pass@1 | end pass@1 [95% t CI] | end pass@2 | end greedy | vs dr_grpo "
             "[95% CI], p, Holm p | mask's effect [95% CI], p | truncated, first / last 5 steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in arms.to_dict("records"):
        versus = "—" if row["arm"] == "dr_grpo" else _difference(row, "vs_dr_grpo")
        lines.append(f"| {row['arm']} | {row['n']} | {_percent(row['start_pass_at_1'])} | "
                     f"{_percent(row['end_pass_at_1'])} [{_percent(row['end_ci_low'])}, "
                     f"{_percent(row['end_ci_high'])}] | {_percent(row['end_pass_at_2'])} | "
                     f"{_percent(row['end_greedy'])} | {versus} | {_difference(row, 'mask_effect')} | "
                     f"{_percent(row['truncated_first5'])} / {_percent(row['truncated_last5'])} |")
    return "\n".join(lines) + "\n\n" + _tests_note(arms)


def _tests_note(arms: pd.DataFrame) -> str:
    """Which tests ran (``grpolab.pairing.which_tests``) and what the Holm family is."""
    rows = [{"test": row[f"{prefix}_test"], "seeds_shared": row[f"{prefix}_seeds_shared"],
             "unpaired": row[f"{prefix}_unpaired"]}
            for row in arms.to_dict("records") for prefix in ("vs_dr_grpo", "mask_effect")
            if isinstance(row.get(f"{prefix}_test"), str)]
    return (f"{which_tests(rows)} Differences in points, end pass@1; Holm p: adjusted over the {len(HOLM_FAMILY)} "
            f"estimators against dr_grpo at 30 steps ({', '.join(HOLM_FAMILY)}); the other p values are unadjusted."
            f"{_floor_note(arms)}")


def _floor_note(arms: pd.DataFrame) -> str:
    """Where a paired p was raised to the floor of what n seeds can carry, the t-test's own p and Holm p."""
    floored = arms[arms["vs_dr_grpo_test"].eq("paired t (floored)") & arms["vs_dr_grpo_t_p_holm"].notna()]
    if floored.empty:
        return ""
    n = int(floored["n"].min())
    own = "; ".join(f"{row['arm']} {row['vs_dr_grpo_t_p']:.2g} (Holm {row['vs_dr_grpo_t_p_holm']:.3g})"
                    for row in floored.to_dict("records"))
    return (f" With {n} seeds no exact test of paired differences can give p below 2 / 2^{n} = {sign_flip_floor(n):.2g}"
            f", so a paired t p below it is raised to it (docs/report-statistics.md); the paired t-test's own p "
            "against "
            f"dr_grpo, which rests on its normal model: {own}.")


def _difference(row: dict, prefix: str) -> str:
    if pd.isna(row.get(prefix)):
        return "—"
    holm = row.get(f"{prefix}_p_holm")
    return (f"{100 * row[prefix]:+.1f} [{_signed(row[prefix + '_low'])}, {_signed(row[prefix + '_high'])}], "
            f"p = {row[prefix + '_p']:.2g}" + ("" if holm is None or pd.isna(holm) else f", Holm p = {holm:.2g}"))


def _signed(value: float) -> str:
    return "n/a" if pd.isna(value) else f"{100 * value:+.1f}"


def table(args: argparse.Namespace) -> None:
    if args.from_runs:
        per_run = pd.read_csv(args.from_runs)
        arms = arm_table(per_run, unpaired=args.unpaired)
    else:
        arms, per_run = lowp_table(args.out, unpaired=args.unpaired)
    args.dest.mkdir(parents=True, exist_ok=True)
    arms.to_csv(args.dest / "lowp.csv", index=False)
    per_run.to_csv(args.dest / "lowp_runs.csv", index=False)
    text = _markdown(arms) + "\n"
    (args.dest / "lowp.md").write_text(text)
    print(text)


if __name__ == "__main__":
    arguments = _arguments()
    run(arguments) if arguments.action == "run" else table(arguments)
