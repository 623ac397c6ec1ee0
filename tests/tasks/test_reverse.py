"""The embedded default task ``reverse``: disjoint splits, a fresh deterministic train stream, families."""

from __future__ import annotations

import random

import pytest

from grpolab.errors import UserError
from grpolab.tasks import get_task, with_validation
from grpolab.tasks.reverse import bucket_of, family_of, sample_string

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def task():
    return get_task("reverse")


def test_references_are_the_reversed_digits(task) -> None:
    for problem in task.test + task.validation:
        digits, marker = problem.prompt[:-2], problem.prompt[-2]
        assert problem.prompt.endswith("=") and marker in "+*" and digits.isdigit()
        assert problem.reference == digits[::-1] != digits  # never a palindrome
        assert problem.family == family_of(digits, marker) == f"{marker}len{len(digits)}"


def test_splits_are_disjoint_and_fixed(task) -> None:
    test, validation = {p.prompt for p in task.test}, {p.prompt for p in task.validation}
    stream = {p.prompt for step in range(1, 21) for p in task.train_stream(0, step, 0, 16)}
    assert len(test) == 200 and len(validation) == 200 and len(stream) > 300
    assert not test & validation and not test & stream and not validation & stream
    assert {bucket_of(p) for p in test} == {"test"} and {bucket_of(p) for p in stream} == {"train"}
    again = get_task("reverse")
    assert again.test == task.test and again.validation == task.validation  # the same for every run


def test_train_stream_is_fresh_and_deterministic(task) -> None:
    first = task.train_stream(3, 7, 0, 16)
    assert first == task.train_stream(3, 7, 0, 16)  # (seed, step, round) -> the same problems
    assert first != task.train_stream(3, 8, 0, 16) and first != task.train_stream(4, 7, 0, 16)
    assert first != task.train_stream(3, 7, 1, 16)
    assert len({p.prompt for p in first}) == 16


def test_all_eight_families_are_evaluated(task) -> None:
    families = {p.family for p in task.test}
    assert families == {f"{m}len{n}" for m in "+*" for n in range(3, 7)}


def test_options_and_bad_input() -> None:
    small = get_task("reverse", lengths=[3, 3], markers="*", num_test=20, num_validation=10)
    assert {p.family for p in small.test} == {"*len3"} and len(small.validation) == 10
    assert small.max_new_tokens == 4
    for bad in ({"lengths": [1, 3]}, {"lengths": "x"}, {"markers": "-"}, {"num_test": 0}):
        with pytest.raises(UserError, match="reverse: "):
            get_task("reverse", **bad)


def test_with_validation_keeps_an_own_split_and_carves_otherwise(task) -> None:
    assert with_validation(task) is task
    arith = get_task("arith", num_train=300, num_test=20)
    carved = with_validation(arith)
    assert 0 < len(carved.validation) <= 0.2 * len(arith.train)
    assert len(carved.train) + len(carved.validation) == len(arith.train)
    assert not {p.prompt for p in carved.train} & {p.prompt for p in carved.validation}
    assert with_validation(arith).validation == carved.validation  # deterministic


def test_sample_string_never_returns_a_palindrome() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        digits, marker = sample_string(rng, (2, 3), "+*")
        assert digits != digits[::-1] and marker in "+*"


def test_an_embedded_model_on_the_other_embedded_task_is_warned() -> None:
    import warnings

    from grpolab.config import TrainConfig
    from grpolab.train.lifecycle import load_task_for

    with pytest.warns(UserWarning, match="use --model embedded-arith"):
        load_task_for(TrainConfig(task="arith"))
    with pytest.warns(UserWarning, match="use --model embedded"):
        load_task_for(TrainConfig(model="embedded-arith", task="reverse"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_task_for(TrainConfig(model="embedded-arith", task="arith"))
        load_task_for(TrainConfig(task="reverse"))


def test_a_split_larger_than_its_bucket_is_refused_at_once() -> None:
    """Issue 36: num_test 2,000,000 ran 300 s and more (10,000 draws per problem) before "too few distinct"."""
    import time

    started = time.perf_counter()
    with pytest.raises(UserError, match=r"too few distinct test prompts: 2,000,000 asked.*about 221,760"):
        get_task("reverse", num_test=2_000_000)
    assert time.perf_counter() - started < 1.0


def test_a_small_bucket_is_counted_exactly() -> None:
    from grpolab.tasks.reverse import bucket_size

    size = bucket_size("test", (2, 2), "+*")
    every = {f"{d:02d}{m}=" for d in range(100) for m in "+*" if f"{d:02d}" != f"{d:02d}"[::-1]}
    assert size == sum(bucket_of(p) == "test" for p in every) == 16
    whole = get_task("reverse", lengths=2, num_test=size, num_validation=1)  # the whole bucket can be drawn
    assert len({p.prompt for p in whole.test}) == size
    with pytest.raises(UserError, match="too few distinct test prompts"):
        get_task("reverse", lengths=2, num_test=size + 1, num_validation=1)
