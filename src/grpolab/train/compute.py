"""What a run spent: optimizer steps, trained sequences, trained and forwarded tokens, and sampled tokens, per step
and since the run began.

Equal completions sampled is not equal compute: grpolab's update skips the rows whose advantage is exactly 0
(``grpolab.train.update.trained_rows``), so an estimator that never gives 0 (``sign``) backpropagates more rows per
step than ``dr_grpo``, and dynamic sampling (``+dynamic``) trains full batches of informative groups in fewer steps.
These counters say what each run paid for:

* ``optimizer_steps``: optimizer steps (``num_iterations`` per training step; a step with no trained row still
  steps AdamW on a zero gradient, so it counts);
* ``trained_sequences``: completions that reached the backward pass, once per optimizer step;
* ``trained_tokens``: the completion tokens of those completions (the backward pass's tokens);
* ``forward_tokens``: their prompt and completion tokens, padding aside, once per optimizer step: the tokens the
  gradient's forward pass covers (prefix packing shares a prompt between rows; each row still counts it). The
  forwards without a gradient (the reference's, the frozen old log-probs') are not counted;
* ``sampled_tokens``: the completion tokens sampled, extra dynamic-sampling rounds included.

The metric keys are ``grpolab.metric_keys.COMPUTE``. A checkpoint saves the totals (``state``), so that a resumed
run's totals equal an uninterrupted run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from grpolab.metric_keys import COMPUTE
from grpolab.train.batch import StepBatch

__all__ = ["COUNTERS", "ComputeSpent", "update_spent"]

COUNTERS = tuple(COMPUTE)
"""The counters' names, in the order the logs and tables show them."""


@dataclass(frozen=True)
class ComputeSpent:
    """Counts of compute spent (over one step, or a run's totals); the fields are ``COUNTERS``."""

    optimizer_steps: int = 0
    trained_sequences: int = 0
    trained_tokens: int = 0
    forward_tokens: int = 0
    sampled_tokens: int = 0

    def __add__(self, other: ComputeSpent) -> ComputeSpent:
        return ComputeSpent(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def step_metrics(self) -> dict[str, float]:
        """These counts as one step's ``compute/*`` keys."""
        return {COMPUTE[name][0]: float(value) for name, value in asdict(self).items()}

    def total_metrics(self) -> dict[str, float]:
        """These counts as a run's cumulative keys (``compute/*_total``, ``rollout/tokens_generated``)."""
        return {COMPUTE[name][1]: float(value) for name, value in asdict(self).items()}

    def state(self) -> dict[str, int]:
        """The counts for a checkpoint or ``summary.json``."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ComputeSpent:
        """The counts ``state`` saved (a name it lacks counts 0)."""
        return cls(**{name: int(state.get(name, 0)) for name in COUNTERS})


def update_spent(batch: StepBatch, rows: Sequence[int], iterations: int) -> ComputeSpent:
    """What an update of ``iterations`` optimizer steps spent backpropagating ``rows`` of ``batch`` (nothing
    sampled: the trainer counts that as it samples)."""
    completion = int(batch.completion_mask[list(rows)].sum()) if rows else 0
    prompt = int(batch.prompt_mask[list(rows)].sum()) if rows else 0
    return ComputeSpent(
        optimizer_steps=iterations,
        trained_sequences=len(rows) * iterations,
        trained_tokens=completion * iterations,
        forward_tokens=(prompt + completion) * iterations,
    )
