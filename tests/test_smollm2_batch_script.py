"""scripts/smollm2_batch.py: the pre-registered lr rule, the reading of d1 and d2 on synthetic runs, the per-run rows
read from a sweep folder, and the committed tables regenerated from the committed rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "smollm2-batch"


def _script():
    spec = importlib.util.spec_from_file_location("smollm2_batch", ROOT / "scripts" / "smollm2_batch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


def _selection(scores: dict[float, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"lr": lr, "seed": 1000 + i, "end_pass_at_1": value}
                         for lr, values in scores.items() for i, value in enumerate(values)])


def test_the_rule_refuses_an_lr_with_a_collapsed_seed() -> None:
    table = script.choose_lr(_selection({1e-4: [0.20, 0.22, 0.24], 2e-4: [0.60, 0.55, 0.05], 4e-4: [0.30, 0.31, 0.29]}))
    assert table.loc[table["chosen"], "lr"].tolist() == [4e-4]  # 2e-4 has the best mean and a seed at 0.05
    assert table.set_index("lr")["qualifies"].to_dict() == {1e-4: True, 2e-4: False, 4e-4: True}
    assert table.set_index("lr")["worst"][2e-4] == pytest.approx(0.05)


def test_a_worst_seed_at_the_floor_does_not_qualify_and_a_tie_takes_the_smaller_lr() -> None:
    table = script.choose_lr(_selection({1e-4: [0.3, 0.3], 2e-4: [0.3, 0.3], 8e-4: [0.9, script.FLOOR]}))
    assert table.loc[table["chosen"], "lr"].tolist() == [1e-4]
    assert not table.set_index("lr")["qualifies"][8e-4]


def test_with_no_lr_qualifying_the_best_worst_seed_is_chosen_and_said() -> None:
    table = script.choose_lr(_selection({1e-4: [0.02, 0.09], 2e-4: [0.5, 0.01], 4e-4: [0.08, 0.07]}))
    assert table.loc[table["chosen"], "lr"].tolist() == [4e-4]  # worst seeds 0.02, 0.01, 0.07; best mean 2e-4
    assert set(table["rule"]) == {"no lr qualifies: the best worst seed"}


def _runs(means: dict[tuple[str, int], float], spread: float = 0.01, seeds: int = 7) -> pd.DataFrame:
    """Synthetic per-run rows: each arm's end pass@1 = its mean + a seed effect shared by the arms + small noise."""
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.03, seeds)
    rows = []
    for (estimator, prompts), mean in means.items():
        for seed in range(seeds):
            value = mean + shared[seed] + rng.normal(0, spread)
            rows.append({"estimator": estimator, "prompts": prompts, "seed": seed, "lr": 2e-4,
                         "pass_at_1_step30": value, "greedy_step30": value, "cosine_early": 0.2,
                         "cosine_early_undefined": 0.0, "clipped": 0.5})
    return pd.DataFrame(rows)


ARMS = (("sign", 16), ("dr_grpo", 16), ("sign", 4), ("dr_grpo", 4))


@pytest.mark.parametrize(("means", "spread", "reading"), [
    ((0.50, 0.55, 0.20, 0.50), 0.01, script.NOISE),  # the batch lifts sign to dr_grpo@4
    ((0.20, 0.55, 0.20, 0.50), 0.01, script.NOT_SUFFICIENT),  # sign@16 = sign@4, far below dr_grpo@4
    ((0.30, 0.55, 0.10, 0.50), 0.01, script.NOT_SUFFICIENT),  # a gain from the batch, still short: not within 10
    ((0.50, 0.55, 0.48, 0.50), 0.10, script.NEITHER),  # seeds too noisy for any test at n = 7
])
def test_the_pre_registered_reading(means: tuple[float, ...], spread: float, reading: str) -> None:
    results = script.comparisons(_runs(dict(zip(ARMS, means, strict=True)), spread), "pass_at_1_step30")
    assert script.verdict(results) == reading


def test_equivalence_is_not_read_at_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    results = script.comparisons(_runs(dict(zip(ARMS, (0.95, 0.95, 0.60, 0.95), strict=True))), "pass_at_1_step30")
    assert script.verdict(results) == script.NEITHER
    monkeypatch.setattr(script, "CEILING", 0.99)
    assert script.verdict(results) == script.NOISE  # the same runs below the ceiling


def test_both_readings_can_hold() -> None:
    runs = _runs(dict(zip(ARMS, (0.40, 0.55, 0.10, 0.47), strict=True)), spread=0.005)
    results = script.comparisons(runs, "pass_at_1_step30")
    assert script.verdict(results) == f"{script.NOISE} and {script.NOT_SUFFICIENT}"


