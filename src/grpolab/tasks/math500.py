"""MATH-500: the 500-problem test subset of MATH (Hendrycks et al. 2021) chosen by PRM800K (Lightman et al.
2023), with LaTeX final answers.

Data: a local jsonl file or folder with fields ``problem``, ``solution`` and ``answer`` (plus optional
``unique_id``, ``subject``, ``level``), or the hub id ``HuggingFaceH4/MATH-500`` through
``datasets.load_dataset``. MATH-500 has only a test split, so this task cuts it in two: a seeded shuffle
(``random.Random(seed)``) holds out ``test_fraction`` (default 0.2, i.e. 100 problems) as the test split
and keeps the rest for training; both keep file order. The cut depends only on ``seed`` and the data. A
folder holding both ``train.jsonl`` and ``test.jsonl`` is used as it is. A malformed row is an error naming
its file and line (see ``_loading``).

Problem ids are the rows' ``unique_id`` (e.g. ``test/precalculus/807.json``), else ``math500/<index>``.
The reference is the ``answer`` field; the prompt asks for the final answer in ``\\boxed{}``, which the
``math`` verifier extracts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpolab.tasks._loading import Row, head, load_train_test
from grpolab.tasks.base import Problem, Task

PROMPT = (
    "Solve the following math problem. Think step by step, and put your final answer within "
    "\\boxed{{}}.\n\nProblem: {problem}\nSolution:"
)
FIELDS = ("problem", "answer")


def _problem(row: Row) -> Problem:
    unique_id = row.get("unique_id")
    return Problem(
        id=unique_id if isinstance(unique_id, str) and unique_id else f"math500/{row['_id']}",
        prompt=PROMPT.format(problem=row["problem"].strip()),
        reference=row["answer"].strip(),
    )


def make_task(
    path: str | Path | None = None,
    *,
    hub_id: str = "HuggingFaceH4/MATH-500",
    hub_config: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.2,
    max_new_tokens: int = 512,
    **_: Any,
) -> Task:
    """The MATH-500 task, split into train/test by ``seed`` (see module docstring).

    Args:
        path: local jsonl file or folder; None loads ``hub_id`` with ``datasets`` (downloads once).
        hub_id: the ``datasets`` id used when ``path`` is None (its ``test`` split is loaded).
        hub_config: the ``datasets`` config name (None for ``HuggingFaceH4/MATH-500``).
        limit: keep only the first ``limit`` problems of each split (file order); None keeps all.
        seed: seeds the train/test cut.
        test_fraction: share of the problems held out as the test split.
        max_new_tokens: generation budget per completion.
    """
    train, test = load_train_test(
        path, hub_id=hub_id, hub_config=hub_config, hub_splits=("test",), fields=FIELDS,
        seed=seed, test_fraction=test_fraction,
    )
    return Task(
        name="math500",
        train=tuple(_problem(row) for row in head(train, limit)),
        test=tuple(_problem(row) for row in head(test, limit)),
        verifier="math",
        max_new_tokens=max_new_tokens,
    )
