"""scripts/sign_map.py's table on a committed sweep table: each gain over dr_grpo paired by seed, Welch's only
with --unpaired, and the verdict lines name the test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.pairing import UNPAIRED_NOTE
from grpolab.stats import PAIRED_TESTS, sign_flip_floor

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sign_map", ROOT / "scripts" / "sign_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_gain_is_paired_by_seed_unless_asked() -> None:
    runs = pd.read_csv(ROOT / "experiments" / "sign-map" / "runs" / "mixed-clip1.csv")
    script = _script()
    table = pd.DataFrame(script._cell_rows(runs, "mixed", "clip1"))
    nsr = table[(table["estimator"] == "nsr") & (table["group_size"] == 2)].iloc[0]
    result = runs[(runs["role"] == "result") & (runs["group_size"] == 2)]
    a, b = (
        result[result["estimator"] == name].sort_values("seed")["end_pass_at_1"].to_numpy()
        for name in ("nsr", "dr_grpo")
    )
    assert nsr["test"] in PAIRED_TESTS
    assert nsr["gain_p"] == pytest.approx(max(scipy_stats.ttest_rel(a, b).pvalue, sign_flip_floor(10)))
    assert script._verdict(table).startswith("Test: paired t")
    welch = pd.DataFrame(script._cell_rows(runs, "mixed", "clip1", unpaired=True))
    nsr = welch[(welch["estimator"] == "nsr") & (welch["group_size"] == 2)].iloc[0]
    assert nsr["test"] == "Welch"
    assert nsr["gain_p"] == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert UNPAIRED_NOTE in script._verdict(welch)
