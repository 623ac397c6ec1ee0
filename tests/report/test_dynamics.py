"""The report's training-dynamics section and figure take their panels and labels from the metric table
(``grpolab.metric_keys``): a row marked ``dynamics`` becomes a panel under its ``label``, without a list of the
report's own."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from grpolab import metric_keys
from grpolab.report import figures
from grpolab.report import sections as report_sections

pytestmark = pytest.mark.fast

RECORDED = ("rollout/reward_mean", "rollout/accuracy", "starvation/all_wrong", "starvation/all_correct",
            "starvation/degenerate")


def _metrics(steps: int = 6) -> pd.DataFrame:
    """Two seeds of one estimator at G = 4, every column of ``RECORDED`` a share in [0, 1]."""
    rng = np.random.default_rng(0)
    rows = [{"run_id": f"grpo-{seed}", "estimator": "grpo", "group_size": 4, "step": step,
             **{key: float(rng.random()) for key in RECORDED}} for seed in (0, 1) for step in range(1, steps + 1)]
    return pd.DataFrame(rows)


def _ylabels(columns: list[str]) -> list[str]:
    fig = figures.figure_dynamics(_metrics(), columns, "step", "Training step", 1)
    labels = [ax.get_ylabel() for ax in fig.axes]
    plt.close(fig)
    return labels


def _with(monkeypatch: pytest.MonkeyPatch, name: str, **changes: object) -> None:
    rows = [dataclasses.replace(k, **changes) if k.name == name else k for k in metric_keys.KEYS]
    monkeypatch.setattr(metric_keys, "KEYS", tuple(rows))


def test_the_panels_are_the_tables_dynamics_rows_in_table_order() -> None:
    marked = [k.name for k in metric_keys.KEYS if k.dynamics]
    panels = metric_keys.dynamics_keys(RECORDED)
    hidden = {k.name for k in metric_keys.KEYS if k.hidden_by in RECORDED}
    assert panels == [name for name in marked if name in RECORDED and name not in hidden]
    assert "rollout/accuracy" in marked and "rollout/accuracy" not in panels  # the reward panel shows it
    assert "rollout/accuracy" in metric_keys.dynamics_keys(set(RECORDED) - {"rollout/reward_mean"})


def test_each_panel_is_labelled_from_the_table() -> None:
    columns = metric_keys.dynamics_keys(RECORDED)
    assert _ylabels(columns) == [metric_keys.lookup(key).label for key in columns]
    assert all(metric_keys.lookup(key).label for key in columns)


def test_a_row_marked_dynamics_in_the_table_becomes_a_labelled_panel(monkeypatch: pytest.MonkeyPatch) -> None:
    before = report_sections.dynamics_section(_metrics(), None)
    _with(monkeypatch, "starvation/all_correct", dynamics=True, label="All-correct share (test label)")
    columns = metric_keys.dynamics_keys(RECORDED)
    assert "starvation/all_correct" in columns
    assert "All-correct share (test label)" in _ylabels(columns)
    after = report_sections.dynamics_section(_metrics(), None)
    assert "All-correct share (test label)" in after.paragraphs[0]
    assert "All-correct share (test label)" not in before.paragraphs[0]


def test_the_section_describes_each_panel_with_the_tables_words() -> None:
    section = report_sections.dynamics_section(_metrics(), None)
    for key in metric_keys.dynamics_keys(RECORDED):
        row = metric_keys.lookup(key)
        assert f"{row.label}: {row.meaning}" in section.paragraphs[0]
    assert len(section.figures) == 1


def test_runs_without_any_dynamics_column_get_a_note() -> None:
    bare = _metrics().drop(columns=list(RECORDED))
    section = report_sections.dynamics_section(bare, None)
    assert section.figures == [] and section.notes == ["None of the reward / starvation metric columns were recorded."]
