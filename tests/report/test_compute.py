"""The compute each arm spent (``grpolab.report.compute``): its table by hand and its section in the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.report import write_report
from grpolab.report.compute import compute_section, compute_table
from report_sweeps import PROMPTS_PER_STEP, STEPS, synthetic_sweep


def _row(run_id: str, estimator: str, step: int, completions: int, tokens: int | None, status: str = "finished"):
    row = {"run_id": run_id, "estimator": estimator, "group_size": 2, "seed": 0, "status": status, "step": step,
           "rollout/completions_generated": completions}
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
    assert (dynamic["tokens"], dynamic["tokens_min"], dynamic["tokens_max"]) == (280.0, 260.0, 300.0)
    assert table.loc["sign", "completions"] == 16.0 and table.loc["sign", "tokens"] == 120.0


def test_a_run_without_a_token_count_says_so_and_the_budget_is_stated() -> None:
    metrics = pd.DataFrame([_row("b0", "sign", 1, 8, None), _row("c0", "dr_grpo+mask", 1, 8, None)])
    assert np.isnan(compute_table(metrics)["tokens"]).all()
    section = compute_section(metrics, {"train": {"budget": "completions=8"}})
    assert section is not None and "completions=8" in section.paragraphs[0]
    display = section.tables[0][1]
    assert list(display["Tokens sampled"]) == ["not counted", "not counted"]
    assert list(display["Completions sampled"]) == ["8", "8"]
    assert compute_section(pd.DataFrame(), {}) is None


def test_the_report_states_the_compute_per_arm(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "dr_grpo", "dr_grpo+dynamic"), seeds=2, sizes=(4,))
    _, md_path = write_report(tmp_path, results, metrics, config)
    markdown = md_path.read_text()
    assert "## Compute per arm\n" in markdown and "No --budget was set" in markdown
    dynamic = int(STEPS * PROMPTS_PER_STEP * 4 * 1.6)  # the synthetic dynamic arm samples 1.6x
    assert f"| dr_grpo+dynamic | 4 | 2 | {STEPS} | {dynamic:,} | not counted |" in markdown
    assert f"| sign | 4 | 2 | {STEPS} | {STEPS * PROMPTS_PER_STEP * 4:,} | not counted |" in markdown
