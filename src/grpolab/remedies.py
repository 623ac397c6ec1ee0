"""The remedies for gradient starvation, in one table: each remedy's arm suffix, its training setting, the trainer
code that runs it, the metric that shows it ran, its source, the engines that run it and its refusals.

A comparison arm appends a remedy's suffix to an estimator (``dr_grpo+dynamic+mask``); the suffix switches the
remedy's setting on for that arm's runs. Everything else reads this table: the arm parser
(``advantages.REMEDY_SUFFIXES``), the sweep's plan (``sweep.plan.remedy_settings``), the config checks (each
remedy's ``refusals``), the engine table (``grpolab.capabilities``: which engine runs which remedy), the TRL
engine's refused settings (``engine_refusals``), docs/remedies.md's table (``render_markdown``) and the test that
runs each remedy for a few steps and checks its ``metric`` moved (``tests/test_remedies.py``).

Adding a remedy: a row here, and its code in the trainer (``hook`` names it; it must log ``metric``); the setting
itself is a ``TrainConfig`` field. This module is data and imports nothing of grpolab's but its error type, so
that the estimator registry (the bottom floor) and the config layer may read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpolab.errors import UserError

__all__ = ["REMEDIES", "SUFFIXES", "Refusal", "Remedy", "active", "by_suffix", "canonical_arm", "check",
           "engine_refusals", "render_markdown", "split_arm"]


@dataclass(frozen=True)
class Refusal:
    """A combination of settings a remedy cannot run with: ``when(config)`` is true for a refused ``TrainConfig``,
    and ``message`` says so in one line that names the setting."""

    when: Callable[[Any], bool]
    message: str


@dataclass(frozen=True)
class Remedy:
    """One remedy for gradient starvation.

    Attributes:
        name: how sentences name it (``"it only applies to <name>"``).
        label: its row's name in docs/remedies.md.
        suffix: the arm suffix that switches it on (``+dynamic``).
        setting: the boolean ``TrainConfig`` field it is (``dynamic_sampling``).
        options: the other ``TrainConfig`` fields that only apply with it (``dynamic_max_rounds``).
        hook: ``module:attribute`` of the trainer code that runs it; a test resolves it.
        metric: the metric the hook logs, non-zero on a step where the remedy acted (``tests/test_remedies.py``).
        what: what it does, one docs cell.
        source: where it comes from (papers, libraries), one docs cell.
        engines: the engines that run it (``grpolab.capabilities``).
        engine_refusals: engine -> why that engine cannot run it (for each engine not in ``engines``).
        refusals: settings it cannot run with, checked with every ``TrainConfig``.
        symbols: option -> the letter ``what`` calls its value (``curriculum_window``: W).
    """

    name: str
    label: str
    suffix: str
    setting: str
    options: tuple[str, ...]
    hook: str
    metric: str
    what: str
    source: str
    engines: tuple[str, ...] = ("grpolab",)
    engine_refusals: dict[str, str] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()
    symbols: dict[str, str] = field(default_factory=dict)


REMEDIES: tuple[Remedy, ...] = (
    Remedy(
        "dynamic sampling", "dynamic sampling", "+dynamic", "dynamic_sampling", ("dynamic_max_rounds",),
        "grpolab.train.trainer:Trainer._dynamic_fill", "rollout/dynamic_rounds",
        "samples whole extra batches of P prompts and keeps the non-degenerate groups until P are kept or the rounds "
        "run out; trains on fewer than P groups rather than padding",
        "DAPO, Yu et al. 2025, arXiv 2503.14476",
        engine_refusals={"trl": "TRL has no dynamic sampling (it would resample inside its generation step)"},
        refusals=(Refusal(lambda config: config.reward_granularity == "token",
                          "dynamic_sampling filters groups by outcome reward; it is not supported with "
                          "reward_granularity token"),),
    ),
    Remedy(
        "group masking", "group masking", "+mask", "mask_degenerate_groups", (),
        "grpolab.train.trainer:Trainer._trained", "loss/masked_groups",
        "the degenerate groups of the step's batch are left out of the update: out of the loss's numerator, its "
        "denominator and the KL term; nothing is resampled",
        "SkyRL `zero_variance_filter`; prime-rl `filter_zero_advantages`; TRL issue #6367 / PR #6365 (denominator) "
        "and PR #7068 `mask_zero_advantage_groups` (KL)",
        engine_refusals={"trl": "TRL 1.16 has no group masking (its loss keeps zero-advantage groups in the "
                                "denominator and the KL)"},
    ),
    Remedy(
        "the curriculum", "difficulty curriculum", "+curriculum", "curriculum", ("curriculum_window",),
        "grpolab.train.curriculum:DifficultyCurriculum.problems", "rollout/curriculum_replaced",
        "prompts whose groups of the last W steps were all wrong or all right are skipped before sampling, and a "
        "fresh prompt of the train split is drawn in their place; only a task with a fixed train split (`reverse` "
        "only with a fixed pool, `train_pool`: by default it streams fresh prompts)",
        "prime-rl `DifficultyPoolSampler` and `AdvRangeGate`; ROLL `difficulty_mask`; NeMo-RL #1475",
        engine_refusals={"trl": "TRL's dataset holds every step's prompts before the run starts; the curriculum draws "
                                "them from recent success"},
        symbols={"curriculum_window": "W"},
    ),
    Remedy(
        "replay", "replay", "+replay", "replay", ("replay_max_age",),
        "grpolab.train.replay:ReplayBuffer.refill", "rollout/replayed_groups",
        "each degenerate group of the step is replaced, before the advantages, by the newest informative group kept "
        "from the last A steps (each replayed once); the importance ratio is not corrected unless `--sampler-is-cap` "
        "is set",
        "TRL's experimental `GRPOWithReplayBuffer` (removed in TRL 1.16.0); verl's replay buffer",
        engine_refusals={"trl": "TRL 1.16 removed GRPOWithReplayBuffer; its GRPOTrainer trains on the groups it has "
                                "just sampled"},
        symbols={"replay_max_age": "A"},
    ),
    Remedy(
        "the reward-variance filter", "reward-variance filter", "+varfilter", "variance_filter", ("variance_filter_p",),
        "grpolab.train.batch:variance_filter", "loss/variance_filtered_share",
        "the groups of the step's batch are sorted by their reward variance and only the smallest set whose "
        "variances sum to a share p of the batch's total is trained (default p = 0.9); the others are left out of "
        "the update as group masking leaves them out (so the degenerate groups always are); nothing is resampled; "
        "p = 0.9 is grpolab's default, not a value taken from the paper",
        "RAGEN-2 SNR-aware filtering, Wang et al. 2026, arXiv 2604.06268",
        engine_refusals={"trl": "TRL 1.16 has no reward-variance filter (its GRPOTrainer trains every group it "
                                "sampled)"},
        symbols={"variance_filter_p": "p"},
    ),
)


def _check_table(remedies: tuple[Remedy, ...]) -> dict[str, Remedy]:
    """suffix -> remedy, refusing a duplicate suffix or setting and a suffix that is not ``+name``."""
    found: dict[str, Remedy] = {}
    for remedy in remedies:
        if not remedy.suffix.startswith("+") or "+" in remedy.suffix[1:]:
            raise ValueError(f"remedy {remedy.name!r}: its suffix must be one '+name', got {remedy.suffix!r}")
        if remedy.suffix in found or remedy.setting in {r.setting for r in found.values()}:
            raise ValueError(f"remedy {remedy.name!r}: suffix {remedy.suffix!r} or setting {remedy.setting!r} is "
                             "already taken")
        found[remedy.suffix] = remedy
    return found


_BY_SUFFIX = _check_table(REMEDIES)

SUFFIXES: dict[str, str] = {remedy.suffix: remedy.setting for remedy in REMEDIES}
"""Arm suffix -> the training setting it switches on (``advantages.REMEDY_SUFFIXES`` is this mapping)."""


def split_arm(spec: str) -> tuple[str, tuple[str, ...]]:
    """``'dr_grpo+dynamic+mask'`` -> (``'dr_grpo'``, (``'+dynamic'``, ``'+mask'``)): the name before the remedy
    suffixes and the suffixes, sorted; the name is not checked. ``ValueError`` for a suffix named twice
    (``sign+dynamic+dynamic`` would be a second ``sign+dynamic`` arm under another name)."""
    name, found = spec, set()
    while (suffix := next((s for s in SUFFIXES if name.endswith(s)), None)) is not None:
        if suffix in found:
            raise ValueError(f"arm {spec!r} names the remedy {suffix} twice; name each remedy once")
        name, found = name[: -len(suffix)], found | {suffix}
    return name, tuple(sorted(found))


def canonical_arm(spec: str) -> str:
    """One spelling per arm: the name, then its remedy suffixes sorted (``dr_grpo+mask+dynamic`` ->
    ``dr_grpo+dynamic+mask``), so that two spellings of one arm can be told apart from two arms."""
    name, suffixes = split_arm(spec)
    return name + "".join(suffixes)


def by_suffix(suffix: str) -> Remedy:
    """The remedy of ``suffix`` (``KeyError`` if none)."""
    return _BY_SUFFIX[suffix]


def active(config: Any) -> list[Remedy]:
    """The remedies a ``TrainConfig`` switches on."""
    return [remedy for remedy in REMEDIES if getattr(config, remedy.setting)]


def check(config: Any) -> None:
    """Raise a ``UserError`` for the first refused combination of an active remedy (its ``refusals``)."""
    for remedy in active(config):
        for refusal in remedy.refusals:
            if refusal.when(config):
                raise UserError(refusal.message)


def engine_refusals(engine: str) -> dict[str, str]:
    """setting -> why ``engine`` refuses it: the settings and options of each remedy it does not run."""
    refused: dict[str, str] = {}
    for remedy in REMEDIES:
        if engine not in remedy.engines:
            refused[remedy.setting] = remedy.engine_refusals.get(engine, f"engine {engine} has no {remedy.name}")
            refused.update({option: f"it only applies to {remedy.name}" for option in remedy.options})
    return refused


def _flags(remedy: Remedy) -> str:
    return ", ".join(f"`--{name.replace('_', '-')}{' ' + remedy.symbols[name] if name in remedy.symbols else ''}`"
                     for name in (remedy.setting, *remedy.options))


def render_markdown() -> str:
    """The remedies table of docs/remedies.md (a test keeps the two equal)."""
    lines = ["| remedy (setting) | arm suffix | what it does | engines | source |", "|---|---|---|---|---|"]
    lines += [f"| {r.label} ({_flags(r)}) | `{r.suffix}` | {r.what} | {', '.join(r.engines)} | {r.source} |"
              for r in REMEDIES]
    return "\n".join(lines) + "\n"
