"""What a fresh ``grpolab train`` may do to its ``--out`` folder: never destroy a run or a user's files.

A fresh run (no ``--resume``) refuses a folder that holds a run's checkpoints, a finished or diverged run
(``summary.json``, ``final/``), the logs of an earlier run under other settings, or files grpolab does not
write (a ``config.yaml`` without grpolab's first line counts as the user's). The one exception is the same
run, under the same settings, stopped before its first checkpoint: starting it again is what ``--resume``
would do. With ``overwrite`` the run's own files are deleted first, at every depth (``_ours``: the names each
writer uses in ``checkpoints/``, ``final/``, ``tensorboard/`` and ``wandb/``); files it did not write are kept. A
file of the user's inside a folder a run replaces whole (``final/``, a checkpoint folder or its staging) is refused
before anything is deleted. A symbolic link planted where a run writes is refused in one line
(``refuse_planted_links``, ``grpolab.io``).

How grpolab knows it wrote a run's top-level files (its logs, ``summary.json``, ``task.json``, ``rollouts/step-*``):
a run writes its ``config.yaml`` (with grpolab's first line) before any of them, and each checkpoint records its
settings, so they are the run's only beside such a ``config.yaml`` or a checkpoint (``_run_marked``). Without one
they are the user's: refused without ``overwrite``, and with it too (a run would write at their names), never
deleted.
"""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from grpolab.config import TrainConfig
from grpolab.config.files import SAVED_HEADER
from grpolab.errors import UserError
from grpolab.io import refuse_links

__all__ = ["check_fresh_run_dir", "check_run_removable", "refuse_planted_links", "remove_run_files"]

_LOGS = ("metrics.jsonl", "eval.jsonl", "resumes.jsonl")
_RUN_FILES = (*_LOGS, "summary.json", "task.json", "config.yaml")
_RUN_DIRS = ("checkpoints", "rollouts", "final", "tensorboard", "wandb")  # wandb: report_to's offline W&B runs
_LOCK_FILES = (".grpolab.lock", ".grpolab.lock.owner")

# What each writer leaves inside a run's folders (glob patterns of paths relative to the folder). checkpoints/:
# grpolab's step-N (train/checkpoint.py) and its .tmp-* staging, the TRL engine's checkpoint-N (the Trainer's
# own files, whole); final/: save_pretrained of a model, its tokenizer and a LoRA adapter (peft adds README.md),
# base_model.txt and its checksums.json; tensorboard/: SummaryWriter's event files; wandb/: an offline W&B run.
_CHECKPOINT_FILES = ("weights.safetensors", "optimizer.safetensors", "state.json", "checksums.json")
_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
                "model.safetensors.index.json", "adapter_config.json", "adapter_model.safetensors", "README.md",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "vocab.txt",
                "merges.txt", "added_tokens.json", "tokenizer.model", "chat_template.jinja", "chat_template.json")
# transformers' Trainer.save_checkpoint beside the model: optimiser, scheduler, RNG and trainer state; grpolab seals it
_TRAINER_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_*.pth",
                  "trainer_state.json", "training_args.bin", "state.json", "checksums.json")
# an offline W&B run folder: its log file, its files/ (config, summary, metadata, console output, media) and logs/
_WANDB_RUN = ("run-*.wandb", "files/config.yaml", "files/output.log", "files/requirements.txt", "files/diff.patch",
              "files/wandb-summary.json", "files/wandb-metadata.json", "files/conda-environment.yaml",
              "files/media/*", "logs/debug*.log", "tmp/*")
_OURS = {
    "checkpoints": (*(f"{folder}/{name}" for folder in ("step-*", ".tmp-*") for name in _CHECKPOINT_FILES),
                    *(f"checkpoint-*/{name}" for name in (*_MODEL_FILES, *_TRAINER_FILES))),
    "final": (*_MODEL_FILES, "base_model.txt", "checksums.json"),
    "tensorboard": ("events.out.tfevents.*",),
    "wandb": ("latest-run", *(f"{run}/{name}" for run in ("run-*", "offline-run-*") for name in _WANDB_RUN),
              "debug.log", "debug-internal.log", "debug-cli.*.log"),
}
# folders a run deletes and writes again: a checkpoint (grpolab's, its staging, TRL's; pruned whole) and final/
_REPLACED_WHOLE = ("final/*", "checkpoints/step-*/*", "checkpoints/.tmp-*/*", "checkpoints/checkpoint-*/*")


def _staging(name: str) -> bool:
    """What a killed write leaves in a run directory: the writable probe, ``final/``'s staging folder, a log's
    staging file (``runlog.rewrite_jsonl``), a run file's atomic-write staging (``grpolab.io.atomic_write_with``:
    ``.config.yaml.<random>.tmp``)."""
    atomic = name.endswith(".tmp") and any(name.startswith(f".{file}.") for file in _RUN_FILES)
    return atomic or name.startswith((".write-test-", ".final.tmp-")) or name in {f"{log}.tmp" for log in _LOGS}


def refuse_planted_links(run_dir: Path) -> None:
    """Refuse (one line, ``grpolab.io.link_error``) a symbolic link at any name a run writes in ``run_dir``."""
    refuse_links(run_dir, (*_RUN_FILES, *_RUN_DIRS, *_LOCK_FILES))


def _ours(folder: str, relative: str) -> bool:
    """Whether ``folder/relative`` (a file under one of the run's folders) is a name a run writes there."""
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in _OURS[folder])


def _files_under(run_dir: Path, folder: str) -> list[str]:
    """The files (and links) below ``run_dir/folder``, as paths relative to it; a link is not followed."""
    root = run_dir / folder
    if not root.is_dir() or root.is_symlink():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink() or not p.is_dir())


