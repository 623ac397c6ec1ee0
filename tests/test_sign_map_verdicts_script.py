"""scripts/sign_map_verdicts.py on the committed sign-map tables: paired by seed, Holm over each estimator's 16
cells, and the counts docs/when-sign-helps.md and the README quote."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.stats import holm_correction

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sign_map_verdicts", ROOT / "scripts" / "sign_map_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    return _script().verdict_table(ROOT / "experiments" / "sign-map" / "runs")


def test_each_cell_is_the_paired_test_and_each_family_is_holm_over_16(table) -> None:
    sign = table[(table["estimator"] == "sign") & (table["metric"] == "pass@1")]
    assert len(sign) == 16 and set(sign["n"]) == {10}
    assert list(sign["holm_p"]) == pytest.approx(list(holm_correction(sign["paired_p"])))
    cell = sign[(sign["level"] == "mixed") & (sign["clipping"] == "clip1") & (sign["G"] == 2)].iloc[0]
    runs = pd.read_csv(ROOT / "experiments" / "sign-map" / "runs" / "mixed-clip1.csv")
    runs = runs[(runs["role"] == "result") & (runs["group_size"] == 2)]
    a, b = (runs[runs["estimator"] == name].sort_values("seed")["end_pass_at_1"] for name in ("sign", "dr_grpo"))
    assert cell["paired_p"] == pytest.approx(scipy_stats.ttest_rel(a.to_numpy(), b.to_numpy()).pvalue)


def test_the_counts_the_docs_quote(table) -> None:
    def said(estimator: str, metric: str) -> dict:
        rows = table[(table["estimator"] == estimator) & (table["metric"] == metric)]
        return rows["verdict"].value_counts().to_dict()

    assert said("sign", "pass@1") == {"better": 7, "no evidence either way": 7, "equivalent": 2}
    assert said("sign", "greedy")["better"] == 2
    assert said("reinforce", "pass@1") == {"better": 16}
    assert said("nsr", "pass@1").get("better", 0) == 0 and said("nsr", "pass@1")["worse"] == 7
    raw = table[(table["estimator"] == "sign") & (table["metric"] == "pass@1")]
    assert int(((raw["paired_p"] < 0.05) & (raw["difference"] > 0)).sum()) == 12  # before any correction
