"""The compute counters (``grpolab.train.compute``): counted by hand on a small batch, logged per step and in total
by a run of the embedded model, written to summary.json, kept exactly across a resume, and the trained-token budget
(``--budget trained_tokens=N``) that ends a run on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.train.test_update_policy import COMPLETIONS, PROMPTS, _batch

from grpolab.config import TrainConfig
from grpolab.config.budget import parse_budget
from grpolab.errors import UserError
from grpolab.metric_keys import COMPUTE, lookup
from grpolab.train.compute import COUNTERS, ComputeSpent, update_spent
from grpolab.train.trainer import Trainer
from resumed_runs import metric_rows, straight_and_resumed

TINY = dict(
    prompts_per_step=4,
    group_size=4,
    steps=2,
    eval_limit=8,
    eval_samples=0,
    checkpoint_every=0,
    progress=False,
    threads=1,
    lr=1e-3,
    eval_start=False,
)
STEP_KEYS = [COMPUTE[name][0] for name in COUNTERS]
TOTAL_KEYS = [COMPUTE[name][1] for name in COUNTERS]


def test_an_update_counts_its_rows_tokens_and_iterations_by_hand() -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    # rows 0 and 4: completions of 4 tokens each, prompts of 3 and 1 tokens; two optimizer steps
    spent = update_spent(batch, [0, 4], iterations=2)
    assert spent == ComputeSpent(optimizer_steps=2, trained_sequences=4, trained_tokens=16, forward_tokens=24)
    # no trained row: AdamW still steps (on a zero gradient), and nothing is forwarded
    assert update_spent(batch, [], iterations=1) == ComputeSpent(optimizer_steps=1)


def test_the_counts_add_and_name_the_table_keys() -> None:
    one = ComputeSpent(1, 2, 3, 4, 5)
    assert one + one == ComputeSpent(2, 4, 6, 8, 10)
    assert ComputeSpent.from_state(one.state()) == one
    assert ComputeSpent.from_state({"trained_tokens": 7}) == ComputeSpent(trained_tokens=7)
    assert list(one.step_metrics()) == STEP_KEYS and list(one.step_metrics().values()) == [1, 2, 3, 4, 5]
    assert list(one.total_metrics()) == TOTAL_KEYS
    assert all(lookup(key) is not None for key in STEP_KEYS + TOTAL_KEYS)


def _run(tmp_path: Path, name: str, **settings) -> tuple[list[dict], dict]:
    Trainer(TrainConfig(**{**TINY, **settings}), tmp_path / name).run()
    return metric_rows(tmp_path / name), json.loads((tmp_path / name / "summary.json").read_text())


def test_a_run_logs_each_steps_compute_and_its_totals(tmp_path: Path) -> None:
    rows, summary = _run(tmp_path, "run", advantage="dr_grpo", num_iterations=2, steps=3)
    for key, total in zip(STEP_KEYS, TOTAL_KEYS, strict=True):
        running = 0.0
        for row in rows:
            running += row[key]
            assert row[total] == running, (key, row["step"])  # integer counts: exact
    for row in rows:
        assert row["compute/optimizer_steps"] == 2
        assert row["compute/trained_sequences"] == 2 * row["loss/trained_sequences"]
        assert row["compute/trained_tokens"] <= row["compute/sampled_tokens"] * 2
        assert row["compute/forward_tokens"] > row["compute/trained_tokens"] or row["compute/trained_tokens"] == 0
    last = rows[-1]
    assert summary["compute"] == {
        **{name: int(last[COMPUTE[name][1]]) for name in COUNTERS},
        "sampled_completions": int(last["rollout/completions_generated"]),
        "counted_from_step": 0,
    }
    assert summary["budget"] is None


def test_sign_trains_every_sampled_token_and_dr_grpo_skips_the_starved_ones(tmp_path: Path) -> None:
    sign, _ = _run(tmp_path, "sign", advantage="sign", steps=3)
    for row in sign:  # sign's advantage is never 0: every completion reaches the backward pass
        assert row["compute/trained_sequences"] == 16
        assert row["compute/trained_tokens"] == row["compute/sampled_tokens"]
    grpo, _ = _run(tmp_path, "grpo", advantage="dr_grpo", steps=3)
    for row in grpo:  # a degenerate group's rows are skipped
        assert row["compute/trained_sequences"] == 16 - 16 * row["starvation/degenerate"]
    assert any(row["starvation/degenerate"] > 0 for row in grpo)  # the embedded model solves some groups whole
    assert grpo[-1]["compute/trained_tokens_total"] < grpo[-1]["rollout/tokens_generated"]


def test_the_totals_survive_a_resume_exactly(tmp_path: Path) -> None:
    config = TrainConfig(advantage="dr_grpo", **{**TINY, "steps": 4, "checkpoint_every": 2})
    straight, resumed, resumed_from = straight_and_resumed(config, tmp_path, crash_after=3)
    assert resumed_from == 2
    assert resumed.spent == straight.spent and resumed.spent.trained_tokens > 0
    keys = STEP_KEYS + TOTAL_KEYS
    assert [{k: r[k] for k in keys} for r in metric_rows(tmp_path / "killed")] == [
        {k: r[k] for k in keys} for r in metric_rows(tmp_path / "straight")
    ]
    summaries = [
        json.loads((tmp_path / name / "summary.json").read_text())["compute"] for name in ("killed", "straight")
    ]
    assert summaries[0] == summaries[1]


def test_a_trained_token_budget_ends_the_run_at_the_step_that_reaches_it(tmp_path: Path) -> None:
    sign, summary = _run(tmp_path, "sign", advantage="sign", steps=12, budget="trained_tokens=200")
    totals = [row["compute/trained_tokens_total"] for row in sign]
    assert totals[-1] >= 200 and all(total < 200 for total in totals[:-1])
    assert summary["budget"] == {
        "setting": "trained_tokens=200",
        "holds_equal": parse_budget("trained_tokens=200").holds_equal,
    }
    assert "completion tokens trained" in summary["budget"]["holds_equal"]
    # dr_grpo skips its degenerate groups' rows, so it trains fewer tokens per step and runs more steps to 200
    grpo, _ = _run(tmp_path, "grpo", advantage="dr_grpo", steps=12, budget="trained_tokens=200")
    totals = [row["compute/trained_tokens_total"] for row in grpo]
    assert totals[-1] >= 200 and all(total < 200 for total in totals[:-1])
    assert len(grpo) > len(sign)
    # under an equal-completions budget both run the same steps instead
    equal = [
        len(_run(tmp_path, f"{name}-completions", advantage=name, steps=12, budget="completions=48")[0])
        for name in ("sign", "dr_grpo")
    ]
    assert equal == [3, 3]


def test_a_budget_in_an_unknown_unit_is_refused_naming_the_forms() -> None:
    with pytest.raises(UserError, match="trained_tokens=N"):
        parse_budget("backward_tokens=5")


def test_a_checkpoint_from_before_the_counters_counts_training_from_its_step() -> None:
    from types import SimpleNamespace

    trainer = SimpleNamespace()
    Trainer._restore_spent(trainer, {"tokens_generated": 50}, 3)  # written before the counters: tokens sampled only
    assert trainer.spent == ComputeSpent(sampled_tokens=50) and trainer.spent_from_step == 3
    saved = ComputeSpent(4, 30, 200, 500, 260)
    Trainer._restore_spent(trainer, {"compute": saved.state(), "compute_from_step": 0, "tokens_generated": 1}, 4)
    assert trainer.spent == saved and trainer.spent_from_step == 0
