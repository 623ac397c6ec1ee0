"""Replay of informative groups (``replay``, ``replay_max_age``): a step's uniform groups (rewards all equal) are
replaced by informative groups kept from earlier steps.

Sources: TRL's experimental ``GRPOWithReplayBuffer`` (removed in TRL 1.16.0), which kept the groups of highest
reward spread and put them in place of zero-spread groups, and verl's replay buffer.

How it works (``ReplayBuffer.refill``, once per step, after sampling and before the advantages):

* The buffer holds the informative groups (rewards not all equal) of the last ``replay_max_age`` steps, each
  with the step that sampled it; older ones are dropped.
* Each uniform group of the step's batch is replaced, in place, by the newest group in the buffer (the least
  off-policy), and a group is replayed at most once. With an empty buffer a uniform group stays.
* Then the step's own informative groups enter the buffer (those just replayed are not stored again).
* The advantages are computed on the batch after the replacement, from each group's own rewards.

How off-policy a replayed group is: it was sampled by the policy of ``age`` steps ago (1 <= age <=
``replay_max_age``), i.e. ``age * num_iterations`` optimizer steps before the one it is trained in;
``rollout/replay_age`` logs the mean age. The importance ratio of the clipped objective is NOT corrected for
it: the ratio is against the log-probs of the policy being updated at the start of the step, as for fresh
groups. A replayed group keeps its sampler's log-probs, so ``--sampler-is-cap`` (truncated importance sampling)
weighs its tokens by min(pi / pi_sampler, cap) against the policy that sampled it, which corrects the staleness
up to the cap, and ``--off-policy-mask-threshold`` drops its negative-advantage completions when they are too
far off-policy; ``rollout/sampler_kl`` measures the distance.

The step's logs (rewards, ``starvation/*``, the rollout table) describe the batch trained, replayed groups
included; compute counts only what was sampled, so replay is free in ``rollout/completions_generated``. The
buffer is saved in the checkpoint (``state`` / ``load_state``, JSON), so a resumed run repeats an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from functools import reduce
from typing import Any

import numpy as np
import torch

from grpolab.tasks import Problem
from grpolab.train.batch import StepBatch

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """Informative groups of the last ``max_age`` steps (see the module docstring)."""

    def __init__(self, max_age: int) -> None:
        self.max_age = max_age
        self._groups: list[tuple[int, StepBatch]] = []  # (step sampled, a one-group batch), oldest first

    def __len__(self) -> int:
        return len(self._groups)

    def refill(self, step: int, batch: StepBatch) -> tuple[StepBatch, dict[str, float]]:
        """(the batch with its degenerate groups replaced by stored ones, the ``rollout/replay*`` metrics)."""
        self._groups = [(s, g) for s, g in self._groups if step - s <= self.max_age]
        informative = set(batch.informative_groups())
        parts, ages = [], []
        for p in range(batch.num_groups):
            if p not in informative and self._groups:
                sampled, group = self._groups.pop()  # the newest
                parts.append(group)
                ages.append(step - sampled)
            else:
                parts.append(batch.select_groups([p]))
        self._groups += [(step, batch.select_groups([p])) for p in sorted(informative)]
        trained = reduce(StepBatch.concat, parts) if ages else batch
        return trained, {"rollout/replayed_groups": float(len(ages)),
                         "rollout/replay_age": float(np.mean(ages)) if ages else 0.0}

    def state(self) -> list[dict[str, Any]]:
        """JSON-safe state for the checkpoint: every stored group with its step."""
        return [{"step": sampled, **{f.name: _to_json(getattr(group, f.name)) for f in dataclasses.fields(group)}}
                for sampled, group in self._groups]

    def load_state(self, state: list[dict[str, Any]]) -> None:
        self._groups = [(int(entry["step"]), _group(entry)) for entry in state or []]


def _to_json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return {"tensor": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": str(value.dtype)}
    if value and isinstance(value[0], Problem):
        return [dataclasses.asdict(problem) for problem in value]
    return list(value)


def _group(entry: dict[str, Any]) -> StepBatch:
    values = {}
    for f in dataclasses.fields(StepBatch):
        value = entry.get(f.name)
        if isinstance(value, dict) and "tensor" in value:
            value = torch.tensor(value["tensor"], dtype=getattr(torch, value["dtype"]))
        elif isinstance(value, dict) and "array" in value:
            value = np.array(value["array"], dtype=value["dtype"])
        elif f.name == "problems":
            value = [Problem(**problem) for problem in value]
        values[f.name] = value
    return StepBatch(**values)
