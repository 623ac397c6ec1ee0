"""The training engines, one object each in one registry: what each supports (its remedies, whether it has
per-token estimators, the settings it refuses, those under which a run needs a GPU of its own, and the check a sweep
runs on every arm before a run starts), how it names and finds its checkpoint folders, how a sweep reads what one of
its runs needs of a GPU's memory, and the run class that starts one of its runs.

``engine: grpolab`` is grpolab's own engine, ``engine: trl`` TRL's ``GRPOTrainer`` under grpolab's run. Everything
that depends on the engine asks its object here (``engine(name)``) instead of comparing the engine's name: the
config checks (``Engine.check``), the sweep (``Engine.check_arm``; ``sweep.plan`` finds a started run by every
engine's ``CheckpointLayout``), a resume (each engine finds its own checkpoints through its layout) and the dispatch
(``grpolab.train.engines`` starts the run class an engine names). ``tests/test_architecture.py`` finds any module
but the dispatch and the engines' own code that compares an engine's name. Which remedies an engine runs is each
remedy's own row (``grpolab.remedies``); an engine reads it.

The module is data and imports no engine, no torch and no schema (the config layer reads it): an engine's run class
and its full settings check are named by their dotted paths and imported only when a run or a sweep asks for them,
so that neither the command line nor a run of grpolab's engine loads TRL.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab import remedies
from grpolab.errors import UserError

__all__ = ["ENGINES", "CheckpointLayout", "Engine", "Unsupported", "checkpoint_folders", "engine", "has_checkpoint",
           "newest_checkpoint_settings",
           "render_markdown", "supports_remedy"]


@dataclass(frozen=True)
class Unsupported:
    """A setting an engine refuses at any value but its default: why, and the fix besides another engine."""

    setting: str
    why: str
    fix: str


@dataclass(frozen=True)
class CheckpointLayout:
    """How an engine names its checkpoint folders under a run's ``checkpoints/``: ``prefix`` and the step, padded
    with zeros to ``width`` digits (0: not padded). A folder whose name is the prefix and digits is a checkpoint
    (``step-12`` as well as ``step-000012``); any other name (``step-3 (copy)``) is not."""

    prefix: str
    width: int = 0

    @property
    def glob(self) -> str:
        """The glob pattern of the folder names (``step-*``)."""
        return f"{self.prefix}*"

    def name(self, step: int) -> str:
        """The folder name of the checkpoint of ``step``."""
        return f"{self.prefix}{step:0{self.width}d}"

    def step_of(self, name: str) -> int | None:
        """The step of a checkpoint folder called ``name``; None when the name is not one of this layout's."""
        digits = name.removeprefix(self.prefix)
        found = name.startswith(self.prefix) and digits.isascii() and digits.isdigit()
        return int(digits) if found else None

    def folders(self, root: Path) -> list[tuple[int, Path]]:
        """(step, folder) of each checkpoint folder in ``root`` (a run's ``checkpoints/``), oldest first (steps
        compared as numbers: ``step-1000000`` after ``step-999999``)."""
        found = [(step, path) for path in (root.iterdir() if root.is_dir() else [])
                 if (step := self.step_of(path.name)) is not None and path.is_dir()]
        return sorted(found)


