"""scripts/sign_map_verdicts.py on the committed sign-map tables and on small synthetic ones: paired by seed, Holm
over each estimator's distinct cells (a clip / no-clip pair with identical runs counted once), conditions counted
once, the margin cut by the headroom, no "equivalent" at the ceiling, and the counts the docs quote."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.equivalence import AT_CEILING
from grpolab.pairing import UNPAIRED_NOTE
from grpolab.stats import PAIRED_TESTS, WELCH_TESTS, holm_correction, sign_flip_floor

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "experiments" / "sign-map" / "runs"


def _script():
    spec = importlib.util.spec_from_file_location("sign_map_verdicts", ROOT / "scripts" / "sign_map_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    return _script().verdict_table(RUNS)


def _family(table: pd.DataFrame, estimator: str, metric: str) -> pd.DataFrame:
    return table[(table["estimator"] == estimator) & (table["metric"] == metric)]


def test_each_cell_is_the_paired_test_and_each_family_is_holm_over_its_distinct_cells(table) -> None:
    sign = _family(table, "sign", "pass@1")
    assert len(sign) == 16 and set(sign["n"]) == {10} and set(sign["test"]) <= set(PAIRED_TESTS)
    assert (sign["same_runs_as"] == "").all()  # sign's runs differ with and without clipping somewhere in each
    assert list(sign["holm_p"]) == pytest.approx(list(holm_correction(sign["p"])))
    cell = sign[(sign["level"] == "mixed") & (sign["clipping"] == "clip1") & (sign["G"] == 2)].iloc[0]
    runs = pd.read_csv(RUNS / "mixed-clip1.csv")
    runs = runs[(runs["role"] == "result") & (runs["group_size"] == 2)]
    a, b = (runs[runs["estimator"] == name].sort_values("seed")["end_pass_at_1"] for name in ("sign", "dr_grpo"))
    expected = max(scipy_stats.ttest_rel(a.to_numpy(), b.to_numpy()).pvalue, sign_flip_floor(10))
    assert cell["p"] == pytest.approx(expected)


def test_a_clip_no_clip_pair_with_identical_runs_is_one_test(table) -> None:
    reinforce = _family(table, "reinforce", "pass@1")
    repeats = reinforce[reinforce["same_runs_as"] != ""]
    assert set(zip(repeats["level"], repeats["clipping"], repeats["same_runs_as"], strict=True)) == {
        ("plus", "noclip", "clip1")
    }  # at plus both arms' runs are the same with and without clipping
    distinct = reinforce[reinforce["same_runs_as"] == ""]
    assert len(distinct) == 14
    assert list(distinct["holm_p"]) == pytest.approx(list(holm_correction(distinct["p"])))  # a family of 14
    for row in repeats.itertuples():
        first = distinct[(distinct["level"] == row.level) & (distinct["G"] == row.G)].iloc[0]
        assert (row.holm_p, row.verdict) == (first["holm_p"], first["verdict"])


def test_the_counts_the_docs_quote(table) -> None:
    script = _script()
    sign = _family(table, "sign", "pass@1")
    assert sign["verdict"].value_counts().to_dict() == {"better": 7, "no evidence either way": 7, "equivalent": 2}
    assert script._conditions(sign, "better") == (4, 3)  # 4 of the 8 (level, G) conditions, 3 of them in both
    at_plus = sign[(sign["level"] == "plus") & (sign["verdict"] == "better")]
    assert len(at_plus) == 4 and (at_plus["difference"].abs() < at_plus["margin"]).all()
    assert 100 * at_plus["difference"].min() == pytest.approx(1.6, abs=0.05)
    assert 100 * at_plus["difference"].max() == pytest.approx(2.6, abs=0.05)
    lines = script._counts(table)
    assert lines[0].startswith("- sign vs dr_grpo, pass@1: better in 4 of 8 conditions (in both clippings in 3)")
    assert "4 of them inside the margin (+1.6 to +2.6 points, at plus)" in lines[0]
    assert script._conditions(_family(table, "reinforce", "pass@1"), "better") == (8, 8)
    assert "plus: 70 of 80" in script.identical_runs(RUNS)


def test_the_margin_is_cut_to_a_quarter_of_the_headroom(table) -> None:
    plus = table[table["level"] == "plus"]
    start = plus["start"].to_numpy()
    assert plus["margin"].to_numpy() == pytest.approx(np.minimum(0.05, 0.25 * (1 - start)))
    assert (table[table["level"] == "star-len6"]["margin"] == 0.05).all()  # far from the ceiling: the fixed margin


def _synthetic(folder: Path, ends: dict[str, list[float]], *, noclip_shift: float = 0.0) -> Path:
    """LEVEL-clip1.csv and LEVEL-noclip.csv of one level at G = 2, 6 seeds; the no-clip runs of sign shifted."""
    folder.mkdir()
    for clipping in ("clip1", "noclip"):
        rows = [
            {
                "role": "result",
                "estimator": name,
                "seed": seed,
                "group_size": 2,
                "start_pass_at_1": 0.5,
                "start_greedy": 0.5,
                "end_pass_at_1": value + (noclip_shift if clipping == "noclip" and name == "sign" else 0.0),
                "end_greedy": value,
            }
            for name, values in ends.items()
            for seed, value in enumerate(values)
        ]
        pd.DataFrame(rows).to_csv(folder / f"level-{clipping}.csv", index=False)
    return folder


def _ends(sign: list[float], reference: list[float]) -> dict[str, list[float]]:
    return {"sign": sign, "reinforce": sign, "nsr": sign, "dr_grpo": reference}


def test_two_arms_at_the_ceiling_are_not_equivalent(tmp_path: Path) -> None:
    near = [0.985, 0.99, 0.98, 0.99, 0.985, 0.99]
    flipped = [v + (0.004 if i % 2 else -0.004) for i, v in enumerate(near)]
    table = _script().verdict_table(_synthetic(tmp_path / "ceiling", _ends(flipped, near)))
    assert set(table["verdict"]) == {AT_CEILING}
    lower = [v - 0.4 for v in near]  # the same differences at 60%: equivalent within the 5-point margin
    table = _script().verdict_table(_synthetic(tmp_path / "middle", _ends([v - 0.4 for v in flipped], lower)))
    assert set(table["verdict"]) == {"equivalent"}


def test_identical_clip_no_clip_cells_count_once_and_different_ones_twice(tmp_path: Path) -> None:
    ends = _ends([0.70, 0.72, 0.69, 0.71, 0.73, 0.70], [0.60, 0.61, 0.60, 0.62, 0.61, 0.60])
    same = _script().verdict_table(_synthetic(tmp_path / "same", ends))
    sign = _family(same, "sign", "pass@1")
    assert list(sign["same_runs_as"]) == ["", "clip1"]
    assert sign["holm_p"].iloc[0] == sign["p"].iloc[0]  # a family of one test
    differ = _script().verdict_table(_synthetic(tmp_path / "differ", ends, noclip_shift=0.001))
    sign = _family(differ, "sign", "pass@1")
    assert list(sign["same_runs_as"]) == ["", ""]
    assert list(sign["holm_p"]) == pytest.approx(list(holm_correction(sign["p"])))  # a family of two


def test_welch_only_when_asked_and_then_said(tmp_path: Path) -> None:
    ends = _ends([0.70, 0.72, 0.69, 0.71, 0.73, 0.70], [0.60, 0.61, 0.60, 0.62, 0.61, 0.60])
    folder = _synthetic(tmp_path / "runs", ends)
    script = _script()
    paired, welch = script.verdict_table(folder), script.verdict_table(folder, unpaired=True)
    assert set(paired["test"]) <= set(PAIRED_TESTS) and not paired["unpaired"].any()
    assert set(welch["test"]) <= set(WELCH_TESTS) and welch["unpaired"].all()  # floored where 6 vs 6 runs cannot go
    identical = script.identical_runs(folder)
    assert UNPAIRED_NOTE in script._markdown(welch, identical)
    assert UNPAIRED_NOTE not in script._markdown(paired, identical)
