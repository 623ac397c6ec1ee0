"""Rebuild the demo's tables (README.md, docs/compare-report.md) from the per-run rows in experiments/demo/.

    python scripts/demo_tables.py extract runs/compare   # write experiments/demo/*.csv from a demo's output folder
    python scripts/demo_tables.py                        # print the README table and the report's tables

The demo is ``make demo`` (``grpolab compare`` with its defaults). ``extract`` keeps, of its output folder
(git-ignored, 932 MB with checkpoints), what the tables need:

* ``runs.csv``: one row per result run (the columns of the sweep's own ``runs.csv`` where they exist): estimator,
  G, seed, lr, pass@1 and greedy accuracy at the start and the end, the completions sampled, the prompt-fate
  counts, and the per-prompt success counts of the start and end evaluations (n = 8 samples on each of the 200
  test prompts) as a string of 200 digits, from which pass@k, D_real of the start and the per-family success are
  recomputed.
* ``problems.csv``: the 200 test prompts in evaluation order, with their family.
* ``steps.csv``: one row per (run, training step): the metrics the report's tables read (training reward, the
  completions and completion tokens sampled so far, the uniform-group share and mean success for the Jensen gap,
  the pre-clip gradient norm and whether it was clipped).
* ``selection.csv``: the lr-selection runs' validation scores (the sweep's ``selection.parquet``).
* ``compare.yaml``: the sweep's saved settings (the primary pair and when it was declared, max_grad_norm).

Without ``extract`` the tables are rebuilt with the report's own code (``grpolab.report``) and printed as
Markdown: the README's summary table, then the report's tables in the order of docs/compare-report.md.
``tests/test_demo_tables_script.py`` checks that each printed table appears in its doc as printed.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.diagnostics import pass_at_k_curve
from grpolab.render import Section, render_markdown
from grpolab.report.clipping import clipping_section
from grpolab.report.compute import compute_section
from grpolab.report.curves import curves_section
from grpolab.report.families import families_section
from grpolab.report.fate import fate_section
from grpolab.report.paired_passk import paired_passk_section
from grpolab.report.sections import summary_sections
from grpolab.report.selection import selection_section
from grpolab.report.start import start_section
from grpolab.report.tables import labelled, summary_table
from grpolab.report.verdict import verdict_sections
from grpolab.sweep.settings import SWEEP_FILE, read_saved_settings

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "demo"
FATES = ["fate_prompts", "fate_all_wrong_first", "fate_all_wrong_first_resampled", "fate_escaped", "fate_solved"]
STEP_COLUMNS = {  # steps.csv column -> metrics.jsonl key
    "reward_mean": "rollout/reward_mean",
    "completions_generated": "rollout/completions_generated",
    "tokens_generated": "rollout/tokens_generated",
    "uniform": "starvation/uniform",
    "all_wrong": "starvation/all_wrong",
    "p_mean": "starvation/p_mean",
    "grad_norm": "loss/grad_norm",
    "clipped": "loss/clipped",
}
RUN_KEYS = ["run_id", "estimator", "group_size", "seed"]
NOT_RECORDED = "not recorded"  # how the report's compute table shows a count the runs did not log
DECLARATION = ("primary_declared", "primary_declared_after_results", "primary_replaced")


# ---------------------------------------------------------------------------- extract


def _digits(successes: object) -> str:
    return "".join(str(int(c)) for c in np.asarray(successes, dtype=int))


def _run_rows(results: pd.DataFrame) -> pd.DataFrame:
    start = results[results["phase"] == "start"].set_index("run_id")
    end = results[results["phase"] == "end"].set_index("run_id")
    runs = end[["estimator", "group_size", "seed", "lr", "n"]].copy()
    runs.insert(0, "role", "result")
    runs["start_pass_at_1"] = start["pass_at_k"].reindex(runs.index).map(lambda curve: float(curve[0]))
    runs["end_pass_at_1"] = end["pass_at_k"].map(lambda curve: float(curve[0]))
    runs["start_greedy"] = start["greedy_accuracy"].reindex(runs.index)
    runs["end_greedy"] = end["greedy_accuracy"]
    runs["completions"] = end["completions_generated"].astype(int)
    for column in FATES:
        runs[column] = end[column].astype(int)
    runs["start_successes"] = start["successes"].reindex(runs.index).map(_digits)
    runs["end_successes"] = end["successes"].map(_digits)
    return runs.reset_index().sort_values(["group_size", "estimator", "seed"])


def extract(out_dir: Path, target: Path = DEMO) -> None:
    """Write target/{runs,problems,steps,selection}.csv and compare.yaml from the demo's output folder."""
    results = pd.read_parquet(out_dir / "results.parquet")
    metrics = pd.read_parquet(out_dir / "metrics.parquet")
    families = {tuple(f) for f in results["families"]}
    if len(families) != 1 or (results["n"] > 9).any():
        raise SystemExit(f"{out_dir}: the evaluations differ in their prompts or hold n > 9 samples; not the demo")
    target.mkdir(parents=True, exist_ok=True)
    _run_rows(results).to_csv(target / "runs.csv", index=False)
    pd.DataFrame({"problem": range(len(families.pop())), "family": results["families"].iloc[0]}).to_csv(
        target / "problems.csv", index=False
    )
    steps = metrics[[*RUN_KEYS, "step", *STEP_COLUMNS.values()]].rename(columns={v: k for k, v in STEP_COLUMNS.items()})
    steps.sort_values([*RUN_KEYS[1:], "step"]).to_csv(target / "steps.csv", index=False, float_format="%.6g")
    pd.read_parquet(out_dir / "selection.parquet").to_csv(target / "selection.csv", index=False)
    (target / SWEEP_FILE).write_text((out_dir / SWEEP_FILE).read_text())


