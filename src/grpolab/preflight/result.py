"""``PreflightResult``: what a pre-flight found (``grpolab.preflight.pipeline``), read by the page and the CLI."""

from __future__ import annotations

import math
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
        band_degenerate: the band's predicted degenerate share at the recommended G, on samples held out from
            choosing it (``predict.held_out_band_degenerate``; NaN when G > n / 2 or the band is empty).
        sampling: how the counts were sampled (temperature, max_new_tokens, use_chat_template, verifier, seed).
        files: name -> path of what was written (empty when nothing was; no band or control for an empty band).
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
    sampling: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def empty_band(self) -> str | None:
        """The sentence saying the band holds no prompt, or None when it holds some."""
        from grpolab.preflight.predict import empty_band

        return None if self.band_size else empty_band(self.successes, self.n, self.band)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: everything but the per-prompt arrays (they are in counts.csv); NaN becomes None."""
        rows = self.table.astype(object).where(self.table.notna(), None).to_dict(orient="records")
        return {"model": self.model, "task": self.task, "n": self.n, "prompts": len(self.problem_ids),
                "p_mean": self.p_mean, "mean_p_variance": self.mean_p_variance, "group_sizes": rows,
                "recommended_group_size": self.group_size, "band": list(self.band), "band_prompts": self.band_size,
                "band_degenerate": None if math.isnan(self.band_degenerate) else self.band_degenerate,
                "sampling": self.sampling, "files": self.files}
