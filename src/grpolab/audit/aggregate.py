"""``grpolab audit``: how much gradient starvation a finished training run suffered, from its rollout logs.

A *group* is (step, prompt) when the table has a step column, else the prompt; in TRL logs it is a block
of G consecutive rows of one file (see ``grpolab.audit.sources``), never a prompt text. Each record batch
is reduced to per-group partial sums with pyarrow's ``group_by`` (rows, scorable rows n, successes c,
zero-advantage rows, reward min / max, tokens), and partials are merged whenever they pile up, so memory
is bounded by the number of groups, not rows. The figures are those of
``grpolab.diagnostics.starvation_metrics`` (same keys) and ``pass_at_k_curve``. D_iid's window departs from the
trainer's: the trainer's ``starvation/d_iid`` at a step reads the groups logged up to it, while the audit, which
reads the whole log at once, gives the steps before the first full window that first full window (the whole log
when it never fills; ``diagnostics.windowed_p_means``), so early steps can differ.

Definitions and where they depart from the papers (see also ``grpolab.diagnostics.starvation``):

* success: the correctness column is 1 (``reward >= threshold``; a column with values other than 0 and 1
  is refused unless ``threshold`` is given); NaN / missing values are unscorable.
* degenerate: groups whose every advantage is zero (the advantage column, as trained), or without one,
  whose scorable rewards are all equal. ``uniform`` = all_correct + all_wrong + groups with nothing
  scorable: the paper's D_real, what a group-centred estimator starves under binary rewards. The two
  agree for grpo / dr_grpo / rloo on one binary reward; under ``sign`` nothing is degenerate.
* D_iid: pbar over a trailing window of >= 64 groups (``diagnostics.windowed_p_means``; the whole run
  when shorter), per step; overall, the group-weighted mean of the per-step values.
  ``jensen_gap = uniform - d_iid``, a difference of shares (percentage points); the sign paper's "60% Jensen gap" is
  the ratio ``jensen_gap / d_iid`` (``jensen_ratio``). G in ``d_iid`` is the nominal group size (the most common
  one); groups of other sizes are counted in the shares, with a warning. Groups with nothing scorable count as
  uniform (D_real) but have no success rate, so they widen the gap; missing rewards are warned about, and a log
  with no scorable reward at all is refused.
* zero-gradient completions (and tokens): completions with zero advantage (without an advantage column, and for a
  group with a missing (NaN or null) advantage, which is unknown, not zero, with a warning: every completion of a
  group whose scorable rewards are all equal, plus every unscorable one); ``sign``
  (A = 2r - 1) would use every scorable completion.
* pass@k uses the groups that are fully scored at the nominal size (k = 1..G), pooled over all steps.
* truncated: the share of completions that hit the token budget without ending (``rollout/truncated``), from
  the table's truncated column (grpolab runs write one); None without one.
* G = 1 (groups of one completion): every group is trivially uniform, so the group figures (uniform, all
  correct / wrong, D_iid, the Jensen gap, and without an advantage column the degenerate and zero-gradient shares)
  are None, with a warning. A length column must hold token counts (whole numbers in [0, 2^31)), so that every
  token share lies in [0, 1].
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
from grpolab.audit.fate_source import run_fate
from grpolab.audit.sources import (
    Columns,
    distinct_files,
    find_source,
    flag_values,
    iter_batches,
    numeric_values,
    prompt_keys,
    resolve_columns,
    trl_file_steps,
)
from grpolab.audit.trl_groups import stated_group_size_warning, trl_group_size
from grpolab.errors import UserError

__all__ = ["GroupTable", "audit", "collect_groups", "summarize"]

_SUMS = ("rows", "n", "c", "nonbinary", "zero_adv", "adv_missing", "tokens", "tokens_scored", "tokens_zero_adv",
         "truncated")
_COMPACT_ROWS = 4_000_000  # merge the partial group sums once they hold this many rows
_MERGE_ROWS = 250_000  # partial rows per step range in one merge


@dataclass(frozen=True)
class GroupTable:
    """Per-group sums, all arrays [groups], in step order. step is None when the log has no step column;
    zero_adv (rows with zero advantage) is None without an advantage column, tokens without lengths,
    truncated (rows that hit the token budget) without a truncated column."""

    step: np.ndarray | None
    rows: np.ndarray
    n: np.ndarray
    c: np.ndarray
    nonbinary: np.ndarray
    zero_adv: np.ndarray | None
    reward_min: np.ndarray
    reward_max: np.ndarray
    tokens: np.ndarray | None
    tokens_scored: np.ndarray | None
    tokens_zero_adv: np.ndarray | None
    truncated: np.ndarray | None = None
    adv_missing: np.ndarray | None = None
    """Rows whose advantage is missing (NaN or null); None without an advantage column."""


def _group_keys(batch: pa.RecordBatch, offset: int, columns: Columns, block: int | None) -> pa.Array:
    """The group of each row: its prompt id, or (TRL, ``block`` = G) its block of G rows in the file."""
    if block is None:
        return prompt_keys(batch.column(columns.prompt))
    return pa.array((offset + np.arange(batch.num_rows)) // block, pa.int64())


def _partial(
    batch: pa.RecordBatch, offset: int, columns: Columns, threshold: float, block: int | None
) -> pa.Table:
    """Group sums of one record batch; keys "step" (if any) and "group"."""
    reward = numeric_values(batch, columns.reward, "reward")  # [N]
    scored = ~np.isnan(reward)
    data: dict[str, Any] = {
        "group": _group_keys(batch, offset, columns, block),
        "reward": pa.array(reward, from_pandas=True),  # NaN -> null
        "rows": np.ones(len(reward), dtype=np.int64),
        "n": scored.astype(np.int64),
        "c": (scored & (reward >= threshold)).astype(np.int64),
        "nonbinary": (scored & (reward != 0) & (reward != 1)).astype(np.int64),
    }
    zero_adv = None
    if columns.advantage:
        advantage = numeric_values(batch, columns.advantage, "advantage")
        missing = np.isnan(advantage)  # not a zero advantage: unknown (its group is judged by its rewards)
        zero_adv = ~missing & (np.abs(np.nan_to_num(advantage)) <= diagnostics.starvation.ZERO_ADVANTAGE_ATOL)
        data["zero_adv"] = zero_adv.astype(np.int64)
        data["adv_missing"] = missing.astype(np.int64)
    if columns.truncated:
        data["truncated"] = flag_values(batch, columns.truncated)
    if columns.step:
        data["step"] = _steps(batch, columns.step)
    if columns.length:
        length = _lengths(batch, columns.length)
        data["tokens"] = length
        data["tokens_scored"] = np.where(scored, length, 0)
        if zero_adv is not None:
            data["tokens_zero_adv"] = np.where(zero_adv, length, 0)
    table = pa.table(data)
    sums = [(name, "sum") for name in _SUMS if name in data]
    return table.group_by(_keys(columns)).aggregate([*sums, ("reward", "min"), ("reward", "max")])


def _steps(batch: pa.RecordBatch, name: str) -> pa.Array:
    """The step column as int64; ``UserError`` naming it when it holds anything but whole numbers (text, 1.5),
    which pyarrow's cast reports as a schema clash."""
    column = batch.column(name)
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    if pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False)
        if np.all(np.isfinite(values) & (values == np.round(values))):
            return column.cast(pa.int64())
    example = next((value for value in column.to_pylist() if not isinstance(value, int)), None)
    raise UserError(f"the step column {name!r} holds {column.type} values such as {example!r}, not whole numbers; "
                    "write each row's training step as an integer, or name another column with --step-column")


