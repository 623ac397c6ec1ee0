"""The compute each arm spent (``grpolab.report.compute``): its table by hand, its section in the report, and what
the methods say ``--budget`` held equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpolab.config.budget import parse_budget
from grpolab.report import write_report
from grpolab.report.compute import compute_section, compute_table
from grpolab.report.methods import methods_section
from report_sweeps import PROMPTS_PER_STEP, STEPS, synthetic_sweep


def _row(run_id: str, estimator: str, step: int, completions: int, tokens: int | None, status: str = "finished",
         **counted: int):
    row = {"run_id": run_id, "estimator": estimator, "group_size": 2, "seed": 0, "status": status, "step": step,
           "rollout/completions_generated": completions, **{f"compute/{k}_total": v for k, v in counted.items()}}
    return row if tokens is None else {**row, "rollout/tokens_generated": tokens}


def test_compute_table_takes_each_runs_last_counts_over_finished_runs() -> None:
    metrics = pd.DataFrame([
        _row("a0", "dr_grpo+dynamic", 1, 16, 100), _row("a0", "dr_grpo+dynamic", 2, 40, 260),
        _row("a1", "dr_grpo+dynamic", 1, 24, 150), _row("a1", "dr_grpo+dynamic", 2, 48, 300),
        _row("a2", "dr_grpo+dynamic", 1, 99, 999, status="diverged"),  # left out
        _row("b0", "sign", 2, 16, 120), _row("b0", "sign", 1, 8, 50),  # rows out of step order
    ])
    table = compute_table(metrics).set_index("estimator")
    assert list(table.index) == ["sign", "dr_grpo+dynamic"]  # display order: the registry's, variants after
    dynamic = table.loc["dr_grpo+dynamic"]
    assert dynamic["n_seeds"] == 2 and dynamic["steps"] == 2.0
    assert (dynamic["completions"], dynamic["completions_min"], dynamic["completions_max"]) == (44.0, 40.0, 48.0)
    assert (dynamic["sampled_tokens"], dynamic["sampled_tokens_min"], dynamic["sampled_tokens_max"]) == (
        280.0, 260.0, 300.0)
    assert table.loc["sign", "completions"] == 16.0 and table.loc["sign", "sampled_tokens"] == 120.0


def test_the_table_shows_each_arms_trained_compute_as_a_mean_over_seeds() -> None:
    trained = dict(optimizer_steps=2, forward_tokens=900)
    metrics = pd.DataFrame([
        _row("s0", "sign", 2, 16, 120, trained_sequences=16, trained_tokens=120, **trained),
        _row("s1", "sign", 2, 16, 140, trained_sequences=16, trained_tokens=140, **trained),
        _row("d0", "dr_grpo", 2, 16, 130, trained_sequences=8, trained_tokens=60, **trained),
        _row("d1", "dr_grpo", 2, 16, 110, trained_sequences=4, trained_tokens=30, **trained),
    ])
    table = compute_table(metrics).set_index("estimator")
    assert table.loc["sign", "trained_tokens"] == 130.0 and table.loc["dr_grpo", "trained_tokens"] == 45.0
    assert (table.loc["dr_grpo", "trained_sequences_min"], table.loc["dr_grpo", "trained_sequences_max"]) == (4.0, 8.0)
    assert table.loc["dr_grpo", "optimizer_steps"] == 2.0
    display = compute_section(metrics, {}).tables[0][1].set_index("Arm")
    assert display.loc["dr_grpo", "Tokens trained"] == "45 (30 to 60)"
    assert display.loc["sign", "Sequences trained"] == "16" and display.loc["sign", "Tokens forwarded"] == "900"


def test_a_count_some_seeds_did_not_record_is_not_averaged_over_the_others() -> None:
    metrics = pd.DataFrame([_row("s0", "sign", 1, 8, 60, trained_tokens=60), _row("s1", "sign", 1, 8, 50)])
    assert np.isnan(compute_table(metrics).loc[0, "trained_tokens"])


def test_a_run_without_a_token_count_says_so_and_the_budget_is_stated() -> None:
    metrics = pd.DataFrame([_row("b0", "sign", 1, 8, None), _row("c0", "dr_grpo+mask", 1, 8, None)])
    assert np.isnan(compute_table(metrics)["sampled_tokens"]).all()
    section = compute_section(metrics, {"train": {"budget": "completions=8"}})
    assert section is not None and "completions=8" in section.paragraphs[0]
    assert parse_budget("completions=8").holds_equal in section.paragraphs[0]
    display = section.tables[0][1]
    assert list(display["Tokens sampled"]) == ["not recorded", "not recorded"]
    assert list(display["Tokens trained"]) == ["not recorded", "not recorded"]
    assert list(display["Completions sampled"]) == ["8", "8"]
    assert compute_section(pd.DataFrame(), {}) is None


def test_the_report_states_the_compute_per_arm(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "dr_grpo", "dr_grpo+dynamic"), seeds=2, sizes=(4,))
    _, md_path = write_report(tmp_path, results, metrics, config)
    markdown = md_path.read_text()
    assert "## Compute per arm\n" in markdown and "No --budget was set" in markdown
    dynamic = int(STEPS * PROMPTS_PER_STEP * 4 * 1.6)  # the synthetic dynamic arm samples 1.6x
    unrecorded = " | ".join(["not recorded"] * 4)  # the synthetic runs predate the trained-compute counters
    assert f"| dr_grpo+dynamic | 4 | 2 | {STEPS} | {unrecorded} | {dynamic:,} | not recorded |" in markdown
    assert f"| sign | 4 | 2 | {STEPS} | {unrecorded} | {STEPS * PROMPTS_PER_STEP * 4:,} | not recorded |" in markdown


@pytest.mark.parametrize("budget", [None, "completions=64", "trained_tokens=5000"])
def test_the_methods_say_what_the_comparison_held_equal(budget: str | None) -> None:
    text = methods_section(None, {"train": {"budget": budget}}).paragraphs[0]
    if budget is None:
        assert "No --budget was set" in text and "equal steps, not equal compute" in text
    else:
        assert f"budget {budget} (--budget), which holds equal {parse_budget(budget).holds_equal}" in text