def _foreign_inside(run_dir: Path) -> list[str]:
    """Files grpolab did not write inside ``checkpoints/``, ``final/``, ``tensorboard/`` and ``wandb/``."""
    return [f"{folder}/{name}" for folder in _OURS for name in _files_under(run_dir, folder)
            if not _ours(folder, name)]


def _written_by_grpolab(config_file: Path) -> bool:
    try:
        with config_file.open(encoding="utf-8") as handle:
            return handle.readline().strip() == SAVED_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _run_marked(run_dir: Path) -> bool:
    """Whether ``run_dir`` shows that a run wrote its top-level files: grpolab's ``config.yaml`` (written before any
    log) or a checkpoint (grpolab's ``step-N/state.json``, a sealed TRL ``checkpoint-N``)."""
    checkpoints = run_dir / "checkpoints"
    return (_written_by_grpolab(run_dir / "config.yaml") or any(checkpoints.glob("step-*/state.json"))
            or any(checkpoints.glob("checkpoint-*/checksums.json")))


def _unmarked_run_files(run_dir: Path) -> list[str]:
    """The files at names a run writes (its logs, summary, task, rollout tables) that no run of grpolab's marked
    as its own (``_run_marked``): the user's."""
    if _run_marked(run_dir):
        return []
    rollouts = run_dir / "rollouts"
    tables = [f"rollouts/{p.name}" for p in rollouts.glob("step-*")] if rollouts.is_dir() else []
    return sorted([name for name in _RUN_FILES if (run_dir / name).exists() and name != "config.yaml"] + tables)


def _foreign(run_dir: Path) -> list[str]:
    """Names in ``run_dir`` that grpolab does not write (or did not: ``_unmarked_run_files``)."""
    names = []
    for entry in run_dir.iterdir():
        ours = entry.name in (*_RUN_FILES, *_RUN_DIRS, *_LOCK_FILES) or _staging(entry.name)
        if not ours or (entry.name == "config.yaml" and not _written_by_grpolab(entry)):
            names.append(entry.name)
    rollouts = run_dir / "rollouts"
    if rollouts.is_dir():
        names += [f"rollouts/{p.name}" for p in rollouts.iterdir() if not p.name.startswith("step-")]
    return sorted(names + _unmarked_run_files(run_dir))


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
    foreign = _foreign(run_dir)
    if ((run_dir / "summary.json").exists() and "summary.json" not in foreign) or (run_dir / "final").exists():
        return "holds a finished (or diverged) run: its metrics, rollouts and final model would be replaced"
    if foreign:
        return f"holds files grpolab did not write ({', '.join(foreign[:4])}), which a run would mix with or replace"
    if _has_logs(run_dir) and not _same_run_restarting(run_dir, config):
        return "holds the logs of an earlier run (metrics.jsonl, eval.jsonl or rollouts/), which would be replaced"
    return None


def check_fresh_run_dir(run_dir: Path, *, overwrite: bool, config: TrainConfig | None = None) -> None:
    """Refuse a fresh run in ``run_dir`` that would destroy what it holds; with ``overwrite``, remove the
    earlier run's files instead (``remove_run_files``). A symbolic link where a run writes is refused."""
    refuse_planted_links(run_dir)
    problem = _problem(run_dir, config)
    if problem is None:
        return
    if not overwrite:
        raise UserError(f"{run_dir} {problem}; choose a new --out, or pass --overwrite to replace the run "
                        "(files grpolab did not write are kept)")
    remove_run_files(run_dir)


def check_run_removable(run_dir: Path) -> None:
    """Refuse (one line, before anything is deleted) to replace the run in ``run_dir`` when it holds a link where
    a run writes, a file of the user's inside a folder a run replaces whole (``final/``, a checkpoint), or the
    user's files at names a run writes (``_unmarked_run_files``)."""
    refuse_planted_links(run_dir)
    foreign = _foreign_inside(run_dir)
    doomed = [name for name in foreign if any(fnmatch.fnmatchcase(name, p) for p in _REPLACED_WHOLE)]
    if doomed:
        raise UserError(f"{run_dir} holds files grpolab did not write inside a folder a run replaces whole "
                        f"({', '.join(doomed[:4])}); move them out of {run_dir}, then rerun with --overwrite")
    clashing = _unmarked_run_files(run_dir)
    if clashing:
        raise UserError(f"{run_dir} holds files grpolab did not write at names a run writes "
                        f"({', '.join(clashing[:4])}); move them out of {run_dir}, then rerun with --overwrite")


def remove_run_files(run_dir: Path) -> None:
    """Delete the files a run writes in ``run_dir``, at every depth, and nothing else: a folder is removed only
    once it is empty. What ``check_run_removable`` refuses is refused before anything is deleted."""
    check_run_removable(run_dir)
    for name in _RUN_FILES:
        path = run_dir / name
        if name != "config.yaml" or _written_by_grpolab(path):
            path.unlink(missing_ok=True)
    for folder in _OURS:
        for name in _files_under(run_dir, folder):
            if _ours(folder, name):
                (run_dir / folder / name).unlink()
        _remove_empty_folders(run_dir / folder)
    rollouts = run_dir / "rollouts"
    for path in rollouts.glob("step-*.parquet*") if rollouts.is_dir() else []:
        path.unlink()
    for entry in run_dir.iterdir():  # staging a killed write left (a folder made by mkdtemp: grpolab's whole)
        if _staging(entry.name) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif _staging(entry.name):
            entry.unlink()


def _remove_empty_folders(root: Path) -> None:
    """Remove ``root`` and the folders below it that hold nothing (deepest first); keep the rest."""
    if not root.is_dir() or root.is_symlink():
        return
    for folder in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()),
                         key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(root.iterdir()):
        root.rmdir()
