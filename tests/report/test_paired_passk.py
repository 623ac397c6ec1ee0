"""The report's "Paired pass@k" section: the primary pair first, both levels of uncertainty, and its figure."""

from __future__ import annotations

import numpy as np
import pytest

from grpolab.report.paired_passk import paired_passk_section, paired_rows
from grpolab.report.sections import figure_png
from report_sweeps import synthetic_sweep

pytestmark = pytest.mark.fast


def test_the_primary_pair_comes_first_at_every_group_size():
    results, _, config = synthetic_sweep(("grpo", "sign", "dr_grpo"), seeds=3, sizes=(2, 4))
    rows = paired_rows(results, config, resamples=200)
    assert [(r["arm_a"], r["arm_b"]) for r in rows[:2]] == [("sign", "dr_grpo")] * 2
    assert [r["group_size"] for r in rows[:2]] == [2, 4]
    assert len(rows) == 6  # three pairs at two group sizes
    for row in rows:
        assert row["seeds"] == [0, 1, 2] and row["seed_level"] is not None
        per_seed = np.array(row["curves_a"]) - np.array(row["curves_b"])
        assert np.allclose(row["seed_level"]["difference"], per_seed.mean(axis=0), rtol=0, atol=1e-12)


def test_the_section_has_its_table_figure_and_both_claims():
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    section = paired_passk_section(results, config, figure_png)
    assert section is not None and section.title == "Paired pass@k"
    (_caption, table), = section.tables
    assert set(table["k"]) == {1, int(results["n"].max()) * 2}  # k = 1 and the largest k of 2 pooled seeds
    assert table["Pair (A vs B)"].iloc[0] == "sign vs dr_grpo"
    assert "claim about the estimator" in section.paragraphs[0] and "these trained checkpoints" in section.paragraphs[0]
    assert section.figures and section.figures[0][2][:8] == b"\x89PNG\r\n\x1a\n"


def test_no_section_without_sampled_evaluations():
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    assert paired_passk_section(results.assign(n=0), config, figure_png) is None
    assert paired_passk_section(results.drop(columns="successes"), config, figure_png) is None
