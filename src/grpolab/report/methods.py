"""The report's "Methods" section, after the results: how the verdict's numbers were computed (the metric, the
learning rates, pairing by seed, the two Holm families, TOST, the intervals, and what compute was held equal). The
Verdict points here in one line (``methods_pointer``) instead of opening with it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpolab.equivalence import margin_rule
from grpolab.render import Section
from grpolab.report.comparisons import equivalence_margin
from grpolab.report.compute import budget_sentence
from grpolab.report.tables import ALPHA

__all__ = ["METHODS", "methods_pointer", "methods_section"]

METHODS = "Methods"


def methods_pointer() -> str:
    """The Verdict's one line that sends the reader to the methods."""
    return (f"How these were tested (the metric, pairing by seed, the two Holm families, TOST and the intervals): "
            f"see {METHODS} (#{METHODS.lower()}), after the results.")


def methods_section(selection: pd.DataFrame | None, config: dict[str, Any]) -> Section:
    """The methods paragraph; ``selection``: the lr-selection runs, or None when every estimator ran one lr."""
    lr_text = ("Each estimator ran at its own learning rate, chosen per group size on the validation split "
               "(never on the test split; see Learning-rate selection). " if selection is not None else
               "Every estimator ran at the same learning rate (no --lrs): a difference may come from the "
               "learning rate rather than the estimator. ")
    return Section(METHODS, [
        f"Held-out score = pass@1 on the test split (mean success of the evaluation samples at the training "
        f"temperature; greedy accuracy when no samples were drawn), at the end of training; each verdict "
        f"names its metric, and greedy accuracy is tested beside pass@1. {lr_text}"
        f"The estimators ran the same seeds, so pairs are tested paired by seed (paired t-test, t interval "
        f"of the per-seed differences) wherever both arms hold the same seeds, else by Welch's test; each "
        f"line names its test. Two families, each Holm-corrected as one: the primary comparison (--primary) "
        f"at every group size and variant, and every other tested pair. A pair is different when its "
        f"Holm-adjusted p < {ALPHA}; equivalent when TOST (two one-sided tests, Holm-adjusted the same way) "
        f"puts the difference within the {margin_rule(equivalence_margin(config))} (--equivalence-margin); "
        "otherwise there is no "
        "evidence either way at this n. CIs are 95% t intervals over seeds (paired, Welch, or Student-t for "
        f"one arm). Compute: {budget_sentence(config)} Compute per arm states what each arm spent."])
