"""What a fresh ``grpolab train`` may do to its ``--out`` folder: never destroy a run or a user's files.

A fresh run (no ``--resume``) refuses a folder that holds a run's checkpoints, a finished or diverged run
(``summary.json``, ``final/``), the logs of an earlier run under other settings, or files grpolab does not
write (a ``config.yaml`` without grpolab's first line counts as the user's). The one exception is the same
run, under the same settings, stopped before its first checkpoint: starting it again is what ``--resume``
would do. With ``overwrite`` the run's own files are deleted first; files it did not write are kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from grpolab.config import TrainConfig
from grpolab.config.files import SAVED_HEADER
from grpolab.errors import UserError

__all__ = ["check_fresh_run_dir", "remove_run_files"]

_LOGS = ("metrics.jsonl", "eval.jsonl", "resumes.jsonl")
_RUN_FILES = (*_LOGS, "summary.json", "task.json", "config.yaml")
_RUN_DIRS = ("checkpoints", "rollouts", "final", "tensorboard", "wandb")  # wandb: report_to's offline W&B runs
_LOCK_FILES = (".grpolab.lock", ".grpolab.lock.owner")


def _written_by_grpolab(config_file: Path) -> bool:
    try:
        with config_file.open(encoding="utf-8") as handle:
            return handle.readline().strip() == SAVED_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _foreign(run_dir: Path) -> list[str]:
    """Names in ``run_dir`` that grpolab does not write."""
    names = []
    for entry in run_dir.iterdir():
        ours = entry.name in (*_RUN_FILES, *_RUN_DIRS, *_LOCK_FILES) or entry.name.startswith(".write-test-")
        if not ours or (entry.name == "config.yaml" and not _written_by_grpolab(entry)):
            names.append(entry.name)
    rollouts = run_dir / "rollouts"
    if rollouts.is_dir():
        names += [f"rollouts/{p.name}" for p in rollouts.iterdir() if not p.name.startswith("step-")]
    return sorted(names)


def _has_logs(run_dir: Path) -> bool:
    logged = any((run_dir / name).is_file() and (run_dir / name).stat().st_size for name in _LOGS)
    return logged or any((run_dir / "rollouts").glob("step-*.parquet"))


def _same_run_restarting(run_dir: Path, config: TrainConfig | None) -> bool:
    """Whether ``run_dir`` holds this very run, stopped before its first checkpoint."""
    if config is None or not (run_dir / "config.yaml").is_file():
        return False
    from grpolab.train.settings import load_saved_config, same_run_settings

    try:
        return same_run_settings(load_saved_config(run_dir), config)
    except UserError:
        return False


def _problem(run_dir: Path, config: TrainConfig | None) -> str | None:
    if any((run_dir / "checkpoints").glob("step-*")):
        return "already holds a run; pass --resume to continue it"
    if (run_dir / "summary.json").exists() or (run_dir / "final").exists():
        return "holds a finished (or diverged) run: its metrics, rollouts and final model would be replaced"
    foreign = _foreign(run_dir)
    if foreign:
        return f"holds files grpolab did not write ({', '.join(foreign[:4])}), which a run would mix with or replace"
    if _has_logs(run_dir) and not _same_run_restarting(run_dir, config):
        return "holds the logs of an earlier run (metrics.jsonl, eval.jsonl or rollouts/), which would be replaced"
    return None


def check_fresh_run_dir(run_dir: Path, *, overwrite: bool, config: TrainConfig | None = None) -> None:
    """Refuse a fresh run in ``run_dir`` that would destroy what it holds; with ``overwrite``, remove the
    earlier run's files instead (``remove_run_files``)."""
    problem = _problem(run_dir, config)
    if problem is None:
        return
    if not overwrite:
        raise UserError(f"{run_dir} {problem}; choose a new --out, or pass --overwrite to replace the run "
                        "(files grpolab did not write are kept)")
    remove_run_files(run_dir)


def remove_run_files(run_dir: Path) -> None:
    """Delete the files a run writes in ``run_dir``, and nothing else."""
    for name in _RUN_FILES:
        path = run_dir / name
        if name != "config.yaml" or _written_by_grpolab(path):
            path.unlink(missing_ok=True)
    for name in ("checkpoints", "final", "tensorboard", "wandb"):
        shutil.rmtree(run_dir / name, ignore_errors=True)
    rollouts = run_dir / "rollouts"
    for path in rollouts.glob("step-*.parquet*") if rollouts.is_dir() else []:
        path.unlink()
