"""What each training engine supports, in one table: its remedies, whether it has per-token estimators, its
checkpoint folders, the settings it refuses and the check a sweep runs on every arm before a run starts.

``engine: grpolab`` is grpolab's own engine, ``engine: trl`` TRL's ``GRPOTrainer`` under grpolab's run
(``grpolab.train.engines`` starts them). The config checks (``config.checks``), the sweep (``sweep.comparison``,
``sweep.plan``) and the engines themselves read this table instead of comparing an engine's name;
``tests/test_architecture.py`` finds any other module that compares one. Which remedies an engine runs is each
remedy's own row (``grpolab.remedies``); this table reads it.

The module is data and imports no engine, no torch and no schema (the config layer reads it); an engine's full
settings check is named by its dotted path and imported only when a sweep asks for it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab import remedies
from grpolab.errors import UserError

__all__ = ["ENGINES", "Engine", "Unsupported", "check_arm", "check_settings", "engine", "has_checkpoint",
           "newest_checkpoint_settings",
           "render_markdown", "supports_remedy"]


@dataclass(frozen=True)
class Unsupported:
    """A setting an engine refuses at any value but its default: why, and the fix besides another engine."""

    setting: str
    why: str
    fix: str


@dataclass(frozen=True)
class Engine:
    """One engine and what it supports.

    Attributes:
        name: the ``engine`` setting's value.
        checkpoint_glob: the folders under ``checkpoints/`` that hold its checkpoints.
        per_token_estimators: it trains the estimators with a per-token baseline (``needs_token_statistics``).
        unsupported: the settings it refuses when they are not at their default (checked with every config).
        arm_check: ``module:function`` of its full settings check, run on every arm of a sweep before the first
            run starts; None where the config checks are all it needs.
        checkpoint_settings: ``module:function(run_dir)`` giving (path, settings or None) of the newest sound
            checkpoint of its kind in a run directory, or None; what ``--resume`` checks ``config.yaml`` against,
            under either engine (``newest_checkpoint_settings``).
    """

    name: str
    checkpoint_glob: str
    per_token_estimators: bool
    unsupported: tuple[Unsupported, ...] = ()
    arm_check: str | None = None
    checkpoint_settings: str = "grpolab.train.checkpoint:checkpoint_settings"

    @property
    def remedies(self) -> tuple[str, ...]:
        """The suffixes of the remedies it runs (``grpolab.remedies``)."""
        return tuple(remedy.suffix for remedy in remedies.REMEDIES if self.name in remedy.engines)


_TRL_OPTION = "TRL 1.16's option; not implemented in grpolab's update"

ENGINES: dict[str, Engine] = {
    "grpolab": Engine(
        "grpolab", "step-*", per_token_estimators=True,
        unsupported=(Unsupported("use_vllm", "it samples with its own decoder", "drop --use-vllm"),
                     Unsupported("entropy_target", _TRL_OPTION, "drop --entropy-target"),
                     Unsupported("top_entropy_quantile", _TRL_OPTION, "drop --top-entropy-quantile"))),
    "trl": Engine("trl", "checkpoint-*", per_token_estimators=False,
                  arm_check="grpolab.train.trl_engine.arguments:check_supported",
                  checkpoint_settings="grpolab.train.trl_engine.checkpoints:trl_checkpoint_settings"),
}
"""engine name -> what it supports; the ``engine`` setting's choices are its keys."""


def engine(name: str) -> Engine:
    """The row of engine ``name`` (``UserError`` naming the engines if unknown)."""
    if name not in ENGINES:
        raise UserError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
    return ENGINES[name]


def supports_remedy(name: str, suffix: str) -> bool:
    """Whether engine ``name`` runs the remedy of ``suffix``."""
    return suffix in engine(name).remedies


def check_settings(config: Any) -> None:
    """Refuse, in one line naming the setting and an engine that has it, a setting the config's engine refuses at
    any value but the default (the rest of an engine's refusals come with its ``arm_check`` or its start)."""
    row = engine(config.engine)
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for entry in row.unsupported:
        if getattr(config, entry.setting) != defaults[entry.setting]:
            others = [e.name for e in ENGINES.values() if entry.setting not in {u.setting for u in e.unsupported}]
            raise UserError(f"{entry.setting} is not supported by engine {row.name} ({entry.why}); "
                            f"add --engine {' or --engine '.join(others)} or {entry.fix}")


def check_arm(config: Any) -> None:
    """Refuse, before any run of a sweep starts, an arm the config's engine cannot run (its ``arm_check``)."""
    row = engine(config.engine)
    if row.arm_check is None:
        return
    module, function = row.arm_check.split(":")
    getattr(importlib.import_module(module), function)(config)


def has_checkpoint(run_dir: Path, name: str | None = None) -> bool:
    """Whether ``run_dir`` holds a checkpoint of engine ``name`` (of any engine when None)."""
    folder = Path(run_dir) / "checkpoints"
    rows = [engine(name)] if name is not None else list(ENGINES.values())
    return folder.is_dir() and any(any(folder.glob(row.checkpoint_glob)) for row in rows)


def newest_checkpoint_settings(run_dir: Path) -> list[tuple[Path, dict[str, Any] | None, str]]:
    """(path, settings, engine) of the newest sound checkpoint of each engine's kind in ``run_dir`` (settings None
    for a checkpoint written before they were recorded); only engines with checkpoints there are asked."""
    found = []
    for row in ENGINES.values():
        if has_checkpoint(run_dir, row.name):
            module, function = row.checkpoint_settings.split(":")
            newest = getattr(importlib.import_module(module), function)(Path(run_dir))
            if newest is not None:
                found.append((newest[0], newest[1], row.name))
    return found


def render_markdown() -> str:
    """The engine table of docs/remedies.md (a test keeps the two equal)."""
    lines = ["| engine | remedies | per-token estimators | refused by the config checks | checkpoints |",
             "|---|---|---|---|---|"]
    for row in ENGINES.values():
        remedies_run = ", ".join(f"`{suffix}`" for suffix in row.remedies) or "none"
        refused = ", ".join(f"`{entry.setting}`" for entry in row.unsupported) or "-"
        lines.append(f"| `{row.name}` | {remedies_run} | {'yes' if row.per_token_estimators else 'no'} | {refused} | "
                     f"`checkpoints/{row.checkpoint_glob}` |")
    return "\n".join(lines) + "\n"
