"""The data types every task shares: a problem (prompt + reference answer) and a task (splits + verifier).

A task holds plain prompt text. Whether a chat template wraps it is the model's business
(see ``grpolab.models``), so the same task runs on a base model and on an instruct model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One verifiable problem.

    Attributes:
        id: stable identifier, unique within its task split (used in rollout logs and per-prompt stats).
        prompt: the text the model is asked to continue or answer.
        reference: what the task's verifier compares a completion with.
        family: the prompt family (e.g. ``*len5``) for per-family breakdowns; "" when the task has none.
    """

    id: str
    prompt: str
    reference: str
    family: str = ""


# A stream of fresh training problems: (seed, step, round, count) -> count problems, deterministic in
# its arguments. Tasks whose prompt space is too large to enumerate train from a stream instead of a pool.
TrainStream = Callable[[int, int, int, int], list[Problem]]


@dataclass(frozen=True)
class Task:
    """A named set of problems with a train split, held-out validation and test splits, and a verifier.

    Train, validation and test never share a prompt. Validation is for choosing hyper-parameters (the
    learning rate of ``grpolab compare --lrs``); test is only ever reported, never selected on.

    Attributes:
        name: the task's registry name (``reverse``, ``arith``, ``gsm8k``, ``math500``).
        train: problems that RL samples prompts from (with ``train_stream``: a sample of the stream, for
            inspection only).
        test: held-out problems for evaluation.
        verifier: a name in ``grpolab.verifiers`` (or a dotted import path to a reward callable).
        max_new_tokens: the default generation budget for a completion on this task.
        use_chat_template: whether to wrap prompts with the tokenizer's chat template when it has one.
        validation: held-out problems for hyper-parameter selection (see ``with_validation``).
        train_stream: fresh training problems for each step; None samples from ``train``.
        info: JSON-safe facts about the task's data for run directories and reports (the ``file`` task: its
            source, row counts and the rows it left out); empty for the built-in tasks.
    """

    name: str
    train: tuple[Problem, ...]
    test: tuple[Problem, ...]
    verifier: str
    max_new_tokens: int = 16
    use_chat_template: bool = True
    validation: tuple[Problem, ...] = ()
    train_stream: TrainStream | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    def summary(self) -> dict[str, Any]:
        """Name, verifier and split sizes, plus ``info``: what a run directory and a report record, and
        ``data_sha256`` (``splits_hash``), which says whether two runs saw the same problems."""
        train = "fresh prompts every step" if self.train_stream is not None else len(self.train)
        sizes = {"train": train, "validation": len(self.validation), "test": len(self.test)}
        return {**self.info, "task": self.name, "verifier": self.verifier, "problems": sizes,
                "data_sha256": splits_hash(self)}


def splits_hash(task: Task) -> str:
    """A SHA-256 of the task's splits as a run sees them: every problem's split, id, prompt, reference and family,
    in order (a streamed train split: the sample ``train`` holds). Equal for two loads of the same data under the
    same settings, whatever file or hub cache it came from; any changed character changes it."""
    digest = hashlib.sha256()
    for split, problems in (("train", task.train), ("validation", task.validation), ("test", task.test)):
        for problem in problems:
            for text in (split, problem.id, problem.prompt, problem.reference, problem.family):
                encoded = str(text).encode("utf-8", "surrogatepass")
                digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return digest.hexdigest()


def _hash_percent(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % 100


def with_validation(task: Task, size: int = 200) -> Task:
    """``task`` with a validation split: its own, or up to ``size`` train problems carved out by a hash
    of the prompt (about 10% of train at most, so training keeps the rest; the carve is the same for
    every seed)."""
    if task.validation or task.train_stream is not None:
        return task
    carved = [p for p in task.train if _hash_percent("validation:" + p.prompt) < 10][:size]
    prompts = {p.prompt for p in carved}
    return replace(task, validation=tuple(carved), train=tuple(p for p in task.train if p.prompt not in prompts))
