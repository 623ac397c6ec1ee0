"""The estimator registry: what each estimator is (paper, flags, granularity, display order and colour),
lookup by name, and ``compute_advantages``, the one entry point that validates rewards for every estimator.

Input rules (enforced here for every estimator):

* NaN marks an unscorable completion: it gets advantage 0 and is left out of its group's statistics.
* +-inf, a rank other than 2, G < 2 for an estimator that needs a group, or non-binary rewards for an
  estimator defined only for binary rewards raise a ``ValueError`` that names the estimator, the
  problem and the allowed input. No estimator returns NaN.
* Per-token (process) rewards go through ``normalise_token_rewards``, which applies the same rules to a
  group's rewarded positions ([P, G*T]); there a binary-only estimator accepts any reward in [0, 1], since a
  token's reward is the mean of its characters' 0/1 labels (``grpolab.process_rewards``).
* An estimator flagged ``needs_lengths`` (``opo``) also takes ``lengths[P, G]``, the number of tokens of each
  completion: ``compute_advantages(name, rewards, lengths=...)``. Without them it raises a ``ValueError``;
  they must be finite and >= 0 where the reward is scored. Other estimators ignore ``lengths``, so a caller
  may always pass them.
* An estimator flagged ``needs_token_statistics`` (``optimal_token_baseline``) gives each token its own advantage:
  it also takes the sampling policy's per-token statistics (``token_statistics=``, a ``TokenStatistics``) and
  returns [P * G, T]. Without them it raises a ``ValueError``; other estimators ignore them.
* ``mix-A-B-L`` names L * A + (1 - L) * B of two registered estimators (``grpolab.advantages.mix``, which
  registers the spelling with ``register_composition``); lookup resolves it, refusing a malformed one in one line.
* A few estimators that users ask for cannot be expressed as ``fn(rewards[P, G])`` at all (``UNAVAILABLE``);
  naming one raises a ``ValueError`` that says what it needs, instead of "unknown estimator".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from grpolab import remedies

__all__ = ["DYNAMIC_SUFFIX", "GRANULARITIES", "REMEDY_SUFFIXES", "UNAVAILABLE", "Estimator", "Paper", "available",
           "compute_advantages", "display_colors", "display_order", "entry_for", "get", "info",
           "normalise_token_rewards", "parse_arm", "parse_spec", "register", "register_composition",
           "split_remedies", "token_estimators"]

EstimatorFn = Callable[..., torch.Tensor]

# An estimator's granularities: "outcome" (one reward per completion, always supported) and "token" (per-token
# process rewards, ``--reward-granularity token``), where its normalisation runs over a group's rewarded steps.
GRANULARITIES = ("outcome", "token")


@dataclass(frozen=True)
class Paper:
    """The paper an estimator comes from."""

    title: str
    arxiv: str
    year: int

    @property
    def citation(self) -> str:
        """``Title (arXiv 2402.03300, 2024)``."""
        return f"{self.title} (arXiv {self.arxiv}, {self.year})"


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and what it accepts.

    Attributes:
        name: registry name, as the papers spell it.
        fn: ``fn(rewards[P, G], **hyperparameters) -> advantages[P, G]``; rewards arrive validated,
            as float64, with NaN for unscorable completions.
        needs_group: the estimator uses group statistics, so G >= 2 is required.
        binary_only: the estimator is defined only for rewards in {0, 1}.
        zero_sum: the advantages of a fully scored group always sum to 0 (group-centred estimators);
            these starve on groups whose rewards are all equal.
        order: display order in reports and tables (the papers' order; lower first).
        color: the estimator's colour in every figure (a matplotlib colour).
        paper: the paper that defines it (None for a user's own estimator).
        granularities: the reward granularities it has a form for (see ``GRANULARITIES``).
        needs_lengths: the estimator also takes ``lengths[P, G]``, tokens per completion (``opo``).
        needs_token_statistics: the estimator also takes ``statistics``, the sampling policy's per-token
            ``TokenStatistics``, and returns per-token advantages [P * G, T] (``optimal_token_baseline``).
    """

    name: str
    fn: EstimatorFn
    needs_group: bool
    binary_only: bool
    zero_sum: bool
    order: int = 100
    color: str | None = None
    paper: Paper | None = None
    granularities: tuple[str, ...] = ("outcome",)
    needs_lengths: bool = False
    needs_token_statistics: bool = False


_REGISTRY: dict[str, Estimator] = {}

# Estimators that users ask for but that the registry's interface cannot give, with what they need instead.
UNAVAILABLE: dict[str, str] = {}


