"""A task written in Python: squares of two-digit numbers (``37*37=`` -> ``1369``), exact match.

From the command line: ``PYTHONPATH=examples grpolab train --task custom_task:make_task --model embedded-arith``.
From Python: ``import custom_task`` registers the name, then ``TrainConfig(task="squares")``.
"""

from grpolab.tasks import Problem, Task, register_task


@register_task("squares")
def make_task(*, low: int = 10, high: int = 99) -> Task:
    """Every number from low to high; those divisible by 5 are held out for testing."""
    problems = {n: Problem(id=f"squares/{n}", prompt=f"{n}*{n}=", reference=str(n * n)) for n in range(low, high + 1)}
    return Task(
        name="squares",
        train=tuple(p for n, p in problems.items() if n % 5),
        test=tuple(p for n, p in problems.items() if n % 5 == 0),
        verifier="exact",
        max_new_tokens=6,
    )
