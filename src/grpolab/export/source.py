"""Which weights of a run an export writes, checked before anything loads, and loading them as one plain model.

A run is exported from its ``final/`` model (the default) or from one checkpoint (``step``): grpolab's engine keeps
``checkpoints/step-NNNNNN/`` (the trainable weights by name, ``grpolab.train.checkpoint``), the TRL engine
``checkpoints/checkpoint-N/`` (TRL's own save: a peft adapter or a full model, sealed by
``grpolab.train.trl_engine.checkpoints``); each folder is checked and read by the engine whose layout names it
(``grpolab.capabilities.checkpoint_folders``). ``read_run`` refuses, in one line naming the run, a directory that is no
run, a damaged ``config.yaml`` or ``summary.json``, a diverged run, an unfinished run (without ``step``), and a
missing or damaged checkpoint. ``load_model`` loads through ``grpolab.models`` (the final model as ``grpolab eval
--model RUN`` loads it, a LoRA adapter merged into its base with peft's ``merge_and_unload``) and refuses NaN or
infinite weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab import capabilities
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.models import Policy, check_finite_weights, load_policy
from grpolab.train.no_signal import NO_SIGNAL
from grpolab.train.runlog import read_summary
from grpolab.train.settings import load_saved_config

__all__ = ["RunSource", "load_model", "read_run"]


@dataclass(frozen=True)
class RunSource:
    """One run to export: its directory, saved settings, ``summary.json`` (None while unfinished) and the weights
    chosen: ``checkpoint`` (None: ``final/``) at ``step`` (the run's last step for ``final/``)."""

    run_dir: Path
    config: TrainConfig
    summary: dict[str, Any] | None
    step: int
    checkpoint: Path | None = None

    @property
    def finished(self) -> bool:
        """Ended with a final model: finished, or stopped by --stop-when-dead."""
        return self.summary is not None and self.summary.get("status", "finished") in ("finished", NO_SIGNAL)


def read_run(run_dir: Path, step: int | None = None) -> RunSource:
    """The run in ``run_dir`` and the weights to export (``final/``, or the checkpoint of ``step``); ``UserError``
    naming the run when it cannot be exported (see the module docstring)."""
    run_dir = Path(run_dir)
    config = _saved_config(run_dir)
    summary = _summary(run_dir)
    if summary is not None and summary.get("status", "finished") == "diverged":
        raise UserError(f"run {run_dir} diverged at step {summary.get('diverged_at_step', '?')} "
                        f"({summary.get('reason', 'no reason recorded')}), so it has no model to export; retrain it "
                        "with a lower --lr in a new --out")
    if step is not None:
        return RunSource(run_dir, config, summary, step, _checkpoint(run_dir, step))
    if summary is None:
        raise UserError(f"run {run_dir} is unfinished (it has no summary.json); resume it (grpolab train --out "
                        f"{run_dir} --resume), or export one of its checkpoints with --step N "
                        f"({_steps_text(run_dir)})")
    if not (run_dir / "final").is_dir():
        raise UserError(f"run {run_dir} is damaged: summary.json says it finished but it has no final/ model; resume "
                        f"it (grpolab train --out {run_dir} --resume) to write final/ again from its last checkpoint")
    return RunSource(run_dir, config, summary, _final_step(summary, config))


def _final_step(summary: dict[str, Any], config: TrainConfig) -> int:
    """The step of a finished run's end evaluation (sooner than ``steps`` when ``--budget`` ended it), else its
    ``steps``."""
    ends = [row["step"] for row in summary.get("evaluations") or []
            if isinstance(row, dict) and row.get("phase") == "end" and isinstance(row.get("step"), int)]
    return ends[-1] if ends else int(summary.get("steps", config.steps))


def _saved_config(run_dir: Path) -> TrainConfig:
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory; pass a grpolab run directory (the --out of grpolab train)")
    try:
        config = load_saved_config(run_dir)
    except UserError as error:
        raise UserError(f"run {run_dir} is damaged: {error}") from None
    if config is None:
        raise UserError(f"{run_dir} holds no config.yaml, so it is no grpolab run directory; pass the --out of "
                        "grpolab train (or of grpolab compare)")
    return config


def _summary(run_dir: Path) -> dict[str, Any] | None:
    summary = read_summary(run_dir)
    if summary is None and (run_dir / "summary.json").exists():
        raise UserError(f"run {run_dir} is damaged: its summary.json cannot be read; resume it (grpolab train --out "
                        f"{run_dir} --resume) to write it again")
    return summary


def _steps_text(run_dir: Path) -> str:
    steps = sorted(capabilities.checkpoint_folders(run_dir))
    return f"it keeps checkpoints of step(s) {', '.join(map(str, steps))}" if steps else "it keeps no checkpoint"


def _checkpoint(run_dir: Path, step: int) -> Path:
    """The checkpoint folder of ``step``, whole (its checksums match), or ``UserError`` naming the run."""
    found = capabilities.checkpoint_folders(run_dir).get(step)
    if found is None:
        raise UserError(f"run {run_dir} has no checkpoint of step {step}; {_steps_text(run_dir)} (grpolab keeps "
                        "--keep-checkpoints of them, every --checkpoint-every steps)")
    engine, path = found
    problem = engine.problem(path)
    if problem:
        raise UserError(f"run {run_dir} is damaged: its checkpoint {path.name} {problem}; export another --step")
    return path


def load_model(source: RunSource) -> Policy:
    """The weights ``source`` chose, as one plain model (LoRA merged) with the base model's tokenizer."""
    if source.checkpoint is None:  # final/: damaged files and NaN weights are refused there
        return load_policy(_path_name(source.run_dir))
    try:
        policy = _load_checkpoint(source)
    except UserError:
        raise
    except Exception as error:  # a cut-short safetensors file, a garbled adapter_config.json, ...
        problem = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UserError(f"run {source.run_dir} is damaged: its checkpoint {source.checkpoint.name} cannot be loaded "
                        f"({problem}); export another --step") from None
    check_finite_weights(policy.model, f"the checkpoint {source.checkpoint}", fix="export an earlier --step")
    return policy


def _path_name(path: Path) -> str:
    """``path`` as a name ``load_policy`` reads as a path (a run folder called ``embedded`` is not the embedded
    model)."""
    return str(path) if len(path.parts) > 1 else f"./{path}"


def _load_checkpoint(source: RunSource) -> Policy:
    """The chosen checkpoint as one plain model, read by the engine whose folder it is."""
    engine, checkpoint = capabilities.checkpoint_folders(source.run_dir)[source.step]
    policy: Policy = engine.model(checkpoint, source.config, str(source.run_dir))
    return policy
