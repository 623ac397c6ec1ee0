"""SmolLM2 batch size at a robust `sign` lr: does 4x the prompts per step bring `sign` to `dr_grpo`?

    python scripts/smollm2_batch.py select --out runs/smollm2-batch   # sign's lr at P = 4 (select.yaml) and the rule
    python scripts/smollm2_batch.py run --out runs/smollm2-batch      # the four arms (compare.yaml), resumable
    python scripts/smollm2_batch.py rows --out runs/smollm2-batch     # experiments/smollm2-batch/runs.csv
    python scripts/smollm2_batch.py table                             # results.csv, arms.csv, table.md from the rows

The design, the lr rule and the readings were fixed before any run in experiments/smollm2-batch/README.md.

* ``select`` drives ``grpolab compare`` on ``select.yaml`` (`sign` at P = 4 on four lrs, 3 selection seeds) and
  applies the pre-registered rule to its selection rows (``choose_lr``): among the lrs whose worst seed's validation
  pass@1 exceeds ``FLOOR``, the best mean (a tie: the smaller lr); if none qualifies, the best worst seed. It
  writes ``selection.csv`` (the selection runs' rows) and ``lr.csv`` (one row per lr, the chosen one marked).
* ``run`` drives ``grpolab compare`` on ``compare.yaml`` twice: `sign` at the chosen lr and `dr_grpo` at
  ``DR_GRPO_LR``, each at P = 4 and 16. Re-running resumes.
* ``rows`` reads each run's ``eval.jsonl`` and the sweeps' ``metrics.parquet`` into one row per run: pass@1 and
  greedy accuracy at steps 0, 10, 20, 30, the mean half-batch cosine over steps 1-5, the clipped share and the
  update compute (optimizer steps, trained sequences, trained and sampled tokens).
* ``table`` reads only the committed rows and writes ``results.csv`` (the paired tests and the verdict),
  ``arms.csv`` and ``table.md``.

The tests are ``grpolab.pairing.compare_arms`` (paired by seed, the paired t floored at 2 / 2^n, TOST) and Holm
over the pre-registered family of two (``grpolab.stats.holm_correction``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

from grpolab.metric_keys import COMPUTE

EXPERIMENT = Path("experiments/smollm2-batch")
FLOOR = 0.10  # an lr qualifies when its worst selection seed's validation pass@1 exceeds this
DR_GRPO_LR = 2e-4  # dr_grpo's lr in the real-model experiment (docs/real-model-experiment.md)
PROMPTS = (4, 16)
EVAL_STEPS = (0, 10, 20, 30)
END_STEP = 30
EARLY_STEPS = 5  # the SNR report: the mean cosine over steps 1..EARLY_STEPS
MARGIN = 0.10  # TOST margin, +-10 points of pass@1
CEILING = 0.90  # dr_grpo@4's mean end pass@1 at or above this: equivalence is not read
ALPHA = 0.05
FORMULA_RATIO = (0.23, 0.28)  # the isotropic formula's sign/dr_grpo SNR^2 ratio at this start (docs/when-sign-helps.md)
PRIMARY = ("sign", 16, "dr_grpo", 4)  # d1
BATCH = ("sign", 16, "sign", 4)  # d2
BESIDE = (("dr_grpo", 16, "dr_grpo", 4),)
NOISE = "noise is supported"
NOT_SUFFICIENT = "noise is not sufficient"
NEITHER = "no evidence either way at this n"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["select", "run", "rows", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2-batch"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=EXPERIMENT, help="where select, rows and table write")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--seeds 2' or '--steps 2'")
    return parser.parse_args()


def _compare(args: argparse.Namespace, config: str, out: Path, *more: str) -> None:
    command = [str(Path(sys.executable).with_name("grpolab")), "compare", "--config", str(EXPERIMENT / config),
               "--out", str(out), "--workers", str(args.workers), "--threads", "1", "--no-report", *more,
               *args.extra.split()]
    if (out / "runs.csv").is_file():
        print(f"done already: {out}", flush=True)
        return
    print("$", " ".join(command[1:]), flush=True)
    if subprocess.run(command, check=False).returncode:
        raise SystemExit(f"grpolab compare stopped before {out} finished; re-run the same command to resume")


# ---------------------------------------------------------------- step 1: sign's lr


def choose_lr(selection: pd.DataFrame) -> pd.DataFrame:
    """One row per lr of the selection rows (columns lr, seed, end_pass_at_1): seeds, mean, worst, whether it
    qualifies (worst > FLOOR) and which lr the pre-registered rule chooses (``chosen``), with the rule that chose."""
    by_lr = selection.groupby("lr")["end_pass_at_1"]
    table = pd.DataFrame({"seeds": by_lr.size(), "mean": by_lr.mean(), "worst": by_lr.min()}).reset_index()
    table["qualifies"] = table["worst"] > FLOOR
    pool, rule = ((table[table["qualifies"]], "best mean among lrs whose worst seed exceeds the floor")
                  if table["qualifies"].any() else (table, "no lr qualifies: the best worst seed"))
    key = "mean" if table["qualifies"].any() else "worst"
    best = pool[pool[key] == pool[key].max()]["lr"].min()  # a tie: the smaller lr
    table["chosen"] = table["lr"] == best
    table["rule"] = rule
    return table


SELECTION_COLUMNS = ["run_id", "estimator", "seed", "group_size", "lr", "split", "n", "end_greedy", "end_pass_at_1"]


def select(args: argparse.Namespace) -> None:
    """Run the selection (or find it done), commit its rows as ``selection.csv`` and the rule's table as ``lr.csv``."""
    out = args.out / "select"
    _compare(args, "select.yaml", out)
    runs = pd.read_csv(out / "runs.csv")
    selection = runs.loc[runs["role"] == "selection", SELECTION_COLUMNS].sort_values(["lr", "seed"], kind="stable")
    selection.to_csv(args.dest / "selection.csv", index=False)
    table = choose_lr(selection)
    table.to_csv(args.dest / "lr.csv", index=False)
    print(table.to_string(index=False))


