"""Advantage estimators for outcome (binary) rewards: one registry, one signature.

Every estimator but one maps ``rewards[P, G]`` (P prompts, G completions each) to ``advantages[P, G]``::

    fn(rewards: Tensor[P, G], *, <keyword hyper-parameters>) -> Tensor[P, G]

Under an outcome-only reward every token of a completion gets its completion's advantage (the credit
assignment of the GRPO-foundations paper), so a per-completion advantage is all the trainer needs.

The package is cut by family: ``registry`` (the entries, lookup and the validating ``compute_advantages``),
``group`` (group-centred: grpo, dr_grpo, rloo, reinforce_pp, ngrpo, avspo, maxrl, batch_std, gpg, opo), ``fixed``
(fixed-reference: sign, fixed_baseline, reinforce, nsr, w_reinforce) and ``passk`` (pass@k: passk, pkpo,
grpo_passk), and ``token_baseline`` (the optimal token baseline). ``opo`` also takes the completions' lengths
(``compute_advantages(..., lengths=)``), and the optimal token baseline the sampling policy's per-token statistics
(``compute_advantages(..., token_statistics=)``), with which it gives per-token advantages [P * G, T]. ``mix``
composes two of them, ``mix-A-B-L`` = L * A + (1 - L) * B, resolved wherever a name is looked up. Each
registry entry carries its paper (title, arXiv id, year), its flags, its granularities, its display order and
colour; ``grpolab estimators``, the report and the docs read them there. Each family module says where it
departs from its papers.
"""

from grpolab.advantages import fixed, group, mix, passk, token_baseline  # noqa: F401  (importing them registers the estimators)
from grpolab.advantages.registry import (
    _REGISTRY as _REGISTRY,  # for tests that register and remove their own estimators
)
from grpolab.advantages.registry import (
    DYNAMIC_SUFFIX,
    GRANULARITIES,
    REMEDY_SUFFIXES,
    UNAVAILABLE,
    Estimator,
    Paper,
    available,
    compute_advantages,
    display_colors,
    display_order,
    entry_for,
    get,
    info,
    normalise_token_rewards,
    parse_arm,
    parse_spec,
    register,
    split_remedies,
    token_estimators,
)
from grpolab.advantages.token_baseline import TokenStatistics

__all__ = ["DYNAMIC_SUFFIX", "GRANULARITIES", "REMEDY_SUFFIXES", "UNAVAILABLE", "Estimator", "Paper",
           "TokenStatistics", "available",
           "compute_advantages", "display_colors", "display_order", "entry_for", "get", "info",
           "normalise_token_rewards", "parse_arm", "parse_spec", "register", "split_remedies", "token_estimators"]