def register(
    name: str, *, needs_group: bool = False, binary_only: bool = False, zero_sum: bool = False,
    order: int = 100, color: str | None = None, paper: Paper | None = None,
    granularities: tuple[str, ...] = ("outcome",), needs_lengths: bool = False, needs_token_statistics: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator that registers ``fn`` under ``name``; a name, and a colour, can be registered only once. ``order``
    and ``color`` are display metadata (reports, figures); estimators without a colour get a spare one."""
    unknown = set(granularities) - set(GRANULARITIES)
    if "outcome" not in granularities or unknown:
        raise ValueError(f"advantage estimator {name!r}: granularities must include 'outcome' and be among "
                         f"{', '.join(GRANULARITIES)}, got {granularities!r}")

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered; pick another name")
        taken = next((e.name for e in _REGISTRY.values() if color is not None and e.color == color), None)
        if taken is not None:
            raise ValueError(f"advantage estimator {name!r}: colour {color!r} is {taken}'s; pick another colour")
        _REGISTRY[name] = Estimator(name, fn, needs_group, binary_only, zero_sum, order, color, paper,
                                    tuple(granularities), needs_lengths, needs_token_statistics)
        return fn

    return decorator


# Colours for estimators the registry gives none (and for ``+variants``), in this order: tab10 backwards,
# so that they differ from the registered estimators' own colours first.
_SPARE_COLORS = ("tab:cyan", "tab:olive", "tab:gray", "tab:pink", "tab:brown", "tab:purple", "tab:red",
                 "tab:green", "tab:orange", "tab:blue")


def entry_for(name: str) -> Estimator | None:
    """The entry of an estimator spelled ``name`` or ``name+variant``; None if unregistered."""
    try:
        return _lookup(name.split("+", 1)[0])
    except ValueError:  # a malformed mix
        return None


def _lookup(name: str) -> Estimator | None:
    """The entry of ``name``: a registered estimator, or a composition of registered ones (``ValueError`` if
    malformed); None if neither."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    build = next((build for prefix, build in _COMPOSITIONS.items() if name.startswith(prefix)), None)
    return build(name, _REGISTRY) if build is not None else None


# Spellings that compose registered estimators (``mix-A-B-L``: ``grpolab.advantages.mix``): prefix -> the function
# that builds the composition's entry from its spelling and the registry, raising ``ValueError`` if malformed.
_COMPOSITIONS: dict[str, Callable[[str, dict[str, Estimator]], Estimator]] = {}


def register_composition(prefix: str, build: Callable[[str, dict[str, Estimator]], Estimator]) -> None:
    """Resolve the names that start with ``prefix`` with ``build(name, registry)``; a prefix is registered once."""
    if prefix in _COMPOSITIONS:
        raise ValueError(f"estimator composition prefix {prefix!r} is already registered; pick another")
    _COMPOSITIONS[prefix] = build


def display_order(names: Iterable[str]) -> list[str]:
    """The distinct ``names`` in the registry's display order, each followed by its ``+`` variants; unknown
    names last. Every table and figure orders estimators this way."""
    def key(name: str) -> tuple[int, str]:
        entry = entry_for(name)
        return (entry.order if entry is not None else 10_000), name

    return sorted(set(names), key=key)


def display_colors(names: Iterable[str]) -> dict[str, str]:
    """Each plain registered estimator's own colour; ``+variants`` and unregistered names get spare colours
    in display order. Every figure colours estimators this way (matplotlib colour names)."""
    spare = itertools.cycle(_SPARE_COLORS)
    colors: dict[str, str] = {}
    for name in display_order(names):
        entry = entry_for(name)
        colors[name] = entry.color if entry is not None and entry.color and "+" not in name else next(spare)
    return colors


# A comparison may name an estimator with this suffix (``dr_grpo+dynamic``): the same estimator with DAPO's
# dynamic sampling switched on in the trainer.
DYNAMIC_SUFFIX = remedies.by_suffix("+dynamic").suffix

# The remedies for gradient starvation a comparison arm may append to an estimator (``dr_grpo+mask``,
# ``dr_grpo+dynamic+mask``): suffix -> the training setting it switches on. Their table is ``grpolab.remedies``
# (docs/remedies.md, "The remedy table"); this name reads it.
REMEDY_SUFFIXES: dict[str, str] = remedies.SUFFIXES


def split_remedies(spec: str) -> tuple[str, tuple[str, ...]]:
    """``'dr_grpo+dynamic+mask'`` -> (``'dr_grpo'``, (``'+dynamic'``, ``'+mask'``)): the name before the remedy
    suffixes (``REMEDY_SUFFIXES``) and the suffixes, sorted; the name is not checked (``remedies.split_arm``:
    ``ValueError`` for a suffix named twice)."""
    return remedies.split_arm(spec)


def parse_arm(spec: str) -> tuple[str, tuple[str, ...]]:
    """``'dr_grpo+mask'`` -> (``'dr_grpo'``, (``'+mask'``,)); ``ValueError`` listing the known names if unknown."""
    name, remedies = split_remedies(spec)
    if name in UNAVAILABLE:
        raise ValueError(f"estimator {name!r} is not available: {UNAVAILABLE[name]}")
    if _lookup(name) is None:
        raise ValueError(f"unknown estimator {spec!r}; choose from {', '.join(available())} or a mix of two "
                         f"(mix-sign-dr_grpo-0.5) (append {', '.join(REMEDY_SUFFIXES)} for a remedy: {DYNAMIC_SUFFIX} "
                         "is dynamic sampling)")
    return name, remedies


def parse_spec(spec: str) -> tuple[str, bool]:
    """``'dr_grpo+dynamic'`` -> (``'dr_grpo'``, True); ``ValueError`` listing the known names if unknown.
    Other remedy suffixes are read and dropped (``parse_arm`` keeps them)."""
    name, remedies = parse_arm(spec)
    return name, DYNAMIC_SUFFIX in remedies


def available() -> list[str]:
    """Names of all registered estimators, sorted."""
    return sorted(_REGISTRY)


def token_estimators() -> list[str]:
    """Names of the estimators with a per-token form, in display order."""
    return display_order(name for name, entry in _REGISTRY.items() if "token" in entry.granularities)


def info(name: str) -> Estimator:
    """The registry entry of ``name`` (``ValueError`` listing the known names if it is unknown)."""
    if name in UNAVAILABLE:
        raise ValueError(f"advantage estimator {name!r} is not available: {UNAVAILABLE[name]}")
    entry = _lookup(name)
    if entry is None:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {', '.join(available())}, or a mix "
                         "of two (mix-sign-dr_grpo-0.5)")
    return entry


