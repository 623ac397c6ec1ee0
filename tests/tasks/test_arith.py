"""Tests for the embedded synthetic task ``arith``: determinism, disjoint splits, correct references."""

from __future__ import annotations

import re

import pytest

from grpolab.errors import UserError
from grpolab.tasks import get_task
from grpolab.tasks.arith import ALPHABET, bucket_of, evaluate, make_task

pytestmark = pytest.mark.fast


def _python_value(prompt: str) -> int:
    """Evaluate a prompt with Python itself (plain or word phrasing) as an independent oracle."""
    expression = prompt.removeprefix("what is ").rstrip("? =")
    for word, symbol in (("plus", "+"), ("minus", "-"), ("times", "*")):
        expression = expression.replace(f" {word} ", symbol)
    assert re.fullmatch(r"[0-9+\-*]+", expression), prompt
    return eval(expression)  # safe: digits and + - * only, checked above


def test_default_task_shape() -> None:
    task = get_task("arith")
    assert task.name == "arith"
    assert (len(task.train), len(task.test)) == (500, 200)
    assert task.verifier == "exact"
    assert task.use_chat_template is False
    assert 6 <= task.max_new_tokens <= 8


def test_deterministic_for_a_seed() -> None:
    assert make_task(seed=3) == make_task(seed=3)
    assert make_task(seed=3).train != make_task(seed=4).train


@pytest.mark.parametrize("options", [{}, {"word_problems": True}, {"operands": 4, "digits": (2, 3)}])
def test_references_match_python(options: dict) -> None:
    task = make_task(seed=1, num_train=300, num_test=100, **options)
    for problem in task.train + task.test:
        assert problem.reference == str(_python_value(problem.prompt))
        assert set(problem.prompt + problem.reference) <= set(ALPHABET)


def test_evaluate_precedence() -> None:
    assert evaluate([12, 7, 3], ["+", "*"]) == 33
    assert evaluate([2, 3, 4, 5], ["*", "-", "*"]) == -14
    assert evaluate([9, 9], ["-"]) == 0


def test_splits_disjoint_across_seeds() -> None:
    tasks = [make_task(seed=seed) for seed in range(3)]
    train_prompts = {p.prompt for t in tasks for p in t.train}
    test_prompts = {p.prompt for t in tasks for p in t.test}
    assert not train_prompts & test_prompts
    assert {bucket_of(p) for p in train_prompts} == {"train"}
    assert {bucket_of(p) for p in test_prompts} == {"test"}


def test_ids_and_prompts_unique_and_stable() -> None:
    task = make_task(seed=0)
    for split, problems in (("train", task.train), ("test", task.test)):
        assert [p.id for p in problems] == [f"arith-{split}-{i:05d}" for i in range(len(problems))]
        assert len({p.prompt for p in problems}) == len(problems)
    # growing the train split keeps the first prompts (prefix-stable) and leaves the test split alone
    bigger = make_task(seed=0, num_train=600)
    assert bigger.train[:500] == task.train and bigger.test == task.test


def test_knobs_change_difficulty() -> None:
    task = make_task(operands=2, digits=1, operators="+", num_train=20, num_test=10)
    assert all(re.fullmatch(r"\d\+\d=", p.prompt) for p in task.train + task.test)
    worded = make_task(word_problems=True, num_train=5, num_test=5)
    assert all(p.prompt.startswith("what is ") and p.prompt.endswith("? ") for p in worded.train)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"operands": (1, 3)}, "operands"),
        ({"operands": (3, 2)}, "operands"),
        ({"digits": (0, 2)}, "digits"),
        ({"digits": "2"}, "digits"),
        ({"operators": "+/"}, "operators"),
        ({"operators": ""}, "operators"),
        ({"num_train": 0}, "num_train"),
        ({"num_test": 2.5}, "num_test"),
        ({"operands": 2, "digits": 1, "operators": "+", "num_train": 200}, "too few distinct"),
    ],
)
def test_bad_knobs_raise_user_error(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        make_task(**options)


def test_a_split_larger_than_its_bucket_is_refused_at_once() -> None:
    """Issue 36: a split past the prompts the knobs make is refused before drawing, not after minutes."""
    import time

    from grpolab.tasks.arith import ArithSpec, possible_prompts

    assert possible_prompts(ArithSpec()) == 100**2 * 3 + 100**3 * 9
    assert possible_prompts(ArithSpec((2, 2), (1, 1), "+")) == 100
    started = time.perf_counter()
    with pytest.raises(UserError, match=r"too few distinct test prompts: num_test 2,000,000 asked, about 1,806,000"):
        make_task(num_test=2_000_000)
    assert time.perf_counter() - started < 1.0
