"""How big a comparison is before it starts: how many runs its plan holds, and how many local workers the memory
this process is allowed can hold at once.

* ``plan_runs_count``: the runs a ``CompareConfig`` plans, counted from its lists without building the plan (a
  plan of millions of runs took minutes and gigabytes to build before anything was said): cells (estimators x
  group sizes x ``--vary`` variants) x (reported seeds + selection seeds x (lrs + ``lr_bracket_rounds``) when lrs
  are selected): each bracketing round adds at most one lr to a cell whose grid has two or more ended lrs
  (``select.extend_grids``; a cell with only one ended lr, the others failed, may add one lr on each side once).
* ``worker_bytes``: the memory one local worker needs, an estimate, not a bound (above the embedded model's measured
  peak, below SmolLM2-135M's: docs/compare.md):
  ``WORKER_BASE_BYTES`` (the interpreter, torch and a small model: a 2-step ``grpolab train`` of the embedded model
  peaks at 434 MB resident on the 2-core CPU machine, ``/usr/bin/time -f %M``), plus ``WEIGHT_COPIES`` x the
  weights as loaded (weights, gradients and Adam's two moments of a full fine-tune; under LoRA the copies stand for
  the sampler's copy and the update's activations, which it does not count). The weights as loaded are float32:
  4 bytes for each parameter of the weight files (their tensor shapes, read from the safetensors headers or the
  GGUF file's tensor table), not the files' size, which a quantized GGUF file (SmolLM2-135M's: 98 MB for 538 MB as
  loaded) understates 5.5 times. A hub id that is not a local directory adds nothing. Measured against it,
  ``scripts/worker_peak_memory.sh`` (docs/compare.md).
* ``memory_limit_bytes``: what this process is allowed, the cgroup's memory limit (v2 ``memory.max``, v1
  ``memory.limit_in_bytes``) where one is set, else the machine's total memory. Each worker's own memory
  check (``grpolab.engine.memory``) sees the whole of it, so without this bound 12 workers each passed their
  check and together used 6.5 GB, and in a 3 GB cgroup the sweep was killed without a word.
* ``fit_workers``: the workers asked for, lowered to what the limit holds (at least one), with a one-line
  ``UserWarning`` when it lowers them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["WEIGHT_COPIES", "WORKER_BASE_BYTES", "fit_workers", "memory_limit_bytes", "plan_runs_count",
           "worker_bytes"]

WORKER_BASE_BYTES = 512 << 20
"""The memory of a worker before its model's weights count (measured: 434 MB peak for the embedded model)."""
WEIGHT_COPIES = 4
"""Copies of the weights as loaded that a training worker is counted for: the weights, their gradients and Adam's two
moments (module docstring)."""


def plan_runs_count(sweep: Any) -> int:
    """The runs ``sweep`` (a ``CompareConfig``) plans, from its lists alone (see the module docstring)."""
    cells = len(sweep.estimator_list) * len(sweep.group_size_list) * _variant_count(sweep.vary)
    lrs = sweep.lr_list
    selection = len(sweep.selection_seed_list) * (len(lrs) + sweep.lr_bracket_rounds) if len(lrs) > 1 else 0
    return cells * (sweep.seeds + selection)


def _variant_count(vary: str) -> int:
    """The variants of a ``--vary`` text, the product of its axes' sizes, without listing them."""
    from grpolab.sweep.variants import _parse_axis, _split

    return math.prod(len(_parse_axis(part)[1]) for part in _split(vary, ";") if part.strip())


def _read_limit(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    return None


def _cgroup_limit(membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """This process's cgroup memory limit (v2, else v1), or None without one; ``membership`` is
    ``/proc/self/cgroup``, ``root`` where the cgroup file systems are mounted."""
    with contextlib.suppress(OSError, ValueError):
        for line in membership.read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            if hierarchy == "0":
                limit = _read_limit(root / path.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):
                limit = _read_limit(root / "memory" / path.lstrip("/") / "memory.limit_in_bytes")
            else:
                continue
            if limit is not None and limit < 1 << 60:  # v1 writes "no limit" as a huge number
                return limit
    return None


def memory_limit_bytes() -> int | None:
    """The memory this process is allowed: its cgroup's limit, else the machine's total (None if unreadable)."""
    limit = _cgroup_limit()
    if limit is not None:
        return limit
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


LOADED_BYTES_PER_PARAMETER = 4
"""grpolab loads a model's weights in float32, whatever the files hold."""


def _parameters(path: Path) -> int:
    """The parameters of one weight file, from its tensor shapes (no tensor data is read)."""
    if path.suffix == ".gguf":
        from gguf import GGUFReader

        return sum(math.prod(int(size) for size in tensor.shape) for tensor in GGUFReader(str(path)).tensors)
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        return sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())


@functools.lru_cache(maxsize=16)
def _weights_bytes(model: str) -> int:
    """Bytes of the model's weights as loaded (``LOADED_BYTES_PER_PARAMETER`` for each parameter of its safetensors
    or GGUF files) where it is a local directory, else 0."""
    from grpolab.models import SMOLLM2, resolve_model_dir

    with contextlib.suppress(Exception):  # a missing package or path fails later, in the run, with its own line
        folder, extra = resolve_model_dir(model)
        files = ([folder / extra["gguf_file"]] if model == SMOLLM2 else
                 [p for pattern in ("*.safetensors", "*.gguf") for p in sorted(folder.glob(pattern))])
        return LOADED_BYTES_PER_PARAMETER * sum(_parameters(path) for path in files)
    return 0


def worker_bytes(configs: Sequence[Any]) -> int:
    """The memory of one local worker training any of ``configs`` (``TrainConfig``s): the largest model's."""
    models = {config.model for config in configs}
    return WORKER_BASE_BYTES + WEIGHT_COPIES * max((_weights_bytes(model) for model in models), default=0)


def fit_workers(workers: int, per_worker: int, limit: int | None) -> int:
    """``workers``, lowered so that ``workers x per_worker`` fits in ``limit`` bytes (at least one), with a
    one-line warning naming the numbers when it lowers them."""
    if limit is None or workers * per_worker <= limit:
        return workers
    fitting = max(1, limit // per_worker)
    from grpolab.engine.memory import format_bytes

    warnings.warn(f"running {fitting} worker(s) at once instead of {workers}: each needs about "
                  f"{format_bytes(per_worker)} and this process is allowed {format_bytes(limit)} of memory (its cgroup "
                  "limit, else the machine's); pass --workers to choose fewer", UserWarning, stacklevel=2)
    return fitting