def test_holm_covers_d1_and_d2_only_and_the_tests_are_paired() -> None:
    from grpolab.stats import holm_correction

    results = script.comparisons(_runs(dict(zip(ARMS, (0.4, 0.5, 0.3, 0.45), strict=True))), "pass_at_1_step30")
    family = results.set_index("difference").loc[["sign@16 - dr_grpo@4", "sign@16 - sign@4"]]
    assert family["p_holm"].tolist() == pytest.approx(list(holm_correction(family["p"].tolist())))
    assert results.set_index("difference")["p_holm"].isna().tolist() == [False, False, True]
    assert set(results["test"]) <= {"paired t", "paired t (floored)"}
    assert (results["p"] >= 2 / 2**7 - 1e-15).all()  # never below what 7 pairs can carry


def test_the_rows_come_from_the_sweep_folder(tmp_path: Path) -> None:
    folder = tmp_path / "sign"
    run_id = "sign-G4-seed3-prompts_per_step=16"
    (folder / "runs" / run_id).mkdir(parents=True)
    pd.DataFrame([{"role": "result", "run_id": run_id, "estimator": "sign", "seed": 3, "lr": 4e-4,
                   "variant": "prompts_per_step=16"}]).to_csv(folder / "runs.csv", index=False)
    evaluations = [{"step": s, "pass_at_k": {"1": s / 100}, "greedy_accuracy": s / 50} for s in (0, 10, 20, 30)]
    (folder / "runs" / run_id / "eval.jsonl").write_text("\n".join(json.dumps(e) for e in evaluations) + "\n")
    steps = pd.DataFrame({"run_id": run_id, "step": range(1, 31), "loss/clipped": [1.0] * 15 + [0.0] * 15,
                          "grad/half_batch_cosine": [0.1, np.nan, 0.3, 0.2, 0.4] + [0.9] * 25,
                          "compute/optimizer_steps_total": range(1, 31),
                          "compute/trained_sequences_total": [64 * s for s in range(1, 31)],
                          "compute/trained_tokens_total": [900 * s for s in range(1, 31)],
                          "compute/forward_tokens_total": [1000 * s for s in range(1, 31)],
                          "rollout/tokens_generated": [1200 * s for s in range(1, 31)]})
    steps.to_parquet(folder / "metrics.parquet")
    row = script.read_runs(tmp_path).iloc[0]
    assert (row["prompts"], row["seed"], row["lr"]) == (16, 3, 4e-4)
    assert (row["pass_at_1_step30"], row["greedy_step10"]) == (pytest.approx(0.3), pytest.approx(0.2))
    assert row["cosine_early"] == pytest.approx(1.0 / 5)  # steps 1-5, the undefined one counted as 0
    assert row["cosine_early_undefined"] == pytest.approx(0.2) and row["clipped"] == pytest.approx(0.5)
    assert (row["optimizer_steps"], row["trained_sequences"], row["sampled_tokens"]) == (30, 1920, 36000)


def test_a_missing_sweep_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"scripts/smollm2_batch\.py run"):
        script.read_runs(tmp_path)


@pytest.mark.skipif(not (EXPERIMENT / "selection.csv").is_file(), reason="the selection has not been committed")
def test_the_committed_lr_table_regenerates_from_the_committed_selection_rows() -> None:
    selection = pd.read_csv(EXPERIMENT / "selection.csv")
    assert len(selection) == 12 and selection.groupby("lr").size().tolist() == [3, 3, 3, 3]
    regenerated = script.choose_lr(selection)
    pd.testing.assert_frame_equal(regenerated, pd.read_csv(EXPERIMENT / "lr.csv"), check_dtype=False)


@pytest.mark.skipif(not (EXPERIMENT / "runs.csv").is_file(), reason="the arms have not been committed")
def test_the_committed_tables_regenerate_from_the_committed_rows() -> None:
    runs, lrs = pd.read_csv(EXPERIMENT / "runs.csv"), pd.read_csv(EXPERIMENT / "lr.csv")
    results, arms, text = script.build_tables(runs, lrs)
    assert text == (EXPERIMENT / "table.md").read_text()
    pd.testing.assert_frame_equal(results, pd.read_csv(EXPERIMENT / "results.csv"), check_dtype=False)
    pd.testing.assert_frame_equal(arms, pd.read_csv(EXPERIMENT / "arms.csv"), check_dtype=False)


