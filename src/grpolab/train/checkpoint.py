"""Atomic, verified checkpoints of a training run: trainable weights, optimizer and scheduler state.

Layout: ``RUN/checkpoints/step-000010/`` with ``weights.safetensors`` (trainable parameters by name),
``optimizer.safetensors`` (AdamW moments, flattened by parameter name), ``state.json`` (step, scheduler,
anything JSON-safe) and ``checksums.json`` (SHA-256 of each file). A checkpoint is written into a
temporary directory and renamed into place, so a kill at any moment leaves either the complete
checkpoint or none, and a write that fails (a full disk) removes its temporary directory and stops the run
with one line; ``load_latest`` verifies the checksums and skips a damaged checkpoint with a warning naming it
(refusing when every one is damaged, or when one cannot be read: a restart from step 0 would rewrite the run).
``state.json`` also holds the settings the run was trained under (``"settings"``), so that a run's
``config.yaml`` can be checked against them, or restored from them (``checkpoint_settings``), and the identity
of the data and local model they name (``"identity"``, ``grpolab.train.identity.run_identity``), so that a resume
on changed data is refused.

No pickle is written or read: tensors go through safetensors, everything else through JSON. There is
no RNG state to save, because the trainer derives every step's randomness from (seed, step).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from grpolab import capabilities
from grpolab.checksums import file_sha256
from grpolab.config import TrainConfig
from grpolab.devices import to_host
from grpolab.errors import UserError
from grpolab.io import RESUME, fsync_dir, is_write_error, share_modes, write_error

if TYPE_CHECKING:
    from grpolab.models import Policy

__all__ = ["LAYOUT", "Checkpoint", "checkpoint_dirs", "checkpoint_model", "checkpoint_problem", "checkpoint_settings",
           "file_sha256", "load_latest", "save_checkpoint", "verify_checkpoint"]

_FILES = ("weights.safetensors", "optimizer.safetensors", "state.json")
LAYOUT = capabilities.engine("grpolab").checkpoints  # this engine's folder names: step-000010


@dataclass
class Checkpoint:
    """A loaded checkpoint: tensors by name and the JSON state."""

    step: int
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor]
    state: dict[str, Any]
    path: Path


def optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> tuple[dict[str, torch.Tensor], dict]:
    """Flatten an optimizer's per-parameter state to {"<param name>/<key>": tensor} plus JSON-safe extras."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, float] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                name = f"{names[id(param)]}/{key}"
                if torch.is_tensor(value):
                    tensors[name] = to_host(value).contiguous().clone()
                else:
                    scalars[name] = float(value)
    return tensors, {"scalars": scalars, "lrs": [group["lr"] for group in optimizer.param_groups]}


def restore_optimizer(
    optimizer: torch.optim.Optimizer, names: dict[int, str], tensors: dict[str, torch.Tensor], extras: dict
) -> None:
    """Inverse of ``optimizer_tensors``, on the parameters' device whatever device wrote the checkpoint: each moment
    goes where its parameter is, and ``step`` too when the kernel keeps it there (fused or capturable AdamW), else
    it stays on the host as torch keeps it."""
    for group, lr in zip(optimizer.param_groups, extras.get("lrs", []), strict=False):
        group["lr"] = lr
    for group in optimizer.param_groups:
        step_device = None if group.get("fused") or group.get("capturable") else torch.device("cpu")
        for param in group["params"]:
            prefix = f"{names[id(param)]}/"
            state = {k[len(prefix):]: v.to(_state_device(k, param, step_device), copy=True)
                     for k, v in tensors.items() if k.startswith(prefix)}
            state.update({k[len(prefix):]: v for k, v in extras.get("scalars", {}).items() if k.startswith(prefix)})
            if state:
                optimizer.state[param] = state


def _state_device(key: str, param: torch.Tensor, step_device: torch.device | None) -> torch.device:
    """Where an optimizer state tensor lives: with its parameter, except a ``step`` counter torch keeps on the host."""
    return step_device if key.endswith("/step") and step_device is not None else param.device


def save_checkpoint(
    run_dir: Path, step: int, weights: dict[str, torch.Tensor], optimizer: dict[str, torch.Tensor],
    state: dict[str, Any], *, keep: int = 2,
) -> Path:
    """Write checkpoint ``step`` atomically and keep only the ``keep`` newest ones; a failed write (disk full)
    leaves no temporary directory and raises a one-line ``UserError``."""
    root = run_dir / "checkpoints"
    final = root / LAYOUT.name(step)
    staging: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        _write_checkpoint(staging, final, step, weights, optimizer, state)
    except Exception as error:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not is_write_error(error):
            raise
        raise write_error(final, error, then=f"{RESUME} (it continues from the last complete checkpoint)") from None
    _prune(root, keep)
    return final


