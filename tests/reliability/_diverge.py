"""``python _diverge.py <grpolab arguments>``: the grpolab CLI, but in a run whose lr is
``GRPOLAB_TEST_DIVERGE_LR`` the update of step ``GRPOLAB_TEST_DIVERGE_STEP`` leaves a NaN weight (whether or
not that step's batch had a gradient): the divergence a too-high lr gives on some CPUs and not on others, forced
at a known step. The
patch is made when this module is imported, so the spawned workers of a sweep, which re-import it as
``__mp_main__``, diverge too. Without those variables it is the plain CLI. ``force_divergence`` makes the same
patch in-process (with a ``monkeypatch``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

import grpolab.train.trainer
from grpolab.cli import main

__all__ = ["force_divergence"]


def _diverging(real_step: Any, lr: float, at_step: int) -> Any:
    def step(self: grpolab.train.trainer.Trainer, step: int) -> dict[str, Any]:
        metrics = real_step(self, step)
        if step == at_step and self.config.lr == lr:
            with torch.no_grad():
                next(iter(self.params.values())).view(-1)[0] = float("nan")
        return metrics

    return step


def force_divergence(patch: Any, lr: float, at_step: int) -> None:
    """With ``patch`` (a ``pytest.MonkeyPatch``): runs at ``lr`` get a NaN weight from step ``at_step``'s update."""
    trainer = grpolab.train.trainer.Trainer
    patch.setattr(trainer, "step", _diverging(trainer.step, lr, at_step))


if os.environ.get("GRPOLAB_TEST_DIVERGE_LR"):
    grpolab.train.trainer.Trainer.step = _diverging(grpolab.train.trainer.Trainer.step,
                                                    float(os.environ["GRPOLAB_TEST_DIVERGE_LR"]),
                                                    int(os.environ["GRPOLAB_TEST_DIVERGE_STEP"]))

if __name__ == "__main__":
    sys.exit(main())
