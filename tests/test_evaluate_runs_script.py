"""scripts/evaluate_runs.py's tests between estimators: paired by seed (the estimators of a sweep share seeds),
Welch's only with --unpaired, and the output names the test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.pairing import UNPAIRED_NOTE

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("evaluate_runs", ROOT / "scripts" / "evaluate_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> pd.DataFrame:
    sign, dr_grpo = [0.30, 0.52, 0.41, 0.60, 0.45], [0.25, 0.40, 0.44, 0.50, 0.47]
    rows = [{"run_id": "start", "estimator": "start", "seed": "", "greedy": 0.1}]
    rows += [
        {"run_id": f"{name}-{seed}", "estimator": name, "seed": seed, "greedy": value}
        for name, values in (("sign", sign), ("dr_grpo", dr_grpo))
        for seed, value in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_the_estimators_are_compared_paired_by_seed() -> None:
    text = _script()._table(_rows(), [])
    expected = scipy_stats.ttest_rel([0.30, 0.52, 0.41, 0.60, 0.45], [0.25, 0.40, 0.44, 0.50, 0.47]).pvalue
    assert expected > 2 / 2**5  # above the floor of 5 pairs, so the paired t p is shown as it is
    assert "Test: paired t (paired by seed)." in text
    assert f"- sign vs dr_grpo: Holm-adjusted paired t p = {expected:.2g} (n = 5 vs 5)" in text
    assert "Welch" not in text


def test_welch_only_when_asked_and_then_said() -> None:
    text = _script()._table(_rows(), [], unpaired=True)
    welch = scipy_stats.ttest_ind(
        [0.30, 0.52, 0.41, 0.60, 0.45], [0.25, 0.40, 0.44, 0.50, 0.47], equal_var=False
    ).pvalue
    assert UNPAIRED_NOTE in text
    assert f"Holm-adjusted Welch p = {welch:.2g}" in text
    assert (
        pytest.approx(welch)
        != scipy_stats.ttest_rel([0.30, 0.52, 0.41, 0.60, 0.45], [0.25, 0.40, 0.44, 0.50, 0.47]).pvalue
    )
