"""The difficulty curriculum (``grpolab.train.curriculum``): it replaces only settled prompts (all wrong or all
right over the window), draws their replacements from the train split without repeats, forgets after W steps,
survives a checkpoint, and is refused on a task that streams its prompts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.tasks import get_task
from grpolab.train.curriculum import DifficultyCurriculum, check_curriculum
from grpolab.train.shell import step_problems
from resumed_runs import metric_rows, straight_and_resumed

pytestmark = pytest.mark.fast

CONFIG = TrainConfig(task="arith", curriculum=True, curriculum_window=2, prompts_per_step=4, seed=3)


@pytest.fixture(scope="module")
def task():
    return get_task("arith")


def test_nothing_recorded_or_nothing_settled_changes_nothing(task) -> None:
    curriculum = DifficultyCurriculum(2)
    assert curriculum.problems(task, CONFIG, 1) == (step_problems(task, CONFIG, 1), 0)
    drawn = step_problems(task, CONFIG, 2)
    curriculum.record(1, drawn, np.array([[1.0, 0.0]] * 4))  # every group mixed: informative
    assert curriculum.problems(task, CONFIG, 2) == (drawn, 0)


def test_settled_prompts_are_replaced_by_fresh_unsettled_ones(task) -> None:
    curriculum = DifficultyCurriculum(2)
    drawn = step_problems(task, CONFIG, 5)
    rewards = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, np.nan]])  # wrong, right, mixed, wrong
    curriculum.record(4, drawn, rewards)
    problems, replaced = curriculum.problems(task, CONFIG, 5)
    assert replaced == 3 and problems[2] == drawn[2]  # the mixed one stays, in its place
    assert len({p.id for p in problems}) == 4 and not {p.id for p in problems} & {drawn[i].id for i in (0, 1, 3)}
    assert curriculum.problems(task, CONFIG, 5) == (problems, 3)  # deterministic in (seed, step)
    # a group all wrong and then mixed within the window is not settled
    curriculum.record(5, [drawn[0]], np.array([[1.0, 0.0]]))
    assert not curriculum.settled(drawn[0].id, 6) and curriculum.settled(drawn[1].id, 6)
    # after W = 2 steps without a record the prompt is forgotten: drawn again
    assert not curriculum.settled(drawn[1].id, 7)
    curriculum.record(6, [drawn[2]], np.array([[1.0, 0.0]]))  # step 6's window is 4..5, step 7's is 5..6
    assert drawn[1].id not in curriculum.state()["history"]  # step 4's records are dropped


def test_the_state_round_trips_through_json(task) -> None:
    curriculum = DifficultyCurriculum(3)
    drawn = step_problems(task, CONFIG, 1)
    curriculum.record(1, drawn, np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]))
    copy = DifficultyCurriculum(3)
    copy.load_state(json.loads(json.dumps(curriculum.state())))
    assert copy.state() == curriculum.state()
    assert copy.problems(task, CONFIG, 2) == curriculum.problems(task, CONFIG, 2)


def test_a_streamed_task_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match=r"^the curriculum needs a task with a fixed train split, but task 'reverse'"):
        check_curriculum(TrainConfig(curriculum=True), get_task("reverse"))
    check_curriculum(TrainConfig(), get_task("reverse"))  # no curriculum: nothing to refuse
    check_curriculum(TrainConfig(curriculum=True), get_task("reverse", train_pool=16))  # a fixed pool: accepted


def test_on_a_reverse_pool_the_replacements_come_from_the_pool() -> None:
    task = get_task("reverse", train_pool=16)
    config = TrainConfig(curriculum=True, curriculum_window=2, prompts_per_step=4, seed=3)
    curriculum = DifficultyCurriculum(2)
    drawn = step_problems(task, config, 5)
    curriculum.record(4, drawn, np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]))
    problems, replaced = curriculum.problems(task, config, 5)
    assert replaced == 3 and problems[2] == drawn[2]
    assert {p.id for p in problems} <= {p.id for p in task.train}


ARITH = {"task": "arith", "model": "embedded-arith", "task_limit": 16}
REVERSE_POOL = {"task": "reverse", "model": "embedded", "task_options": {"train_pool": 16}}


@pytest.mark.parametrize("setting", [ARITH, REVERSE_POOL], ids=["arith", "reverse-pool"])
def test_a_resumed_curriculum_run_repeats_an_uninterrupted_one(tmp_path, setting) -> None:
    config = TrainConfig(advantage="dr_grpo", curriculum=True, curriculum_window=3, prompts_per_step=8, group_size=4,
                         steps=6, checkpoint_every=2, eval_start=False, eval_limit=8, eval_samples=0, progress=False,
                         threads=1, lr=1e-3, **setting)
    straight, resumed, resumed_from = straight_and_resumed(config, tmp_path, crash_after=5)
    assert resumed_from == 4
    rows = {name: metric_rows(tmp_path / name) for name in ("straight", "killed")}
    replaced = [row["rollout/curriculum_replaced"] for row in rows["straight"]]
    assert replaced == [row["rollout/curriculum_replaced"] for row in rows["killed"]]
    assert sum(replaced) > 0  # 16 prompts, 8 a step: settled ones come round again and are replaced
    assert [r["rollout/completions_generated"] for r in rows["straight"]] == [32 * s for s in range(1, 7)]
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name
