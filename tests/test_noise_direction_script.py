"""scripts/noise_direction.py: the phase-0 SNR matches (the measured rule's crossing, the fit rule's slope), the
pre-registered reading of a cell, the paired tests on synthetic runs, and the committed tables regenerated from
the committed per-run rows."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "noise-direction"


def _script():
    spec = importlib.util.spec_from_file_location("noise_direction", ROOT / "scripts" / "noise_direction.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()
NOISE, DIRECTION, NEITHER = script.NOISE, script.DIRECTION, script.NEITHER


def test_snr2_inverts_the_half_batch_cosine() -> None:
    assert script.snr2(0.5) == pytest.approx(2.0) and script.snr2(0.0) == 0.0  # c = SNR^2 / (SNR^2 + 2)
    for value in (0.1, 1.0, 7.0):
        assert script.snr2(value / (value + 2)) == pytest.approx(value, rel=1e-12)


def test_the_fit_rule_is_the_slope_through_the_origin() -> None:
    prompts = np.array([16, 32, 64])
    assert script.slope_through_origin(prompts, 0.01 * prompts) == pytest.approx(0.01, rel=1e-12)
    assert script.slope_through_origin([1, 2], [1, 1]) == pytest.approx(3 / 5, rel=1e-12)  # (1 + 2) / (1 + 4)
    assert script.matched_prompts(0.02, 0.01) == (32.0, 32) and script.matched_prompts(0.001, 0.01)[1] == 2


def test_the_measured_rule_joins_the_curve_by_straight_lines() -> None:
    prompts, curve = [16, 24, 32, 48], [0.10, 0.08, 0.20, 0.40]
    assert script.crossing(prompts, curve, 0.15) == (pytest.approx(24 + 8 * 7 / 12), 29)  # 0.07 of the 0.12 rise
    assert script.crossing(prompts, curve, 0.30) == (pytest.approx(40.0), 40)
    assert script.crossing(prompts, curve, 0.05) == (16.0, 16)  # already above at the first P
    with pytest.raises(SystemExit, match=r"never reaches 0\.5"):
        script.crossing(prompts, curve, 0.5)


@pytest.mark.parametrize(("beats_base", "equivalent", "beats_matched", "reading"), [
    (True, True, False, NOISE),
    (True, False, True, DIRECTION),
    (False, False, True, DIRECTION),
    (True, True, True, f"{NOISE} and {DIRECTION}"),
    (True, False, False, NEITHER),
    (False, True, False, NEITHER),
])
def test_the_reading_of_a_cell(beats_base: bool, equivalent: bool, beats_matched: bool, reading: str) -> None:
    assert script.decide(beats_base, equivalent, beats_matched) == reading


def _synthetic_runs(sign_over_matched: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """10 seeds at one level: dr_grpo@16 = base, dr_grpo@40 = base + 0.2, sign@16 = dr_grpo@40 +
    ``sign_over_matched`` (+- 0.002 by seed), reinforce@16 = base (+- 0.01); every step scores the same."""
    generator = np.random.default_rng(0)
    base = generator.uniform(0.3, 0.5, size=10)
    arms = {("dr_grpo", 16): base, ("dr_grpo", 40): base + 0.2,
            ("sign", 16): base + 0.2 + sign_over_matched + generator.uniform(-0.002, 0.002, size=10),
            ("reinforce", 16): base + generator.uniform(-0.01, 0.01, size=10)}
    rows = []
    for (estimator, prompts), scores in arms.items():
        for seed, score in enumerate(scores):
            row = {"level": "mixed", "estimator": estimator, "prompts": prompts, "seed": seed}
            row.update({f"{metric}_step{step}": score for metric in ("pass_at_1", "greedy")
                        for step in script.EVAL_STEPS})
            rows.append(row)
    fit = pd.DataFrame({"level": "mixed", "estimator": ["sign", "reinforce"], "matched_prompts": 40,
                        "matched_fit_prompts": 40})
    return pd.DataFrame(rows), fit


def test_an_arm_equal_to_the_matched_dr_grpo_reads_as_noise() -> None:
    runs, fit = _synthetic_runs(0.0)
    table = script.comparisons(runs, fit).set_index("estimator")
    assert table.loc["sign", "gain_vs_16"] == pytest.approx(0.2, abs=0.002)
    assert table.loc["sign", "verdict"] == NOISE
    assert table.loc["reinforce", "verdict"] == NEITHER  # ties dr_grpo@16, far below dr_grpo@40
    assert table.loc["reinforce", "gain_vs_matched"] == pytest.approx(-0.2, abs=0.01)


def test_an_arm_above_the_matched_dr_grpo_reads_as_direction() -> None:
    runs, fit = _synthetic_runs(0.1)
    row = script.comparisons(runs, fit).set_index("estimator").loc["sign"]
    assert row["gain_vs_matched"] == pytest.approx(0.1, abs=0.002) and row["p_vs_matched_holm"] < 0.05
    assert row["verdict"] == DIRECTION


def test_holm_runs_over_the_cells_of_each_family() -> None:
    runs, fit = _synthetic_runs(0.0)
    table = script.comparisons(runs, fit)
    from grpolab.stats import holm_correction

    for column in ("p_vs_16", "p_vs_matched", "tost_p_matched"):
        np.testing.assert_allclose(table[f"{column}_holm"], holm_correction(table[column].tolist()), rtol=1e-12)


# ---------------------------------------------------------------- the committed tables


def test_phase_zero_tables_regenerate_from_the_committed_batches() -> None:
    batches = pd.read_csv(EXPERIMENT / "snr_batches.csv")
    cells = script.snr_cells(batches)
    fit = script.snr_fit(cells)
    _assert_same(cells, pd.read_csv(EXPERIMENT / "snr_cells.csv"))
    _assert_same(fit, pd.read_csv(EXPERIMENT / "snr_fit.csv"))


def test_the_results_regenerate_from_the_committed_rows() -> None:
    runs = pd.read_csv(EXPERIMENT / "runs.csv")
    results, text = script.build_tables(runs, pd.read_csv(EXPERIMENT / "snr_fit.csv"),
                                        pd.read_csv(EXPERIMENT / "snr_cells.csv"))
    _assert_same(results, pd.read_csv(EXPERIMENT / "results.csv"))
    _assert_same_text(text, (EXPERIMENT / "table.md").read_text())


def _assert_same(found: pd.DataFrame, committed: pd.DataFrame) -> None:
    """Same columns and rows; text and integers exactly, floats to 1e-9 relative (a CSV round trip keeps every
    digit, so this only allows for another CPU's last-bit rounding)."""
    assert list(found.columns) == list(committed.columns)
    assert len(found) == len(committed)
    for column in found.columns:
        if pd.api.types.is_float_dtype(committed[column]):
            np.testing.assert_allclose(found[column].to_numpy(float), committed[column].to_numpy(float), rtol=1e-9,
                                       atol=1e-12, equal_nan=True, err_msg=column)
        else:
            assert found[column].astype(str).tolist() == committed[column].astype(str).tolist(), column


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _assert_same_text(found: str, committed: str) -> None:
    """The same text, numbers compared to their printed 4 significant digits (one unit in the 4th digit: 1e-3
    relative), the words exactly."""
    assert NUMBER.sub("#", found) == NUMBER.sub("#", committed)
    for a, b in zip(NUMBER.findall(found), NUMBER.findall(committed), strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-3, abs=1e-12)