@pytest.mark.skipif(not (EXPERIMENT / "lr.csv").is_file(), reason="the selection has not been committed")
def test_docs_compare_quotes_the_committed_selection_and_compare_s_floor_agrees_with_the_rule() -> None:
    lrs = pd.read_csv(EXPERIMENT / "lr.csv").set_index("lr")
    doc = " ".join((ROOT / "docs" / "compare.md").read_text(encoding="utf-8").split())
    assert (f"8e-4 had a mean validation pass@1 of {100 * lrs.loc[8e-4, 'mean']:.1f}% over 3 seeds, one of them at "
            f"{100 * lrs.loc[8e-4, 'worst']:.0f}%") in doc
    from grpolab.sweep.select import _choose

    rows = pd.read_csv(EXPERIMENT / "selection.csv").rename(columns={"end_pass_at_1": "validation_score"})
    chosen, *_ = _choose(rows.assign(status="finished"), script.FLOOR)  # grpolab compare --lr-seed-floor 0.1
    assert chosen == float(lrs.index[lrs["chosen"]][0])


@pytest.mark.skipif(not (EXPERIMENT / "runs.csv").is_file(), reason="the arms have not been committed")
def test_the_docs_quote_the_committed_results() -> None:
    """The numbers docs/when-sign-helps.md, docs/results.md and the experiment's README give, from the committed
    results, arms and rows; the reading from the pre-registered rule."""
    results = pd.read_csv(EXPERIMENT / "results.csv")
    end = results[results["metric"] == "pass_at_1_step30"].set_index("difference")
    arms = pd.read_csv(EXPERIMENT / "arms.csv").set_index(["estimator", "prompts"])
    runs = pd.read_csv(EXPERIMENT / "runs.csv")
    per_seed = runs.pivot_table(index="seed", columns=["estimator", "prompts"], values="pass_at_1_step30")
    gap16 = per_seed[("sign", 16)] - per_seed[("dr_grpo", 16)]
    d1, d2 = end.loc["sign@16 - dr_grpo@4"], end.loc["sign@16 - sign@4"]

    def points(value: float) -> str:
        return f"{100 * value:+.1f}"

    quotes = {
        "when-sign-helps.md": [
            f"`sign`@16 − `sign`@4 = {points(d2['gain'])} points [{points(d2['low'])}, {points(d2['high'])}], "
            f"Holm p = {d2['p_holm']:.3f}",
            f"`sign`@16 − `dr_grpo`@4 = {points(d1['gain'])} points [{points(d1['low'])}, {points(d1['high'])}], "
            f"Holm p = {d1['p_holm']:.3f}",
            f"`dr_grpo`@4 {100 * arms.loc[('dr_grpo', 4), 'pass_at_1_step30']:.1f}%, `dr_grpo`@16 "
            f"{100 * arms.loc[('dr_grpo', 16), 'pass_at_1_step30']:.1f}%, `sign`@4 "
            f"{100 * arms.loc[('sign', 4), 'pass_at_1_step30']:.1f}%, `sign`@16 "
            f"{100 * arms.loc[('sign', 16), 'pass_at_1_step30']:.1f}%",
            f"`dr_grpo` gains {100 * end.loc['dr_grpo@16 - dr_grpo@4', 'gain']:.1f} points",
            f"`sign` is {-100 * gap16.mean():.1f} points below `dr_grpo`, lower in all {int((gap16 < 0).sum())} seeds",
            f"{arms.loc[('sign', 16), 'trained_sequences']:,.0f} sequences a run to `dr_grpo`@4's "
            f"{arms.loc[('dr_grpo', 4), 'trained_sequences']:.0f}",
            f"{100 * arms.loc[('dr_grpo', 4), 'cosine_early_undefined']:.0f}% of `dr_grpo`'s half-batch cosines",
        ],
        "results.md": [
            f"gains {100 * d2['gain']:.1f} points over `sign` at 4 and ends {100 * d1['gain']:.1f} points above",
            f"`dr_grpo` at 16 prompts reaches {100 * arms.loc[('dr_grpo', 16), 'pass_at_1_step30']:.1f}%",
            f"used {arms.loc[('sign', 16), 'trained_sequences'] / arms.loc[('dr_grpo', 4), 'trained_sequences']:.1f}x "
            "the trained sequences",
        ],
    }
    for name, lines in quotes.items():
        doc = " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())
        for line in lines:
            assert line in doc, (name, line)
    readme = " ".join((EXPERIMENT / "README.md").read_text(encoding="utf-8").split())
    assert (f"| d₁ = `sign`@16 − `dr_grpo`@4 | {points(d1['gain'])} | [{points(d1['low'])}, {points(d1['high'])}] "
            f"| {d1['p']:.3f} | {d1['p_holm']:.3f} | {d1['tost_p']:.2f} |") in readme
    assert (f"| d₂ = `sign`@16 − `sign`@4 | {points(d2['gain'])} | [{points(d2['low'])}, {points(d2['high'])}] "
            f"| {d2['p']:.3f} (floor) | {d2['p_holm']:.3f} | {d2['tost_p']:.2f} |") in readme
    assert script.verdict(end.reset_index()) == script.NEITHER
    assert "no evidence either way at this n" in (EXPERIMENT / "table.md").read_text()
