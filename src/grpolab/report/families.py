"""The report's "Per-family breakdown" section: start and end held-out success per prompt family, for each
estimator (and variant) at each group size. Tasks without prompt families have no such section.

The numbers come from ``tables.family_table`` (mean per-prompt success c / n over the prompts of a family,
then over seeds); the verdict's one line on where the gain sits is ``verdict``'s. A seed whose evaluation lost its
per-prompt successes (a damaged ``eval.jsonl`` restored from an older ``summary.json``) is named below the table,
since the means of its arm then average fewer seeds (``tables.family_gaps``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpolab.advantages import display_order
from grpolab.render import Section
from grpolab.report.tables import family_gaps, family_table, labelled

__all__ = ["families_section"]


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def families_section(results: pd.DataFrame) -> Section | None:
    """Start and end success per prompt family, for each estimator at each group size; None without families."""
    table = family_table(labelled(results))
    if table.empty:
        return None
    wide = table.pivot_table(index=["group_size", "family"], columns="estimator", values="end").reset_index()
    start = table.groupby(["group_size", "family"])["start"].mean().reset_index()
    wide = start.merge(wide, on=["group_size", "family"]).sort_values(["group_size", "start"])
    names = display_order([c for c in wide.columns if c not in ("group_size", "family", "start")])
    display = pd.DataFrame({"G": wide["group_size"], "Family": wide["family"], "Start": wide["start"].map(_pct),
                            **{f"{name} end": wide[name].map(_pct) for name in names}})
    text = ("Mean per-prompt success (over the evaluation samples) in each prompt family at the start and at "
            "the end of training, mean over seeds. Families are ordered by their starting success: the "
            "low-success families are where group-centred advantages starve (most groups all wrong).")
    gaps = family_gaps(labelled(results))
    if gaps:
        text += (f" Left out for want of per-prompt successes (so those means average fewer seeds): {', '.join(gaps)}; "
                 "see each run's eval.jsonl.")
    return Section("Per-family breakdown", [text], [("Held-out success per prompt family", display)])
