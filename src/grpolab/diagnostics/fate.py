"""Each train prompt's fate: its state each time it was sampled (all wrong, mixed or all right in its group) and
the transitions between consecutive samplings.

Paper 1 (gradient starvation, arXiv 2605.07689) argues that a group-centred estimator leaves a prompt whose G
completions are all wrong without gradient, so such a prompt escapes only by the drift the other prompts' updates
give it ("pass@G failure descent"), while a fixed-reference estimator such as ``sign`` pushes its completions down.
The paper measures starvation rates; this module tests the claim directly on a run's rollout tables: of the prompts
that were all wrong when first sampled and were sampled again, how many were later mixed or all right.

Definitions (grpolab's, not the paper's):

* a prompt's *state* at a step pools its scorable completions of that step (n scored, c right): ``all_wrong``
  (c = 0), ``all_right`` (c = n) or ``mixed``; a step where none of them was scorable gives no state;
* *escaped*: all wrong at its first state, and mixed or all right at some later one; *solved*: all right at some
  later one (a subset of escaped);
* a transition counts each pair of consecutive states of one prompt.

Input: a frame with one row per (step, prompt_id) and its counts ``n`` and ``correct``
(``grpolab.audit.fate_source.prompt_counts`` reads it from a run's ``rollouts/``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["FATE_COUNTS", "STATES", "escaped_share", "fate_counts", "prompt_states", "transitions"]

STATES = ("all_wrong", "mixed", "all_right")
FATE_COUNTS = ("prompts", "all_wrong_first", "all_wrong_first_resampled", "escaped", "solved")


def prompt_states(counts: pd.DataFrame) -> pd.DataFrame:
    """[rows] (prompt_id, step, state) sorted by prompt and step, from ``counts`` [rows] (step, prompt_id, n,
    correct); a prompt's rows of one step are pooled, and steps with nothing scorable dropped."""
    pooled = counts.groupby(["prompt_id", "step"], as_index=False)[["n", "correct"]].sum()
    pooled = pooled[pooled["n"] > 0]
    state = np.where(pooled["correct"] == 0, "all_wrong",
                     np.where(pooled["correct"] == pooled["n"], "all_right", "mixed"))
    return pooled.assign(state=state)[["prompt_id", "step", "state"]].reset_index(drop=True)


def transitions(states: pd.DataFrame) -> pd.DataFrame:
    """[3, 3] counts of consecutive states of one prompt: rows the earlier state, columns the later (``STATES``
    order both)."""
    later = states.groupby("prompt_id")["state"].shift(-1)
    pairs = pd.DataFrame({"from": states["state"], "to": later}).dropna()
    table = pd.crosstab(pairs["from"], pairs["to"]) if len(pairs) else pd.DataFrame()
    return table.reindex(index=list(STATES), columns=list(STATES), fill_value=0).astype(int)


def fate_counts(states: pd.DataFrame) -> dict[str, int]:
    """``FATE_COUNTS`` of a run's ``prompt_states``: prompts with a state, those all wrong at their first state,
    those of them sampled again, those escaped and those solved (see the module docstring)."""
    by_prompt = states.groupby("prompt_id", sort=False)["state"]
    first = by_prompt.first()
    wrong_first = first.index[first == "all_wrong"]
    later = states[states["prompt_id"].isin(wrong_first) & states.duplicated("prompt_id")]  # after the first
    return {"prompts": int(first.size), "all_wrong_first": int(wrong_first.size),
            "all_wrong_first_resampled": int(later["prompt_id"].nunique()),
            "escaped": int(later.loc[later["state"] != "all_wrong", "prompt_id"].nunique()),
            "solved": int(later.loc[later["state"] == "all_right", "prompt_id"].nunique())}


def escaped_share(counts: dict[str, float]) -> float:
    """Escaped over the all-wrong-first prompts sampled again (NaN when none was)."""
    resampled = counts["all_wrong_first_resampled"]
    return counts["escaped"] / resampled if resampled else math.nan
