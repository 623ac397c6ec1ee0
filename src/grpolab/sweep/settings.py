"""A sweep directory owns its settings, and the training settings a sweep sets for each run are its own.

* ``OUT/compare.yaml`` holds every sweep setting and every shared training setting. Once a run of the sweep
  has trained a step, a re-run must give the same settings (those that may change on resume aside: runtime
  settings such as ``workers`` and ``backend``, and ``primary``, which only orders the report), or
  ``grpolab compare`` refuses, naming the differences. While no run has trained, new settings replace the
  saved ones, so a sweep refused at once can be fixed.
* A sweep folder saved before a sweep setting existed resumes with the value it was made with
  (``_BEFORE_THE_SETTING``: ``lr_bracket_rounds`` 0, since such a sweep never extended its lr grid), so an old
  finished sweep re-run with the same --out trains nothing.
* The primary comparison is recorded with when it was declared (``primary_declared``, UTC), kept while the
  primary stays the same. A primary changed once a run has trained is recorded with a new time,
  ``primary_declared_after_results: true`` and the pair it replaced, so the report can say that it was not
  declared before the results (``primary_declaration``). A new declaration also records the folders that held
  earlier results of the same configuration when it was made (``primary_earlier_results``, ``sweep.earlier``):
  a primary named before this sweep's runs may still have been chosen with those in view.
* A saved ``OUT/compare.yaml`` given as ``--config`` reruns the comparison as it was made (``settings_to_rerun``):
  its declaration record is dropped (the new --out declares its own primary), and so is its ``lr`` where its
  ``lrs`` gave the lrs (the file holds the base config's unused ``lr`` beside a grid, and beside one lr in ``lrs``
  the lr every run trained at, which ``lrs`` gives again). A sweep of one lr in ``lrs`` records that lr as ``lr``.
  A task or verifier it names by dotted path is code from a folder: refused unless given again as a flag or with
  --trust-run-code.
* The training settings that a sweep sets for each run (``SWEEP_OWNED``, from the fields' metadata) are
  refused as ``grpolab compare`` flags or config-file keys, naming the flag to use instead.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from grpolab.config import CompareConfig, TrainConfig, yaml_text
from grpolab.config.fields import resume_may_change, runtime_only, sweep_owned
from grpolab.config.files import SAVED_FOOTER, SAVED_HEADER, read_saved_settings
from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.sweep.earlier import earlier_results

__all__ = ["COMPARE_TRAIN_DEFAULTS", "DECLARATION_KEYS", "SWEEP_FILE", "SWEEP_OWNED", "adopt_saved_settings",
           "check_sweep_settings", "primary_declaration", "refuse_sweep_owned", "settings_to_rerun", "sweep_defaults",
           "sweep_train_settings"]

SWEEP_OWNED: dict[str, str] = sweep_owned(TrainConfig)
SWEEP_FILE = "compare.yaml"
# What ``OUT/compare.yaml`` records besides the settings: when its primary comparison was declared.
DECLARATION_KEYS = ("primary_declared", "primary_declared_after_results", "primary_replaced",
                    "primary_earlier_results")

# The training settings of a comparison that differ from `grpolab train`'s: a fixed, short budget, so the
# comparison measures how fast each estimator learns (and the default sweep runs in minutes on 2 cores).
# Precedence: TrainConfig defaults < these < the config file < flags.
COMPARE_TRAIN_DEFAULTS: dict[str, Any] = {"steps": 20}

# Settings a re-run may change: how the processes run, and which comparison the report puts first.
_MAY_CHANGE = runtime_only(TrainConfig, CompareConfig) | resume_may_change(CompareConfig)

# Sweep settings added after sweeps were saved without them -> the value that reproduces such a sweep.
_BEFORE_THE_SETTING: dict[str, Any] = {"lr_bracket_rounds": 0}


def refuse_sweep_owned(explicit_train: dict[str, Any]) -> None:
    """Refuse training settings that ``grpolab compare`` sets for each run itself."""
    owned = [name for name in SWEEP_OWNED if name in explicit_train]
    if owned:
        uses = "; ".join(f"for {name} use {SWEEP_OWNED[name]}" for name in owned)
        flags = ", ".join("--" + name.replace("_", "-") for name in owned)
        raise UserError(f"grpolab compare sets {', '.join(owned)} for each run itself, so {flags} would be "
                        f"ignored: {uses}")


def sweep_train_settings(base: TrainConfig) -> dict[str, Any]:
    """The training settings a sweep shares between its runs (the base config without ``SWEEP_OWNED``)."""
    return {k: v for k, v in base.to_dict().items() if k not in SWEEP_OWNED}


def sweep_defaults() -> dict[str, Any]:
    """The value of every setting a saved ``compare.yaml`` may leave out."""
    return {**CompareConfig().to_dict(), **TrainConfig().to_dict(), **COMPARE_TRAIN_DEFAULTS}


def _trained(out: Path) -> bool:
    """Whether any run of the sweep in ``out`` has logged a training step."""
    return any(log.stat().st_size for log in Path(out).glob("*/*/metrics.jsonl"))


def adopt_saved_settings(out: Path, sweep: CompareConfig) -> CompareConfig:
    """``sweep`` with the value a trained sweep in ``out`` was made with for each setting its ``compare.yaml``
    predates, where ``sweep`` leaves that setting at its default."""
    path = Path(out) / SWEEP_FILE
    if not path.is_file() or not _trained(out):
        return sweep
    saved = read_saved_settings(path)
    defaults = CompareConfig()
    older = {name: value for name, value in _BEFORE_THE_SETTING.items()
             if name not in saved and getattr(sweep, name) == getattr(defaults, name)}
    return dataclasses.replace(sweep, **older) if older else sweep


def _changes(saved: dict[str, Any], wanted: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The settings ``wanted`` changes from ``saved``; ``lr`` only where neither gives ``lrs`` (otherwise the runs'
    lrs are ``lrs``, and a sweep saved before one lr in ``lrs`` was recorded as ``lr`` holds the unused default)."""
    by_lrs = all(str(settings.get("lrs") or "").strip() for settings in (saved, wanted))
    return [(name, saved.get(name), value) for name, value in wanted.items()
            if saved.get(name) != value and name not in _MAY_CHANGE and not (by_lrs and name == "lr")]