# ---------------------------------------------------------------------------- load


def _counts(digits: str) -> np.ndarray:
    return np.array([int(c) for c in digits], dtype=int)


def _evaluation(run: pd.Series, phase: str, families: list[str]) -> dict:
    successes = _counts(run[f"{phase}_successes"])
    n = int(run["n"])
    curve = pass_at_k_curve(np.full(successes.size, n), successes)
    if not math.isclose(curve[1], float(run[f"{phase}_pass_at_1"]), rel_tol=1e-9):
        raise SystemExit(
            f"runs.csv, {run['run_id']}: {phase}_pass_at_1 {run[f'{phase}_pass_at_1']} is not the mean "
            f"success of its {phase}_successes ({curve[1]}); extract the runs again"
        )
    return {
        "phase": phase,
        "step": 0 if phase == "start" else int(run["steps"]),
        "completions_generated": 0 if phase == "start" else int(run["completions"]),
        "greedy_accuracy": float(run[f"{phase}_greedy"]),
        "n": n,
        "pass_at_k": [curve[k] for k in sorted(curve)],
        "successes": successes.tolist(),
        "families": families,
    }


def load_results(demo: Path = DEMO) -> pd.DataFrame:
    """The report's ``results`` frame (one row per (run, evaluation)) rebuilt from runs.csv and problems.csv."""
    runs = pd.read_csv(demo / "runs.csv", dtype={"start_successes": str, "end_successes": str})
    families = pd.read_csv(demo / "problems.csv")["family"].tolist()
    steps = pd.read_csv(demo / "steps.csv").groupby("run_id")["step"].max()
    rows = []
    for _, run in runs.assign(steps=runs["run_id"].map(steps)).iterrows():
        keys = {
            "run_id": run["run_id"],
            "variant": "",
            "estimator": run["estimator"],
            "seed": int(run["seed"]),
            "group_size": int(run["group_size"]),
            "lr": float(run["lr"]),
            "task": "reverse",
            "model": "embedded",
            "steps": int(run["steps"]),
            "status": "finished",
            **{column: int(run[column]) for column in FATES},
        }
        rows += [{**keys, **_evaluation(run, phase, families)} for phase in ("start", "end")]
    return pd.DataFrame(rows)


