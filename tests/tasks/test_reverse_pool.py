"""``reverse`` with a fixed train pool (``train_pool``, ``pool_seed``): a fixed sample of the train bucket, the same
for the same pool seed, disjoint from test and validation, the only prompts any step draws; refused in one line
when it cannot be drawn; the default (a fresh stream) unchanged."""

from __future__ import annotations

import pytest

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.tasks import get_task
from grpolab.tasks.base import splits_hash
from grpolab.tasks.reverse import bucket_of
from grpolab.train.shell import RunShell, step_problems

pytestmark = pytest.mark.fast

# splits_hash of the default task and of the sign map's lowest level before the pool existed (commit 96f55ce)
DEFAULT_HASH = "7fd640bd93ab6e8bd3f3dca1708aaa2b511c114074a9285c696a07ea21b9e310"
STAR_LEN6_HASH = "39b3c3520475eaee0d58d45b455c2d0851f6521fb4927d59249152702935c7d2"


@pytest.fixture(scope="module")
def pooled():
    return get_task("reverse", train_pool=64)


def test_the_default_task_still_streams_its_prompts_unchanged() -> None:
    task = get_task("reverse")
    assert task.train_stream is not None and len(task.train) == 64  # the preview of the stream
    assert splits_hash(task) == DEFAULT_HASH
    assert splits_hash(get_task("reverse", markers="*", lengths=[6, 6])) == STAR_LEN6_HASH


def test_the_pool_is_a_fixed_sample_of_the_train_bucket_disjoint_from_test_and_validation(pooled) -> None:
    assert pooled.train_stream is None and len(pooled.train) == 64
    prompts = {p.prompt for p in pooled.train}
    assert len(prompts) == 64 and len({p.id for p in pooled.train}) == 64
    assert {bucket_of(p) for p in prompts} == {"train"}
    assert not prompts & {p.prompt for p in pooled.test + pooled.validation}
    assert pooled.test == get_task("reverse").test and pooled.validation == get_task("reverse").validation
    assert pooled.summary()["problems"]["train"] == 64  # a run's task.json: a fixed split, not a stream


def test_the_same_pool_seed_gives_the_same_pool_and_another_a_different_one(pooled) -> None:
    assert get_task("reverse", train_pool=64).train == pooled.train
    assert get_task("reverse", train_pool=64, pool_seed=0).train == pooled.train
    other = get_task("reverse", train_pool=64, pool_seed=1).train
    assert {p.prompt for p in other} != {p.prompt for p in pooled.train}
    assert get_task("reverse", train_pool=16).train == pooled.train[:16]  # a smaller pool is a prefix


def test_every_step_draws_from_the_pool_and_prompts_recur(pooled) -> None:
    config = TrainConfig(prompts_per_step=16, seed=5)
    pool = {p.id for p in pooled.train}
    drawn = [p.id for step in range(1, 21) for p in step_problems(pooled, config, step)]
    assert set(drawn) <= pool and len(drawn) == 320
    assert len(set(drawn)) < len(drawn)  # 320 draws from 64 prompts: they recur
    again = get_task("reverse", train_pool=64)  # a resumed run rebuilds the task: the same steps
    assert [p.id for p in step_problems(again, config, 7)] == [p.id for p in step_problems(pooled, config, 7)]


@pytest.mark.parametrize(("options", "message"), [
    ({"train_pool": 0}, r"^reverse: train_pool must be a positive int .* got 0$"),
    ({"train_pool": "64"}, r"^reverse: train_pool must be a positive int .* got '64'$"),
    ({"train_pool": True}, r"^reverse: train_pool must be a positive int"),
    ({"train_pool": 8, "pool_seed": 1.5}, r"^reverse: pool_seed must be an int; got 1.5$"),
    ({"pool_seed": 3}, r"^reverse: pool_seed keys the fixed train pool, and there is none; give train_pool"),
    ({"train_pool": 35, "markers": "*", "lengths": 2, "num_test": 5, "num_validation": 5},
     r"^reverse: train_pool 35 is more than the about 34 train prompts that lengths \(2, 2\) with markers '\*' "
     r"make; lower train_pool or widen lengths$"),
])
def test_a_bad_pool_is_refused_in_one_line(options, message) -> None:
    with pytest.raises(UserError, match=message) as error:
        get_task("reverse", **options)
    assert "\n" not in str(error.value)


def test_a_pool_of_the_whole_bucket_is_drawn() -> None:
    task = get_task("reverse", train_pool=34, markers="*", lengths=2, num_test=5, num_validation=5)
    assert len({p.prompt for p in task.train}) == 34


def test_a_pool_smaller_than_a_step_is_refused_in_one_line(tmp_path) -> None:
    config = TrainConfig(task="reverse", task_options={"train_pool": 8}, prompts_per_step=16)
    with pytest.raises(UserError, match=r"^prompts_per_step 16 is more than the 8 train prompts of task 'reverse'"):
        RunShell(config, tmp_path / "run", command="test", writer=False).load_task()
