"""Planning a comparison: the seeds a claim needs under the compare report's own test (``power``: the exact
power of the paired t from the noncentral t, Holm over its family), and what a pilot ``grpolab compare`` folder
says about its noise (``pilot``: each arm's end-score variance split into training seed, evaluation sampling and
prompt). ``grpolab plan`` is the command line; docs/planning.md the formulas and a worked example."""

from grpolab.planning.power import fewest_resolving_seeds, floored_power, paired_power, seeds_needed

__all__ = ["fewest_resolving_seeds", "floored_power", "paired_power", "seeds_needed"]
