"""The data types every task shares: a problem (prompt + reference answer) and a task (splits + verifier).

A task holds plain prompt text. Whether a chat template wraps it is the model's business
(see ``grpolab.models``), so the same task runs on a base model and on an instruct model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One verifiable problem.

    Attributes:
        id: stable identifier, unique within its task split (used in rollout logs and per-prompt stats).
        prompt: the text the model is asked to continue or answer.
        reference: what the task's verifier compares a completion with.
    """

    id: str
    prompt: str
    reference: str


@dataclass(frozen=True)
class Task:
    """A named set of problems with a train split, a held-out test split and a verifier.

    Attributes:
        name: the task's registry name (``arith``, ``gsm8k``, ``math500``).
        train: problems that RL samples prompts from.
        test: held-out problems for evaluation.
        verifier: a name in ``grpolab.verifiers`` (or a dotted import path to a reward callable).
        max_new_tokens: the default generation budget for a completion on this task.
        use_chat_template: whether to wrap prompts with the tokenizer's chat template when it has one.
    """

    name: str
    train: tuple[Problem, ...]
    test: tuple[Problem, ...]
    verifier: str
    max_new_tokens: int = 16
    use_chat_template: bool = True
