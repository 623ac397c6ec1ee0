"""Gradient-starvation diagnostics: degeneracy and the Jensen gap, pass@k, gradient spectrum, sparsity.

Every function takes plain arrays (torch tensors, numpy arrays or nested lists) and returns numbers or
numpy arrays; nothing here touches a model. Modules (named apart from the functions they export, so
that ``grpolab.diagnostics.spectrum`` is unambiguously the function):

* ``starvation``: all-correct / all-wrong group rates, D_iid over a window of >= 64 groups, the Jensen gap,
  unbiased count estimators, and ``starvation_metrics``: the one set of ``starvation/*`` metrics that the
  trainer, the TRL adapter and the audit report.
* ``passk``: the unbiased pass@k estimator (product form) and pass@k curves.
* ``majority``: maj@k, the majority vote over k samples as an exact expectation over k-subsets (ties shared).
* ``sampled``: the sampled-evaluation statistics with standard errors over prompts: avg@n, pass@k, maj@k, pass^k.
* ``rank``: singular values, effective / stable rank and energy counts (SVD, Gram or sketch).
* ``zero_signal``: zero-advantage shares of completions and tokens; gradient-entry sparsity.
* ``variance``: the variance view's predicted SNR ratio of sign over group-centred advantages, 4p(1-p)/(1-1/G).
"""

import importlib
from typing import Any

from grpolab.diagnostics.majority import Votes, maj_at_k_curve, votes_of
from grpolab.diagnostics.passk import pass_at_k, pass_at_k_curve
from grpolab.diagnostics.sampled import pass_hat_k, sampled_metrics
from grpolab.diagnostics.starvation import (
    DEFAULT_WINDOW_GROUPS,
    STARVATION_KEYS,
    SuccessWindow,
    degeneracy,
    degeneracy_per_prompt,
    degenerate_groups,
    expected_degeneracy,
    expected_degeneracy_from_counts,
    expected_outcomes_from_counts,
    group_counts,
    iid_degeneracy,
    outcome_shares,
    starvation_metrics,
    success_histogram,
    success_rates,
    windowed_p_means,
)

# The torch-based modules load on first use, so that numpy-only users (audit, report) skip importing torch.
_LAZY = {
    "gram_matrix": "rank",
    "spectrum": "rank",
    "spectrum_metrics": "rank",
    "spectrum_per_group": "rank",
    "gradient_sparsity": "zero_signal",
    "zero_advantage_fraction": "zero_signal",
    "sparsity": "zero_signal",  # the short name of zero_advantage_fraction
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'grpolab.diagnostics' has no attribute {name!r}")
    module = importlib.import_module(f"grpolab.diagnostics.{_LAZY[name]}")
    return getattr(module, "zero_advantage_fraction" if name == "sparsity" else name)

__all__ = [
    "DEFAULT_WINDOW_GROUPS",
    "STARVATION_KEYS",
    "SuccessWindow",
    "Votes",
    "degeneracy",
    "degeneracy_per_prompt",
    "degenerate_groups",
    "expected_degeneracy",
    "expected_degeneracy_from_counts",
    "expected_outcomes_from_counts",
    "gradient_sparsity",
    "gram_matrix",
    "group_counts",
    "iid_degeneracy",
    "maj_at_k_curve",
    "outcome_shares",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_hat_k",
    "sampled_metrics",
    "sparsity",
    "spectrum",
    "spectrum_metrics",
    "spectrum_per_group",
    "starvation_metrics",
    "success_histogram",
    "success_rates",
    "votes_of",
    "windowed_p_means",
    "zero_advantage_fraction",
]
