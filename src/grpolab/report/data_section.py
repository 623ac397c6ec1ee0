"""The report's "Data" section: the task every run trained on, its data source, row counts and the rows it
left out (empty or duplicate prompts, references the verifier cannot parse).

It reads ``config["task"]``, the ``Task.summary()`` that ``grpolab compare`` stores with the sweep settings;
a report without it (an older sweep) has no Data section.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpolab.render import Section

__all__ = ["data_sections"]


def _counts_table(summary: dict[str, Any]) -> pd.DataFrame:
    """Rows read per split of the source and problems used per split of the task."""
    rows = [{"split": f"source: {name}", "rows": count} for name, count in summary.get("rows", {}).items()]
    rows += [{"split": f"task: {name}", "rows": count} for name, count in summary.get("problems", {}).items()]
    return pd.DataFrame(rows, columns=["split", "rows"])


def _left_out(summary: dict[str, Any]) -> list[str]:
    if "unparseable_references" not in summary:
        return []
    example = summary.get("unparseable_example")
    return [
        f"Empty prompts left out: {summary.get('empty_prompts', 0)}.",
        f"Duplicate prompts left out (a prompt is kept in one split only): {summary.get('duplicate_prompts', 0)}.",
        f"References the verifier cannot parse, left out rather than scored 0: "
        f"{summary['unparseable_references']}" + (f" (e.g. {example})." if example else "."),
    ]


def _evaluated(summary: dict[str, Any], train: dict[str, Any]) -> list[str]:
    """How many prompts of which split each evaluation scored: the split's size cut to ``eval_limit``."""
    split = train.get("eval_split") or "test"
    size, limit = summary.get("problems", {}).get(split), train.get("eval_limit")
    if not isinstance(size, int):
        return []
    scored = min(size, limit) if isinstance(limit, int) else size
    cut = f" (--eval-limit {limit} of its {size})" if scored < size else ""
    samples = train.get("eval_samples")
    drawn = f", greedily and with {samples} samples each" if isinstance(samples, int) and samples else ", greedily"
    return [f"Each evaluation scored the first {scored} prompts of the {split} split{cut}{drawn}."]


def data_sections(config: dict[str, Any]) -> list[Section]:
    """The Data section (a list of one) when ``config`` holds the task summary, else an empty list."""
    summary = config.get("task")
    if not isinstance(summary, dict) or "task" not in summary:
        return []
    lines = [f"Every run trained on the task {summary['task']!r}, scored by the verifier {summary.get('verifier')!r}."]
    if "source" in summary:
        lines.append(f"Data: {summary['source']} (prompt column {summary.get('prompt_column')!r}, reference column "
                     f"{summary.get('reference_column')!r}); test split: {summary.get('test_split')}.")
    lines += _evaluated(summary, config.get("train") or {})
    if not summary.get("problems", {}).get("validation"):
        lines.append("The task has no validation split of its own: learning-rate selection (--lrs) carves one from "
                     "about a tenth of train for its runs; the reported runs train on all of train.")
    return [Section("Data", lines, tables=[("Rows read and problems used", _counts_table(summary))],
                    bullets=_left_out(summary))]
