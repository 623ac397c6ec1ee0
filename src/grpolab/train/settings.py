"""A run directory owns its settings (a sweep directory's are in ``grpolab.sweep.settings``).

* A run's saved ``config.yaml`` is the truth on ``--resume``. A setting given again with the saved value is
  fine; ``steps`` may change (to extend a run, or end it sooner), and every resume is recorded in the run's
  ``resumes.jsonl`` with what changed; ``progress`` and ``threads`` change how the process runs, not what it
  trains. Any other difference is refused with one line naming the settings, both values and the way on.
* A run directory whose ``config.yaml`` differs from the run a sweep planned is never counted as its result
  (``same_run_settings``).
* The settings name a run's data and model; ``run_identity`` says whether what they name is still the same: a
  content hash of a local ``--data`` file or folder and a fingerprint of a local ``--model`` directory. Each
  checkpoint records it (``grpolab.train.checkpoint``), and a resume whose data or model changed since is
  refused in one line (``check_identity``); a sweep does the same (``grpolab.sweep.identity``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import time
from pathlib import Path
from typing import Any

from grpolab.config import CompareConfig, TrainConfig, build_config
from grpolab.config.fields import resume_may_change, runtime_only
from grpolab.config.files import read_saved_settings
from grpolab.errors import UserError
from grpolab.io import open_no_follow

__all__ = [
    "RESUME_MAY_CHANGE",
    "RUNTIME_ONLY",
    "check_identity",
    "check_resume",
    "check_resume_steps",
    "check_same_problems",
    "checked_resume_settings",
    "explicit_values",
    "load_saved_config",
    "record_resume",
    "refuse_run_code",
    "resume_config",
    "same_run_settings",
]

# Read from the fields' metadata (grpolab.config.fields): settings of how a process runs, not of what it trains
# or finds (they may differ between runs of one directory), and those --resume may change.
RUNTIME_ONLY = runtime_only(TrainConfig, CompareConfig)
RESUME_MAY_CHANGE = resume_may_change(TrainConfig)
Change = tuple[str, Any, Any]  # (setting, saved value, new value)


def explicit_values(args: argparse.Namespace, cls: type, file_values: dict[str, Any]) -> dict[str, Any]:
    """The settings of ``cls`` that the user gave: config-file keys, overridden by the flags that were set."""
    values = {k: v for k, v in file_values.items() if k in {f.name for f in dataclasses.fields(cls)}}
    for f in dataclasses.fields(cls):
        if getattr(args, f.name, None) is not None:
            values[f.name] = getattr(args, f.name)
    return values


def _changes(saved: dict[str, Any], wanted: dict[str, Any], names: list[str]) -> list[Change]:
    return [(name, saved.get(name), wanted.get(name)) for name in names if saved.get(name) != wanted.get(name)]


def _describe(changes: list[Change]) -> str:
    """'A 1, B 2; this command gives A 3, B 4'."""
    saved = ", ".join(f"{name} {old!r}" for name, old, _ in changes)
    return f"{saved}; this command gives " + ", ".join(f"{name} {new!r}" for name, _, new in changes)


# ---------------------------------------------------------------------------- one run


def load_saved_config(run_dir: Path) -> TrainConfig | None:
    """The ``config.yaml`` a run directory holds, or None when it has none; ``UserError`` when it is damaged
    (empty, cut short, settings missing), naming the way to restore it."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    try:
        values = read_saved_settings(path)
    except UserError as error:
        raise UserError(f"{error}; {restore_hint(Path(run_dir))}") from None
    try:
        return build_config(values)
    except UserError as error:
        raise UserError(f"{path} cannot be read as this grpolab's settings ({error}); "
                        "resume it with the grpolab version that made it, or choose a new --out") from None


def restore_hint(run_dir: Path) -> str:
    """How to restore a run's missing or damaged ``config.yaml``: from its newest checkpoint's settings."""
    from grpolab.train.checkpoint import checkpoint_settings

    found = checkpoint_settings(run_dir)
    aside = f"move {run_dir / 'config.yaml'} aside and "
    if found is None:
        return f"{aside}start the run again with its settings, or choose a new --out"
    path, settings = found
    if settings is None:
        return f"{aside}rerun --resume with every setting of the run given again, or choose a new --out"
    return f"{aside}rerun --resume with the settings of {path.name}: {restore_flags(settings)}"


def restore_flags(settings: dict[str, Any]) -> str:
    """The ``grpolab train`` flags that give ``settings`` (those that differ from the defaults)."""
    defaults = TrainConfig().to_dict()
    flags = []
    for name, value in settings.items():
        if name in RUNTIME_ONLY or defaults.get(name) == value:
            continue
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
            continue
        shown = (json.dumps(value) if isinstance(value, dict) else
                 ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value))
        flags.append(f"--{flag} {shlex.quote(shown)}")
    return " ".join(flags) or "(all defaults)"


