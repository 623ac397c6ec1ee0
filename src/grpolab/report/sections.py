"""The sections of the ``grpolab compare`` report, one function each, after arXiv 2605.07689.

Summary; final accuracy per estimator (paper Fig. 1); statistics of every pairwise comparison (no claim without its
p-value and n); pass@k (Fig. 3); training dynamics (Fig. 4: the ``dynamics`` rows of ``grpolab.metric_keys``), also
against completions generated when an estimator uses dynamic sampling (``+dynamic``), with an equal-cost table; the
gradient's effective rank when ``metric_keys.GROUP_RANK`` was tracked. Each function returns a ``Section`` with its
figures already rendered to PNG; a section whose inputs are missing (no metrics, missing columns) says so in a note
instead of failing. The numbers come from ``grpolab.report.tables``, the figures from ``grpolab.report.figures``;
``grpolab.report.document`` puts the sections in order. The start policy's section (Fig. 2) is
``grpolab.report.start``, the learning curves ``grpolab.report.curves``.
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from grpolab import advantages, metric_keys
from grpolab.advantages import display_order, entry_for
from grpolab.equivalence import margin_rule
from grpolab.render import Section
from grpolab.report import figures as figs
from grpolab.report.comparisons import comparisons, equivalence_margin, permutation_floor_notes, reading
from grpolab.report.tables import (
    ALPHA,
    N_RESAMPLES,
    equal_cost_table,
    labelled,
    run_table,
    summary_table,
)

METRICS_KEYS = ("run_id", "estimator", "group_size", "step")
DYNAMIC = advantages.DYNAMIC_SUFFIX


def figure_png(fig: Figure) -> bytes:
    """A figure as PNG bytes (closed afterwards)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=figs.DPI)
    plt.close(fig)
    return buffer.getvalue()


def _pct(value: float, signed: bool = False) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    return f"{100 * value:+.1f} pts" if signed else f"{100 * value:.1f}%"


def _num(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}g}"


def summary_display(summary: pd.DataFrame) -> pd.DataFrame:
    def ci(row: pd.Series) -> str:
        if row["n_seeds"] < 2:
            return f"n/a (n = {row['n_seeds']})"
        return f"[{_pct(row['ci_low'])}, {_pct(row['ci_high'])}]"

    columns = {"Variant": summary["variant"]} if "variant" in summary and (summary["variant"] != "").any() else {}
    columns.update({"Estimator": summary["estimator"], "G": summary["group_size"], "Seeds": summary["n_seeds"]})
    if "n_diverged" in summary and summary["n_diverged"].gt(0).any():
        columns["Diverged (left out)"] = summary["n_diverged"]
    return pd.DataFrame(
        {
            **columns,
            "Start score": summary["start_accuracy"].map(_pct),
            "Final score": summary["final_accuracy"].map(_pct),
            "95% CI": summary.apply(ci, axis=1),
            "Change": summary["change"].map(lambda v: _pct(v, signed=True)),
            "Greedy start": summary["start_greedy"].map(_pct),
            "Greedy final": summary["final_greedy"].map(_pct),
            "pass@n": [f"{_pct(p)} (n = {n})" for p, n in zip(summary["pass@n"], summary["n"], strict=True)],
            "Completions": summary["completions"].map(lambda v: f"{v:,.0f}"),
        }
    )


ROLE_NAMES = {"primary": "primary (Holm, its family)", "secondary": "secondary (Holm, its family)",
              "same_update": "same update", "repeat": "repeat"}
STATISTICS_COLUMNS = ("Metric", "Test", "95% CI of A - B", "p", "p (Holm, its family)", "TOST p (Holm)",
                      "Greedy A - B", "Greedy p (Holm)", "Welch p", "Permutation p", "Seed r",
                      "P(A > B) [95% CI]", "IQM A", "IQM B", "Hedges g")


def _interval(low: float, high: float, format_value: Any) -> str:
    return f"[{format_value(low)}, {format_value(high)}]"


