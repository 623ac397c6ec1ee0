"""The forest plot of tested differences (grpolab.report.forest): each tested pair exactly once, the primary
family first, and the pairs not tested in their own table."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from grpolab.report.comparisons import comparisons
from grpolab.report.forest import figure_forest, forest_rows, untested_table
from grpolab.report.tables import run_table
from report_sweeps import shifted, synthetic_sweep, with_variants

pytestmark = pytest.mark.fast


def test_each_tested_pair_is_one_row_and_the_primary_family_comes_first() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo", "rloo"), seeds=3, sizes=(2, 4))
    rows, _ = comparisons(run_table(results), config)
    forest = forest_rows(rows)
    # G = 2: grpo and rloo are the same update as dr_grpo (their pairs with sign repeat sign vs dr_grpo); G = 4:
    # rloo is dr_grpo's multiple, grpo is not
    assert list(forest["label"]) == ["G = 2: sign - dr_grpo", "G = 4: sign - dr_grpo", "G = 4: sign - grpo",
                                     "G = 4: dr_grpo - grpo"]
    assert list(forest["family"]) == ["primary", "primary", "secondary", "secondary"]
    tested = [f"G = {r['group_size']}: {r['name_a']} - {r['name_b']}" for r in rows if r["tested"]]
    assert sorted(forest["label"]) == sorted(tested) and forest["label"].is_unique
    untested = untested_table(rows)
    assert len(untested) + len(forest) == len(rows)  # every pair in exactly one of the two
    assert set(untested["Arm"] + ": " + untested["Pair"].str.replace(" vs ", " - ")).isdisjoint(forest["label"])


def test_rows_carry_the_interval_and_the_holm_p_of_their_pair() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=8, sizes=(2,))
    varied = with_variants({"max_grad_norm=1": results, "max_grad_norm=0": shifted(results, "dr_grpo", 0.44)})
    rows, _ = comparisons(run_table(varied), config)
    forest = forest_rows(rows).set_index("label")
    assert list(forest.index) == ["G = 2 (max_grad_norm=0): sign - dr_grpo", "G = 2 (max_grad_norm=1): sign - dr_grpo"]
    row = next(r for r in rows if r["variant"] == "max_grad_norm=1")
    shown = forest.loc["G = 2 (max_grad_norm=1): sign - dr_grpo"]
    assert (shown["difference"], shown["low"], shown["high"], shown["p_holm"]) == (
        row["mean_difference"], row["difference_low"], row["difference_high"], row["p_holm"])
    assert list(forest["finding"]) == ["equivalent", "higher"]


def test_the_figure_has_one_labelled_row_and_one_p_per_tested_pair() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=3, sizes=(4,))
    forest = forest_rows(comparisons(run_table(results), config)[0])
    fig = figure_forest(forest, margin=0.05)
    ax = fig.axes[0]
    by_height = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True),
                       reverse=True)
    assert [label for _, label in by_height] == [f"{r.label} ({r.family})" for r in forest.itertuples()]  # top down
    assert [t.get_text() for t in ax.texts] == [f"p = {p:.2g}" for p in forest["p_holm"]]
    assert ax.patches[0].get_x() == -5.0  # the shaded margin starts at -5 points
    plt.close(fig)
