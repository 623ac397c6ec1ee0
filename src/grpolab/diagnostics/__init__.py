"""Gradient-starvation diagnostics: degeneracy and the Jensen gap, pass@k, gradient spectrum, sparsity.

Every function takes plain arrays (torch tensors, numpy arrays or nested lists) and returns numbers or
numpy arrays; nothing here touches a model. Modules (named apart from the functions they export, so
that ``grpolab.diagnostics.spectrum`` is unambiguously the function):

* ``starvation``: all-correct / all-wrong group rates, D_iid, the Jensen gap, unbiased count estimators.
* ``passk``: the unbiased pass@k estimator (product form) and pass@k curves.
* ``rank``: singular values, effective / stable rank and energy counts (SVD, Gram or sketch).
* ``zero_signal``: zero-advantage shares of completions and tokens; gradient-entry sparsity.
"""

from grpolab.diagnostics.passk import pass_at_k, pass_at_k_curve
from grpolab.diagnostics.rank import gram_matrix, spectrum, spectrum_metrics, spectrum_per_group
from grpolab.diagnostics.starvation import (
    degeneracy,
    expected_degeneracy,
    expected_degeneracy_from_counts,
    group_counts,
    success_histogram,
)
from grpolab.diagnostics.zero_signal import gradient_sparsity, zero_advantage_fraction

sparsity = zero_advantage_fraction  # the short name used in the design notes

__all__ = [
    "degeneracy",
    "expected_degeneracy",
    "expected_degeneracy_from_counts",
    "gradient_sparsity",
    "gram_matrix",
    "group_counts",
    "pass_at_k",
    "pass_at_k_curve",
    "sparsity",
    "spectrum",
    "spectrum_metrics",
    "spectrum_per_group",
    "success_histogram",
    "zero_advantage_fraction",
]