def _tested_columns(r: dict[str, Any]) -> dict[str, str]:
    """The statistics of a tested pair; 'n/a' for the rest."""
    if not r["tested"]:
        return dict.fromkeys(STATISTICS_COLUMNS, "n/a")
    greedy = "greedy_p_holm" in r
    return {
        "Metric": "pass@1" if r.get("sampled", True) else "greedy",
        "Test": r["test"],
        "95% CI of A - B": _interval(r["difference_low"], r["difference_high"], lambda v: _pct(v, signed=True)),
        "p": _num(r["p"]),
        "p (Holm, its family)": _num(r["p_holm"]),
        "TOST p (Holm)": _num(r["tost_p_holm"]),
        "Greedy A - B": _pct(r["greedy_mean_difference"], signed=True) if greedy else "n/a",
        "Greedy p (Holm)": _num(r["greedy_p_holm"]) if greedy else "n/a",
        "Welch p": _num(r["welch_p"]),
        "Permutation p": _num(r["permutation_p"]),
        "Seed r": _num(r["seed_correlation"], 2),
        "P(A > B) [95% CI]": f"{r['prob_improvement']:.2f} "
                             + _interval(r["prob_improvement_low"], r["prob_improvement_high"], lambda v: f"{v:.2f}"),
        "IQM A": _pct(r["iqm_a"]),
        "IQM B": _pct(r["iqm_b"]),
        "Hedges g": _num(r["hedges_g"]),
    }


def _stats_display(rows: list[dict[str, Any]]) -> pd.DataFrame:
    variant = any(r["variant"] for r in rows)
    return pd.DataFrame(
        [
            {
                **({"Variant": r["variant"]} if variant else {}),
                "G": r["group_size"],
                "Pair (A vs B)": f"{r['name_a']} vs {r['name_b']}",
                "Role": ROLE_NAMES[r["role"]],
                "n": f"{r['n_a']} vs {r['n_b']}",
                "Mean A": _pct(r["mean_a"]),
                "Mean B": _pct(r["mean_b"]),
                "A - B": _pct(r["mean_difference"], signed=True),
                **_tested_columns(r),
            }
            for r in rows
        ]
    )


def _overview(results: pd.DataFrame, config: dict[str, Any]) -> str:
    def values(column: str) -> str:
        if column not in results.columns:
            return "?"
        return ", ".join(str(v) for v in sorted(results[column].dropna().unique(), key=str))

    names = ", ".join(display_order(results["estimator"]))
    return (
        f"{results['run_id'].nunique()} runs: estimators {names}; group sizes G = {values('group_size')}; "
        f"seeds {values('seed')}; task {values('task')}; model {values('model')}; "
        f"{values('steps')} training steps. The score is held-out pass@1 of each run's last evaluation "
        f"(greedy accuracy when no samples were drawn); CIs are 95% Student-t intervals over seeds."
    )


def _papers(results: pd.DataFrame) -> list[str]:
    """One paragraph naming the paper of each registered estimator compared (from the registry); none if no
    estimator has one."""
    names = [n for n in display_order(results["estimator"]) if "+" not in n]
    cited = [f"{n}: {entry.paper.citation}" for n in names if (entry := entry_for(n)) is not None and entry.paper]
    return [f"Estimators' papers: {'; '.join(cited)}."] if cited else []


def _equal_cost_readings(table: pd.DataFrame) -> list[str]:
    """One line per group size: each estimator's accuracy at the shared completions budget (or its cost)."""
    lines = []
    for size, group in table.groupby("group_size"):
        if group["accuracy_at_budget"].notna().all():
            parts = [f"{r.estimator} {_pct(r.accuracy_at_budget)}" for r in group.itertuples()]
            lines.append(
                f"G = {size}, at equal sampling cost ({group['budget'].iloc[0]:,.0f} completions): "
                + ", ".join(parts)
                + " (mean over seeds; last evaluation within the budget)."
            )
        else:
            parts = [f"{r.estimator} {r.completions_end:,.0f}" for r in group.itertuples()]
            lines.append(
                f"G = {size}: no evaluation at equal cost; completions used by the end: " + ", ".join(parts) + "."
            )
    return lines


def sampler_reading(metrics: pd.DataFrame | None) -> list[str]:
    """One sentence on how the runs sampled (``perf/sampler_graph``, ``perf/sampler_fell_back``): the runs whose
    rollouts fell back from the sampler their device and model call for, named; none when the runs predate the
    record or sampled on the CPU without falling back."""
    if metrics is None or not present(metrics, ["perf/sampler_fell_back"]):
        return []
    fell_back = metrics.loc[metrics["perf/sampler_fell_back"] > 0, "run_id"].unique()
    graph = present(metrics, ["perf/sampler_graph"]) and (metrics["perf/sampler_graph"] > 0).any()
    if len(fell_back):
        named = ", ".join(sorted(map(str, fell_back))[:5]) + (", ..." if len(fell_back) > 5 else "")
        return [f"Sampling fell back in {len(fell_back)} of {metrics['run_id'].nunique()} runs ({named}): they "
                "sampled eagerly or through transformers where their device and model call for the lean decoder's "
                "CUDA graph; each run's summary.json says why. Their speed is not the sampler's."]
    return ["Every rollout of every run replayed the lean decoder's CUDA graph."] if graph else []