def _load(dotted: str) -> Any:
    """The object ``module:attribute`` names, its module imported now."""
    module, attribute = dotted.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Engine:
    """One engine: what it supports, its checkpoint folders and how it starts a run.

    Attributes:
        name: the ``engine`` setting's value.
        checkpoints: how it names and finds its checkpoint folders.
        run_class: ``module:class`` of its run, ``cls(config, run_dir, *, resume, on_step, start_eval_cache,
            overwrite)``, an ``grpolab.train.engines.EngineRun``; imported when a run starts.
        checkpoint_problem: ``module:function`` of ``fn(folder) -> str | None``: why one of its checkpoint folders
            cannot be read, as the end of "its checkpoint <folder> ..." (None when it is whole).
        checkpoint_model: ``module:function`` of ``fn(folder, config, source) -> grpolab.models.Policy``: the
            weights of one of its checkpoint folders as one plain model (``grpolab export --step``).
        per_token_estimators: it trains the estimators with a per-token baseline (``needs_token_statistics``).
        unsupported: the settings it refuses when they are not at their default (checked with every config).
        arm_check: ``module:function`` of its full settings check, run on every arm of a sweep before the first
            run starts; None where the config checks are all it needs.
        checkpoint_settings: ``module:function(run_dir)`` giving (path, settings or None) of the newest sound
            checkpoint of its kind in a run directory, or None; what ``--resume`` checks ``config.yaml`` against,
            under either engine (``newest_checkpoint_settings``).
        exclusive_gpu: the settings under which one of its runs needs a GPU of its own (refused, when on, with
            ``grpolab compare --runs-per-gpu`` above 1: ``check_shared_gpu``).
        gpu_footprint: ``module:function`` reading what one of its runs' peak GPU memory depends on from the run's
            config, freshly loaded policy and task, the model set up as its run sets it up (``footprint``; what
            ``grpolab compare --runs-per-gpu`` checks).
    """

    name: str
    checkpoints: CheckpointLayout
    run_class: str
    checkpoint_problem: str
    checkpoint_model: str
    per_token_estimators: bool
    unsupported: tuple[Unsupported, ...] = ()
    arm_check: str | None = None
    checkpoint_settings: str = "grpolab.train.checkpoint:checkpoint_settings"
    exclusive_gpu: tuple[Unsupported, ...] = ()
    gpu_footprint: str = "grpolab.sweep.sharing:grpolab_footprint"

    @property
    def remedies(self) -> tuple[str, ...]:
        """The suffixes of the remedies it runs (``grpolab.remedies``)."""
        return tuple(remedy.suffix for remedy in remedies.REMEDIES if self.name in remedy.engines)

    def check(self, config: Any) -> None:
        """Refuse, in one line naming the setting and an engine that has it, a setting of ``config`` this engine
        refuses at any value but the default (the rest of its refusals come with ``check_arm`` or its start)."""
        defaults = {f.name: f.default for f in dataclasses.fields(config)}
        for entry in self.unsupported:
            if getattr(config, entry.setting) != defaults[entry.setting]:
                others = [e.name for e in ENGINES.values() if entry.setting not in {u.setting for u in e.unsupported}]
                raise UserError(f"{entry.setting} is not supported by engine {self.name} ({entry.why}); "
                                f"add --engine {' or --engine '.join(others)} or {entry.fix}")

    def check_arm(self, config: Any) -> None:
        """Refuse, before any run of a sweep starts, an arm this engine cannot run (its ``arm_check``)."""
        if self.arm_check is not None:
            _load(self.arm_check)(config)

    def check_shared_gpu(self, config: Any, runs_per_gpu: int) -> None:
        """Refuse, in one line, ``runs_per_gpu`` > 1 runs on one GPU for ``config`` where one of its settings
        (``exclusive_gpu``) gives each run a GPU of its own."""
        for entry in self.exclusive_gpu:
            if runs_per_gpu > 1 and getattr(config, entry.setting):
                raise UserError(f"--runs-per-gpu {runs_per_gpu} puts several runs on one GPU, but engine {self.name} "
                                f"with {entry.setting} needs a GPU for each run ({entry.why}); use --runs-per-gpu 1 "
                                f"or {entry.fix}")

    def footprint(self, config: Any, policy: Any, task: Any) -> Any:
        """What one of its runs' peak GPU memory depends on (``grpolab.engine.memory.RunFootprint``), its freshly
        loaded ``policy`` set up as a run sets it up (its ``gpu_footprint``)."""
        return _load(self.gpu_footprint)(config, policy, task)

    def start(self, config: Any, run_dir: Path, **options: Any) -> Any:
        """Set one run up with this engine (``grpolab.train.engines.start`` says what ``options`` are)."""
        return _load(self.run_class)(config, Path(run_dir), **options)

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds a checkpoint folder of this engine, whole or not."""
        return bool(self.checkpoints.folders(Path(run_dir) / "checkpoints"))

    def problem(self, folder: Path) -> str | None:
        """Why its checkpoint ``folder`` cannot be read (its ``checkpoint_problem``), None when it is whole."""
        found: str | None = _load(self.checkpoint_problem)(folder)
        return found

    def model(self, folder: Path, config: Any, source: str) -> Any:
        """Its checkpoint ``folder`` of a run trained under ``config`` as one plain model (``grpolab.models.Policy``)
        that says it came from ``source``."""
        return _load(self.checkpoint_model)(folder, config, source)


_TRL_OPTION = "TRL 1.16's option; not implemented in grpolab's update"

ENGINES: dict[str, Engine] = {
    "grpolab": Engine(
        "grpolab", CheckpointLayout("step-", 6), run_class="grpolab.train.trainer:Trainer",
        checkpoint_problem="grpolab.train.checkpoint:checkpoint_problem",
        checkpoint_model="grpolab.train.checkpoint:checkpoint_model", per_token_estimators=True,
        unsupported=(Unsupported("use_vllm", "it samples with its own decoder", "drop --use-vllm"),
                     Unsupported("entropy_target", _TRL_OPTION, "drop --entropy-target"),
                     Unsupported("top_entropy_quantile", _TRL_OPTION, "drop --top-entropy-quantile"))),
    "trl": Engine(
        "trl", CheckpointLayout("checkpoint-"), run_class="grpolab.train.trl_engine.run:TRLRun",
        checkpoint_problem="grpolab.train.trl_engine.checkpoints:unreadable",
        checkpoint_model="grpolab.train.trl_engine.checkpoints:checkpoint_model", per_token_estimators=False,
        arm_check="grpolab.train.trl_engine.arguments:check_supported",
        checkpoint_settings="grpolab.train.trl_engine.checkpoints:trl_checkpoint_settings",
        exclusive_gpu=(Unsupported("use_vllm", "vLLM reserves a fixed share of the GPU's memory in each run",
                                   "drop --use-vllm"),),
        gpu_footprint="grpolab.train.trl_engine.run:gpu_footprint"),
}
"""engine name -> the engine; the ``engine`` setting's choices are its keys."""


