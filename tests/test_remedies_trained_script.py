"""scripts/remedies_trained.py: N per cell from sign's dry run, the compare commands under --budget
trained_tokens=N at the map's lrs, the per-run rows read from a sweep (with whether each reached N), the paired
tests and Holm over the primary family, the verdict rule of experiments/remedies-trained/README.md against the
map's readings, and the committed tables regenerated from the committed rows."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from holm_by_hand import holm_by_hand

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "remedies-trained"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _script():
    spec = importlib.util.spec_from_file_location("remedies_trained", ROOT / "scripts" / "remedies_trained.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


def _runs(cells: list[tuple[str, int]], seeds: int = 6, short: tuple = ()) -> pd.DataFrame:
    """Synthetic per-run rows: arm i scores 0.3 + 0.04 i plus noise; ``short`` lists (level, G, arm, seed) runs
    that did not reach the budget."""
    generator = np.random.default_rng(11)
    rows = [
        {
            "level": level,
            "group_size": g,
            "arm": arm,
            "seed": seed,
            "end_pass_at_1": 0.3 + 0.04 * shift + generator.normal(0, 0.05),
            "end_greedy": 0.4 + generator.normal(0, 0.05),
            "reached_budget": (level, g, arm, seed) not in short,
        }
        for level, g in cells
        for shift, arm in enumerate(script.ARMS)
        for seed in range(seeds)
    ]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the verdict rule


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        ("sign above dr_grpo+mask", "sign above dr_grpo+mask", "holds"),
        ("sign above dr_grpo+mask", "dr_grpo+mask above sign", "reverses"),
        ("sign above dr_grpo+mask", "no evidence either way", "becomes no evidence either way"),
        ("no evidence either way", "no evidence either way", "still no evidence either way"),
        ("no evidence either way", "dr_grpo+mask above sign", "newly resolved"),
    ],
)
def test_each_comparison_is_judged_against_the_maps_reading_by_the_preregistered_rule(before, now, expected) -> None:
    assert script.survival(before, now) == expected
    assert expected in script.VERDICTS


def test_the_verdicts_pair_each_comparison_with_the_maps_and_mark_runs_short_of_the_budget() -> None:
    runs = _runs(
        [("star-len6", 2)],
        short=(("star-len6", 2, "dr_grpo+mask", 3), ("star-len6", 2, "dr_grpo", 3), ("star-len6", 2, "dr_grpo", 4)),
    )
    tests = script.tests_table(runs)
    keys = ["level", "group_size", "arm", "versus"]
    map_tests = tests[tests["family"] == "primary"][keys].assign(family="primary", mean=-0.1, p_holm=0.01)
    map_tests["reading"] = [f"{r.versus} above {r.arm}" for r in map_tests.itertuples()]
    table = script.verdicts_table(tests, map_tests).set_index(["arm", "versus"])
    assert len(table) == 6
    # the short seeds of both arms are counted: +mask vs dr_grpo has 1 + 2, +mask vs sign 1, +dynamic vs sign 0
    assert table.loc[("dr_grpo+mask", "dr_grpo"), "budget"] == "budget not reached on 3 seeds"
    assert table.loc[("dr_grpo+mask", "sign"), "budget"] == "budget not reached on 1 seeds"
    assert table.loc[("dr_grpo+dynamic", "sign"), "budget"] == "reached"
    for row in table.itertuples():
        assert row.verdict == script.survival(row.reading_map, row.reading)


# ---------------------------------------------------------------- the tests


def test_the_primary_family_is_each_remedy_against_both_references_with_holm_over_it_alone() -> None:
    runs = _runs([("star-len6", 2), ("star-len6", 4)])
    tests = script.tests_table(runs)
    assert tests.groupby("family").size().to_dict() == {"primary": 12, "reported": 12}
    primary = tests[tests["family"] == "primary"]
    assert set(zip(primary["arm"], primary["versus"], strict=True)) == {
        (arm, versus) for arm in script.REMEDIES for versus in ("dr_grpo", "sign")
    }
    np.testing.assert_allclose(primary["p_holm"], holm_by_hand(list(primary["p"])), atol=1e-12)
    assert tests.loc[tests["family"] == "reported", "p_holm"].isna().all()
    floor = 2 / 2**6  # 6 seeds
    for row in tests.itertuples():
        cell = runs[(runs["level"] == row.level) & (runs["group_size"] == row.group_size)]
        wide = cell.pivot_table(index="seed", columns="arm", values=row.metric)
        raw = scipy_stats.ttest_rel(wide[row.arm], wide[row.versus]).pvalue
        assert row.p == pytest.approx(max(raw, floor), rel=1e-9)
        assert row.mean == pytest.approx((wide[row.arm] - wide[row.versus]).mean(), abs=1e-12)
        assert row.n == 6


def test_a_difference_on_every_seed_reads_as_a_side_only_after_holm() -> None:
    # +dynamic 0.1 below sign on all 10 seeds with spread: t p far below 2 / 2^10, raised to it; Holm x 6 = 0.0117
    seeds = np.arange(10)
    base = 0.5 + 0.01 * seeds
    values = {arm: base for arm in script.ARMS} | {"dr_grpo+dynamic": base - 0.1 + 0.001 * (seeds % 3), "sign": base}
    runs = pd.DataFrame(
        [
            {
                "level": "star-len6",
                "group_size": 2,
                "arm": arm,
                "seed": int(s),
                "end_pass_at_1": float(v[s]),
                "end_greedy": 0.5,
                "reached_budget": True,
            }
            for arm, v in values.items()
            for s in seeds
        ]
    )
    tests = script.tests_table(runs).set_index(["family", "arm", "versus"])
    row = tests.loc[("primary", "dr_grpo+dynamic", "sign")]
    assert row["test"] == "paired t (floored)" and row["p"] == 2 / 2**10
    assert row["p_holm"] == pytest.approx(6 * 2 / 2**10)
    assert row["reading"] == "sign above dr_grpo+dynamic"
    assert tests.loc[("primary", "dr_grpo+mask", "sign"), "reading"] == "no evidence either way"


# ---------------------------------------------------------------- running and reading


def _sweep(folder: Path, rows: list[dict], steps: dict[str, int]) -> None:
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    metrics = pd.DataFrame(
        [
            {"run_id": run_id, "step": step, "rollout/completions_generated": 32.0 * step}
            for run_id, last in steps.items()
            for step in range(1, last + 1)
        ]
    )
    metrics.to_parquet(folder / "metrics.parquet")


def _row(run_id: str, arm: str, seed: int, trained: float, role: str = "result") -> dict:
    return {
        "role": role,
        "run_id": run_id,
        "estimator": arm,
        "seed": seed,
        "group_size": 2,
        "lr": 1e-3,
        "status": "finished",
        "optimizer_steps": 3.0,
        "trained_sequences": 10.0,
        "trained_tokens": trained,
        "forward_tokens": 2 * trained,
        "sampled_tokens": 300.0,
        "end_pass_at_1": 0.5,
        "end_greedy": 0.6,
    }


def test_n_is_the_least_of_signs_trained_tokens_over_seeds() -> None:
    dry = pd.DataFrame(
        {
            "level": "mixed",
            "group_size": 2,
            "seed": [0, 1, 2],
            "trained_tokens": [3600.0, 3511.0, 3641.0],
            "steps_run": 20,
        }
    )
    found = script.budgets(dry).iloc[0]
    assert found["trained_tokens_budget"] == 3511
    assert found["sign_trained_tokens_mean"] == pytest.approx((3600 + 3511 + 3641) / 3)
    assert found["sign_trained_tokens_max"] == 3641 and found["sign_steps_run"] == 20 and found["seeds"] == 3


def test_runs_are_read_with_their_steps_and_whether_they_reached_n(tmp_path: Path, monkeypatch) -> None:
    _sweep(
        tmp_path / "out" / "star-len6-G2-lr0.001",
        [
            _row("sel", "sign", 1000, 9.0, role="selection"),
            _row("a", "dr_grpo", 0, 4468.0),
            _row("b", "dr_grpo", 1, 4467.0),
        ],
        {"sel": 2, "a": 3, "b": 500},
    )
    pd.DataFrame({"level": ["star-len6"], "group_size": [2], "trained_tokens_budget": [4468]}).to_csv(
        tmp_path / "budgets.csv", index=False
    )
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "remedies_trained.py",
            "table",
            "--out",
            str(tmp_path / "out"),
            "--dest",
            str(tmp_path),
            "--cells",
            "star-len6-G2",
        ],
    )
    runs = script.read_runs(script._arguments()).set_index("run_id")
    assert list(runs.index) == ["a", "b"]  # selection rows are not results
    assert runs.loc["a", "steps_run"] == 3 and runs.loc["b", "steps_run"] == 500
    assert runs.loc["b", "sampled_completions"] == 32.0 * 500
    assert bool(runs.loc["a", "reached_budget"]) and not bool(runs.loc["b", "reached_budget"])


def test_run_gives_every_arm_its_maps_lr_and_the_cells_trained_token_budget(tmp_path: Path, monkeypatch) -> None:
    commands = []
    monkeypatch.setattr(script.subprocess, "run", lambda command, check: commands.append(command))
    pd.DataFrame({"level": ["star-len6"], "group_size": [2], "trained_tokens_budget": [4468]}).to_csv(
        tmp_path / "budgets.csv", index=False
    )
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "remedies_trained.py",
            "run",
            "--out",
            str(tmp_path / "out"),
            "--dest",
            str(tmp_path),
            "--cells",
            "star-len6-G2",
        ],
    )
    script.run(script._arguments())
    lrs = pd.read_csv(ROOT / "experiments" / "remedies" / "cells.csv").query("level == 'star-len6' and group_size == 2")
    expected = dict(zip(lrs["estimator"], lrs["lr"], strict=True))
    ran = {}
    for command in commands:
        assert command[command.index("--budget") + 1] == "trained_tokens=4468"
        assert command[command.index("--steps") + 1] == str(script.STEPS_BOUND)
        assert command[command.index("--lrs") + 1] == ""  # no selection: the map's lr
        for arm in command[command.index("--estimators") + 1].split(","):
            ran[arm] = float(command[command.index("--lr") + 1])
    assert ran == {arm: expected[arm] for arm in script.ARMS}
    monkeypatch.setattr(sys, "argv", ["remedies_trained.py", "run", "--dest", str(tmp_path), "--cells", "mixed-G4"])
    with pytest.raises(SystemExit, match="no N for mixed-G4"):
        script.run(script._arguments())


def test_an_unknown_cell_is_refused_in_one_line() -> None:
    with pytest.raises(SystemExit, match="unknown cell 'star-len6-G8'"):
        script.parse_cells("star-len6-G2,star-len6-G8")


# ---------------------------------------------------------------- the committed tables


def test_the_committed_tables_regenerate_from_the_committed_rows() -> None:
    runs = pd.read_csv(EXPERIMENT / "runs.csv")
    tests, text = script.build_tables(
        runs,
        pd.read_csv(ROOT / "experiments" / "remedies" / "tests.csv"),
        "--runs experiments/remedies-trained/runs.csv",
    )
    committed = pd.read_csv(EXPERIMENT / "tests.csv")
    assert list(tests.columns) == list(committed.columns) and len(tests) == len(committed)
    for column in committed.columns:
        if pd.api.types.is_float_dtype(committed[column]):
            np.testing.assert_allclose(
                tests[column].to_numpy(float),
                committed[column].to_numpy(float),
                rtol=1e-9,
                atol=1e-12,
                equal_nan=True,
                err_msg=column,
            )
        else:
            kept = committed[column].fillna("")  # a CSV keeps an empty reading as empty, read back as NaN
            assert tests[column].astype(str).tolist() == kept.astype(str).tolist(), column
    found, kept = text, (EXPERIMENT / "table.md").read_text()
    assert NUMBER.sub("#", found) == NUMBER.sub("#", kept)  # the words exactly, the numbers to their print
    for a, b in zip(NUMBER.findall(found), NUMBER.findall(kept), strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-3, abs=1e-12)