def get(name: str) -> EstimatorFn:
    """A callable ``fn(rewards, **hyperparameters)`` that validates its input like ``compute_advantages``."""
    info(name)
    return lambda rewards, **hyperparameters: compute_advantages(name, rewards, **hyperparameters)


def compute_advantages(name: str, rewards: Any, *, lengths: Any = None, token_statistics: Any = None,
                       **hyperparameters: Any) -> torch.Tensor:
    """Advantages[P, G] of estimator ``name`` for ``rewards[P, G]`` ([P * G, T] per token for an estimator flagged
    ``needs_token_statistics``).

    Args:
        name: a registered estimator (see ``available()``).
        rewards: [P, G] torch tensor, numpy array or nested list; NaN (or None in a list) = unscorable.
        lengths: [P, G] tokens per completion, required by the estimators flagged ``needs_lengths`` (``opo``)
            and ignored by the others.
        token_statistics: the sampling policy's per-token ``TokenStatistics`` of the P * G completions, required
            by the estimators flagged ``needs_token_statistics`` and ignored by the others.
        **hyperparameters: the estimator's keyword hyper-parameters (e.g. ``k`` for ``passk``).

    Returns:
        A float tensor of the rewards' shape, or [P * G, T] (the input's floating dtype, else float32); finite
        everywhere, 0 where the reward was NaN.
    """
    return _run(info(name), rewards, hyperparameters, granularity="outcome", lengths=lengths,
                token_statistics=token_statistics)


def normalise_token_rewards(name: str, rewards: torch.Tensor, **hyperparameters: Any) -> torch.Tensor:
    """Estimator ``name``'s normalisation of per-token rewards [P, G*T] (each row: one group's tokens, NaN at
    unrewarded ones), validated like ``compute_advantages``; float64 [P, G*T], 0 at unrewarded tokens.
    ``ValueError`` if the estimator has no per-token form."""
    estimator = info(name)
    if "token" not in estimator.granularities:
        raise ValueError(f"advantage {name!r} has no per-token form; with --reward-granularity token use one of "
                         f"{', '.join(token_estimators())}")
    return _run(estimator, rewards, hyperparameters, granularity="token")


def _run(estimator: Estimator, rewards: Any, hyperparameters: dict[str, Any], *, granularity: str,
         lengths: Any = None, token_statistics: Any = None) -> torch.Tensor:
    name = estimator.name
    values, out_dtype, device = _as_float64(rewards, name)
    _validate(values, estimator, granularity)
    if estimator.needs_lengths:
        hyperparameters = {**hyperparameters, "lengths": _lengths(lengths, values, name)}
    if estimator.needs_token_statistics:
        hyperparameters = {**hyperparameters, "statistics": _statistics(token_statistics, values, name)}
    try:
        advantages = estimator.fn(values, **hyperparameters)
    except TypeError as error:
        raise ValueError(
            f"advantage estimator {name!r}: bad hyper-parameters {hyperparameters}: {error}"
        ) from None
    if advantages.shape == values.shape:  # per-token estimators zero their unscorable rows themselves
        advantages = torch.where(torch.isnan(values), torch.zeros_like(advantages), advantages)
    result = advantages.to(dtype=out_dtype, device=device)
    if not torch.isfinite(result).all():  # also catches finite float64 values that overflow a float32 output
        raise ValueError(f"advantage estimator {name!r} produced non-finite {out_dtype} advantages for rewards "
                         f"{values}; use rewards of moderate size (binary rewards are 0 and 1)")
    return result


