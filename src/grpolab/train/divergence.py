"""Divergence: a step whose loss, gradient norm or updated parameters are not finite ends the run.

``divergence_reason`` is checked after every update: the step's ``loss/total`` and ``loss/grad_norm`` (both
already computed by the update) and one float32 sum over the trainable parameters (a NaN or infinite entry
anywhere makes the sum non-finite), so it costs one pass over the weights and no copy.

A diverged run (``record_divergence``) keeps its last good checkpoint (the diverged step is never saved),
saves no ``final/`` model and writes ``summary.json`` with ``"status": "diverged"``, ``"diverged_at_step"``
and ``"reason"``; ``RunDiverged`` (a ``UserError``) carries the one line the command prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from grpolab.errors import UserError
from grpolab.io import atomic_write_text

__all__ = ["RunDiverged", "divergence_reason", "non_finite_metric", "record_divergence"]


class RunDiverged(UserError):
    """A run stopped because its loss, gradient or parameters became NaN or infinite."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


def _not_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isfinite(value)


def non_finite_metric(metrics: dict[str, Any]) -> str | None:
    """Why a step with these metrics diverged: its ``loss/total`` or ``loss/grad_norm`` is not finite; else None.
    Both engines word a divergence with it (the TRL engine passes TRL's loss and gradient norm under these keys)."""
    for key, what in (("loss/total", "loss"), ("loss/grad_norm", "gradient norm")):
        if _not_finite(metrics.get(key)):
            return f"the {what} is {metrics[key]}"
    return None


def divergence_reason(metrics: dict[str, Any], params: Iterable[torch.Tensor]) -> str | None:
    """Why the step that produced ``metrics`` and left ``params`` diverged, or None when all is finite."""
    reason = non_finite_metric(metrics)
    if reason is not None:
        return reason
    with torch.no_grad():
        total = sum((p.detach().sum(dtype=torch.float32) for p in params), torch.zeros((), dtype=torch.float32))
    if not bool(torch.isfinite(total)):
        return "the parameters became NaN or infinite after the update"
    return None


def record_divergence(run_dir: Path, step: int, reason: str, *, lr: float, steps: int,
                      metrics: dict[str, Any]) -> RunDiverged:
    """Write the diverged run's ``summary.json`` and return the error that ends the run."""
    safe = {k: v for k, v in metrics.items() if not _not_finite(v)}
    summary = {"status": "diverged", "diverged_at_step": step, "reason": reason, "steps": steps, "lr": lr,
               "final_metrics": safe}
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=1))
    return RunDiverged(f"the run diverged at step {step}: {reason}; the lr {lr:g} is likely too high: rerun "
                       "with a lower --lr (e.g. tenfold) or --warmup-steps, in a new --out or with --overwrite; "
                       f"{run_dir} keeps its last good checkpoint and no final/ model", step)