def _write_checkpoint(staging: Path, final: Path, step: int, weights: dict[str, torch.Tensor],
                      optimizer: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    save_file({k: to_host(v).contiguous() for k, v in weights.items()}, str(staging / "weights.safetensors"))
    save_file(optimizer, str(staging / "optimizer.safetensors"))
    (staging / "state.json").write_text(json.dumps({**state, **_identity(state), "step": step}))
    checksums = {name: file_sha256(staging / name) for name in _FILES}
    (staging / "checksums.json").write_text(json.dumps(checksums))
    for name in (*_FILES, "checksums.json"):
        with (staging / name).open("rb") as handle:
            os.fsync(handle.fileno())
    share_modes(staging)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    fsync_dir(final.parent)


def _identity(state: dict[str, Any]) -> dict[str, Any]:
    """``{"identity": ...}`` of the data and local model that the state's settings name (``run_identity``)."""
    if not isinstance(state.get("settings"), dict):
        return {}
    from grpolab.train.identity import run_identity

    return {"identity": run_identity(state["settings"])}


def checkpoint_dirs(root: Path) -> list[Path]:
    """The ``step-N`` directories under ``root``, oldest first by the number N (as text, ``step-1000000``
    would sort before ``step-999999``); names whose N is not a number are left out (the engine's
    ``CheckpointLayout``)."""
    return [path for _, path in LAYOUT.folders(root)]


def _prune(root: Path, keep: int) -> None:
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    complete = checkpoint_dirs(root)
    for old in complete[: max(len(complete) - keep, 0)]:
        shutil.rmtree(old, ignore_errors=True)


def verify_checkpoint(path: Path) -> bool:
    """Whether checkpoint ``path`` is whole: ``checksums.json`` readable and every file's SHA-256 equal to it
    (a flipped bit, a truncated or missing file, a missing or garbage ``checksums.json``: False)."""
    return _verify(path)


def checkpoint_problem(path: Path) -> str | None:
    """Why checkpoint ``path`` cannot be read (the engine's ``checkpoint_problem``), None when it is whole."""
    return None if _verify(path) else "does not match its checksums"


def checkpoint_model(checkpoint: Path, config: TrainConfig, source: str) -> Policy:
    """Checkpoint ``checkpoint`` of a run trained under ``config`` as one plain model (saying it came from
    ``source``): the base model, LoRA-wrapped as the run trained it
    (``wrap_lora``), with the checkpoint's trainable weights copied in by name, then merged."""
    from grpolab.models import Policy, load_policy
    from grpolab.train.lifecycle import wrap_lora

    base = load_policy(config.model)
    model = wrap_lora(base.model, config) if config.lora else base.model
    weights = load_file(str(checkpoint / "weights.safetensors"))
    params = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise UserError(f"the checkpoint {checkpoint} does not match the run's model {config.model!r} (it holds "
                        f"{unknown[0]}); export the run's final model instead")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor)
    merged = model.merge_and_unload() if config.lora else model
    return Policy(merged, base.tokenizer, source, config.model)


def _verify(path: Path) -> bool:
    """Whether the checkpoint at ``path`` is whole (every file matches its checksum); a file this user may not read
    is a ``UserError``, not damage: skipping it would restart the run from an older step, or from step 0."""
    try:
        checksums = json.loads((path / "checksums.json").read_text())
        return all(file_sha256(path / name) == checksums[name] for name in _FILES)
    except PermissionError as error:
        raise UserError(f"cannot read checkpoint {path} ({error.strerror}: {Path(error.filename or path).name}); "
                        "give this user read access to the run folder, or resume as its owner; nothing was "
                        "changed") from None
    except (OSError, KeyError, TypeError, ValueError):  # ValueError: not JSON, not UTF-8
        return False


def load_latest(run_dir: Path) -> Checkpoint | None:
    """The newest checkpoint whose checksums verify, or None if the run has none. Damaged ones are skipped with a
    warning; when every one is damaged, a ``UserError``: restarting at step 0 would rewrite a trained run's logs."""
    root = run_dir / "checkpoints"
    found = checkpoint_dirs(root)
    for path in reversed(found):
        if not _verify(path):
            warnings.warn(f"checkpoint {path} is damaged (its checksums do not match); skipping it", UserWarning,
                          stacklevel=2)
            continue
        state = json.loads((path / "state.json").read_text())
        return Checkpoint(
            step=int(state["step"]),
            weights=load_file(str(path / "weights.safetensors")),
            optimizer=load_file(str(path / "optimizer.safetensors")),
            state=state,
            path=path,
        )
    if found:
        names = ", ".join(p.name for p in found)
        raise UserError(f"every checkpoint in {root} is damaged ({names}), so a resume would restart at step 0 and "
                        f"rewrite the run's logs; move {root} aside to train the run afresh, or choose a new --out")
    return None


def checkpoint_settings(run_dir: Path) -> tuple[Path, dict[str, Any] | None] | None:
    """(path, settings) of the newest checkpoint whose checksums verify; settings is None for a checkpoint
    written before checkpoints recorded them. None when the run has no checkpoint."""
    root = run_dir / "checkpoints"
    for path in reversed(checkpoint_dirs(root)):
        if _verify(path):
            return path, json.loads((path / "state.json").read_text()).get("settings")
    return None
