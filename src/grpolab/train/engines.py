"""The engine dispatch: ``start()`` sets a run up with the engine its config names, ``train()`` sets it up and runs it.

``engine: grpolab`` is grpolab's own engine (``grpolab.train.trainer``); ``engine: trl`` is TRL's
``GRPOTrainer`` under grpolab's run (``grpolab.train.trl_engine``). Each engine is one object in the engine registry
(``grpolab.capabilities.ENGINES``): its checks, its checkpoint layout and its run class, which ``start`` imports only
when a run of that engine starts, so that a run of the own engine never loads TRL. The run class's instance is an
``EngineRun``; both engines' runs live inside the run shell (``grpolab.train.shell``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from grpolab import capabilities
from grpolab.config import TrainConfig
from grpolab.train.lifecycle import RunResult
from grpolab.train.shell import RunShell

__all__ = ["EngineRun", "start", "train"]

StepCallback = Callable[[int, dict[str, Any]], None]


class EngineRun(Protocol):
    """A run set up by its engine: its shell (``resumed_changes``: what a resume changed), the step it resumes
    after (0 for a fresh run), and ``run()``, which trains to the end and gives the run's lock up."""

    shell: RunShell
    start_step: int

    def run(self) -> RunResult: ...


def start(config: TrainConfig, run_dir: str | Path, *, resume: bool = False, on_step: StepCallback | None = None,
          start_eval_cache: Path | None = None, overwrite: bool = False) -> EngineRun:
    """Set one run up with the config's engine: the run directory locked, the settings checked, the task and the
    model loaded, a checkpoint restored on ``resume``; the arguments are ``train``'s."""
    run: EngineRun = capabilities.engine(config.engine).start(
        config, Path(run_dir), resume=resume, on_step=on_step, start_eval_cache=start_eval_cache, overwrite=overwrite)
    return run


def train(config: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          on_step: StepCallback | None = None, start_eval_cache: Path | None = None,
          overwrite: bool = False) -> RunResult:
    """Train one run with the config's engine; the Python API behind ``grpolab train`` and every run of
    ``grpolab compare``. ``resume``: continue the run in ``run_dir`` from its newest checkpoint; ``on_step``:
    ``fn(step, metrics)`` after each step; ``start_eval_cache``: a sweep's shared start evaluations;
    ``overwrite``: replace the run already in ``run_dir`` (files grpolab did not write are kept)."""
    return start(config, run_dir, resume=resume, on_step=on_step, start_eval_cache=start_eval_cache,
                 overwrite=overwrite).run()