def _as_float64(rewards: Any, name: str) -> tuple[torch.Tensor, torch.dtype, torch.device]:
    if isinstance(rewards, torch.Tensor):
        dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
        return rewards.detach().to(torch.float64), dtype, rewards.device
    try:
        array = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"advantage estimator {name!r}: rewards must be numbers in a [P, G] array ({error})"
        ) from None
    source_dtype = getattr(rewards, "dtype", None)
    is_float = isinstance(source_dtype, np.dtype) and np.issubdtype(source_dtype, np.floating)
    dtype = torch.from_numpy(np.empty(0, dtype=source_dtype)).dtype if is_float else torch.float32
    return torch.from_numpy(array), dtype, torch.device("cpu")


def _lengths(lengths: Any, rewards: torch.Tensor, name: str) -> torch.Tensor:
    """``lengths`` as float64 [P, G] on the rewards' device, checked where the reward is scored."""
    if lengths is None:
        raise ValueError(f"advantage estimator {name!r} weighs completions by their length: pass lengths[P, G] "
                         "(tokens per completion) with the rewards")
    values, _, _ = _as_float64(lengths, name)
    values = values.to(rewards.device)
    if values.shape != rewards.shape:
        raise ValueError(f"advantage estimator {name!r}: lengths must have the rewards' shape "
                         f"{tuple(rewards.shape)}, got {tuple(values.shape)}")
    scored = values[~torch.isnan(rewards)]
    if not (torch.isfinite(scored) & (scored >= 0)).all():
        bad = scored[~(torch.isfinite(scored) & (scored >= 0))][:3].tolist()
        raise ValueError(f"advantage estimator {name!r}: lengths must be finite token counts >= 0 where the reward "
                         f"is scored, got values such as {bad}")
    return values


def _statistics(statistics: Any, rewards: torch.Tensor, name: str) -> Any:
    """``statistics`` checked against the rewards' P * G rows, as float64 on the rewards' device."""
    if statistics is None:
        raise ValueError(f"advantage estimator {name!r} gives each token its own baseline from the sampling policy's "
                         "per-token probabilities: pass token_statistics= (grpolab's own engine computes them; "
                         "--engine trl cannot, and verl users run verl's own optimal_token_baseline)")
    checked = statistics.checked(rewards.numel(), name)
    return type(checked)(*(t.to(rewards.device) for t in (checked.mask, checked.logprobs, checked.sum_pi_squared)))


def _validate(rewards: torch.Tensor, estimator: Estimator, granularity: str) -> None:
    name = estimator.name
    if rewards.dim() != 2:
        raise ValueError(
            f"advantage estimator {name!r}: rewards must have shape [P, G] (prompts x group), "
            f"got {rewards.dim()} dimension(s) with shape {tuple(rewards.shape)}"
        )
    if torch.isinf(rewards).any():
        raise ValueError(
            f"advantage estimator {name!r}: rewards contain +-inf; use finite rewards, or NaN to mark "
            "an unscorable completion"
        )
    if estimator.needs_group and rewards.shape[1] < 2:
        raise ValueError(
            f"advantage estimator {name!r} needs groups of G >= 2 completions per prompt, got G = "
            f"{rewards.shape[1]}; raise the group size or use a fixed-reference estimator such as 'sign'"
        )
    if estimator.binary_only:
        _check_binary(rewards[~torch.isnan(rewards)], name, granularity)


def _check_binary(scored: torch.Tensor, name: str, granularity: str) -> None:
    if granularity == "token":  # a token's reward is the mean of its characters' 0/1 labels
        bad = scored[(scored < 0) | (scored > 1)][:3].tolist()
        if bad:
            raise ValueError(f"advantage estimator {name!r} takes per-token rewards in [0, 1] (means of 0/1 "
                             f"labels) or NaN, got values such as {bad}")
        return
    if not ((scored == 0) | (scored == 1)).all():
        bad = scored[(scored != 0) & (scored != 1)][:3].tolist()
        raise ValueError(
            f"advantage estimator {name!r} is defined only for binary rewards in {{0, 1}} (or NaN), "
            f"got values such as {bad}"
        )
