"""A run's compute budget (``--budget``): ``completions=N`` or ``tokens=N``, the completions or completion tokens
a run may sample before it stops.

A comparison holds compute equal with it: every arm of ``grpolab compare --budget completions=N`` samples about
N completions, so that a remedy that resamples (DAPO's dynamic sampling) cannot win by sampling more. A run
stops after the step at which its count reaches N (it takes its end evaluation and checkpoint there), so it
may overshoot N by at most one step's sampling; ``--steps`` stays an upper bound, and a learning-rate schedule
still decays over ``--steps``. The counts are those the run logs as ``rollout/completions_generated`` and
``rollout/tokens_generated`` (everything sampled, extra dynamic-sampling rounds included). grpolab's engine
only: the TRL engine samples inside TRL's step and refuses a budget.
"""

from __future__ import annotations

from typing import NamedTuple

from grpolab.errors import UserError

__all__ = ["UNITS", "Budget", "check_budget", "parse_budget"]

UNITS = ("completions", "tokens")


class Budget(NamedTuple):
    unit: str  # one of UNITS
    amount: int

    def spent(self, completions: int, tokens: int) -> bool:
        """Whether a run that has sampled ``completions`` completions of ``tokens`` tokens has spent it."""
        return (completions if self.unit == "completions" else tokens) >= self.amount


def parse_budget(text: str) -> Budget:
    """``'completions=4096'`` -> Budget('completions', 4096); ``UserError`` naming the form otherwise."""
    unit, _, amount = text.partition("=")
    unit = unit.strip()
    try:
        value = int(amount.strip())
    except ValueError:
        value = 0
    if unit not in UNITS or value < 1:
        raise UserError(f"budget must be completions=N or tokens=N with N >= 1, got {text!r}; "
                        "e.g. --budget completions=4096")
    return Budget(unit, value)


def check_budget(text: str | None) -> None:
    """The schema's check of ``TrainConfig.budget`` (None: no budget)."""
    if text is not None:
        parse_budget(text)
