"""scripts/remedies_map.py's analysis on synthetic sweeps: the paired-by-seed difference with its t interval and p
(against values computed by hand), Holm within each pre-registered family (and not across families), the
reading and verdict rules of experiments/remedies/README.md, and the per-run rows read from a sweep; and the
curriculum column (``--map curriculum``): its families, its pool and its replacements per step."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from holm_by_hand import holm_by_hand

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("remedies_map", ROOT / "scripts" / "remedies_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


def _cell(values: dict[str, list[float]], metric: str = "end_pass_at_1") -> pd.DataFrame:
    rows = [{"estimator": arm, "seed": seed, metric: value}
            for arm, column in values.items() for seed, value in enumerate(column)]
    return pd.DataFrame(rows)


def test_the_paired_difference_matches_the_hand_computed_t_interval_and_its_p_is_raised_to_the_floor() -> None:
    # d = 0.1, 0.2, 0.1, 0.2: mean 0.15, sd sqrt(0.01 / 3), se 0.05 / sqrt(3), t = 3 sqrt(3), df 3.
    cell = _cell({"a": [0.5, 0.6, 0.7, 0.8], "b": [0.4, 0.4, 0.6, 0.6]}).sample(frac=1.0, random_state=3)
    found = script.paired_difference(cell, "a", "b", "end_pass_at_1")
    half = 3.1824463 * 0.05 / math.sqrt(3)  # t_{3, 0.975} x se
    # Student t with 3 df: F(t) = 1/2 + (x / (1 + x^2) + atan x) / pi with x = t / sqrt 3 = 3
    p = 2 * (0.5 - (3 / 10 + math.atan(3)) / math.pi)
    assert found["n"] == 4
    assert found["mean"] == pytest.approx(0.15, abs=1e-9)
    assert found["low"] == pytest.approx(0.15 - half, abs=1e-6)
    assert found["high"] == pytest.approx(0.15 + half, abs=1e-6)
    assert p == pytest.approx(0.0138468, abs=1e-6)
    # below 2 / 2^4 = 0.125, the least p an exact sign-flip test of 4 pairs can give: raised to it, and named
    assert found["p"] == 0.125 and found["test"] == "paired t (floored)"


def test_the_difference_pairs_by_seed_and_uses_only_the_seeds_both_arms_ran() -> None:
    cell = _cell({"a": [0.75, 0.25, 0.5], "b": [0.5, 0.0]})  # seed 2 ran in a only; binary-exact values
    found = script.paired_difference(cell, "a", "b", "end_pass_at_1")
    assert found["n"] == 2
    assert found["mean"] == 0.25
    # every pair differs by the same nonzero amount: t p 0, raised to the floor 2 / 2^2; no spread, no interval
    assert found["p"] == 0.5 and found["test"] == "paired t (floored)"
    assert math.isnan(found["low"]) and math.isnan(found["high"])
    missing = script.paired_difference(cell, "a", "pkpo", "end_pass_at_1")
    assert missing["n"] == 0 and math.isnan(missing["mean"])


def _runs(levels: tuple[str, ...], seeds: int = 5) -> pd.DataFrame:
    generator = np.random.default_rng(7)
    rows = []
    for level in levels:
        for group_size in (2, 4):
            for shift, arm in enumerate(script.ARMS):
                for seed in range(seeds):
                    rows.append({"level": level, "group_size": group_size, "estimator": arm, "seed": seed,
                                 "end_pass_at_1": 0.3 + 0.05 * shift + generator.normal(0, 0.05),
                                 "end_greedy": 0.3 + generator.normal(0, 0.05)})
    return pd.DataFrame(rows)


def test_holm_runs_within_each_family_and_never_across_families() -> None:
    tests = script.tests_table(_runs(("star-len6", "mixed", "plus")))
    sizes = tests.groupby("family").size().to_dict()
    # 6 primary and 5 secondary tests per cell; 4 pre-registered cells, 2 restored; greedy on all 6 cells
    assert sizes == {"primary": 24, "secondary": 20, "primary (restored levels)": 12,
                     "secondary (restored levels)": 10, "reported": 66}
    for family in ("primary", "secondary", "primary (restored levels)", "secondary (restored levels)"):
        rows = tests[tests["family"] == family]
        np.testing.assert_allclose(rows["p_holm"], holm_by_hand(list(rows["p"])), atol=1e-12)
    assert tests.loc[tests["family"] == "reported", "p_holm"].isna().all()


def test_every_p_is_the_paired_t_p_raised_to_the_floor_of_its_seeds_and_holm_takes_the_raised_p() -> None:
    runs = _runs(("star-len6",))
    tests = script.tests_table(runs)
    floor = 2 / 2**5  # 5 seeds
    for row in tests.itertuples():
        cell = runs[(runs["level"] == row.level) & (runs["group_size"] == row.group_size)]
        wide = cell.pivot_table(index="seed", columns="estimator", values=row.metric)
        raw = scipy_stats.ttest_rel(wide[row.arm], wide[row.versus]).pvalue
        assert row.p == pytest.approx(max(raw, floor), rel=1e-9)
        assert row.test == ("paired t (floored)" if raw < floor else "paired t")
    assert (tests["test"] == "paired t (floored)").any() and (tests["test"] == "paired t").any()


def test_holm_matches_a_hand_computed_family() -> None:
    # one cell of five seeds; only the dr_grpo+dynamic arm differs from dr_grpo, by 0.1, 0.1, 0.1, 0.1, 0.6
    base = [0.2, 0.4, 0.6, 0.3, 0.1]
    values = {arm: list(base) for arm in script.ARMS}
    values["dr_grpo+dynamic"] = [0.3, 0.5, 0.7, 0.4, 0.7]
    cell = _cell(values).assign(level="star-len6", group_size=2, end_greedy=0.5)
    tests = script.tests_table(cell)
    primary = tests[tests["family"] == "primary"].set_index(["arm", "versus"])
    # dynamic - dr_grpo and dynamic - sign: d mean 0.2, sd sqrt(0.2 / 4), se 0.1, t = 2, df 4: with
    # x = t / sqrt(t^2 + 4), p = 1 - x (1 + (1 - x^2) / 2) (Student t with 4 df), above the floor 2 / 2^5;
    # the 4 other differences are 0 on every seed: p = 1
    x = 2 / math.sqrt(8)
    p_dynamic = 1 - x * (1 + (1 - x * x) / 2)
    assert p_dynamic > 2 / 2**5
    for versus in ("dr_grpo", "sign"):
        assert primary.loc[("dr_grpo+dynamic", versus), "p"] == pytest.approx(p_dynamic, abs=1e-9)
        assert primary.loc[("dr_grpo+dynamic", versus), "test"] == "paired t"
        # Holm over the 6: p_(1) x 6, then max(p_(1) x 6, p_(2) x 5) = 6 p_dynamic, then min(1, 4 x 1) = 1
        assert primary.loc[("dr_grpo+dynamic", versus), "p_holm"] == pytest.approx(6 * p_dynamic, abs=1e-9)
    for arm in ("dr_grpo+mask", "dr_grpo+replay"):
        assert primary.loc[(arm, "dr_grpo"), "p"] == 1.0
        assert primary.loc[(arm, "sign"), "p_holm"] == 1.0
    assert 6 * p_dynamic == pytest.approx(0.6967, abs=1e-4)  # not significant: "no evidence either way"
    assert set(primary["reading"]) == {"no evidence either way"}


def test_the_reading_needs_a_holm_p_below_alpha_and_names_the_side() -> None:
    assert script.reading(0.1, 0.01, "sign", "dr_grpo") == "sign above dr_grpo"
    assert script.reading(-0.1, 0.01, "sign", "dr_grpo") == "dr_grpo above sign"
    assert script.reading(0.3, 0.05, "sign", "dr_grpo") == "no evidence either way"
    assert script.reading(0.3, math.nan, "sign", "dr_grpo") == "no evidence either way"


def _verdict_tests(differences: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"family": "primary", "arm": "dr_grpo+mask", "versus": "sign", "mean": mean, "p_holm": p}
                         for mean, p in differences]
                        + [{"family": "primary", "arm": "dr_grpo+mask", "versus": "dr_grpo", "mean": 0.5,
                            "p_holm": 0.0}])


@pytest.mark.parametrize(("differences", "expected"), [
    ([(-0.2, 0.01), (0.1, 0.3)], "supported"),
    ([(0.2, 0.01), (-0.1, 0.3)], "contradicted"),
    ([(0.2, 0.01), (-0.1, 0.02)], "mixed"),
    ([(0.2, 0.05), (-0.1, 0.5)], "untested at this n"),
])
def test_the_verdict_follows_the_preregistered_rule(differences, expected) -> None:
    # the remedy-vs-dr_grpo row (significant) never enters the verdict on sign
    assert script.verdict(_verdict_tests(differences), "dr_grpo+mask") == expected


def test_a_sweep_is_read_as_its_result_runs_with_the_compute_they_spent(tmp_path: Path) -> None:
    pd.DataFrame([
        {"role": "selection", "run_id": "s", "estimator": "sign", "seed": 1000, "group_size": 2, "lr": 1e-3,
         "bracketed": True, "status": "finished", "steps": 20, "end_pass_at_1": 0.9, "end_greedy": 0.9},
        {"role": "result", "run_id": "d", "estimator": "dr_grpo+dynamic", "seed": 0, "group_size": 2, "lr": 3e-4,
         "bracketed": True, "status": "finished", "steps": 20, "end_pass_at_1": 0.4, "end_greedy": 0.5},
    ]).to_csv(tmp_path / "runs.csv", index=False)
    metrics = pd.DataFrame({"run_id": ["s", "d", "d", "d"], "step": [1, 1, 2, 3],
                            "rollout/completions_generated": [32.0, 160.0, 416.0, 672.0]})
    metrics.to_parquet(tmp_path / "metrics.parquet")
    runs = script.read_sweep(tmp_path, "mixed")
    assert runs.drop(columns=list(script.TRAINED)).to_dict("records") == [
        {"level": "mixed", "group_size": 2, "estimator": "dr_grpo+dynamic", "seed": 0, "lr": 3e-4, "bracketed": True,
         "status": "finished", "steps_run": 3, "completions": 672.0, "end_pass_at_1": 0.4, "end_greedy": 0.5}]
    assert runs[list(script.TRAINED)].isna().all().all()  # a sweep older than the counters: not recorded, not 0
    assert script.budget(2) == 640 and script.budget(4) == 1280


def test_the_compute_each_run_trained_is_read_averaged_per_cell_and_shown_or_named_missing(tmp_path: Path) -> None:
    trained = [{"optimizer_steps": 20, "trained_sequences": s, "trained_tokens": 10 * s, "forward_tokens": 30 * s,
                "sampled_tokens": 500} for s in (400, 200)]
    pd.DataFrame([{"role": "result", "run_id": f"r{seed}", "estimator": "dr_grpo", "seed": seed, "group_size": 2,
                   "lr": 1e-3, "bracketed": True, "status": "finished", "steps": 20, "end_pass_at_1": 0.5,
                   "end_greedy": 0.5, **trained[seed]} for seed in (0, 1)]).to_csv(tmp_path / "runs.csv", index=False)
    pd.DataFrame({"run_id": ["r0", "r1"], "step": [20, 20], "rollout/completions_generated": [640.0, 640.0]}
                 ).to_parquet(tmp_path / "metrics.parquet")
    runs = script.read_sweep(tmp_path, "mixed")
    assert runs["trained_tokens"].tolist() == [4000, 2000]
    old = runs.assign(seed=runs["seed"] + 2, estimator="sign", **dict.fromkeys(script.TRAINED, np.nan))
    cells = script.cells_table(pd.concat([runs, old], ignore_index=True)).set_index("estimator")
    assert cells.loc["dr_grpo", "trained_sequences"] == 300 and cells.loc["dr_grpo", "forward_tokens"] == 9000
    assert cells.loc["sign", list(script.TRAINED)].isna().all()
    shown = script._markdown(cells.reset_index()[["estimator", *script.TRAINED]])
    assert "| dr_grpo | 20 | 300 | 3000 | 9000 | 500 |" in shown
    assert "| sign | " + " | ".join(["not recorded"] * len(script.TRAINED)) + " |" in shown


# ---------------------------------------------------------------- the curriculum column (--map curriculum)


def _curriculum_runs(seeds: int = 5) -> pd.DataFrame:
    generator = np.random.default_rng(11)
    return pd.DataFrame([{"level": level, "group_size": group_size, "estimator": arm, "seed": seed,
                          "end_pass_at_1": 0.4 + 0.05 * shift + generator.normal(0, 0.05),
                          "end_greedy": 0.4 + generator.normal(0, 0.05)}
                         for level in script.LEVELS for group_size in (2, 4)
                         for shift, arm in enumerate(script.CURRICULUM_MAP.arms) for seed in range(seeds)])


def test_the_curriculum_column_tests_its_preregistered_families_over_all_four_levels() -> None:
    tests = script.tests_table(_curriculum_runs(), script.CURRICULUM_MAP)
    # primary: dr_grpo+curriculum vs dr_grpo and vs sign in 8 cells; secondary: sign vs dr_grpo; no restored levels
    assert tests.groupby("family").size().to_dict() == {"primary": 16, "secondary": 8, "reported": 24}
    primary = tests[tests["family"] == "primary"]
    assert set(zip(primary["arm"], primary["versus"], strict=True)) == {("dr_grpo+curriculum", "dr_grpo"),
                                                          ("dr_grpo+curriculum", "sign")}
    np.testing.assert_allclose(primary["p_holm"], holm_by_hand(list(primary["p"])), atol=1e-12)
    assert set(tests.loc[tests["family"] == "secondary", "arm"]) == {"sign"}


def test_the_curriculum_column_runs_every_level_on_its_fixed_pool(tmp_path: Path, monkeypatch) -> None:
    commands = []
    monkeypatch.setattr(script.subprocess, "run", lambda command, check: commands.append(command))
    monkeypatch.setattr(sys, "argv", ["remedies_map.py", "run", "--map", "curriculum", "--out", str(tmp_path)])
    script.run(script._arguments())
    assert len(commands) == 8  # 4 levels x G = 2, 4
    first = commands[0]
    assert first[first.index("--config") + 1] == "experiments/remedies-curriculum/compare.yaml"
    assert json.loads(first[first.index("--task-options") + 1]) == {"markers": "*", "lengths": [6, 6],
                                                                     "train_pool": 64}
    assert first[first.index("--budget") + 1] == "completions=640"
    plain = script.MAPS["remedies"]
    assert plain.task_options == {} and "dr_grpo+curriculum" not in plain.arms  # the streaming map: unchanged


def test_a_curriculum_sweep_is_read_with_its_replacements_per_step(tmp_path: Path) -> None:
    pd.DataFrame([{"role": "result", "run_id": "c", "estimator": "dr_grpo+curriculum", "seed": 0, "group_size": 2,
                   "lr": 1e-3, "bracketed": True, "status": "finished", "steps": 2, "end_pass_at_1": 0.5,
                   "end_greedy": 0.5}]).to_csv(tmp_path / "runs.csv", index=False)
    pd.DataFrame({"run_id": ["c", "c"], "step": [1, 2], "rollout/completions_generated": [32.0, 64.0],
                  "rollout/curriculum_replaced": [0.0, 3.0]}).to_parquet(tmp_path / "metrics.parquet")
    row = script.read_sweep(tmp_path, "plus", script.CURRICULUM_MAP).to_dict("records")[0]
    assert row["replaced_per_step"] == 1.5 and row["steps_run"] == 2 and row["completions"] == 64.0


def test_run_takes_another_budget_for_every_cell(tmp_path: Path, monkeypatch) -> None:
    commands = []
    monkeypatch.setattr(script.subprocess, "run", lambda command, check: commands.append(command))
    monkeypatch.setattr(sys, "argv", ["remedies_map.py", "run", "--out", str(tmp_path), "--levels", "star-len6,mixed",
                                      "--group-sizes", "2", "--budget", "trained_tokens=9000"])
    script.run(script._arguments())
    assert [c[c.index("--budget") + 1] for c in commands] == ["trained_tokens=9000"] * 2
    monkeypatch.setattr(sys, "argv", ["remedies_map.py", "run", "--out", str(tmp_path), "--levels", "mixed"])
    script.run(script._arguments())
    assert [c[c.index("--budget") + 1] for c in commands[2:]] == ["completions=640", "completions=1280"]


def test_the_new_remedies_run_one_level_at_both_g_and_test_their_preregistered_families(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    commands = []
    monkeypatch.setattr(script.subprocess, "run", lambda command, check: commands.append(command))
    monkeypatch.setattr(sys, "argv", ["remedies_map.py", "run", "--map", "new", "--out", str(tmp_path)])
    script.run(script._arguments())
    assert [json.loads(c[c.index("--task-options") + 1]) for c in commands] == [{"markers": "*", "lengths": [6, 6]}] * 2
    assert [c[c.index("--budget") + 1] for c in commands] == ["completions=640", "completions=1280"]
    assert {c[c.index("--config") + 1] for c in commands} == {"experiments/remedies-new/compare.yaml"}
    config = (ROOT / "experiments" / "remedies-new" / "compare.yaml").read_text(encoding="utf-8")
    listed = next(line for line in config.splitlines() if line.startswith("estimators:")).split(":", 1)[1]
    assert tuple(arm.strip() for arm in listed.split(",")) == script.NEW_MAP.arms
    rng = np.random.default_rng(0)
    runs = pd.DataFrame([{"level": "star-len6", "group_size": g, "estimator": arm, "seed": seed,
                          "end_pass_at_1": rng.random(), "end_greedy": rng.random()}
                         for g in (2, 4) for arm in script.NEW_MAP.arms for seed in range(10)])
    tests = script.tests_table(runs, script.NEW_MAP)
    # primary: 3 new arms vs dr_grpo and vs sign at 2 G; secondary: 3 pairs at 2 G; greedy reported for all
    assert tests.groupby("family").size().to_dict() == {"primary": 12, "secondary": 6, "reported": 18}
    primary = tests[tests["family"] == "primary"]
    np.testing.assert_allclose(primary["p_holm"], holm_by_hand(list(primary["p"])), atol=1e-12)
