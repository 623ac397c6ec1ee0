"""How far apart two float computations of the same value may be when they sum in different orders (two
kernels, two CPUs' instruction sets, a packed and a padded layout), derived from the dtype and the size of the
sums instead of measured on one machine.

Rounding each of the n additions of a sum whose terms are about ``m`` in size costs at most ``eps / 2`` of the
running total, so two orders of the same sum differ by at most about ``n * eps * m`` (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., section 4.2); independent rounding errors grow like a random walk,
``sqrt(n) * eps * m`` (ibid., section 2.8), and that is what two kernels' orders give in practice. Along a
network's forward the errors of its successive sums add the same way, so ``n`` is the number of terms summed
along the path to one output, and ``m`` the largest reference value compared. ``k`` is stated by each test.
"""

from __future__ import annotations

import math

import torch

__all__ = ["reordered_sum_gap"]


def reordered_sum_gap(dtype: torch.dtype, terms: int, magnitude: float | torch.Tensor, *, k: float = 1.0) -> float:
    """``k * eps(dtype) * sqrt(terms) * magnitude``: the largest expected gap between two orders of the sums."""
    return k * torch.finfo(dtype).eps * math.sqrt(terms) * float(magnitude)