def chosen_lr(dest: Path) -> float:
    table = pd.read_csv(dest / "lr.csv")
    return float(table.loc[table["chosen"], "lr"].iloc[0])


# ---------------------------------------------------------------- step 2: the arms


def run(args: argparse.Namespace) -> None:
    if not (args.dest / "lr.csv").is_file():
        raise SystemExit(f"no {args.dest / 'lr.csv'}; run: python scripts/smollm2_batch.py select first")
    _compare(args, "compare.yaml", args.out / "sign", "--estimators", "sign", "--lr", f"{chosen_lr(args.dest):g}")
    _compare(args, "compare.yaml", args.out / "dr_grpo", "--estimators", "dr_grpo", "--lr", f"{DR_GRPO_LR:g}")


def _evaluations(run_dir: Path) -> dict[int, dict[str, float]]:
    """step -> {pass_at_1, greedy} of a run's held-out evaluations."""
    found = {}
    for line in (run_dir / "eval.jsonl").read_text().splitlines():
        row = json.loads(line)
        found[int(row["step"])] = {"pass_at_1": float(row["pass_at_k"]["1"]), "greedy": float(row["greedy_accuracy"])}
    return found


def _compute(steps: pd.DataFrame) -> dict[str, float]:
    """The run's update compute: each counter's cumulative key (``grpolab.metric_keys.COMPUTE``) at its last step."""
    last = steps.sort_values("step").iloc[-1]
    return {name: float(last.get(total, math.nan)) for name, (_, total) in COMPUTE.items()}


