"""``grpolab gradients``' batch: as many prompt groups as asked, or a one-line refusal.

The embedded ``reverse`` task streams fresh train prompts; its ``train`` split is a 64-prompt preview. The command
draws from the split and refuses ``--prompts`` beyond it (it used to cut the batch to the split's size without a
word); a caller that wants a training step's prompts passes them (``grpolab.train.shell.step_problems``).
"""

from __future__ import annotations

import pytest

from grpolab.cli import main
from grpolab.commands.gradients import model_for, sample_batch
from grpolab.config import TrainConfig
from grpolab.models import load_policy
from grpolab.train.lifecycle import load_task_for
from grpolab.train.shell import step_problems


def test_given_problems_are_the_batch_even_beyond_the_preview() -> None:
    config = TrainConfig(prompts_per_step=80, group_size=2, seed=3, threads=1)
    task = load_task_for(config)
    problems = step_problems(task, config, 1)
    assert len(task.train) < len(problems) == 80  # the preview is smaller than the batch
    policy = load_policy(config.model)
    batch = sample_batch(config, policy, model_for(config, policy), problems)
    assert batch.rewards.shape == (80, 2)
    assert [p.id for p in batch.problems] == [p.id for p in problems]


@pytest.mark.parametrize(("options", "prompts", "size"), [("{}", 65, 64), ('{"train_pool": 8}', 9, 8)])
def test_more_prompts_than_the_split_is_refused_in_one_line(capsys: pytest.CaptureFixture, options: str, prompts: int,
                                                            size: int) -> None:
    code = main(["gradients", "--task-options", options, "--prompts", str(prompts), "--threads", "1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert f"--prompts {prompts} is more than the {size} train prompts" in lines[0] and "lower --prompts" in lines[0]
