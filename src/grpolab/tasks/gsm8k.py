"""GSM8K (Cobbe et al. 2021): grade-school word problems with a numeric final answer.

Data: a local jsonl file or folder (``train.jsonl`` / ``test.jsonl``) with fields ``question`` and
``answer`` (reasoning, then ``#### <number>``), or the hub id ``openai/gsm8k`` (config ``main``) through
``datasets.load_dataset``. A folder with both files, or the hub, gives the published train/test split; a
single file (or a folder with only ``test.jsonl``) is split by ``seed`` with ``test_fraction`` held out.
A malformed row is an error naming its file and line (see ``_loading``).

Problem ids are ``gsm8k/<split>/<index in the source split>``. The reference is the text after the final
``####`` (e.g. ``"18"``), which the ``gsm8k`` verifier reads as a number. The prompt asks for step-by-step
reasoning and the final answer after ``####``, the format of GSM8K's own solutions, so a base model that
imitates that format and an instruct model that follows the instruction are both scored by strict match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.tasks._loading import Row, head, load_train_test
from grpolab.tasks.base import Problem, Task

PROMPT = (
    "Solve the following math word problem. Think step by step, then write the final answer as a plain "
    "number on the last line, after '####' (for example: #### 42).\n\nQuestion: {question}\nAnswer:"
)
FIELDS = ("question", "answer")


def reference_of(answer: str, where: str) -> str:
    """The text after the last ``####`` of a GSM8K answer; ``UserError`` naming ``where`` if absent."""
    if "####" not in answer:
        raise UserError(f"{where}: the answer has no '#### <number>' line; is this GSM8K data?")
    return answer.rpartition("####")[2].strip()


def _problem(row: Row) -> Problem:
    return Problem(
        id=f"gsm8k/{row['_id']}",
        prompt=PROMPT.format(question=row["question"].strip()),
        reference=reference_of(row["answer"], f"gsm8k row {row['_id']}"),
    )


def make_task(
    path: str | Path | None = None,
    *,
    hub_id: str = "openai/gsm8k",
    hub_config: str | None = "main",
    limit: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.1,
    max_new_tokens: int = 256,
    **_: Any,
) -> Task:
    """The GSM8K task.

    Args:
        path: local jsonl file or folder; None loads ``hub_id`` with ``datasets`` (downloads once).
        hub_id: the ``datasets`` id used when ``path`` is None.
        hub_config: the ``datasets`` config name (``main`` for ``openai/gsm8k``).
        limit: keep only the first ``limit`` problems of each split (file order); None keeps all.
        seed: seeds the train/test cut of single-split data (unused for the published split).
        test_fraction: share of single-split data held out as the test split.
        max_new_tokens: generation budget per completion.
    """
    train, test = load_train_test(
        path, hub_id=hub_id, hub_config=hub_config, hub_splits=("train", "test"), fields=FIELDS,
        seed=seed, test_fraction=test_fraction,
    )
    return Task(
        name="gsm8k",
        train=tuple(_problem(row) for row in head(train, limit)),
        test=tuple(_problem(row) for row in head(test, limit)),
        verifier="gsm8k",
        max_new_tokens=max_new_tokens,
    )
