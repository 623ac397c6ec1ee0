"""Paired comparisons of pass@k on the same prompts (``grpolab eval --against``, ``--compare DIR --arms A,B``, the
compare report's "Paired pass@k" section).

Modules:

* ``band``: the statistics, pure functions of per-prompt counts: the paired difference of pass@k for every k with
  a sup-t simultaneous band over k from a paired bootstrap over prompts, and the seed-level t interval with Holm
  over k;
* ``sources``: where the counts come from (harness samples files, run directories, ``grpolab eval --out`` files,
  a sweep's ``results.parquet``) and how two sides are matched by prompt id.
"""

from grpolab.paired.band import PairedBand, SeedDifferences, paired_band, seed_differences
from grpolab.paired.sources import Side, arm_pairs, compare_sides, pair_sides

__all__ = ["PairedBand", "SeedDifferences", "Side", "arm_pairs", "compare_sides", "pair_sides", "paired_band",
           "seed_differences"]
