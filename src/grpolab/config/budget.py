"""A run's compute budget (``--budget``): ``completions=N``, ``tokens=N`` or ``trained_tokens=N``, the completions
sampled, the completion tokens sampled or the completion tokens trained that a run may spend before it stops.

A comparison holds one kind of compute equal with it, and only that one (``Budget.holds_equal`` says which):

* ``completions=N`` / ``tokens=N``: equal sampling. Every arm of ``grpolab compare --budget completions=N``
  samples about N completions, so that a remedy that resamples (DAPO's dynamic sampling) cannot win by sampling
  more. The update is not held equal: grpolab's update skips rows whose advantage is 0, so ``sign`` (never 0)
  backpropagates more rows than ``dr_grpo``, and ``+dynamic`` takes fewer optimizer steps.
* ``trained_tokens=N``: equal training. Every arm backpropagates about N completion tokens
  (``compute/trained_tokens_total``, ``grpolab.train.compute``); an arm that skips more zero-advantage rows runs
  more steps and samples more to get there.

A run stops after the step at which its count reaches N (it takes its end evaluation and checkpoint there), so it
may overshoot N by at most one step's count; ``--steps`` stays an upper bound, and a learning-rate schedule still
decays over ``--steps``. The counts are those the run logs as ``rollout/completions_generated``,
``rollout/tokens_generated`` (everything sampled, extra dynamic-sampling rounds included) and
``compute/trained_tokens_total``. grpolab's engine only: the TRL engine samples and trains inside TRL's step and
refuses a budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from grpolab.errors import UserError

__all__ = ["UNITS", "Budget", "check_budget", "parse_budget"]

UNITS = {
    "completions": "completions sampled (equal sampling; the update is not held equal)",
    "tokens": "completion tokens sampled (equal sampling; the update is not held equal)",
    "trained_tokens": "completion tokens trained, the backward pass's tokens (equal training; sampling is not "
                      "held equal)",
}
"""Each unit and what a budget in it holds equal."""


class Budget(NamedTuple):
    unit: str  # one of UNITS
    amount: int

    def spent(self, counts: Mapping[str, int]) -> bool:
        """Whether a run whose counts so far are ``counts`` (unit -> count, ``UNITS``' keys) has spent it."""
        return counts[self.unit] >= self.amount

    @property
    def holds_equal(self) -> str:
        """What the budget holds equal across runs, in words."""
        return f"{self.amount:,} {UNITS[self.unit]}"


def parse_budget(text: str) -> Budget:
    """``'completions=4096'`` -> Budget('completions', 4096); ``UserError`` naming the form otherwise."""
    unit, _, amount = text.partition("=")
    unit = unit.strip()
    try:
        value = int(amount.strip())
    except ValueError:
        value = 0
    if unit not in UNITS or value < 1:
        raise UserError(f"budget must be completions=N, tokens=N or trained_tokens=N with N >= 1, got {text!r}; "
                        "e.g. --budget completions=4096")
    return Budget(unit, value)


def check_budget(text: str | None) -> None:
    """The schema's check of ``TrainConfig.budget`` (None: no budget)."""
    if text is not None:
        parse_budget(text)
