"""Each prompt's fate (``grpolab.diagnostics.fate``) read from a grpolab run's rollout tables.

Reads ``rollouts/step-NNNNNN.parquet`` (only the names the trainer writes, ``grpolab.audit.sources``), three columns
of each: step, prompt_id and reward, one step per file, reduced at once to one row per (step, prompt_id) with the
scorable completions ``n`` (a non-NaN reward) and the right ones ``correct`` (reward >= 0.5, as ``rollout/accuracy``
counts them), so memory holds the prompts of the steps, not their completions. Only grpolab runs: a TRL log groups
completions by position, not by a prompt id that stays the same across steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from grpolab.audit.sources import grpolab_rollout_files
from grpolab.diagnostics.fate import STATES, escaped_share, fate_counts, prompt_states, transitions

__all__ = ["prompt_counts", "run_fate"]

_COUNT_COLUMNS = ["step", "prompt_id", "n", "correct"]


def _step_counts(path: Path) -> pd.DataFrame:
    frame = pq.read_table(path, columns=["step", "prompt_id", "reward"]).to_pandas()
    reward = frame["reward"].to_numpy(dtype=np.float64)
    frame = frame.assign(n=~np.isnan(reward), correct=reward >= 0.5)
    return frame.groupby(["step", "prompt_id"], as_index=False, sort=False)[["n", "correct"]].sum()


def prompt_counts(files: Sequence[Path]) -> pd.DataFrame:
    """[rows] (step, prompt_id, n, correct) of the rollout tables ``files``, one row per step and prompt."""
    parts = [_step_counts(path) for path in files]
    if not parts:
        return pd.DataFrame(columns=_COUNT_COLUMNS)
    return pd.concat(parts, ignore_index=True)[_COUNT_COLUMNS].astype({"step": int, "n": int, "correct": int})


def run_fate(run_dir: Path) -> dict[str, Any] | None:
    """The prompts' fate of the run in ``run_dir``: ``fate_counts``, ``escaped_share`` and ``transitions`` as
    {from: {to: count}}; None when the run wrote no rollout table."""
    files = grpolab_rollout_files(Path(run_dir))
    if not files:
        return None
    states = prompt_states(prompt_counts(files))
    counts = fate_counts(states)
    table = transitions(states)
    return {**counts, "escaped_share": escaped_share(counts),
            "transitions": {a: {b: int(table.loc[a, b]) for b in STATES} for a in STATES}}