def run_row(folder: Path, run_row: pd.Series, steps: pd.DataFrame) -> dict[str, object]:
    """One result run's row: arm, seed, lr, the evaluations, the early cosine, the clipped share, the compute."""
    run_id = run_row["run_id"]
    scores = _evaluations(folder / "runs" / run_id)
    mine = steps[steps["run_id"] == run_id]
    early = mine.loc[mine["step"] <= EARLY_STEPS, "grad/half_batch_cosine"]
    row: dict[str, object] = {"estimator": run_row["estimator"],
                              "prompts": int(str(run_row["variant"]).split("=")[1]),
                              "seed": int(run_row["seed"]), "lr": float(run_row["lr"])}
    for step in EVAL_STEPS:
        row[f"pass_at_1_step{step}"] = scores.get(step, {}).get("pass_at_1", math.nan)
        row[f"greedy_step{step}"] = scores.get(step, {}).get("greedy", math.nan)
    row["cosine_early"] = float(early.fillna(0.0).mean())
    row["cosine_early_undefined"] = float(early.isna().mean())
    row["clipped"] = float(mine["loss/clipped"].mean())
    return {**row, **_compute(mine)}


def read_runs(out: Path) -> pd.DataFrame:
    rows = []
    for folder in (out / "sign", out / "dr_grpo"):
        if not (folder / "runs.csv").is_file():
            continue
        runs = pd.read_csv(folder / "runs.csv")
        steps = pd.read_parquet(folder / "metrics.parquet")
        rows += [run_row(folder, row, steps) for _, row in runs[runs["role"] == "result"].iterrows()]
    if not rows:
        raise SystemExit(f"no finished sweep under {out}; run: python scripts/smollm2_batch.py run")
    return pd.DataFrame(rows).sort_values(["estimator", "prompts", "seed"], kind="stable")


def rows(args: argparse.Namespace) -> None:
    read_runs(args.out).to_csv(args.dest / "runs.csv", index=False)
    print(f"wrote {args.dest / 'runs.csv'}")


# ---------------------------------------------------------------- the tests and the verdict


def snr2(cosine: float) -> float:
    """SNR^2 = 2c / (1 - c) of the half-batch cosine c (``grpolab.gradients.halves``)."""
    return 2 * cosine / (1 - cosine) if cosine < 1 else math.inf


def _arm(runs: pd.DataFrame, estimator: str, prompts: int, column: str) -> pd.Series:
    arm = runs[(runs["estimator"] == estimator) & (runs["prompts"] == prompts)]
    return pd.Series(arm[column].to_numpy(float), index=arm["seed"].to_numpy())


def _name(pair: tuple[str, int, str, int]) -> str:
    return f"{pair[0]}@{pair[1]} - {pair[2]}@{pair[3]}"