def checked_resume_settings(run_dir: Path, config: TrainConfig) -> TrainConfig | None:
    """The settings ``run_dir`` was trained under, checked against its newest checkpoint's (of either engine):
    ``config.yaml``, or, when it is missing, the checkpoint's own (``config`` must then give them again). None for
    a run with neither (nothing to resume). Refuses a resume whose ``config`` differs from them beyond what may
    change; a checkpoint from before settings were recorded still names its engine."""
    from grpolab.capabilities import newest_checkpoint_settings

    saved = load_saved_config(run_dir)
    for checkpoint, settings, engine in newest_checkpoint_settings(run_dir):
        check_identity(checkpoint, config)
        trained = build_config({**(saved or config).to_dict(), "engine": engine} if settings is None else settings)
        if settings is None and saved is None:
            raise UserError(f"{run_dir} has checkpoints but no config.yaml, and {checkpoint.name} predates recorded "
                            "settings, so what it was trained under is unknown; choose a new --out")
        if saved is None:
            _check_against_checkpoint(run_dir, checkpoint, trained, config, missing=True)
            return trained
        _check_against_checkpoint(run_dir, checkpoint, trained, saved, missing=False)
    if saved is not None:
        check_resume(run_dir, saved, config)
    return saved


def _check_against_checkpoint(run_dir: Path, checkpoint: Path, trained: TrainConfig, config: TrainConfig, *,
                              missing: bool) -> None:
    names = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in RESUME_MAY_CHANGE]
    refused = _changes(trained.to_dict(), config.to_dict(), names)
    if not refused:
        return
    where = ("has no config.yaml and this command gives other settings than" if missing else
             "holds a config.yaml that differs from")
    raise UserError(f"{run_dir} {where} its checkpoint {checkpoint.name}, trained with {_describe(refused)}; "
                    f"rerun --resume with the settings of {checkpoint.name}: {restore_flags(trained.to_dict())}")


def refuse_run_code(config: TrainConfig | dict[str, Any], source: Path, *, given: dict[str, Any], trust: bool) -> None:
    """Refuse the settings read from ``source`` (a run's config.yaml, a sweep's compare.yaml) when they name a task
    or verifier to import by dotted path that the user neither gave again (``given``: the explicit settings) nor
    trusts (``trust``): a run or sweep directory is data, and importing it must not run its code."""
    if trust:
        return
    from grpolab import verifiers
    from grpolab.tasks import is_import_path

    values = config.to_dict() if isinstance(config, TrainConfig) else config
    options = values.get("task_options") or {}
    given_options = given.get("task_options") or {}
    code = [("task", values.get("task"), given.get("task"), is_import_path),
            ("verifier", values.get("verifier"), given.get("verifier"), verifiers.is_import_path),
            ("task_options.verifier", options.get("verifier") if isinstance(options, dict) else None,
             given_options.get("verifier") if isinstance(given_options, dict) else None, verifiers.is_import_path)]
    for name, value, again, imports in code:
        if isinstance(value, str) and imports(value) and again != value:
            flag = "--task-options" if "." in name else f"--{name}"
            raise UserError(f"{source} names the {name} {value!r}, code that grpolab would import and run; give "
                            f"{flag} {value} again if you trust it, or pass --trust-run-code")


def resume_config(run_dir: Path, explicit: dict[str, Any], *, trust_run_code: bool = False) -> TrainConfig | None:
    """The config of ``grpolab train --resume``: the saved one, with only the settings that may change
    taken from ``explicit``; None when ``run_dir`` holds no saved config (nothing to resume: a fresh run).
    A task or verifier the saved config imports by dotted path must be given again or trusted
    (``refuse_run_code``)."""
    saved = load_saved_config(run_dir)
    if saved is None:
        return None
    refuse_run_code(saved, Path(run_dir) / "config.yaml", given=explicit, trust=trust_run_code)
    explicit = {name: value for name, value in explicit.items()
                if not (name == "data" and _same_data_path(saved.data, value))}
    wanted = build_config({**saved.to_dict(), **explicit})
    refused = [c for c in _changes(saved.to_dict(), wanted.to_dict(), sorted(explicit))
               if c[0] not in RESUME_MAY_CHANGE]
    if refused:
        raise UserError(f"{run_dir} holds a run saved with {_describe(refused)}: drop those flags to continue "
                        "it with its saved settings "
                        "(only --steps may change on --resume), or choose a new --out for a new run")
    return wanted


def _same_data_path(saved: Any, given: Any) -> bool:
    """Whether ``--data given`` names, from this directory, the existing file or folder the saved ``data`` names:
    ``./d.jsonl``, ``d.jsonl`` and its absolute path are one data set, which the resume keeps in its saved
    spelling (the problems themselves are checked against the run's ``task.json`` all the same)."""
    if not isinstance(saved, str) or not isinstance(given, str) or saved == given:
        return False
    try:
        return Path(saved).exists() and Path(saved).resolve() == Path(given).resolve()
    except (OSError, RuntimeError):  # a loop of links, a name too long
        return False


