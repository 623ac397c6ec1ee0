"""``grpolab gradients``' batch: the prompts of step 1 of a run, as many as asked, from the task's train stream.

The embedded ``reverse`` task streams fresh train prompts; its ``train`` split is a 64-prompt preview, so a batch
drawn from the preview would silently hold at most 64 prompt groups whatever ``--prompts`` said.
"""

from __future__ import annotations

import pytest

from grpolab.cli import main
from grpolab.commands.gradients import model_for, sample_batch
from grpolab.config import TrainConfig
from grpolab.models import load_policy
from grpolab.train.lifecycle import load_task_for
from grpolab.train.shell import step_problems


def test_a_batch_holds_every_prompt_asked_for_beyond_the_preview() -> None:
    config = TrainConfig(prompts_per_step=80, group_size=2, seed=3, threads=1)
    assert len(load_task_for(config).train) < config.prompts_per_step  # the preview is smaller than the batch
    policy = load_policy(config.model)
    batch = sample_batch(config, policy, model_for(config, policy))
    assert batch.rewards.shape == (80, 2)


def test_a_batch_has_the_prompts_of_step_one_of_the_seed() -> None:
    config = TrainConfig(prompts_per_step=4, group_size=2, seed=5, threads=1)
    policy = load_policy(config.model)
    batch = sample_batch(config, policy, model_for(config, policy))
    assert [p.id for p in batch.problems] == [p.id for p in step_problems(load_task_for(config), config, 1)]


def test_more_prompts_than_a_fixed_pool_is_refused_in_one_line(capsys: pytest.CaptureFixture) -> None:
    code = main(["gradients", "--task-options", '{"train_pool": 8}', "--prompts", "9", "--threads", "1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert "--prompts 9 is more than the 8 train prompts" in lines[0] and "lower --prompts" in lines[0]