_MAX_LENGTH = 1 << 31  # no completion is this many tokens long; below it, the int64 sums of a log cannot overflow


def _lengths(batch: pa.RecordBatch, name: str) -> np.ndarray:
    """[N] int64 token counts of the length column (missing: 0); ``UserError`` for a value that is no token count
    (negative, fractional, 2^31 or more), which would make the token shares negative or past 100%."""
    length = np.nan_to_num(numeric_values(batch, name, "length"), nan=0.0)
    bad = (length < 0) | (length >= _MAX_LENGTH) | (length != np.floor(length))
    if bad.any():
        raise UserError(f"length column {name!r} holds {length[bad][0]:g} in {int(bad.sum())} row(s), which is no "
                        "completion's token count (a whole number from 0 to 2^31 - 1); name the column of token "
                        "counts with --length-column")
    return length.astype(np.int64)


def _keys(columns: Columns) -> list[str]:
    return ["step", "group"] if columns.step else ["group"]


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
    advantage_column: str | None = None,
    group_size: int | None = None,
    threshold: float | None = None,
    batch_rows: int = 1 << 20,
) -> tuple[GroupTable, dict[str, Any]]:
    """Stream the rollout tables under ``path`` into per-group sums, plus a description of the input."""
    source = find_source(Path(path))
    files, skipped = distinct_files(source)
    columns = resolve_columns(
        source, files, prompt=prompt_column, reward=reward_column, step=step_column, length=length_column,
        advantage=advantage_column,
    )
    block, how, guess = None, "--group-size", None
    if source.kind == "trl":
        block = group_size
        if block:
            guess = stated_group_size_warning(files, columns.prompt, block, step=columns.step)
        else:
            root = Path(path) if Path(path).is_dir() else None
            block, how, guess = trl_group_size(files, columns.prompt, step=columns.step,
                                               advantage=columns.advantage, root=root)
    keys, parts, pending = _keys(columns), [], 0
    try:
        for batch, offset in iter_batches(files, source.fmt, columns, batch_rows):
            if batch.num_rows:
                parts.append(_partial(batch, offset, columns, 0.5 if threshold is None else threshold, block))
                pending += parts[-1].num_rows
            if pending > _COMPACT_ROWS and len(parts) > 1:
                parts = [_merge(parts, keys)]
                pending = parts[0].num_rows
        if not parts:
            raise UserError(f"{path}: the rollout tables hold no rows")
        merged = _merge(parts, keys)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:  # one file's ids are integers, another's text, ...
        raise _mixed_types_error(path, files, columns, error) from None
    groups = _to_group_table(merged, columns)
    info = {
        "path": str(path),
        "kind": source.kind,
        "format": source.fmt,
        "files": len(files),
        "duplicate_files_skipped": skipped,
        "other_files_skipped": [p.name for p in source.skipped],
        "columns": {
            "prompt": columns.prompt,
            "reward": columns.reward,
            "reward_choice": columns.choice,
            "advantage": columns.advantage,
            "step": columns.step,
            "length": columns.length,
            "truncated": columns.truncated,
            "not_read": list(columns.ignored),
        },
        "grouping": _grouping(columns, block, how),
        "group_size_warning": guess,
        "threshold": threshold,
        "logged_steps": trl_file_steps(source) if source.kind == "trl" else None,
    }
    return groups, info


def _mixed_types_error(path: Any, files: list[Path], columns: Columns, error: Exception) -> UserError:
    """One line for rollout files whose key columns have different types (pyarrow's own text is a schema dump)."""
    named = ", ".join(Path(f).name for f in files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    keys = " and ".join(repr(c) for c in (columns.step, columns.prompt) if c)
    return UserError(f"{path}: the rollout files do not agree on the type of {keys} (in {named}; pyarrow: "
                     f"{type(error).__name__}); write the ids with one type in every file (all integers or all text)")


def _grouping(columns: Columns, block: int | None, how: str) -> str:
    if block is None:
        return f"({columns.step}, {columns.prompt})" if columns.step else columns.prompt
    return f"blocks of {block} consecutive rows per file (G = {block} from {how})"


def _to_group_table(table: pa.Table, columns: Columns) -> GroupTable:
    if columns.step:
        table = table.sort_by("step")

    def col(name: str) -> np.ndarray | None:
        if f"{name}_sum" not in table.column_names:
            return None
        return table.column(f"{name}_sum").to_numpy(zero_copy_only=False).astype(np.int64)

    def bound(name: str) -> np.ndarray:
        return pc.fill_null(table.column(name), np.nan).to_numpy().astype(np.float64)

    step = table.column("step").to_numpy(zero_copy_only=False).astype(np.int64) if columns.step else None
    return GroupTable(
        step=step, rows=col("rows"), n=col("n"), c=col("c"), nonbinary=col("nonbinary"),  # type: ignore[arg-type]
        zero_adv=col("zero_adv"), reward_min=bound("reward_min"), reward_max=bound("reward_max"),
        tokens=col("tokens"), tokens_scored=col("tokens_scored"), tokens_zero_adv=col("tokens_zero_adv"),
        truncated=col("truncated"), adv_missing=col("adv_missing"),
    )


def _by_advantage(groups: GroupTable) -> np.ndarray | None:
    """[groups] bool: whether a group's advantages decide its figures (an advantage column, none of the group's
    missing); None without an advantage column."""
    if groups.zero_adv is None:
        return None
    return np.ones_like(groups.rows, dtype=bool) if groups.adv_missing is None else groups.adv_missing == 0


def _equal_rewards(groups: GroupTable) -> np.ndarray:
    """[groups] bool: every scorable reward of the group equal (or at most one scorable)."""
    return (groups.n <= 1) | (groups.reward_min == groups.reward_max)


def _decided(groups: GroupTable, by_advantages: np.ndarray | None, by_rewards: np.ndarray) -> np.ndarray:
    """Per group, ``by_advantages`` where the group's advantages decide (``_by_advantage``), else ``by_rewards``."""
    decide = _by_advantage(groups)
    return by_rewards if decide is None or by_advantages is None else np.where(decide, by_advantages, by_rewards)


def _degenerate(groups: GroupTable) -> np.ndarray:
    """[groups] bool: every advantage zero, or (no advantage column, or some of the group's advantages missing)
    every scorable reward equal."""
    by_advantages = None if groups.zero_adv is None else groups.zero_adv == groups.rows
    return _decided(groups, by_advantages, _equal_rewards(groups))


def _rates(groups: GroupTable, degenerate: np.ndarray, members: slice, d_iid: float) -> dict[str, Any]:
    """The ``starvation_metrics`` figures of a set of groups, given ``_degenerate(groups)`` and their D_iid."""
    n, c = groups.n[members], groups.c[members]
    shares = diagnostics.outcome_shares(n, c)
    return {
        **shares,
        "groups": int(n.size),
        "degenerate": float(np.mean(degenerate[members])),
        "success_rate": float(c.sum() / max(n.sum(), 1)),
        "d_iid": d_iid,
        "jensen_gap": shares["uniform"] - d_iid,
        "jensen_ratio": (shares["uniform"] - d_iid) / d_iid if d_iid > 0 else None,
        "truncated": _truncated_share(groups, members),
    }


def _truncated_share(groups: GroupTable, members: slice) -> float | None:
    """Share of the completions of ``members`` that hit the token budget; None without a truncated column."""
    if groups.truncated is None:
        return None
    return float(groups.truncated[members].sum() / max(int(groups.rows[members].sum()), 1))


def _step_bounds(groups: GroupTable) -> tuple[list[int], list[int]]:
    """(steps, bounds): the groups of steps[i] are groups[bounds[i]:bounds[i + 1]] (step order)."""
    if groups.step is None:
        return [0], [0, groups.rows.size]
    steps, starts = np.unique(groups.step, return_index=True)
    return steps.tolist(), [*starts.tolist(), groups.rows.size]


def _per_step(groups: GroupTable, group_size: int, window: int) -> list[dict[str, Any]]:
    """One entry per step (one for the whole log without steps), D_iid from the trailing window."""
    steps, bounds = _step_bounds(groups)
    slices = [slice(low, high) for low, high in itertools.pairwise(bounds)]
    rates = [groups.c[s][groups.n[s] > 0] / groups.n[s][groups.n[s] > 0] for s in slices]
    p_window = diagnostics.windowed_p_means(rates, window)
    degenerate = _degenerate(groups)
    return [
        {"step": int(step), **_rates(groups, degenerate, members, diagnostics.iid_degeneracy(float(pbar), group_size))}
        for step, members, pbar in zip(steps, slices, np.nan_to_num(p_window), strict=True)
    ]


def _zero_gradient(groups: GroupTable) -> dict[str, Any]:
    """Shares of completions (and tokens) with zero advantage, and what sign would use."""
    total_rows = max(int(groups.rows.sum()), 1)
    flat = _equal_rewards(groups)  # by rewards: every completion of such a group, and every unscorable one
    zero_rows = _decided(groups, groups.zero_adv, np.where(flat, groups.rows, groups.rows - groups.n)).sum()
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
        zero_tokens = _decided(groups, groups.tokens_zero_adv,
                               np.where(flat, groups.tokens, groups.tokens - groups.tokens_scored)).sum()
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


def summarize(groups: GroupTable, window: int = diagnostics.DEFAULT_WINDOW_GROUPS) -> dict[str, Any]:
    """The audit report (JSON-ready) of per-group sums; see the module docstring for the definitions."""
    sizes, counts = np.unique(groups.rows, return_counts=True)
    group_size = int(sizes[np.argmax(counts)])  # nominal G: the most common group size
    per_step = _per_step(groups, group_size, window)
    weights = np.array([s["groups"] for s in per_step], dtype=np.float64)
    d_iid = float(np.average([s["d_iid"] for s in per_step], weights=weights))
    overall = _rates(groups, _degenerate(groups), slice(None), d_iid)
    result = {
        **overall,
        "window_groups": window,
        "group_size": group_size,
        "group_sizes": {str(int(s)): int(k) for s, k in zip(sizes, counts, strict=True)},
        "steps": len(per_step) if groups.step is not None else None,
        **_zero_gradient(groups),
        "success_histogram": _histogram(groups),
        "pass_at_k": _pass_at_k(groups, group_size),
        "per_step": per_step if groups.step is not None else [],
    }
    return _without_group_figures(result, groups) if group_size == 1 else result


# the figures that compare the completions of a group: none where groups hold one completion (G = 1)
_GROUP_FIGURES = ("uniform", "all_correct", "all_wrong", "unscorable_groups", "d_iid", "jensen_gap", "jensen_ratio")


def _without_group_figures(result: dict[str, Any], groups: GroupTable) -> dict[str, Any]:
    """``result`` of groups of one completion with the group figures None (every such group is trivially
    uniform: "100% degenerate" would be no finding); with an advantage column, the degenerate share and the
    zero-advantage shares stay, as they read the advantages the run trained on."""
    gone = (*_GROUP_FIGURES, *(() if groups.zero_adv is not None else
                               ("degenerate", "zero_gradient_completions", "zero_gradient_tokens")))
    for row in (result, *result["per_step"]):
        row.update(dict.fromkeys((key for key in gone if key in row), None))
    return result


def _missing_steps(steps: list[int], first: int | None, shown: int = 8) -> tuple[int, list[int]]:
    """(how many steps between ``first`` (default: the first logged) and the last logged one are absent, the
    first ``shown`` of them): time and memory grow with the logged steps, not with the range they span
    (a step column holding 1e10 must not build a list of ten billion steps)."""
    if not steps:
        return 0, []
    present = sorted(set(steps))
    low, high = (present[0] if first is None else first), present[-1]
    inside = [s for s in present if s >= low]
    absent, listed, previous = high - low + 1 - len(inside), [], low - 1
    for step in inside:  # the gaps between consecutive logged steps, until ``shown`` are listed
        listed += range(previous + 1, min(step, previous + 1 + shown - len(listed)))
        if len(listed) >= shown:
            break
        previous = step
    return absent, listed


def _warnings(result: dict[str, Any], groups: GroupTable) -> list[str]:
    """Problems that leave the figures computed but partial or redefined; ``UserError`` for refusals."""
    info, warnings = result["input"], []
    nonbinary = int(groups.nonbinary.sum())
    if nonbinary and info["threshold"] is None:
        raise UserError(
            f"{info['path']}: the reward column {info['columns']['reward']!r} holds values other than 0 and 1 "
            f"({nonbinary} of {int(groups.n.sum())} rows); name a 0/1 correctness column with --reward-column, "
            "or pass --threshold T to count a reward >= T as a success"
        )
    if nonbinary:
        warnings.append(f"{nonbinary} rewards are not 0 or 1: a success is a reward >= {info['threshold']}")
    if info.get("group_size_warning"):
        warnings.append(info["group_size_warning"])
    warnings += _data_warnings(result, groups)
    missing = 0 if groups.adv_missing is None else int(groups.adv_missing.sum())
    if missing:
        warnings.append(
            f"{missing:,} of {int(groups.rows.sum()):,} advantages are missing (NaN or null), in "
            f"{int((groups.adv_missing > 0).sum()):,} groups: those groups are judged by their rewards (a group of "
            "equal scorable rewards has zero gradient) instead of their advantages")
    if result["group_size"] == 1:
        warnings.append("most groups hold one completion (G = 1), so the group figures (uniform groups, D_iid, the "
                        "Jensen gap) are not defined and are left out; if the log's groups are larger, name their "
                        "prompt with --prompt-column (TRL logs: --group-size)")
    others = info.get("other_files_skipped") or []
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        warnings.append(
            f"skipped {len(others)} file{'s' if len(others) > 1 else ''} the trainer did not write "
            f"in {Path(info['path']) / ('rollouts' if info['kind'] == 'grpolab' else '')}: {shown} "
            "(a backup copy of a step would count its completions twice; audit such a table on its own)"
        )
    logged = info["logged_steps"] or [s["step"] for s in result["per_step"]]
    absent, missing = _missing_steps(logged, 1 if info["kind"] in ("trl", "grpolab") else None)
    if absent:
        shown = ", ".join(map(str, missing)) + (", ..." if absent > len(missing) else "")
        warnings.append(
            f"{absent:,} of {max(logged):,} steps are missing from the logs ({shown}), so the figures cover "
            "only the logged steps. TRL writes its completions only every `logging_steps` steps: train with "
            "logging_steps=1 (GRPOConfig) to audit every step"
        )
    return warnings


def _data_warnings(result: dict[str, Any], groups: GroupTable) -> list[str]:
    """Missing rewards, and groups of other sizes than the nominal G: the figures count them, the output says so."""
    said, unscored = [], int(groups.rows.sum() - groups.n.sum())
    if unscored:
        empty = int((groups.n == 0).sum())
        said.append(f"{unscored:,} of {int(groups.rows.sum()):,} rewards are missing (NaN or null); {empty:,} "
                    "group(s) have none scorable: they count as uniform (D_real) but have no success rate, so they "
                    "widen the Jensen gap")
    size = result["group_size"]
    other = groups.rows != size
    if size > 1 and other.any():
        sizes = ", ".join(f"{int(n)}" for n in np.unique(groups.rows[other])[:6])
        said.append(f"{int(other.sum()):,} of {groups.rows.size:,} groups hold other than G = {size} completions "
                    f"(sizes {sizes}): they count in the shares (a group of one is uniform by construction), "
                    "D_iid uses G for every group, and pass@k only the groups of G")
    return said


def _refuse_nothing_scorable(groups: GroupTable, info: dict[str, Any]) -> None:
    if int(groups.n.sum()) == 0:
        raise UserError(f"{info['path']}: every reward in the column {info['columns']['reward']!r} is missing (NaN or "
                        "null), so there is nothing to audit; name the 0/1 correctness column with --reward-column")


def audit(path: Path | str, *, window: int = diagnostics.DEFAULT_WINDOW_GROUPS, **options: Any) -> dict[str, Any]:
    """Audit the rollout logs at ``path``: ``summarize(collect_groups(path, **options))``, the input read,
    ``warnings`` (missing steps, non-binary rewards under ``threshold``) and, for a grpolab run, ``prompt_fate``
    (``grpolab.audit.fate_source.run_fate``; None for other logs)."""
    groups, info = collect_groups(Path(path), **options)
    _refuse_nothing_scorable(groups, info)
    result = {"input": info, **summarize(groups, window)}
    result["prompt_fate"] = run_fate(Path(path)) if info["kind"] == "grpolab" else None
    result["warnings"] = _warnings(result, groups)
    return result
