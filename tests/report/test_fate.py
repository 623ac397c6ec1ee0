"""The compare report's section on each prompt's fate (``grpolab.report.fate``): counts pooled per arm by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from grpolab.report.fate import fate_section, fate_table
from grpolab.sweep.gather import fate_columns

pytestmark = pytest.mark.fast

# run -> (estimator, G, seed, prompts, all_wrong_first, all_wrong_first_resampled, escaped, solved)
RUNS = {"a0": ("sign", 2, 0, 10, 4, 3, 2, 1), "a1": ("sign", 2, 1, 10, 6, 5, 3, 0),
        "b0": ("dr_grpo", 2, 0, 10, 5, 4, 0, 0), "b1": ("dr_grpo", 2, 1, 10, 5, 4, 1, 1)}


def _results(with_fate: bool = True) -> pd.DataFrame:
    rows = []
    for run_id, (estimator, size, seed, *counts) in RUNS.items():
        fate = dict(zip(["fate_prompts", "fate_all_wrong_first", "fate_all_wrong_first_resampled", "fate_escaped",
                         "fate_solved"], map(float, counts), strict=True)) if with_fate else {}
        rows += [{"run_id": run_id, "variant": "", "estimator": estimator, "group_size": size, "seed": seed,
                  "phase": phase, **fate} for phase in ("start", "end")]  # two rows per run: counted once
    return pd.DataFrame(rows)


def test_the_counts_are_pooled_per_arm_and_the_share_is_escaped_over_sampled_again() -> None:
    table = fate_table(_results()).set_index("estimator")
    assert table.loc["sign", ["runs", "all_wrong_first", "all_wrong_first_resampled", "escaped", "solved"]].tolist() \
        == [2, 10, 8, 5, 1]
    assert table.loc["sign", "escaped_share"] == 5 / 8 and table.loc["dr_grpo", "escaped_share"] == 1 / 8
    display = fate_section(_results()).tables[0][1].set_index("Estimator")
    assert display.loc["sign", "Escaped share"] == "62.5%" and display.loc["dr_grpo", "Escaped share"] == "12.5%"


def test_runs_without_rollout_tables_add_nothing_and_no_fate_means_no_section(tmp_path: Path) -> None:
    results = _results()
    results.loc[results["run_id"] == "a1", [c for c in results.columns if c.startswith("fate_")]] = math.nan
    assert fate_table(results).set_index("estimator").loc["sign", "escaped"] == 2
    assert fate_section(_results(with_fate=False)) is None
    assert all(math.isnan(v) for v in fate_columns(tmp_path).values())  # a run directory without rollouts/
