"""The whole ``grpolab compare`` report: its sections in order, written as HTML and as Markdown.

``build_sections`` checks the results frame and lists the sections: the verdict (its bottom line and forest
plot, the pairs not tested, the verdict in detail), then the results (summary, data, lr selection, families,
start policy, pass@k, paired pass@k, learning curves, dynamics, compute per arm, gradient clipping, equal
cost, effective rank), then the methods and the configuration;
``write_report`` renders them to ``report.html`` and ``report.md`` with ``grpolab.render``. Figures and the
tables that group by estimator alone see each ``--vary`` variant as an estimator ``name+variant``
(``tables.labelled``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab import metric_keys
from grpolab.errors import UserError
from grpolab.io import atomic_write_bytes, atomic_write_text
from grpolab.render import Section, render_html, render_markdown
from grpolab.report.clipping import clipping_section
from grpolab.report.compute import compute_section
from grpolab.report.curves import curves_section
from grpolab.report.data_section import data_sections
from grpolab.report.families import families_section
from grpolab.report.fate import fate_section
from grpolab.report.methods import methods_section
from grpolab.report.paired_passk import paired_passk_section
from grpolab.report.sections import (
    DYNAMIC,
    dynamics_section,
    equal_cost_section,
    figure_png,
    pass_at_k_section,
    present,
    rank_section,
    summary_sections,
    usable_metrics,
)
from grpolab.report.selection import selection_section
from grpolab.report.start import start_section
from grpolab.report.tables import labelled, run_table
from grpolab.report.verdict import verdict_sections

RESULTS_COLUMNS = tuple(
    "run_id estimator seed group_size phase step completions_generated greedy_accuracy n pass_at_k successes".split()
)


def build_sections(results: pd.DataFrame, metrics: pd.DataFrame | None, config: dict[str, Any],
                   selection: pd.DataFrame | None = None) -> list[Section]:
    """Every section of the report, in order (figures already rendered to PNG)."""
    _check_results(results)
    usable, problem = usable_metrics(metrics)
    shown = labelled(usable)
    sections = [*verdict_sections(results, selection, config, usable, figure_png),
                *summary_sections(results, config, usable), *data_sections(config)]
    if selection is not None and not selection.empty:
        sections.append(selection_section(selection, config))
    family = families_section(results)
    sections += [family] if family is not None else []
    sections += [
        start_section(results, usable),
        pass_at_k_section(labelled(run_table(results))),
    ]
    paired = paired_passk_section(results, config, figure_png)
    sections += [paired] if paired is not None else []
    sections += [
        curves_section(results, usable, figure_png),
        dynamics_section(shown, problem),
    ]
    fate = fate_section(results)
    sections += [fate] if fate is not None else []
    compute = compute_section(shown, config)
    sections += [compute] if compute is not None else []
    clipping = clipping_section(usable, config)
    sections += [clipping] if clipping is not None else []
    if results["estimator"].str.contains(DYNAMIC, regex=False).any():
        sections.append(equal_cost_section(labelled(results)))
    if present(usable, [metric_keys.GROUP_RANK]):
        sections.append(rank_section(shown))
    sections.append(methods_section(selection, config))
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
    if run_table(results).empty:
        diverged = "status" in results.columns and results["status"].eq("diverged").any()
        reason = "every run diverged" if diverged else "no run finished"
        raise UserError(f"results hold no 'end' evaluation of a run that did not diverge: {reason}, so there is "
                        "nothing to report; see the runs' summary.json")


def write_report(
    out_dir: Path, results: pd.DataFrame, metrics: pd.DataFrame | None, config: dict[str, Any],
    selection: pd.DataFrame | None = None,
) -> tuple[Path, Path]:
    """Write ``out_dir/report.html`` (self-contained) and ``out_dir/report.md`` (+ ``figures/*.png``).

    results: one row per (run, evaluation) with run_id, estimator, seed, group_size, task, model, steps,
    phase ("start" / "step" / "end"), step, completions_generated, greedy_accuracy, n, pass_at_k [n],
    successes [P], mean_length, and optionally lr, variant (a --vary setting, "" for none), status
    ("finished" / "diverged" / "no_signal", with diverged_at_step / no_signal_at_step) and the ``fate_*`` counts
    (``grpolab.report.fate``). metrics: one row per (run, training step) with run_id,
    estimator, seed, group_size, (variant,) step and ``rollout/``, ``starvation/``, ``loss/``, ``perf/``,
    ``grad/`` columns (any may be missing; empty or None is allowed). config: the sweep settings. selection:
    the lr-selection runs (``grpolab.sweep.select.select_lrs``), or None. Returns (html path, markdown path).
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
