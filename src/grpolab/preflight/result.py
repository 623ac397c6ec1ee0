"""``PreflightResult``: what a pre-flight found (``grpolab.preflight.pipeline``), read by the page and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["PreflightResult"]


@dataclass
class PreflightResult:
    """What a pre-flight found: the train prompts' counts, the per-G table, the recommendation and the files.

    Attributes:
        model, task: what was sampled. n: samples per train prompt. problem_ids: the train prompts [P].
        successes: correct samples of n per prompt [P]. table: ``predict.group_table``, one row per G.
        p_mean: mean estimated pass rate. mean_p_variance: unbiased E[p(1 - p)].
        group_size: the recommended G. band: the pass-rate band (low, high). band_size: prompts in it.
        band_degenerate: the band's own predicted degenerate share at the recommended G.
        files: name -> path of what was written (empty when nothing was).
    """

    model: str
    task: str
    n: int
    problem_ids: list[str]
    successes: np.ndarray
    table: pd.DataFrame
    p_mean: float
    mean_p_variance: float
    group_size: int
    band: tuple[float, float]
    band_size: int
    band_degenerate: float
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: everything but the per-prompt arrays (they are in counts.csv); NaN becomes None."""
        rows = self.table.astype(object).where(self.table.notna(), None).to_dict(orient="records")
        return {"model": self.model, "task": self.task, "n": self.n, "prompts": len(self.problem_ids),
                "p_mean": self.p_mean, "mean_p_variance": self.mean_p_variance, "group_sizes": rows,
                "recommended_group_size": self.group_size, "band": list(self.band), "band_prompts": self.band_size,
                "band_degenerate": self.band_degenerate, "files": self.files}