def load_metrics(demo: Path = DEMO) -> pd.DataFrame:
    """The report's ``metrics`` frame (one row per (run, training step)) from steps.csv."""
    return pd.read_csv(demo / "steps.csv").rename(columns=STEP_COLUMNS).assign(variant="")


def load_selection(demo: Path = DEMO) -> pd.DataFrame:
    return pd.read_csv(demo / "selection.csv", keep_default_na=False, dtype={"variant": str})


def demo_config(demo: Path = DEMO) -> dict:
    """The sweep settings the report reads, from the demo's saved compare.yaml: the primary pair and when it
    was declared, the equivalence margin, max_grad_norm."""
    saved = read_saved_settings(demo / SWEEP_FILE)
    return {
        "compare": {key: saved[key] for key in ("primary", "equivalence_margin")},
        "primary_declaration": {key: saved[key] for key in DECLARATION},
        "train": {"max_grad_norm": saved["max_grad_norm"]},
    }


# ---------------------------------------------------------------------------- tables


def _lr(value: float) -> str:
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def readme_table(results: pd.DataFrame) -> str:
    """README.md's "What the demo shows" table: per (G, estimator) the lr, start and end pass@1 with its 95%
    t interval, and greedy accuracy at the end, in the report's order."""
    summary = summary_table(results)
    lrs = results.groupby(["estimator", "group_size"])["lr"].first()
    lines = ["| estimator | G | lr | start | end pass@1 [95% CI] | greedy accuracy, end |", "|---|---|---|---|---|---|"]
    for _, row in summary.iterrows():
        lines.append(
            f"| `{row['estimator']}` | {row['group_size']} | {_lr(lrs[(row['estimator'], row['group_size'])])} "
            f"| {row['start_accuracy']:.1%} | {row['final_accuracy']:.1%} [{100 * row['ci_low']:.1f}, "
            f"{100 * row['ci_high']:.1f}] | {row['final_greedy']:.1%} |"
        )
    return "\n".join(lines)


def _recorded(table: pd.DataFrame) -> pd.DataFrame:
    """The table without the columns the demo's runs did not record (counts logged since), as its report showed it."""
    return table.loc[:, ~table.astype(str).eq(NOT_RECORDED).all()]


def _no_figure(_figure: object) -> bytes:
    return b""


def report_tables(results: pd.DataFrame, metrics: pd.DataFrame, selection: pd.DataFrame) -> str:
    """The report's text and tables (no figures), as the report's code renders them, in the order of
    docs/compare-report.md."""
    config = demo_config()
    sections = [
        *verdict_sections(results, selection, config, metrics, _no_figure),
        *summary_sections(results, config, metrics),
        selection_section(selection),
        families_section(results),
        start_section(results, metrics),
        paired_passk_section(results, config, _no_figure),
        curves_section(results, metrics, _no_figure),
        fate_section(results),
        compute_section(labelled(metrics), config),
        clipping_section(metrics, config),
    ]
    shown = [
        Section(
            section.title,
            section.paragraphs,
            [(caption, _recorded(table)) for caption, table in section.tables],
            bullets=section.bullets,
        )
        for section in sections
        if section is not None
    ]
    return render_markdown(shown, "The demo's tables", figure_dir="")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["tables", "extract"], default="tables")
    parser.add_argument("out_dir", nargs="?", type=Path, help="extract: the demo's output folder (runs/compare)")
    args = parser.parse_args(argv)
    if args.command == "extract":
        if args.out_dir is None or not (args.out_dir / "results.parquet").is_file():
            parser.error("extract needs the demo's output folder, holding results.parquet (e.g. runs/compare)")
        extract(args.out_dir)
        return 0
    results = load_results()
    print(readme_table(results), end="\n\n")
    print(report_tables(results, load_metrics(), load_selection()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
