"""A difficulty curriculum (``curriculum``, ``curriculum_window``): prompts whose recent success is 0 or 1 are
skipped, and a fresh prompt of the train split is drawn in their place.

Sources: prime-rl's ``DifficultyPoolSampler`` and ``AdvRangeGate``, ROLL's ``difficulty_mask``, NeMo-RL #1475
("no-positive resampling": skip prompts with a pass rate of 0.9 or more). Those keep per-prompt pass rates and
skip or down-weight the prompts a group-centred estimator would starve on; this is the plain form of it.

How it works, deterministically in (seed, step), so that a resumed run repeats an uninterrupted one (the
per-prompt history is saved in the checkpoint: ``state`` / ``load_state``):

* Every sampled group is recorded: its prompt, the step, its successes c and scorable completions n (reward
  >= 0.5 is a success, as in ``grpolab.diagnostics.group_counts``).
* At step s, a prompt is *settled* when the groups recorded for it in steps s - W .. s - 1 (W =
  ``curriculum_window``) have c = 0 or c = n in total (n > 0): all wrong or all right lately. A prompt not
  sampled in the window is never settled.
* The step's prompts are those the run would draw without the curriculum (``shell.step_problems``); each
  settled one is replaced by the next prompt, in a permutation of the train split drawn from (seed, step,
  round), that is neither settled nor already drawn. When the split runs out of such prompts, the settled ones
  stay. Only what is sampled counts as compute (``rollout/completions_generated``): a skipped prompt is never
  sampled.

Departures: the sources pick by pass rate over longer histories or pools (prime-rl) or mask in the loss (ROLL);
here a prompt is skipped outright for W steps after it was last seen settled, and only a task with a fixed
train split can have a curriculum (a task that streams fresh prompts never sees a prompt twice; ``reverse``
has one with its ``train_pool`` option).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grpolab.config import TrainConfig
from grpolab.diagnostics import group_counts
from grpolab.errors import UserError
from grpolab.tasks import Problem, Task
from grpolab.train.shell import step_problems, step_seed

__all__ = ["DifficultyCurriculum", "check_curriculum"]

_REPLACEMENT_ROUND = 7_777  # keys the replacement draw apart from the step's own draws (rounds are < 7777)


def check_curriculum(config: TrainConfig, task: Task) -> None:
    """Refuse a curriculum on a task that streams its train prompts (one line)."""
    if config.curriculum and task.train_stream is not None:
        raise UserError(f"the curriculum needs a task with a fixed train split, but task {config.task!r} draws "
                        "fresh prompts every step; use a task such as arith or gsm8k, give reverse a fixed pool "
                        "(--task-options '{\"train_pool\": 64}'), or drop --curriculum (+curriculum)")


class DifficultyCurriculum:
    """Per-prompt recent success and the step's prompts without the settled ones (see the module docstring)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._history: dict[str, list[list[int]]] = {}  # prompt id -> [[step, successes, scorable], ...]

    def record(self, step: int, problems: Sequence[Problem], rewards: np.ndarray) -> None:
        """Record the groups sampled at ``step``: ``rewards`` [P, G] of ``problems``."""
        scorable, successes = group_counts(rewards)
        for problem, n, c in zip(problems, scorable.tolist(), successes.tolist(), strict=True):
            self._history.setdefault(str(problem.id), []).append([step, int(c), int(n)])
        self._forget(step)

    def settled(self, problem_id: str, step: int) -> bool:
        """Whether the prompt's groups of steps ``step - window .. step - 1`` are all wrong or all right."""
        recent = [(c, n) for s, c, n in self._history.get(str(problem_id), ()) if step - self.window <= s < step]
        successes, scorable = sum(c for c, _ in recent), sum(n for _, n in recent)
        return scorable > 0 and successes in (0, scorable)

    def problems(self, task: Task, config: TrainConfig, step: int, round_: int = 0) -> tuple[list[Problem], int]:
        """(the prompts of ``step`` / ``round_``, how many settled prompts were replaced)."""
        drawn = step_problems(task, config, step, round_)
        if not any(self.settled(p.id, step) for p in drawn):
            return drawn, 0
        taken = {str(p.id) for p in drawn}
        rng = np.random.default_rng(step_seed(config.seed, step, _REPLACEMENT_ROUND + round_))
        spare = (task.train[i] for i in rng.permutation(len(task.train)))
        chosen, replaced = [], 0
        for problem in drawn:
            if self.settled(problem.id, step):
                fresh = next((p for p in spare if str(p.id) not in taken and not self.settled(p.id, step)), None)
                if fresh is not None:
                    taken.add(str(fresh.id))
                    problem, replaced = fresh, replaced + 1
            chosen.append(problem)
        return chosen, replaced

    def _forget(self, step: int) -> None:
        """Drop the records no later step's window reaches."""
        for key in list(self._history):
            kept = [r for r in self._history[key] if r[0] > step - self.window]
            if kept:
                self._history[key] = kept
            else:
                del self._history[key]

    def state(self) -> dict[str, Any]:
        """JSON-safe state for the checkpoint."""
        return {"window": self.window, "history": {k: [list(r) for r in v] for k, v in self._history.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        self._history = {str(k): [[int(x) for x in r] for r in v] for k, v in (state or {}).get("history", {}).items()}
