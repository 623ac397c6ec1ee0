"""Gradients of a GRPO rollout batch: per-completion rows (``rows``) and their geometry (``geometry``).

``rows`` computes one policy-gradient row per completion, exactly or through a seeded CountSketch;
``geometry`` turns rows and advantages into the ``grad/*`` metrics (effective rank, the rank-2 check,
sparsity, credit assignment) of the GRPO policy-gradient-foundations paper; ``halves`` measures the batch
gradient's signal-to-noise ratio as the cosine between the gradients of two halves of its prompt groups.
The rank measures themselves are pure functions in ``grpolab.diagnostics.rank``. docs/gradient-geometry.md
has the definitions and measurements.
"""

from grpolab.gradients.geometry import (
    analyze_gradients,
    decompose_group_gradient,
    gradient_metrics_for_step,
    projection_residual,
    split_sums,
)
from grpolab.gradients.halves import half_batch_cosine, half_rows
from grpolab.gradients.rows import (
    CountSketch,
    GradientRows,
    per_completion_gradients,
    select_parameters,
    summed_policy_gradient,
    token_advantages,
)

__all__ = [
    "CountSketch",
    "GradientRows",
    "analyze_gradients",
    "decompose_group_gradient",
    "gradient_metrics_for_step",
    "half_batch_cosine",
    "half_rows",
    "per_completion_gradients",
    "projection_residual",
    "select_parameters",
    "split_sums",
    "summed_policy_gradient",
    "token_advantages",
]
