"""The whole ``grpolab compare`` report: its sections in order, written as HTML and as Markdown.

``build_sections`` checks the results frame and lists the sections (verdict, summary, data, lr selection,
families, start policy, pass@k, dynamics, equal cost, effective rank, configuration); ``write_report``
renders them to ``report.html`` and ``report.md`` with ``grpolab.render``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab.errors import UserError
from grpolab.io import atomic_write_bytes, atomic_write_text
from grpolab.render import Section, render_html, render_markdown
from grpolab.report.data import data_sections
from grpolab.report.sections import (
    DYNAMIC,
    dynamics_section,
    equal_cost_section,
    pass_at_k_section,
    present,
    rank_section,
    start_section,
    summary_sections,
    usable_metrics,
)
from grpolab.report.tables import run_table
from grpolab.report.verdict import families_section, selection_section, verdict_section

RESULTS_COLUMNS = tuple(
    "run_id estimator seed group_size phase step completions_generated greedy_accuracy n pass_at_k successes".split()
)


def build_sections(results: pd.DataFrame, metrics: pd.DataFrame | None, config: dict[str, Any],
                   selection: pd.DataFrame | None = None) -> list[Section]:
    """Every section of the report, in order (figures already rendered to PNG)."""
    _check_results(results)
    usable, problem = usable_metrics(metrics)
    sections = [verdict_section(results, selection), *summary_sections(results, config), *data_sections(config)]
    if selection is not None and not selection.empty:
        sections.append(selection_section(selection))
    family = families_section(results)
    sections += [family] if family is not None else []
    sections += [
        start_section(results, usable),
        pass_at_k_section(run_table(results)),
        dynamics_section(usable, problem),
    ]
    if results["estimator"].str.contains(DYNAMIC, regex=False).any():
        sections.append(equal_cost_section(results))
    if present(usable, ["grad/effective_rank"]):
        sections.append(rank_section(usable))
    sections.append(
        Section(
            "Configuration",
            ["The sweep settings saved with the results."],
            code=json.dumps(config, indent=2, sort_keys=True, default=str),
        )
    )
    return sections


def _check_results(results: pd.DataFrame) -> None:
    missing = [c for c in RESULTS_COLUMNS if c not in results.columns]
    if missing:
        raise UserError(f"results lack the columns {missing}; pass the sweep's results table")
    if not (results["phase"] == "end").any():
        raise UserError("results hold no 'end' evaluation: no run finished, so there is nothing to report")


def write_report(
    out_dir: Path, results: pd.DataFrame, metrics: pd.DataFrame | None, config: dict[str, Any],
    selection: pd.DataFrame | None = None,
) -> tuple[Path, Path]:
    """Write ``out_dir/report.html`` (self-contained) and ``out_dir/report.md`` (+ ``figures/*.png``).

    results: one row per (run, evaluation) with run_id, estimator, seed, group_size, task, model, steps,
    phase ("start" / "step" / "end"), step, completions_generated, greedy_accuracy, n, pass_at_k [n],
    successes [P], mean_length. metrics: one row per (run, training step) with run_id, estimator, seed,
    group_size, step and ``rollout/``, ``starvation/``, ``loss/``, ``perf/``, ``grad/`` columns (any may be
    missing; empty or None is allowed). config: the sweep settings. selection: the lr-selection runs
    (``experiments.select_lrs``), or None. Returns (html path, markdown path).
    """
    out_dir = Path(out_dir)
    sections = build_sections(results, metrics, config, selection)
    title = f"grpolab compare: {config.get('name', 'estimator comparison')}"
    figure_dir = out_dir / "figures"
    figure_dir.mkdir(parents=True, exist_ok=True)
    for section in sections:
        for stem, _, png in section.figures:
            atomic_write_bytes(figure_dir / f"{stem}.png", png)
    html_path, md_path = out_dir / "report.html", out_dir / "report.md"
    atomic_write_text(html_path, render_html(sections, title))
    atomic_write_text(md_path, render_markdown(sections, title))
    return html_path, md_path
