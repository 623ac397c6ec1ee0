"""How a run sampled, recorded so that no run falls back to a slower or different sampler without a trace.

Each ``Rollout`` carries its ``sampler`` (one of ``fast_decode.SAMPLER_PATHS``: "lean graph", "lean static",
"lean dynamic", "transformers") and ``sampler_fallback`` (why it did not sample the way its device and model call
for, or ""). A run turns them into two per-step metrics (``sampler_metrics``: ``perf/sampler_graph``,
``perf/sampler_fell_back``) and, at its end, into ``summary.json``'s ``"sampler"`` (``SamplerRecord``): every path
its rollouts took, with the number of rollouts each, and the first fall-back's reason.

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

    def note(self, rollout: Rollout) -> None:
        """Count ``rollout``'s path; keep the first fall-back's reason."""
        self.paths[rollout.sampler or "unknown"] += 1
        self.fallback = self.fallback or rollout.sampler_fallback

    def summary(self) -> dict[str, Any]:
        """``{"paths": {path: rollouts}, "fallback": reason or None}`` for the rollouts noted since the run (or
        its resume) started; an empty ``paths`` for a run that sampled nothing."""
        return {"paths": dict(self.paths), "fallback": self.fallback or None}