def summary_sections(results: pd.DataFrame, config: dict[str, Any],
                     metrics: pd.DataFrame | None = None) -> list[Section]:
    runs, summary = run_table(results), summary_table(results)
    rows, notes = comparisons(runs, config)
    notes += permutation_floor_notes(rows)
    readings = [reading(r) for r in rows] + notes
    if results["estimator"].str.contains(DYNAMIC, regex=False).any():
        readings += _equal_cost_readings(equal_cost_table(labelled(results)))
    summary_section = Section(
        "Summary",
        [_overview(results, config), *_papers(results), *sampler_reading(metrics)],
        [("Final accuracy per estimator and group size", summary_display(summary))],
        bullets=readings,
    )
    accuracy = Section(
        "Final accuracy",
        figures=[
            (
                "final_accuracy",
                "Final held-out score (pass@1; greedy accuracy without samples) per estimator; bars are means "
                "over seeds, whiskers 95% "
                "Student-t CIs (none for a single seed), dots individual seeds.",
                figure_png(figs.figure_final_accuracy(labelled(runs), labelled(summary))),
            )
        ],
    )
    margin = equivalence_margin(config)
    text = (
        "Pairs are compared within each group size (and variant) on the final score per seed, paired by seed "
        "where both arms ran the same seeds (Test: paired t; the interval is the t interval of the per-seed "
        "differences, Seed r the correlation of the two arms' seeds), else by Welch's test and interval. Two "
        "families, each Holm-corrected as one (Holm 1979): the primary pair (--primary) at every group size and "
        "variant, and every other tested pair; pairs that are the same update under Adam are listed, not tested. "
        f"A pair is called different when its Holm-adjusted p is < {ALPHA}, equivalent when its Holm-adjusted "
        f"TOST p (Schuirmann 1987; {margin_rule(margin)}) is < {ALPHA}, and otherwise neither: no evidence "
        "either way at this n. Greedy accuracy is tested the same way beside pass@1. Also shown: Welch's p, a "
        f"permutation test (exact when at most {N_RESAMPLES:,} splits), Hedges' g, and rliable's interquartile "
        "means and probability of improvement P(A > B) (Agarwal et al. 2021) with Newcombe's 95% interval."
    )
    table = [("Pairwise comparisons of final accuracy", _stats_display(rows))] if rows else []
    statistics = Section("Statistics", [text] if rows else [text, "No test could be run."], table, bullets=notes)
    return [summary_section, accuracy, statistics]


def pass_at_k_section(runs: pd.DataFrame) -> Section:
    text = (
        "Unbiased pass@k (Chen et al. 2021) over the test set, mean over seeds. A gain at k = 1 that "
        "shrinks as k grows is search compression (the policy finds more often what it could already "
        "find); a gain at large k would be new capacity."
    )
    section = Section("pass@k", [text])
    if not any(len(p or []) for p in runs["end_pass_at_k"]):
        section.notes.append("The evaluations hold no pass@k values (n = 0 samples per prompt): no curves.")
        return section
    caption = "pass@k per estimator at the end of training (solid) and of the shared start policy (black dashed)."
    section.figures.append(("pass_at_k", caption, figure_png(figs.figure_pass_at_k(runs))))
    return section


def usable_metrics(metrics: pd.DataFrame | None) -> tuple[pd.DataFrame, str | None]:
    """Metrics with their key columns, or (empty frame, the reason it is unusable)."""
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=list(METRICS_KEYS)), "No training metrics were recorded."
    missing = [c for c in METRICS_KEYS if c not in metrics.columns]
    if missing:
        return pd.DataFrame(columns=list(METRICS_KEYS)), f"Training metrics lack the columns {missing}."
    return metrics, None


def present(metrics: pd.DataFrame, columns: list[str]) -> list[str]:
    return [c for c in columns if c in metrics.columns and metrics[c].notna().any()]