def check_resume(run_dir: Path, saved: TrainConfig, config: TrainConfig) -> None:
    """Refuse to resume ``run_dir`` (saved with ``saved``) under ``config`` when they differ in more than
    the settings that may change on resume."""
    names = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in RESUME_MAY_CHANGE]
    refused = _changes(saved.to_dict(), config.to_dict(), names)
    if refused:
        raise UserError(f"{run_dir} holds a run saved with {_describe(refused)}: resume it with its saved "
                        "settings (config.yaml), or choose a new run directory")


def record_resume(run_dir: Path, saved: TrainConfig, config: TrainConfig, start_step: int, *,
                  task: Any = None) -> dict[str, list]:
    """Check ``config.steps`` against the steps already trained and append this resume, with what changed,
    to ``run_dir/resumes.jsonl``; returns the changes (setting -> [saved, new]). With the ``task`` the resume
    loaded, refuses one whose problems differ from those the run recorded (``check_same_problems``)."""
    if task is not None:
        check_same_problems(run_dir, task)
    check_resume_steps(run_dir, saved, config, start_step)
    names = sorted(RESUME_MAY_CHANGE & {f.name for f in dataclasses.fields(TrainConfig)})
    changed = {name: [old, new] for name, old, new in _changes(saved.to_dict(), config.to_dict(), names)}
    row = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "from_step": start_step, "changed": changed}
    with open_no_follow(Path(run_dir) / "resumes.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")
    return changed


def check_resume_steps(run_dir: Path, saved: TrainConfig, config: TrainConfig, start_step: int) -> None:
    """Refuse a resume whose ``--steps`` (changed from the saved) is at or below the ``start_step`` already
    trained: before anything about the run's logs is checked or said."""
    if config.steps != saved.steps and config.steps <= start_step:
        raise UserError(f"{run_dir} has already trained {start_step} steps; --steps must be more than that "
                        f"(or the saved {saved.steps})")


def check_same_problems(run_dir: Path, task: Any) -> None:
    """Refuse to resume ``run_dir`` on ``task`` when its splits (``Task.summary()["data_sha256"]``) differ from
    those the run recorded in its ``task.json`` (read before the resume rewrites it); a ``task.json`` written
    before grpolab recorded them is not checked. Covers data that no local path names (the hub cache)."""
    try:
        recorded = json.loads((Path(run_dir) / "task.json").read_text(encoding="utf-8")).get("data_sha256")
    except (OSError, ValueError, AttributeError):
        return
    now = task.summary().get("data_sha256")
    if isinstance(recorded, str) and now != recorded:
        raise UserError(f"the problems of task {task.name!r} differ from those {run_dir} trained on (recorded in "
                        f"{Path(run_dir) / 'task.json'}: its data changed, or the grpolab that builds them), so a "
                        "resume would mix two data sets in one run; restore the data the run trained on, or train "
                        "afresh in a new --out (or with --overwrite)")


def same_run_settings(saved: TrainConfig | None, planned: TrainConfig) -> bool:
    """Whether a run directory's saved config is the planned run (runtime-only settings aside)."""
    if saved is None:
        return False
    names = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in RUNTIME_ONLY]
    return not _changes(saved.to_dict(), planned.to_dict(), names)


def check_identity(checkpoint: Path, config: TrainConfig) -> None:
    """Refuse to resume from ``checkpoint`` when the data or local model that ``config`` names changed since it
    was written (its ``state.json`` ``"identity"``; a checkpoint written before it recorded one is not checked)."""
    try:
        recorded = json.loads((checkpoint / "state.json").read_text(encoding="utf-8")).get("identity")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(recorded, dict):
        return
    from grpolab.train.identity import run_identity

    now = run_identity(config)
    run_dir = checkpoint.parent.parent
    for key, what in (("data", f"the data {config.data or config.task_options.get('path')}"),
                      ("model", f"the model directory {config.model}")):
        if key in recorded and key not in now:  # not found from here: a relative path read from another folder
            raise UserError(f"{what}, which {run_dir} trained on, is not found from {Path.cwd()} (a relative path is "
                            "read from the folder a command runs in); resume from the folder the run started in, or "
                            f"restore the {key} there")
        if key in recorded and recorded[key] != now.get(key):
            how = "content" if key == "data" else "file names, sizes or modification times"
            raise UserError(f"{what} changed since {run_dir} wrote its checkpoint {checkpoint.name} (its {how} "
                            f"differ), so a resume would mix two {key}s in one run; restore the {key} the run "
                            "trained on, or train afresh in a new --out (or with --overwrite)")
