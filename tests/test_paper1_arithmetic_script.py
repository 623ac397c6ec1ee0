"""scripts/paper1_arithmetic.py: run as docs/when-sign-helps.md names it, each printed number checked against the
paper's inputs by going back the other way (the degenerate shares the printed E[p(1 - p)] and p-bar give), and
the G = 4 bounds against distributions that reach them."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "paper1_arithmetic.py"
PRINTED = 0.5e-4 + 1e-12  # the script prints 4 decimals: half a unit of the last place, plus a float's error


@pytest.fixture(scope="module")
def printed() -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True, env=env, cwd=ROOT, timeout=120
    ).stdout
    values = {}
    for line in out.splitlines():
        label, _, numbers = line.rpartition(": ")
        values[label] = [float(x) for x in re.findall(r"[-+]?\d+\.\d+", numbers)]
    return values


def test_the_g2_start_state_gives_back_the_papers_degeneracies(printed) -> None:
    (q,) = printed["E[p(1-p)] from D_real = 0.9 at G = 2"]
    (p_bar,) = printed["p-bar from D_iid = 0.56 at G = 2"]
    assert 1 - 2 * q == pytest.approx(0.90, abs=2 * PRINTED)
    assert p_bar**2 + (1 - p_bar) ** 2 == pytest.approx(0.56, abs=2 * PRINTED)
    assert p_bar < 0.5  # 57.5% of the paper's prompts have p = 0: the root below 1/2
    assert printed["batch ratio at G = 2, 4E[p(1-p)]/(1-1/G)"] == pytest.approx([4 * 0.05 / 0.5], abs=PRINTED)
    assert printed["p-bar formula at G = 2"] == pytest.approx([4 * 0.22 / 0.5], abs=PRINTED)  # p(1-p) = 0.22


def test_the_g4_bounds_hold_and_are_reached(printed) -> None:
    low, high = printed["E[p(1-p)] bounds from D_4 = 0.69 at G = 4"]
    point_mass = (4 - math.sqrt(16 - 8 * 0.31)) / 4  # every prompt at one q: 4q - 2q^2 = 1 - 0.69
    assert low <= point_mass <= high
    weight = 0.31 / (4 * 0.25 - 2 * 0.25**2)  # q in {0, 1/4}: the largest E[q] with that degeneracy
    assert weight * 0.25 == pytest.approx(high, abs=PRINTED)
    assert low == pytest.approx(0.31 / 4, abs=PRINTED)


def test_the_g4_ratio_range_is_below_one_and_the_p_bar_formula_above(printed) -> None:
    (start,) = printed["batch ratio at G = 4 from the G = 2 start"]
    assert start == pytest.approx(4 * 0.05 / 0.75, abs=PRINTED)
    lo, hi = printed["batch ratio at G = 4, all"]
    assert (lo, hi) == pytest.approx((4 * 0.05 / 0.75, 4 * (0.31 / 3.5) / 0.75), abs=PRINTED)
    assert hi < 1.0 < printed["p-bar formula at G = 4"][0]


def test_the_final_accuracies_against_the_start_mean(printed) -> None:
    (p_bar,) = printed["p-bar from D_iid = 0.56 at G = 2"]
    assert printed["DrGRPO final accuracy minus p-bar"] == pytest.approx([0.284 - p_bar], abs=2 * PRINTED)
    assert printed["DrGRPO final accuracy minus p-bar"][0] < 0 < printed["sign final accuracy minus p-bar"][0]


def test_the_smollm2_numbers_are_the_result_runs_means(printed) -> None:
    runs = pd.read_csv(ROOT / "experiments" / "smollm2" / "runs.csv")
    dr_grpo = runs[(runs["role"] == "result") & (runs["estimator"] == "dr_grpo")]
    assert len(dr_grpo) == 5
    expected = [dr_grpo["start_pass_at_1"].mean(), dr_grpo["end_pass_at_1"].mean()]
    assert printed["SmolLM2 dr_grpo pass@1, start and end"] == pytest.approx(expected, abs=PRINTED)