def dynamics_section(metrics: pd.DataFrame, problem: str | None) -> Section:
    section = Section("Training dynamics")
    columns = metric_keys.dynamics_keys(present(metrics, list(metrics.columns)))
    if problem or not columns:
        section.notes.append(problem or "None of the reward / starvation metric columns were recorded.")
        return section
    window = max(1, round(metrics.groupby("run_id")["step"].nunique().median() / 20))
    panels = "; ".join(f"{metric_keys.label(key)}: {metric_keys.lookup(key).meaning}" for key in columns)
    section.paragraphs.append(
        f"Per estimator, mean over seeds with its 95% Student-t band, smoothed by a rolling mean over {window} "
        f"step(s). {panels} (docs/metrics.md). A uniform group (rewards all equal) is degenerate (advantages all "
        "zero) under a group-centred estimator, never under sign: a group-centred estimator stuck at a high "
        "all-wrong share is starved of gradient."
    )
    section.figures.append(
        (
            "dynamics_steps",
            "Training dynamics against training steps.",
            figure_png(figs.figure_dynamics(metrics, columns, "step", "Training step", window)),
        )
    )
    dynamic = metrics["estimator"].str.contains(DYNAMIC, regex=False).any()
    if dynamic and present(metrics, ["rollout/completions_generated"]):
        section.figures.append(
            (
                "dynamics_completions",
                "The same curves against completions sampled "
                "(equal sampling cost: dynamic sampling draws extra groups).",
                figure_png(
                    figs.figure_dynamics(
                        metrics,
                        columns,
                        "rollout/completions_generated",
                        "Completions sampled (cumulative)",
                        window,
                    )
                ),
            )
        )
    elif dynamic:
        section.notes.append("rollout/completions_generated was not recorded: no equal-cost curves.")
    return section


def equal_cost_section(results: pd.DataFrame) -> Section:
    table = equal_cost_table(results)
    display = pd.DataFrame(
        {
            "Estimator": table["estimator"],
            "G": table["group_size"],
            "Seeds": table["n_seeds"],
            "Completions by the end": table["completions_end"].map(lambda v: f"{v:,.0f}"),
            "Final accuracy": table["final_accuracy"].map(_pct),
            "Budget (completions)": table["budget"].map(lambda v: f"{v:,.0f}"),
            "Accuracy at budget": table["accuracy_at_budget"].map(_pct),
            "Evaluated at (completions)": table["completions_at_budget"].map(
                lambda v: "n/a" if not np.isfinite(v) else f"{v:,.0f}"
            ),
        }
    )
    text = (
        "Dynamic sampling redraws prompts whose groups are degenerate, so it samples more completions per "
        "step. The budget of a group size is the largest completions count every run of it reached; "
        "accuracy at budget is each run's last evaluation within it (mean over seeds)."
    )
    section = Section("Equal sampling cost", [text], [("Accuracy at equal sampling cost", display)])
    if table["accuracy_at_budget"].isna().any():
        section.notes.append(
            "Some runs have no evaluation within the budget other than the start (only end "
            "evaluations exist): compare them through the completions each used, listed above."
        )
    return section


def rank_section(metrics: pd.DataFrame) -> Section:
    text = (
        "Effective rank (exp of the entropy of the normalised singular values, Roy & Vetterli 2007) of each "
        "group's matrix of per-completion contributions A_i g_i [G, D], mean over the groups with a nonzero "
        f"matrix ({metric_keys.GROUP_RANK}), at the steps where it was tracked. The policy-gradient foundations "
        "paper reports an effective rank of about 2 (dotted line). With binary rewards a group's gradient lies in "
        "the span of the summed gradients of its correct and of its wrong completions for any estimator that is a "
        "function of the reward, sign included (grad/rank2_residual: an identity), and along one direction for a "
        "zero-sum estimator (grad/rank1_residual). The matrix's rank is bounded by G, not by 2, and on the embedded "
        "model it grows with G (docs/gradient-geometry.md). metrics.parquet holds the other matrices' ranks "
        "(grad/*_effective_rank)."
    )
    return Section(
        "Gradient effective rank",
        [text],
        figures=[
            (
                "effective_rank",
                "Gradient effective rank per estimator and group size; dotted: the paper's 'about 2'.",
                figure_png(figs.figure_effective_rank(metrics)),
            )
        ],
    )
