"""Multi-seed comparisons (``grpolab compare``) as a Python API: ``compare(CompareConfig, TrainConfig, out)``.

* ``settings``: the sweep directory's saved settings and the training settings a sweep owns.
* ``variants``: the ``--vary`` axes. ``plan``: the runs (``RunSpec``), their ids, folders and configs.
* ``select``: the lr chosen per (variant, estimator, G) on validation runs, and bracketing the grid.
* ``run``: the backends (``local``: a process pool that every stop signal ends, ``signals``; ``cluster``: Ray),
  ``worker``: one run in a worker, ``devices``: GPUs per run.
* ``gather``: the results, metrics and runs tables. ``comparison``: the order of it all (``compare``).

Where it departs from the papers it follows: see ``select`` (bracketing) and ``plan`` (``name+dynamic``).
"""

from grpolab.sweep.comparison import CompareResult, compare
from grpolab.sweep.plan import Cell, RunSpec
from grpolab.sweep.variants import Variant

__all__ = ["Cell", "CompareResult", "RunSpec", "Variant", "compare"]