def primary_declaration(out: Path, primary: str, *, now: datetime | None = None, train: dict[str, Any] | None = None,
                        roots: list[Path] | None = None) -> dict[str, Any]:
    """When the sweep in ``out`` declared ``primary`` ("A,B"): ``primary_declared`` (UTC, "" for a sweep saved
    before declarations were recorded), ``primary_declared_after_results`` (a run had trained a step when
    this primary replaced another), ``primary_replaced`` (that other primary, else "") and, given the sweep's
    training settings ``train``, ``primary_earlier_results``: the folders with earlier results of the same
    configuration found when it was declared (``sweep.earlier.earlier_results`` under ``roots``; "" for none),
    absent for a declaration recorded before this was looked for."""
    path = Path(out) / SWEEP_FILE
    try:
        saved = read_saved_settings(path) if path.is_file() else {}
    except UserError:  # a damaged file is refused by check_sweep_settings once runs have trained
        saved = {}
    trained = _trained(out)
    if saved.get("primary") == primary and ("primary_declared" in saved or trained):
        kept = {"primary_declared": str(saved.get("primary_declared", "")),
                "primary_declared_after_results": bool(saved.get("primary_declared_after_results", False)),
                "primary_replaced": str(saved.get("primary_replaced", ""))}
        earlier = saved.get("primary_earlier_results")
        return kept if earlier is None else {**kept, "primary_earlier_results": str(earlier)}
    changed = trained and bool(saved.get("primary"))
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    declared = {"primary_declared": when, "primary_declared_after_results": changed,
                "primary_replaced": str(saved.get("primary")) if changed else ""}
    if train is None:
        return declared
    found = earlier_results(out, train, primary, COMPARE_TRAIN_DEFAULTS, roots)
    return {**declared, "primary_earlier_results": ", ".join(found)}


def settings_to_rerun(values: dict[str, Any], *, saved: bool, source: Path | None = None,
                      given: dict[str, Any] | None = None, trust: bool = False) -> dict[str, Any]:
    """A config file's ``values`` as settings: a sweep's saved ``compare.yaml`` (``saved``: it starts with
    ``SAVED_HEADER``) without its declaration record, and without its ``lr`` where a non-empty ``lrs`` was the grid
    (see the module docstring); any other file as written. A saved file is a sweep folder's, so a task or verifier
    it names by dotted path is refused unless ``given`` (the flags) repeats it or ``trust`` (--trust-run-code), as
    on ``train --resume`` (``grpolab.train.settings.refuse_run_code``)."""
    if not saved:
        return values
    from grpolab.train.settings import refuse_run_code

    refuse_run_code(values, Path(source or SWEEP_FILE), given=given or {}, trust=trust)
    kept = {name: value for name, value in values.items() if name not in DECLARATION_KEYS}
    if str(kept.get("lrs") or "").strip():
        kept.pop("lr", None)
    return kept


def check_sweep_settings(out: Path, settings: dict[str, dict[str, Any]], defaults: dict[str, Any]) -> dict[str, Any]:
    """Refuse a sweep in ``out`` whose saved settings differ from ``settings`` ({"compare": ..., "train": ...})
    once any of its runs has trained a step; settings missing from the saved file count as their
    ``defaults`` (or the value a sweep made before the setting existed ran with). Saves ``settings`` whenever
    they are accepted (so the file holds the latest runtime settings and primary comparison), with the
    primary's ``primary_declaration``, which it returns."""
    path = Path(out) / SWEEP_FILE
    flat = {**settings["compare"], **settings["train"]}
    declaration = primary_declaration(out, str(settings["compare"].get("primary", "")), train=settings["train"])
    if path.is_file() and _trained(out):
        saved = {**defaults, **_BEFORE_THE_SETTING, **read_saved_settings(path)}
        changes = _changes(saved, flat)
        if changes:
            before = ", ".join(f"{name} {old!r}" for name, old, _ in changes)
            after = ", ".join(f"{name} {new!r}" for name, _, new in changes)
            raise UserError(f"{out} holds a sweep made with {before}; this command gives {after}: rerun with its "
                            f"saved settings ({path}) to resume it, or choose a new --out")
    saved = {**flat, **declaration}
    atomic_write_text(path, f"{SAVED_HEADER}\n{yaml_text(saved)}{SAVED_FOOTER}: {len(saved)} settings\n")
    return declaration
