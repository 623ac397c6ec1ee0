"""Multi-seed comparisons (``grpolab compare``) as a Python API: ``compare(CompareConfig, TrainConfig, out)``.

* ``settings``: the sweep directory's saved settings and the training settings a sweep owns.
* ``variants``: the ``--vary`` axes. ``plan``: the runs (``RunSpec``), their ids, folders and configs.
* ``select``: the lr chosen per (variant, estimator, G) on validation runs, and bracketing the grid.
* ``run``: the backends (``local``: a process pool that every stop signal ends, ``signals``; ``cluster``: Ray),
  ``worker``: one run in a worker, ``devices``: GPUs per run.
* ``gather``: the results, metrics and runs tables. ``comparison``: the order of it all (``compare``).

Where it departs from the papers it follows: see ``select`` (bracketing) and ``plan`` (``name+dynamic``).

The names below load on first use (PEP 562): ``grpolab compare --help`` reads ``settings`` without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpolab.sweep.comparison import CompareResult, compare
    from grpolab.sweep.plan import Cell, RunSpec
    from grpolab.sweep.variants import Variant

__all__ = ["Cell", "CompareResult", "RunSpec", "Variant", "compare"]
_HOMES = {"CompareResult": "grpolab.sweep.comparison", "compare": "grpolab.sweep.comparison",
          "Cell": "grpolab.sweep.plan", "RunSpec": "grpolab.sweep.plan", "Variant": "grpolab.sweep.variants"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'grpolab.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