def comparisons(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The paired comparisons of d1, d2 (Holm over the two) and the ones reported beside them, on ``column``."""
    from grpolab.pairing import compare_arms
    from grpolab.stats import holm_correction

    result = []
    for pair in (PRIMARY, BATCH, *BESIDE):
        a, b = _arm(runs, pair[0], pair[1], column), _arm(runs, pair[2], pair[3], column)
        if min(len(a), len(b)) < 2:
            continue
        found = compare_arms(a, b, margin=MARGIN)
        result.append({"metric": column, "difference": _name(pair), "n": found["n_a"], "mean_a": found["mean_a"],
                       "mean_b": found["mean_b"], "gain": found["mean_difference"], "low": found["difference_low"],
                       "high": found["difference_high"], "test": found["test"], "p": found["p"], "t_p": found["t_p"],
                       "tost_p": found["tost_p"]})
    table = pd.DataFrame(result)
    if table.empty:
        return table
    family = table["difference"].isin([_name(PRIMARY), _name(BATCH)])
    table["p_holm"] = math.nan
    table.loc[family, "p_holm"] = holm_correction(table.loc[family, "p"].tolist())
    return table


def verdict(results: pd.DataFrame) -> str:
    """The pre-registered reading of the end pass@1 rows of ``comparisons``."""
    by_name = results.set_index("difference")
    primary, batch = by_name.loc[_name(PRIMARY)], by_name.loc[_name(BATCH)]
    at_ceiling = primary["mean_b"] >= CEILING
    found = [NOISE] if (batch["gain"] > 0 and batch["p_holm"] < ALPHA and not at_ceiling
                        and primary["tost_p"] < ALPHA) else []
    found += [NOT_SUFFICIENT] if primary["gain"] < 0 and primary["p_holm"] < ALPHA else []
    return " and ".join(found) if found else NEITHER


def arm_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: seeds, lr, pass@1 and greedy at each evaluation, the early cosine and its SNR^2, the clipped
    share and the update compute (means over seeds)."""
    columns = [c for c in runs.columns if c.startswith(("pass_at_1_", "greedy_"))]
    columns += ["cosine_early", "cosine_early_undefined", "clipped", *COMPUTE]
    cells = runs.groupby(["estimator", "prompts"], sort=False).agg(
        n=("seed", "size"), lr=("lr", "first"), **{c: (c, "mean") for c in columns}).reset_index()
    cells["snr2_early"] = cells["cosine_early"].map(snr2)
    return cells


def snr_ratios(arms: pd.DataFrame) -> pd.DataFrame:
    """The measured SNR^2 ratios over steps 1-5 beside the formula's range: sign / dr_grpo at each P, and
    sign@16 / dr_grpo@4."""
    snr = arms.set_index(["estimator", "prompts"])["snr2_early"]
    pairs = [("sign", p, "dr_grpo", p) for p in PROMPTS] + [PRIMARY]
    return pd.DataFrame([{"ratio": f"{a}@{pa} / {b}@{pb}", "measured": snr[(a, pa)] / snr[(b, pb)],
                          "formula_low": FORMULA_RATIO[0], "formula_high": FORMULA_RATIO[1]}
                         for a, pa, b, pb in pairs if (a, pa) in snr.index and (b, pb) in snr.index])


def _markdown(frame: pd.DataFrame) -> str:
    def cell(value: object) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _points(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    scaled = frame.copy()
    for column in scaled.columns:
        if column.startswith(columns):
            scaled[column] = scaled[column] * 100
    return scaled


def build_tables(runs: pd.DataFrame, lrs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """results, arms and table.md's text."""
    metrics = [f"pass_at_1_step{END_STEP}", f"greedy_step{END_STEP}"] + [
        f"{m}_step{s}" for m in ("pass_at_1", "greedy") for s in EVAL_STEPS if s not in (0, END_STEP)]
    results = pd.concat([comparisons(runs, m) for m in metrics if m in runs.columns], ignore_index=True)
    primary = results[results["metric"] == f"pass_at_1_step{END_STEP}"]
    reading = verdict(primary) if {_name(PRIMARY), _name(BATCH)} <= set(primary["difference"]) else "incomplete"
    arms = arm_table(runs)
    text = "\n".join([
        "# SmolLM2 batch size at a robust sign lr: tables", "",
        "Written by `python scripts/smollm2_batch.py table` from `runs.csv` and `lr.csv`; scores in points "
        f"(x 100). Primary: end pass@1 (step {END_STEP}, 200 test prompts, 2 samples each), paired by seed; p: the "
        "paired t floored at 2 / 2^n; p_holm: Holm over d1 and d2; TOST margin +-10 points. The other metrics' rows "
        "use the same tests and are reported beside the primary ones.", "",
        f"**Pre-registered reading: {reading}.**", "",
        "## Step 1: sign's lr (validation pass@1 at P = 4)", "", _markdown(_points(lrs, ("mean", "worst"))), "",
        "## Comparisons", "", _markdown(_points(results, ("mean_", "gain", "low", "high"))), "",
        "## Arms (means over seeds)", "",
        "cosine_early: the mean half-batch cosine over steps 1-5 (undefined counted as 0; its share beside it); "
        "snr2_early = 2c/(1 - c); compute: totals per run.", "",
        _markdown(_points(arms, ("pass_at_1_", "greedy_"))), "",
        "## Measured SNR^2 ratios, steps 1-5, against the isotropic formula", "", _markdown(snr_ratios(arms)), ""])
    return results, arms, text


def table(args: argparse.Namespace) -> None:
    runs = pd.read_csv(args.dest / "runs.csv")
    lrs = pd.read_csv(args.dest / "lr.csv")
    results, arms, text = build_tables(runs, lrs)
    results.to_csv(args.dest / "results.csv", index=False)
    arms.to_csv(args.dest / "arms.csv", index=False)
    (args.dest / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    arguments = _arguments()
    {"select": select, "run": run, "rows": rows, "table": table}[arguments.action](arguments)
