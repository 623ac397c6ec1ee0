"""Holm's step-down adjustment written out by hand (Holm 1979), the oracle the experiment scripts' tests check
their adjusted p-values against, independent of the code under test."""

from __future__ import annotations


def holm_by_hand(p: list[float]) -> list[float]:
    """Holm-adjusted ``p``, in the input's order: the k-th smallest times (m - k + 1), kept monotone, capped at 1."""
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted
