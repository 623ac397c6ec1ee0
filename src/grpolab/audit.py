"""``grpolab audit``: how much gradient starvation a finished training run suffered, from its rollout logs.

A *group* is (step, prompt) when the table has a step column, else the prompt. Each record batch is
reduced to per-group partial sums with pyarrow's ``group_by`` (rows, scorable rows n, successes c, reward
min / max, tokens), and partials are merged whenever they pile up, so memory is bounded by the number
of groups, not rows. The summary follows ``grpolab.diagnostics.degeneracy`` (same thresholds, same
treatment of unscorable completions) and ``pass_at_k_curve``.

Definitions and where they depart from the papers (see also ``grpolab.diagnostics.starvation``):

* success: ``reward >= threshold`` (default 0.5); NaN / missing rewards are unscorable.
* all_correct / all_wrong / degenerate: fractions of groups; degenerate also counts groups with no
  scorable completion. G in ``d_iid`` is the nominal group size (the most common group size).
* Over several steps, ``d_iid`` is the group-weighted mean of the per-step D_iid (pbar per step): the
  gap then measures the spread of prompt difficulty within a batch, as in the paper, and not the drift
  of accuracy over training. ``jensen_gap = degenerate - d_iid``.
* zero-gradient completions (and tokens) under group-centred estimators (grpo, dr_grpo, rloo): every
  completion of a group whose scorable rewards are all equal (raw rewards, so for non-binary rewards this
  can differ from ``degenerate``), plus every unscorable one. ``sign`` (A = 2r - 1) uses every scorable
  completion.
* pass@k uses the groups that are fully scored at the nominal size (k = 1..G), pooled over all steps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from grpolab import diagnostics
from grpolab.audit_sources import (
    Columns,
    find_source,
    iter_batches,
    prompt_keys,
    resolve_columns,
    reward_values,
)

__all__ = ["GroupTable", "audit", "collect_groups", "summarize"]

_SUMS = ("rows", "n", "c", "tokens", "tokens_scored")
_COMPACT_ROWS = 4_000_000  # merge the partial group sums once they hold this many rows
_MERGE_ROWS = 250_000  # partial rows per step range in one merge


@dataclass(frozen=True)
class GroupTable:
    """Per-group sums, all arrays [groups]. step is None when the log has no step column."""

    step: np.ndarray | None
    rows: np.ndarray
    n: np.ndarray
    c: np.ndarray
    reward_min: np.ndarray
    reward_max: np.ndarray
    tokens: np.ndarray | None
    tokens_scored: np.ndarray | None


def _partial(batch: pa.RecordBatch, columns: Columns, threshold: float) -> pa.Table:
    """Group sums of one record batch; keys "step" (if any) and "prompt"."""
    reward = reward_values(batch, columns.reward)  # [N]
    scored = ~np.isnan(reward)
    data: dict[str, Any] = {
        "prompt": prompt_keys(batch.column(columns.prompt)),
        "reward": pa.array(reward, from_pandas=True),  # NaN -> null
        "rows": np.ones(len(reward), dtype=np.int64),
        "n": scored.astype(np.int64),
        "c": (scored & (reward >= threshold)).astype(np.int64),
    }
    if columns.step:
        data["step"] = batch.column(columns.step).cast(pa.int64())
    if columns.length:
        length = pc.fill_null(batch.column(columns.length).cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        data["tokens"] = length
        data["tokens_scored"] = np.where(scored, length, 0)
    table = pa.table(data)
    sums = [(name, "sum") for name in _SUMS if name in data]
    return table.group_by(_keys(columns)).aggregate([*sums, ("reward", "min"), ("reward", "max")])


def _keys(columns: Columns) -> list[str]:
    return ["step", "prompt"] if columns.step else ["prompt"]


def _merge(parts: list[pa.Table], keys: list[str]) -> pa.Table:
    """Combine partial group sums into one table; column names stay ``rows_sum``, ``reward_min``, ...

    With a step column the merge runs over contiguous step ranges of about ``_MERGE_ROWS`` partial rows
    each (groups of different steps never merge), which keeps pyarrow's hash tables small.
    """
    table = pa.concat_tables(parts)
    if "step" not in keys or table.num_rows <= _MERGE_ROWS:
        return _merge_table(table, keys)
    step = table.column("step")
    edges = np.quantile(step.to_numpy(), np.linspace(0, 1, table.num_rows // _MERGE_ROWS + 2))
    bounds = np.unique(np.append(np.floor(edges), edges[-1] + 1))  # half-open ranges covering every step
    pieces = []
    for low, high in itertools.pairwise(bounds):
        mask = pc.and_(pc.greater_equal(step, int(low)), pc.less(step, int(high)))
        pieces.append(_merge_table(table.filter(mask), keys))
    return pa.concat_tables(pieces)


def _merge_table(table: pa.Table, keys: list[str]) -> pa.Table:
    sums = [name for name in table.column_names if name.endswith("_sum")]
    merged = table.group_by(keys).aggregate(
        [*[(name, "sum") for name in sums], ("reward_min", "min"), ("reward_max", "max")]
    )
    renames = {f"{name}_sum": name for name in sums} | {
        "reward_min_min": "reward_min",
        "reward_max_max": "reward_max",
    }
    return merged.rename_columns([renames.get(name, name) for name in merged.column_names])


def collect_groups(
    path: Path,
    *,
    prompt_column: str | None = None,
    reward_column: str | None = None,
    step_column: str | None = None,
    length_column: str | None = None,
    threshold: float = 0.5,
    batch_rows: int = 1 << 20,
) -> tuple[GroupTable, dict[str, Any]]:
    """Stream the rollout tables under ``path`` into per-group sums, plus a description of the input."""
    source = find_source(Path(path))
    columns = resolve_columns(
        source, prompt=prompt_column, reward=reward_column, step=step_column, length=length_column
    )
    keys, parts, pending = _keys(columns), [], 0
    for batch in iter_batches(source, columns, batch_rows):
        if batch.num_rows:
            parts.append(_partial(batch, columns, threshold))
            pending += parts[-1].num_rows
        if pending > _COMPACT_ROWS and len(parts) > 1:
            parts = [_merge(parts, keys)]
            pending = parts[0].num_rows
    if not parts:
        raise ValueError(f"{path}: the rollout tables hold no rows")
    groups = _to_group_table(_merge(parts, keys), columns)
    info = {
        "path": str(path),
        "kind": source.kind,
        "format": source.fmt,
        "files": len(source.files),
        "columns": {
            "prompt": columns.prompt,
            "reward": list(columns.reward),
            "step": columns.step,
            "length": columns.length,
        },
        "threshold": threshold,
    }
    return groups, info


def _to_group_table(table: pa.Table, columns: Columns) -> GroupTable:
    def col(name: str) -> np.ndarray:
        return table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)

    has_tokens = "tokens_sum" in table.column_names
    return GroupTable(
        step=col("step") if columns.step else None,
        rows=col("rows_sum"),
        n=col("n_sum"),
        c=col("c_sum"),
        reward_min=pc.fill_null(table.column("reward_min"), np.nan).to_numpy().astype(np.float64),
        reward_max=pc.fill_null(table.column("reward_max"), np.nan).to_numpy().astype(np.float64),
        tokens=col("tokens_sum") if has_tokens else None,
        tokens_scored=col("tokens_scored_sum") if has_tokens else None,
    )


def _rates(n: np.ndarray, c: np.ndarray, group_size: int) -> dict[str, float]:
    """Degeneracy numbers of one set of groups, as ``diagnostics.degeneracy`` defines them."""
    seen = n > 0
    all_correct = float(np.mean(seen & (c == n)))
    all_wrong = float(np.mean(seen & (c == 0)))
    degenerate = all_correct + all_wrong + float(np.mean(~seen))
    p_mean = float(np.mean(c[seen] / n[seen])) if seen.any() else 0.0
    d_iid = p_mean**group_size + (1.0 - p_mean) ** group_size
    return {
        "groups": int(n.size),
        "all_correct": all_correct,
        "all_wrong": all_wrong,
        "degenerate": degenerate,
        "p_mean": p_mean,
        "success_rate": float(c.sum() / max(n.sum(), 1)),
        "d_iid": float(d_iid),
        "jensen_gap": float(degenerate - d_iid),
    }


def _per_step(groups: GroupTable, group_size: int) -> list[dict[str, Any]]:
    if groups.step is None:
        return []
    order = np.argsort(groups.step, kind="stable")
    steps, starts = np.unique(groups.step[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    rows = []
    for i, step in enumerate(steps.tolist()):
        members = order[bounds[i] : bounds[i + 1]]
        rows.append({"step": int(step), **_rates(groups.n[members], groups.c[members], group_size)})
    return rows


def _zero_gradient(groups: GroupTable) -> dict[str, Any]:
    """Shares of completions (and tokens) with zero group-centred advantage, and what sign would use."""
    flat = (groups.n <= 1) | (groups.reward_min == groups.reward_max)  # [groups] equal scorable rewards
    zero_rows = np.where(flat, groups.rows, groups.rows - groups.n).sum()
    total_rows = max(int(groups.rows.sum()), 1)
    out: dict[str, Any] = {
        "completions": int(groups.rows.sum()),
        "zero_gradient_completions": float(zero_rows / total_rows),
        "sign_used_completions": float(groups.n.sum() / total_rows),
        "tokens": None,
        "zero_gradient_tokens": None,
        "sign_used_tokens": None,
    }
    if groups.tokens is not None and groups.tokens_scored is not None:
        total_tokens = max(int(groups.tokens.sum()), 1)
        zero_tokens = np.where(flat, groups.tokens, groups.tokens - groups.tokens_scored).sum()
        out |= {
            "tokens": int(groups.tokens.sum()),
            "zero_gradient_tokens": float(zero_tokens / total_tokens),
            "sign_used_tokens": float(groups.tokens_scored.sum() / total_tokens),
        }
    return out


def _pass_at_k(groups: GroupTable, group_size: int) -> dict[str, float]:
    full = groups.n == group_size
    if group_size < 1 or not full.any():
        return {}
    curve = diagnostics.pass_at_k_curve(groups.n[full], groups.c[full], ks=list(range(1, group_size + 1)))
    return {str(k): float(v) for k, v in curve.items()}


def _histogram(groups: GroupTable) -> dict[str, Any]:
    seen = groups.n > 0
    if not seen.any():
        return {"exact": True, "rates": [], "counts": [], "fractions": []}
    hist = diagnostics.success_histogram(groups.c[seen], groups.n[seen])
    return {
        "exact": bool(hist["exact"]),
        "rates": [float(r) for r in hist["rates"]],
        "counts": [int(x) for x in hist["counts"]],
        "fractions": [float(x) for x in hist["fractions"]],
    }


def summarize(groups: GroupTable) -> dict[str, Any]:
    """The audit report (JSON-ready) of per-group sums; see the module docstring for the definitions."""
    sizes, counts = np.unique(groups.rows, return_counts=True)
    group_size = int(sizes[np.argmax(counts)])  # nominal G: the most common group size
    overall = _rates(groups.n, groups.c, group_size)
    per_step = _per_step(groups, group_size)
    if per_step:
        weights = np.array([s["groups"] for s in per_step], dtype=np.float64)
        overall["d_iid"] = float(np.average([s["d_iid"] for s in per_step], weights=weights))
        overall["jensen_gap"] = overall["degenerate"] - overall["d_iid"]
    return {
        **overall,
        "group_size": group_size,
        "group_sizes": {str(int(s)): int(k) for s, k in zip(sizes, counts, strict=True)},
        "steps": len(per_step) or None,
        **_zero_gradient(groups),
        "success_histogram": _histogram(groups),
        "pass_at_k": _pass_at_k(groups, group_size),
        "per_step": per_step,
    }


def audit(path: Path | str, **options: Any) -> dict[str, Any]:
    """Audit the rollout logs at ``path``: ``summarize(collect_groups(path, **options))`` plus the input."""
    groups, info = collect_groups(Path(path), **options)
    return {"input": info, **summarize(groups)}
