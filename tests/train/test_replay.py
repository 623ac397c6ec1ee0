"""Replay of informative groups (``grpolab.train.replay``): it acts only on degenerate groups, replaces each by
the newest stored group once, forgets groups older than the max age, survives a checkpoint (JSON), and a
resumed run with replay repeats an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from tests.train.test_update_policy import COMPLETIONS, PROMPTS, _batch

from grpolab.config import TrainConfig
from grpolab.tasks import Problem
from grpolab.train.batch import StepBatch
from grpolab.train.replay import ReplayBuffer
from resumed_runs import metric_rows, straight_and_resumed

pytestmark = pytest.mark.fast

G = 2


def _step_batch(rewards: list[list[float]], tag: str) -> StepBatch:
    """Three groups of two (``test_update_policy``'s rows) with the given rewards, problems named ``tag``."""
    batch = _batch(PROMPTS, COMPLETIONS, group_size=G)
    batch.rewards = np.array(rewards, dtype=np.float64)
    batch.problems = [Problem(f"{tag}{p}", f"prompt {p}", "ref") for p in range(3)]
    batch.sampler_logprobs = -torch.arange(batch.size * 4, dtype=torch.float32).reshape(batch.size, 4) / 7
    return batch


def _same(a: StepBatch, b: StepBatch) -> bool:
    def equal(x, y) -> bool:
        if isinstance(x, torch.Tensor):
            return torch.equal(x, y)
        if isinstance(x, np.ndarray):
            return np.array_equal(x, y, equal_nan=True)
        return x == y

    return all(equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(StepBatch))


def test_a_batch_without_degenerate_groups_is_trained_as_sampled() -> None:
    buffer = ReplayBuffer(max_age=2)
    batch = _step_batch([[1, 0], [0, 1], [1, 0]], "a")
    trained, metrics = buffer.refill(1, batch)
    assert trained is batch and metrics == {"rollout/replayed_groups": 0.0, "rollout/replay_age": 0.0}
    assert len(buffer) == 3  # its informative groups are kept for later steps


def test_degenerate_groups_are_replaced_in_place_by_the_newest_stored_groups_once() -> None:
    buffer = ReplayBuffer(max_age=2)
    buffer.refill(1, _step_batch([[1, 0], [1, 1], [0, 0]], "a"))  # keeps a0
    buffer.refill(2, _step_batch([[0, 0], [0, 1], [1, 1]], "b"))  # a0 replaces b0; keeps b1
    assert len(buffer) == 1
    batch = _step_batch([[1, 1], [1, 0], [0, 0]], "c")
    trained, metrics = buffer.refill(3, batch)
    assert [p.id for p in trained.problems] == ["b1", "c1", "c2"]  # the newest (b1, age 1); then none is left
    assert metrics == {"rollout/replayed_groups": 1.0, "rollout/replay_age": 1.0}
    assert np.array_equal(trained.rewards, [[0, 1], [1, 0], [0, 0]])
    assert torch.equal(trained.sampler_logprobs[:2], batch.sampler_logprobs[2:4])  # b1's rows: b's rows 2, 3
    assert [p.id for p, in [g.problems for _, g in buffer._groups]] == ["c1"]  # b1 was used up; c1 is stored


def test_groups_older_than_the_max_age_are_not_replayed() -> None:
    buffer = ReplayBuffer(max_age=1)
    buffer.refill(1, _step_batch([[1, 0], [1, 1], [1, 1]], "a"))
    trained, metrics = buffer.refill(3, _step_batch([[1, 1], [0, 0], [1, 1]], "b"))  # a0 is 2 steps old
    assert metrics["rollout/replayed_groups"] == 0.0 and [p.id for p in trained.problems] == ["b0", "b1", "b2"]


def test_the_buffer_round_trips_through_json() -> None:
    buffer = ReplayBuffer(max_age=3)
    buffer.refill(1, _step_batch([[1, 0], [0, 1], [np.nan, np.nan]], "a"))
    copy = ReplayBuffer(max_age=3)
    copy.load_state(json.loads(json.dumps(buffer.state())))
    batch = _step_batch([[0, 0], [1, 1], [0, 0]], "b")
    (first, m1), (second, m2) = buffer.refill(2, batch), copy.refill(2, batch)
    assert m1 == m2 and m1["rollout/replayed_groups"] == 2.0 and _same(first, second)


@pytest.mark.parametrize("advantage", ["dr_grpo"])
def test_a_resumed_replay_run_repeats_an_uninterrupted_one(tmp_path, advantage: str) -> None:
    config = TrainConfig(advantage=advantage, replay=True, replay_max_age=2, prompts_per_step=4, group_size=4,
                         steps=5, checkpoint_every=2, eval_start=False, eval_limit=8, eval_samples=0, progress=False,
                         threads=1, lr=1e-3)
    straight, resumed, resumed_from = straight_and_resumed(config, tmp_path, crash_after=3)
    assert resumed_from == 2
    rows = {name: metric_rows(tmp_path / name) for name in ("straight", "killed")}
    replayed = [row["rollout/replayed_groups"] for row in rows["straight"]]
    assert replayed == [row["rollout/replayed_groups"] for row in rows["killed"]] and sum(replayed) > 0
    assert all(0 < row["rollout/replay_age"] <= 2 for row in rows["straight"] if row["rollout/replayed_groups"])
    assert [row["rollout/completions_generated"] for row in rows["straight"]] == [16 * s for s in range(1, 6)]
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name
