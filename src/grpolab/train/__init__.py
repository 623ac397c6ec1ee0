"""One training run: the engine dispatch (``engines``), the run shell both engines share (``shell``: the run
directory, settings, task, logs, evaluations and end), grpolab's own engine (``trainer``, with one step's batch in
``batch``, its advantages in ``step_advantages``, its forward passes in ``forward`` and its update in ``update``),
TRL's (``trl_engine``), the run's set-up pieces (``lifecycle``), and what a run directory holds: checkpoints
(``checkpoint``), logs (``runlog``), its saved settings (``settings``) and its writer's lock (``lock``).

``from grpolab.train import train, Trainer`` is the Python API behind ``grpolab train``. The three load on first
use (PEP 562), so that importing a light module of this package (``settings``, which the command line's flags
read) does not import torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpolab.train.engines import train
    from grpolab.train.lifecycle import RunResult
    from grpolab.train.trainer import Trainer

__all__ = ["RunResult", "Trainer", "train"]
_HOMES = {"train": "grpolab.train.engines", "RunResult": "grpolab.train.lifecycle", "Trainer": "grpolab.train.trainer"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'grpolab.train' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
