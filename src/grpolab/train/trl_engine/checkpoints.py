"""A TRL-engine run's checkpoints (TRL's ``checkpoints/checkpoint-N``, N optimiser steps), made as safe as grpolab's
engine makes its own (``grpolab.train.checkpoint``): sealed with ``checksums.json`` once TRL has written them,
verified before a resume, and skipped with a warning naming them when damaged.

TRL writes a checkpoint's files one by one and not atomically: a kill inside transformers' save leaves an empty
``trainer_state.json``, a truncated ``optimizer.pt`` or ``model.safetensors``; a flipped bit goes unseen. grpolab
seals a checkpoint after TRL's save returns (``seal``: SHA-256 of every file in it), so a checkpoint without a seal
is one whose save never finished, and ``latest_checkpoint`` resumes from the newest checkpoint whose files match
their seal. Under ``accelerate launch`` the main process seals what is on its disk when its save returns. Each
checkpoint also holds ``state.json`` with the settings the run was trained under and the identity of its data and
local model (``record_state``), as grpolab's engine's checkpoints do, so that ``--resume`` refuses a ``config.yaml``
edited since (``trl_checkpoint_settings``, found through ``grpolab.capabilities`` by
``grpolab.train.settings.checked_resume_settings``).

Rotation is grpolab's, not TRL's (TRL's ``save_total_limit`` is unset): ``prune`` removes older checkpoints only
after the newest is sealed, so a kill during a save always leaves the previous sealed checkpoint to resume from.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab import capabilities
from grpolab.checksums import SEAL, seal_folder, seal_problem
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text, share_modes
from grpolab.train.identity import run_identity

if TYPE_CHECKING:
    from grpolab.models import Policy

__all__ = ["LAYOUT", "SEAL", "any_checkpoint", "checkpoint_model", "checkpoint_problem", "latest_checkpoint", "prune",
           "record_state", "saved_success_window", "seal", "trl_checkpoint_settings",
           "unreadable"]

LAYOUT = capabilities.engine("trl").checkpoints
"""TRL's folder names, ``checkpoint-N`` for N optimiser steps (``grpolab.capabilities``)."""



def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(optimiser step, path) of every checkpoint directory, newest first (steps compared as numbers)."""
    return LAYOUT.folders(Path(run_dir) / "checkpoints")[::-1]


def any_checkpoint(run_dir: Path) -> bool:
    """Whether the run directory holds any TRL checkpoint, whole or not (a fresh run must not replace it)."""
    return capabilities.engine("trl").has_checkpoint(run_dir)


def record_state(checkpoint: Path, config: TrainConfig, success_window: list[list[float]] | None = None) -> None:
    """Write ``state.json`` with the settings the run trains under and the identity of its data and local model
    (``run_identity``), as grpolab's own checkpoints hold them, so that a resume refuses changed settings or data
    (``settings.checked_resume_settings``, ``settings.check_identity``); and the training success window
    (``SuccessWindow.state``), so that a resumed run's ``d_iid`` and ``jensen_gap`` see the steps before it."""
    state = {"settings": config.to_dict(), "identity": run_identity(config)}
    if success_window is not None:
        state["success_window"] = success_window
    atomic_write_text(checkpoint / "state.json", json.dumps(state))


def saved_success_window(checkpoint: Path) -> list[list[float]]:
    """The training success window ``record_state`` saved in ``checkpoint`` ([] when it holds none)."""
    try:
        state = json.loads((checkpoint / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    window = state.get("success_window") if isinstance(state, dict) else None
    return window if isinstance(window, list) else []


def seal(checkpoint: Path) -> None:
    """Write ``checkpoint``'s ``checksums.json``: the SHA-256 of each of its files, by relative path; and give its
    files the umask's modes (``io.share_modes``: TRL's safetensors are 0600)."""
    seal_folder(checkpoint)
    share_modes(checkpoint)


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when its files match its seal."""
    return seal_problem(checkpoint, required=("trainer_state.json",))


def unreadable(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be read, as the end of "its checkpoint <folder> ..." (the engine's
    ``checkpoint_problem``), None when its files match their seal."""
    problem = checkpoint_problem(checkpoint)
    return None if problem is None else f"cannot be read ({problem})"


def checkpoint_model(checkpoint: Path, config: TrainConfig, source: str) -> Policy:
    """``checkpoint`` as one plain model (saying it came from ``source``): TRL saved a
    peft adapter, merged here into the run's base model, or a whole model."""
    from grpolab.models import load_lora_adapter, load_policy

    if (checkpoint / "adapter_config.json").is_file():
        return load_lora_adapter(checkpoint, config.model, source)
    return load_policy(str(checkpoint))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint whose files match their seal; each newer one that does not is skipped with a warning
    naming it and why. None when there is none, or only saves that never finished (a kill during TRL's save); a
    ``UserError`` when every sealed one is damaged: restarting at step 0 would rewrite a trained run's logs."""
    damaged = []
    for _, checkpoint in _checkpoints(run_dir):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return checkpoint
        warnings.warn(f"checkpoint {checkpoint} is damaged ({problem}); skipping it", UserWarning, stacklevel=2)
        if (checkpoint / SEAL).is_file():
            damaged.append(checkpoint.name)
    if damaged:
        raise UserError(f"every checkpoint of {run_dir} is damaged or unfinished ({', '.join(damaged)} damaged), so "
                        "a resume would restart at step 0 and rewrite the run's logs; move them aside to train the "
                        "run afresh, or choose a new --out")
    return None


def trl_checkpoint_settings(run_dir: Path) -> tuple[Path, dict[str, Any] | None] | None:
    """(path, settings) of the newest checkpoint whose files match their seal (no warning: ``latest_checkpoint``
    names the damaged ones); settings is None for a checkpoint written before they were recorded. None when the
    run has no sealed checkpoint."""
    for _, checkpoint in _checkpoints(run_dir):
        if checkpoint_problem(checkpoint) is None:
            try:
                state = json.loads((checkpoint / "state.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return checkpoint, None
            settings = state.get("settings") if isinstance(state, dict) else None
            return checkpoint, settings if isinstance(settings, dict) else None
    return None


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` sealed checkpoints; remove every checkpoint older than the oldest of them."""
    sealed = [step for step, path in _checkpoints(run_dir) if (path / SEAL).is_file()][:keep]
    if len(sealed) < keep:
        return
    for step, path in _checkpoints(run_dir):
        if step < sealed[-1]:
            shutil.rmtree(path, ignore_errors=True)
