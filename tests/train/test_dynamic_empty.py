"""Dynamic sampling (``+dynamic``) whose rounds find no informative group: the step trains on an empty batch (a zero
gradient, as the degenerate groups would have given a group-centred estimator), says so (``rollout/groups`` 0,
``loss/trained_sequences`` 0, ``sampled/*`` from everything it sampled) and writes no mean over no completions. It
crashed ("degeneracy needs a non-empty [P, G] reward matrix")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpolab.config import TrainConfig
from grpolab.train.trainer import Trainer

pytestmark = pytest.mark.fast

TINY = dict(prompts_per_step=2, group_size=2, steps=3, eval_limit=4, eval_samples=0, eval_start=False,
            checkpoint_every=0, progress=False, threads=1, lr=1e-3, dynamic_sampling=True, dynamic_max_rounds=1)


@pytest.mark.parametrize("advantage", ["dr_grpo", "sign", "optimal_token_baseline"])
def test_a_step_without_an_informative_group_trains_nothing_and_says_so(advantage: str, tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(advantage=advantage, **TINY), tmp_path / "run")
    trainer.verifier = lambda completion, reference: 0.0  # every group all wrong: degenerate
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "rollout/groups" in row]
    assert len(steps) == 3
    for row in steps:
        assert row["rollout/groups"] == 0 and row["loss/trained_sequences"] == 0 and row["loss/grad_norm"] == 0
        assert row["sampled/starvation/uniform"] == 1.0 and row["rollout/dynamic_rounds"] == 1
        absent = {"rollout/reward_mean", "rollout/accuracy", "rollout/entropy", "starvation/degenerate"} & set(row)
        assert absent == set()
    assert steps[-1]["rollout/completions_generated"] == 3 * 2 * 2 * 2  # 3 steps x 2 rounds x P x G
    after = dict(trainer.model.named_parameters())
    assert all(float((after[name].detach() - value).abs().max()) == 0 for name, value in before.items())