def engine(name: str) -> Engine:
    """The engine called ``name`` (``UserError`` naming the engines if unknown)."""
    if name not in ENGINES:
        raise UserError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
    return ENGINES[name]


def supports_remedy(name: str, suffix: str) -> bool:
    """Whether engine ``name`` runs the remedy of ``suffix``."""
    return suffix in engine(name).remedies


def checkpoint_folders(run_dir: Path) -> dict[int, tuple[Engine, Path]]:
    """step -> (the engine whose layout names the folder, the folder) of every checkpoint folder in ``run_dir``
    (where two engines' folders hold one step, the later engine's)."""
    root = Path(run_dir) / "checkpoints"
    return {step: (row, path) for row in ENGINES.values() for step, path in row.checkpoints.folders(root)}


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint of any engine (a run that has started, whichever engine ran it)."""
    return any(row.has_checkpoint(run_dir) for row in ENGINES.values())


def newest_checkpoint_settings(run_dir: Path) -> list[tuple[Path, dict[str, Any] | None, str]]:
    """(path, settings, engine) of the newest sound checkpoint of each engine's kind in ``run_dir`` (settings None
    for a checkpoint written before they were recorded); only engines with checkpoints there are asked."""
    found = []
    for row in ENGINES.values():
        if row.has_checkpoint(run_dir):
            newest = _load(row.checkpoint_settings)(Path(run_dir))
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
                     f"`checkpoints/{row.checkpoints.glob}` |")
    return "\n".join(lines) + "\n"
