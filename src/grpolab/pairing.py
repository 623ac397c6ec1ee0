"""Which test compares two arms: paired by seed where they share seeds, Welch's only where they do not.

One rule for the ``grpolab compare`` report and every experiment script (docs/report-statistics.md). The
estimators of a sweep run the same seeds, and seed s of each starts from the same policy and is scored on the
same prompts, so one seed's luck is shared by both arms. Arms that hold the same seeds (each once) are compared
by the paired t-test of the per-seed differences and its t interval (Student 1908; ``stats.compare_pair(paired=
True)``). Welch's test (Welch 1947) ignores that pairing and counts the shared luck as noise twice, which moves
its p either way; on arms that share seeds it runs only when asked (``unpaired=True``, a script's
``--unpaired``), and the result then carries ``UNPAIRED_NOTE`` for the output to print. Arms whose seeds differ
(a run diverged in one arm, an arm has extra seeds) get Welch's test, and ``test`` says so.

Arms are ``pandas.Series`` of one score per run, indexed by seed: ``values[n_runs]`` with the seed as label.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpolab import stats

__all__ = ["UNPAIRED_FLAG", "UNPAIRED_NOTE", "compare_arms", "shares_seeds", "which_tests"]

UNPAIRED_FLAG = "--unpaired"
UNPAIRED_NOTE = (
    f"Welch's test on arms that share seeds, as asked ({UNPAIRED_FLAG}): it ignores the pairing by "
    "seed; without the flag the paired t-test runs."
)


def shares_seeds(seeds_a: Any, seeds_b: Any) -> bool:
    """Whether two arms ran the same seeds, each once: then run i of one pairs with the same seed of the other."""
    a, b = pd.Index(seeds_a), pd.Index(seeds_b)
    return a.is_unique and b.is_unique and set(a) == set(b)


def compare_arms(
    a: pd.Series,
    b: pd.Series,
    *,
    unpaired: bool = False,
    margin: float = stats.DEFAULT_EQUIVALENCE_MARGIN,
    **options: Any,
) -> dict[str, Any]:
    """``stats.compare_pair`` of arm a against arm b (each a score per run, indexed by seed; >= 2 runs each), paired
    by seed where they share seeds, else Welch; ``unpaired``: Welch even on shared seeds. Adds ``t_p`` (the t-test's
    own p, before ``stats.sign_flip_floor`` raises a paired one), ``seeds_shared`` and ``unpaired`` (Welch asked for
    on shared seeds: print ``UNPAIRED_NOTE``). ``options`` go to compare_pair."""
    shared = shares_seeds(a.index, b.index)
    paired = shared and not unpaired
    x, y = (a.sort_index(), b.sort_index()) if paired else (a, b)
    result = stats.compare_pair(x.to_numpy(float), y.to_numpy(float), paired=paired, margin=margin, **options)
    t_p = stats.paired_t_test(x.to_numpy(float), y.to_numpy(float))[2] if paired else result["welch_p"]
    return {**result, "t_p": t_p, "seeds_shared": shared, "unpaired": shared and unpaired}


def which_tests(rows: list[dict[str, Any]]) -> str:
    """One line naming the tests that ran over ``rows`` (results of ``compare_arms``), with ``UNPAIRED_NOTE``
    where Welch was asked for on shared seeds and the reason where Welch ran on seeds that differ."""
    tests = sorted({row["test"] for row in rows})
    line = f"Test: {', '.join(tests)}" + (" (paired by seed)" if all(t in stats.PAIRED_TESTS for t in tests) else "")
    if any(row["unpaired"] for row in rows):
        line += f". {UNPAIRED_NOTE}"
    if any(not row["seeds_shared"] for row in rows):
        line += ". Welch's test where the two arms' seeds differ."
    return line + ("" if line.endswith(".") else ".")
