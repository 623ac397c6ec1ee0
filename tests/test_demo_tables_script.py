"""scripts/demo_tables.py: the demo's per-run rows in experiments/demo/ rebuild, with the report's own code, the
tables and numbers that README.md, docs/compare-report.md, docs/results.md and docs/embedded-model.md quote."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from grpolab.report.clipping import clipping_table
from grpolab.report.tables import family_split, family_table, jensen_table, summary_table, variance_table
from grpolab.stats import welch_t_test

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Lines of the rebuilt report whose wording the report's code has changed since docs/compare-report.md was written
# (its preamble names them); their numbers are checked below where they differ.
REWORDED = (
    "- The primary comparison sign vs dr_grpo was declared at",
    "- sign's gain in held-out pass@1 at each group size",
    "Pairs are compared within each group size",
    "The compute each arm spent by the end of its runs",
)


def _script():
    spec = importlib.util.spec_from_file_location("demo_tables", ROOT / "scripts" / "demo_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    return script.load_results()


@pytest.fixture(scope="module")
def metrics() -> pd.DataFrame:
    return script.load_metrics()


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_the_committed_rows_hold_every_result_run_of_the_demo(results: pd.DataFrame) -> None:
    ends = results[results["phase"] == "end"]
    assert len(ends) == 40
    seeds = ends.groupby(["estimator", "group_size"])["seed"].apply(lambda s: tuple(sorted(s)))
    assert set(seeds) == {(0, 1, 2, 3, 4)} and len(seeds) == 8
    assert {len(s) for s in results["successes"]} == {200}


def test_the_readme_table_is_rebuilt_from_the_committed_runs(results: pd.DataFrame) -> None:
    table = script.readme_table(results)
    assert len(table.splitlines()) == 10
    assert table in _doc("README.md")


def test_every_line_of_the_rebuilt_report_is_in_docs_compare_report(results, metrics) -> None:
    rebuilt = script.report_tables(results, metrics, script.load_selection())
    doc = _doc("docs/compare-report.md")
    lines = [line for line in rebuilt.splitlines() if line and not line.startswith(("#", "**"))]
    assert sum(line.startswith("|") for line in lines) > 100  # every table came out, not only some
    missing = [line for line in lines if line not in doc and not line.startswith(REWORDED)]
    assert missing == []


def test_signs_gain_across_group_sizes_is_the_welch_p_the_report_printed(results: pd.DataFrame) -> None:
    ends = results[(results["phase"] == "end") & (results["estimator"] == "sign")]
    starts = results[(results["phase"] == "start") & (results["estimator"] == "sign")]
    gains = ends.set_index("run_id")["pass_at_k"].map(lambda k: k[0]) - starts.set_index("run_id")["pass_at_k"].map(
        lambda k: k[0]
    )
    sizes = ends.set_index("run_id")["group_size"]
    _, _, p = welch_t_test(gains[sizes == 4].to_numpy(), gains[sizes == 2].to_numpy())
    assert f"G = 4 vs G = 2: Welch p = {p:.2g}." in _doc("docs/compare-report.md")


def test_the_results_page_quotes_the_rebuilt_demo(results: pd.DataFrame, metrics: pd.DataFrame) -> None:
    summary = summary_table(results)
    start, low, high = (
        summary["start_accuracy"].mean(),
        summary["final_accuracy"].min(),
        summary["final_accuracy"].max(),
    )
    jensen = jensen_table(results, metrics).set_index("group_size")
    clipped = clipping_table(metrics, script.demo_config())[0].set_index(["group_size", "estimator"])["clipped_share"]
    doc = " ".join(_doc("docs/results.md").split())
    assert f"from {start:.0%} to {100 * low:.0f}-{high:.0%} in 20 steps" in doc
    assert (
        f"{jensen.loc[4, 'd_real_eval']:.0%} of G = 4 groups are all-right or all-wrong against "
        f"{jensen.loc[4, 'd_iid_eval']:.0%} predicted" in doc
    )
    assert (
        f"clipping acted on {clipped[2, 'sign']:.0%} of `sign`'s steps, {clipped[2, 'rloo']:.0%} of `rloo`'s, "
        f"{clipped[2, 'grpo']:.0%} of `grpo`'s and {clipped[2, 'dr_grpo']:.0%} of `dr_grpo`'s at G = 2 "
        f"({clipped[4, 'sign']:.0%} and {clipped[4, 'dr_grpo']:.0%} for `sign` and `dr_grpo` at G = 4)"
    ) in doc


def test_the_results_page_quotes_the_variance_views_ratios_of_the_demo(results: pd.DataFrame) -> None:
    ratios = variance_table(results).set_index("group_size")
    doc = " ".join(_doc("docs/results.md").split())
    assert (
        f"{ratios.loc[2, 'snr_ratio']:.2f} at G = 2 and {ratios.loc[4, 'snr_ratio']:.2f} at G = 4 in the demo's "
        f"report, where 4p̄(1−p̄)/(1−1/G) gives {ratios.loc[2, 'snr_ratio_pbar']:.2f} and "
        f"{ratios.loc[4, 'snr_ratio_pbar']:.2f}"
    ) in doc


def test_the_selection_grew_the_grid_once_for_the_pairs_that_chose_its_top() -> None:
    selection = script.load_selection()
    chosen = selection[selection["selected"]].groupby(["estimator", "group_size"])["lr"].first()
    added = selection[selection["round"] > 0]
    assert (chosen == 1e-3).sum() == 7  # docs/results.md: "seven pairs chose 1e-3"
    assert added["lr"].round(5).unique().tolist() == [0.00333]
    assert added.groupby(["estimator", "group_size"]).ngroups == 7
    assert "seven pairs chose 1e-3" in " ".join(_doc("docs/results.md").split())
    scores = added.groupby(["estimator", "group_size"])["validation_score"].mean()
    report = " ".join(_doc("docs/compare-report.md").split())
    assert f"it scored {scores.min():.0%}-{scores.max():.0%} everywhere".replace("%-", "-") in report
    assert f"{len(selection)} selection runs and {len(script.load_results()) // 2} reported runs" in report


def test_the_embedded_model_page_quotes_where_the_gain_sits(results: pd.DataFrame) -> None:
    split = family_split(family_table(results))
    at4 = split[split["group_size"] == 4]
    low, high = 100 * at4["low_change"], 100 * at4["high_change"]
    doc = " ".join(_doc("docs/embedded-model.md").split())
    assert (
        f"(+{low.min():.0f} to +{low.max():.0f} points at G = 4, against +{high.min():.0f} to +{high.max():.0f} in "
        f"the `+` families)" in doc
    )


def test_a_pass_at_1_that_disagrees_with_its_counts_is_refused(tmp_path: Path) -> None:
    for name in ("problems.csv", "steps.csv"):
        (tmp_path / name).write_text((script.DEMO / name).read_text())
    runs = pd.read_csv(script.DEMO / "runs.csv", dtype=str)
    runs.loc[0, "end_pass_at_1"] = "0.5"
    runs.to_csv(tmp_path / "runs.csv", index=False)
    with pytest.raises(SystemExit, match=r"end_pass_at_1 0\.5 is not the mean success"):
        script.load_results(tmp_path)
