"""How a run sampled, recorded so that no run falls back to a slower or different sampler without a trace.

Each ``Rollout`` carries its ``sampler`` (one of ``fast_decode.SAMPLER_PATHS``: "lean graph", "lean static",
"lean dynamic", "transformers") and ``sampler_fallback`` (why it did not sample the way its device and model call
for, or ""). A run turns them into two per-step metrics (``sampler_metrics``: ``perf/sampler_graph``,
``perf/sampler_fell_back``) and, at its end, into ``summary.json``'s ``"sampler"`` (``SamplerRecord``): every path
its rollouts took, with the number of rollouts each, and the first fall-back's reason. The record travels in each
checkpoint (``state``), so a resumed run's summary counts every step; a run resumed from a checkpoint saved before
the record did says from which step it counts (``"from_step"``).

Nothing here departs from the papers: they say nothing of samplers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from grpolab.engine.rollout import Rollout

__all__ = ["SamplerRecord", "sampler_metrics"]


def sampler_metrics(rollout: Rollout) -> dict[str, float]:
    """``perf/sampler_graph`` (1 when the rollout replayed a CUDA graph) and ``perf/sampler_fell_back`` (1 when it
    fell back from the path its device and model call for)."""
    return {"perf/sampler_graph": float(rollout.sampler == "lean graph"),
            "perf/sampler_fell_back": float(bool(rollout.sampler_fallback))}


class SamplerRecord:
    """The sampling paths of a run's rollouts (``note`` each), summarised for ``summary.json``."""

    def __init__(self) -> None:
        self.paths: Counter[str] = Counter()
        self.fallback = ""
        self.from_step = 0  # the record counts the rollouts of the steps after this one

    def note(self, rollout: Rollout) -> None:
        """Count ``rollout``'s path; keep the first fall-back's reason."""
        self.paths[rollout.sampler or "unknown"] += 1
        self.fallback = self.fallback or rollout.sampler_fallback

    def state(self) -> dict[str, Any]:
        """What a checkpoint saves of the record (``load_state`` takes it back)."""
        return {"paths": dict(self.paths), "fallback": self.fallback, "from_step": self.from_step}

    def load_state(self, state: Any, step: int) -> None:
        """The record a checkpoint of ``step`` saved; one saved before the record (``state`` None) counts from
        ``step`` on."""
        if not isinstance(state, dict) or not isinstance(state.get("paths"), dict):
            self.paths, self.fallback, self.from_step = Counter(), "", step
            return
        self.paths = Counter({str(path): int(count) for path, count in state["paths"].items()})
        self.fallback = str(state.get("fallback") or "")
        self.from_step = int(state.get("from_step", 0))

    def summary(self) -> dict[str, Any]:
        """``{"paths": {path: rollouts}, "fallback": reason or None}`` for every rollout of the run, with
        ``"from_step"`` when the record counts only the steps after it; an empty ``paths`` for a run that sampled
        nothing."""
        record: dict[str, Any] = {"paths": dict(self.paths), "fallback": self.fallback or None}
        return {**record, "from_step": self.from_step} if self.from_step else record
