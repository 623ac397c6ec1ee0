"""``grpolab.train.batch.StepBatch``: one batch from the scored rollout to the update. Joining and selecting
groups keep every field (the optional ones too), padded to the wider batch; a scored rollout converts with
its per-token rewards; per-completion advantages are the outcome advantages themselves."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from grpolab.engine.collect import ScoredBatch
from grpolab.engine.rollout import Rollout
from grpolab.rewards import Scores
from grpolab.tasks import Problem
from grpolab.train.batch import StepBatch
from grpolab.train.step_advantages import completion_view

pytestmark = pytest.mark.fast


def _rollout(rows: int, prompt_width: int, width: int, seed: int) -> Rollout:
    """A rollout with every field set: prompts left-padded to ``prompt_width``, completions of lengths 1..width."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.arange(rows) % width + 1
    completion_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    prompt_mask = torch.ones(rows, prompt_width, dtype=torch.long)
    prompt_mask[0, 0] = 0
    return Rollout(prompt_ids=torch.randint(1, 9, (rows, prompt_width), generator=generator) * prompt_mask,
                   prompt_mask=prompt_mask,
                   completion_ids=torch.randint(1, 9, (rows, width), generator=generator) * completion_mask,
                   completion_mask=completion_mask, texts=[f"text {seed}-{r}" for r in range(rows)],
                   truncated=lengths == width, entropy=torch.rand(rows, width, generator=generator) * completion_mask,
                   logprobs=-torch.rand(rows, width, generator=generator) * completion_mask)


def _batch(groups: int, group_size: int, prompt_width: int, width: int, seed: int) -> StepBatch:
    rows = groups * group_size
    problems = [Problem(id=f"p{seed}-{g}", prompt=f"prompt {g}", reference=str(g)) for g in range(groups)]
    rewards = np.random.default_rng(seed).integers(0, 2, size=(groups, group_size)).astype(np.float64)
    token_rewards = torch.rand(rows, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return StepBatch.make(problems, _rollout(rows, prompt_width, width, seed), rewards, token_rewards)


def _rows(value) -> int:
    return len(value) if isinstance(value, list) else value.shape[0]


def test_concat_keeps_every_field_and_pads_to_the_wider_batch() -> None:
    a, b = _batch(2, 3, prompt_width=4, width=5, seed=0), _batch(1, 3, prompt_width=6, width=3, seed=1)
    joined = a.concat(b)
    for field in dataclasses.fields(StepBatch):  # none dropped, optional ones included
        value = getattr(joined, field.name)
        assert value is not None, field.name
        per_group = field.metadata["axis"] == "group"
        assert _rows(value) == (3 if per_group else 9), field.name
    assert joined.prompt_ids.shape == (9, 6) and joined.completion_ids.shape == (9, 5)
    torch.testing.assert_close(joined.prompt_ids[6:], b.prompt_ids)
    torch.testing.assert_close(joined.prompt_ids[:6, 2:], a.prompt_ids)  # left-padded
    assert (joined.prompt_mask[:6, :2] == 0).all()
    torch.testing.assert_close(joined.token_rewards[:6], a.token_rewards)
    torch.testing.assert_close(joined.token_rewards[6:, :3], b.token_rewards)
    assert torch.isnan(joined.token_rewards[6:, 3:]).all()  # padding is unrewarded, not a reward of 0
    torch.testing.assert_close(joined.sampler_logprobs[6:, :3], b.sampler_logprobs)
    assert (joined.completion_mask[6:, 3:] == 0).all() and (joined.entropy[6:, 3:] == 0).all()
    assert joined.texts == a.texts + b.texts and joined.problems == a.problems + b.problems
    np.testing.assert_array_equal(joined.rewards, np.concatenate([a.rewards, b.rewards]))


def test_concat_with_a_batch_lacking_an_optional_field_gives_none() -> None:
    a, b = _batch(1, 2, 3, 3, seed=0), _batch(1, 2, 3, 3, seed=1)
    assert a.concat(dataclasses.replace(b, token_rewards=None)).token_rewards is None


def test_select_groups_takes_every_field_of_the_chosen_groups() -> None:
    batch = _batch(3, 2, prompt_width=4, width=4, seed=2)
    chosen = batch.select_groups([2, 0])
    rows = [4, 5, 0, 1]
    for field in dataclasses.fields(StepBatch):
        value, source = getattr(chosen, field.name), getattr(batch, field.name)
        index = [2, 0] if field.metadata["axis"] == "group" else rows
        expected = [source[i] for i in index] if isinstance(source, list) else source[index]
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, expected)
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, expected)
        else:
            assert value == expected, field.name


def test_dynamic_sampling_filter_and_first() -> None:
    batch = _batch(3, 2, 4, 4, seed=3)
    batch.rewards[:] = [[1, 0], [1, 1], [math.nan, 0]]  # only group 0 has different scored rewards
    kept = batch.non_degenerate()
    assert [p.id for p in kept.problems] == [batch.problems[0].id] and kept.size == 2
    assert batch.first(2).num_groups == 2 and batch.first(10).num_groups == 3


def test_a_scored_rollout_becomes_a_step_batch_with_its_token_rewards() -> None:
    rollout = _rollout(4, 3, 5, seed=4)
    problems = [Problem(id="a", prompt="x", reference="1"), Problem(id="b", prompt="y", reference="2")]
    scores = Scores(rewards=np.array([1.0, 0.0, math.nan, 1.0]), errors=0, first_error=None)
    token_rewards = torch.rand(4, 5, dtype=torch.float64)
    batch = StepBatch.from_scored(ScoredBatch(problems, rollout, scores, token_rewards))
    np.testing.assert_array_equal(batch.rewards, [[1.0, 0.0], [math.nan, 1.0]])
    assert batch.token_rewards is token_rewards and batch.sampler_logprobs is rollout.logprobs
    assert batch.texts == rollout.texts and batch.problems == problems and batch.group_size == 2


def test_completion_view_of_outcome_advantages_is_the_advantages_themselves() -> None:
    batch = dataclasses.replace(_batch(2, 2, 3, 3, seed=5), token_rewards=None)
    outcome = torch.randn(2, 2)
    assert completion_view(batch, outcome) is outcome
    with_tokens = _batch(2, 2, 3, 3, seed=5)
    per_token = torch.ones(4, 3) * with_tokens.completion_mask
    torch.testing.assert_close(completion_view(with_tokens, per_token), torch.ones(2, 2))


def test_every_field_declares_how_it_is_indexed() -> None:
    assert {f.metadata["axis"] for f in dataclasses.fields(StepBatch)} == {"group", "row", "left", "right"}
