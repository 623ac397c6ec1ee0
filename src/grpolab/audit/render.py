"""Rendering of a ``grpolab audit`` result: a rich terminal summary and a self-contained HTML report.

The HTML report is a list of ``Section``s (what was read, the starvation summary, the figures) rendered
by ``grpolab.render``, the renderer of the compare report; its figures (matplotlib, Agg backend) are
embedded as base64 PNGs, so it opens anywhere without side files. Input is the JSON-ready dict of
``grpolab.audit.audit``.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab import metric_keys
from grpolab.io import atomic_write_text
from grpolab.render import Section, render_html

__all__ = ["TITLE", "html_sections", "render_terminal", "sample_steps", "step_table", "write_html"]

TITLE = "grpolab audit: gradient starvation"
FATE_INTRO = ("A prompt's state each time it was sampled: all wrong, mixed or all right in its group. Of the prompts "
              "all wrong when first sampled and sampled again, the share later mixed or all right tests paper 1's "
              "pass@G failure descent directly (docs/audit.md).")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _points(value: float | None) -> str:
    """A difference of two shares, in percentage points."""
    return "-" if value is None else f"{100 * value:+.1f} pts"


def sample_steps(per_step: list[dict[str, Any]], limit: int = 12) -> list[dict[str, Any]]:
    """At most ``limit`` evenly spaced rows of the per-step table (first and last always included)."""
    if len(per_step) <= limit:
        return per_step
    picks = sorted({round(i * (len(per_step) - 1) / (limit - 1)) for i in range(limit)})
    return [per_step[i] for i in picks]


def step_table(per_step: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the per-step table (sampled): one column per row of ``grpolab.metric_keys.KEYS`` that
    names an ``audit`` field, under its ``label``; shares in percent."""
    columns = metric_keys.audit_columns()
    rows = [[_cell(row.get(key.audit), key.unit) for key in columns] for row in sample_steps(per_step)]
    return [key.label or key.name for key in columns], rows


def _cell(value: Any, unit: str) -> str:
    if unit == "share":
        return _pct(value)
    return "-" if value is None else f"{value:,}"


def _headline_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (
            "groups",
            f"{result['groups']:,} (G = {result['group_size']}"
            + (f", {result['steps']:,} steps)" if result["steps"] else ")"),
        ),
        ("degenerate groups (advantages all zero)", _pct(result["degenerate"])),
        ("uniform groups (rewards all equal; D_real)", _pct(result["uniform"])),
        ("  all correct", _pct(result["all_correct"])),
        ("  all wrong", _pct(result["all_wrong"])),
        ("  nothing scorable", _pct(result["unscorable_groups"])),
        (f"D_iid (i.i.d., pbar over >= {result['window_groups']} groups)", _pct(result["d_iid"])),
        ("Jensen gap (D_real - D_iid)", _points(result["jensen_gap"])
         + (f" ({100 * result['jensen_ratio']:+.0f}% of D_iid)" if result.get("jensen_ratio") is not None else "")),
        ("success rate", _pct(result["success_rate"])),
        ("zero-advantage completions", _pct(result["zero_gradient_completions"])),
        ("completions sign (2r-1) would use", _pct(result["sign_used_completions"])),
    ]
    if result.get("truncated") is not None:
        rows.append(("truncated completions (no end within the token budget)", _pct(result["truncated"])))
    if result["tokens"] is not None:
        rows += [
            ("zero-advantage tokens", _pct(result["zero_gradient_tokens"])),
            ("tokens sign would use", _pct(result["sign_used_tokens"])),
        ]
    if result["pass_at_k"]:
        shown = {
            k: v
            for k, v in result["pass_at_k"].items()
            if int(k) & (int(k) - 1) == 0 or int(k) == len(result["pass_at_k"])
        }
        rows.append(("pass@k", "  ".join(f"@{k} {_pct(v)}" for k, v in shown.items())))
    return rows


def _fate_rows(fate: dict[str, Any]) -> list[tuple[str, str]]:
    """Each prompt's fate (``grpolab.diagnostics.fate``) in words."""
    share = fate["escaped_share"]
    return [
        ("prompts sampled (with a scorable group)", f"{fate['prompts']:,}"),
        ("all wrong when first sampled", f"{fate['all_wrong_first']:,}"),
        ("  of them sampled again", f"{fate['all_wrong_first_resampled']:,}"),
        ("  later mixed or all right (escaped)", f"{fate['escaped']:,} ({_pct(None if math.isnan(share) else share)})"),
        ("  later all right (solved)", f"{fate['solved']:,}"),
    ]


def _transition_frame(fate: dict[str, Any]) -> pd.DataFrame:
    """[3, 3] consecutive states of one prompt: rows the earlier, columns the later."""
    return pd.DataFrame(fate["transitions"]).T.rename_axis("from / to").reset_index()


def _input_rows(source: dict[str, Any]) -> list[tuple[str, str]]:
    """What was read: files, correctness / advantage columns, grouping, columns left out."""
    columns = source["columns"]
    files = f"{source['files']} ({source['kind']}, {source['format']})"
    if source["duplicate_files_skipped"]:
        files += f", {source['duplicate_files_skipped']} duplicate snapshot(s) skipped"
    rows = [
        ("files read", files),
        ("correctness column", columns["reward"] + ("" if columns["reward_choice"] == "--reward-column" else
                                                    f" ({columns['reward_choice']}; choose with --reward-column)")),
        ("degenerate from", f"column {columns['advantage']}" if columns["advantage"] else "equal rewards"),
        ("groups", source["grouping"]),
    ]
    if columns["not_read"]:
        rows.append(("numeric columns not read", ", ".join(columns["not_read"])))
    return rows


def render_terminal(result: dict[str, Any], console: Any = None) -> None:
    """Print the summary, the per-step table (sampled) and the success histogram with rich."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    source = result["input"]
    read = Table(title=f"grpolab audit: {source['path']}")
    read.add_column("input")
    read.add_column("read")
    for name, value in _input_rows(source):
        read.add_row(name, value)
    console.print(read)
    summary = Table()
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    for name, value in _headline_rows(result):
        summary.add_row(name, value)
    console.print(summary)
    if result["per_step"]:
        steps = Table(title="per step (sampled)" if len(result["per_step"]) > 12 else "per step")
        header, rows = step_table(result["per_step"])
        for name in header:
            steps.add_column(name, justify="right")
        for row in rows:
            steps.add_row(*row)
        console.print(steps)
    fate = result.get("prompt_fate")
    if fate:
        prompts = Table(title="each prompt's fate")
        prompts.add_column("prompts")
        prompts.add_column("count", justify="right")
        for name, value in _fate_rows(fate):
            prompts.add_row(name, value)
        console.print(prompts)
    hist = result["success_histogram"]
    if hist["counts"]:
        bars = Table(title="per-prompt success rate")
        for name in ("rate", "groups", "share"):
            bars.add_column(name, justify="right")
        for rate, count, share in zip(hist["rates"], hist["counts"], hist["fractions"], strict=True):
            bars.add_row(f"{rate:.2f}", f"{count:,}", f"{_pct(share)} {'#' * round(40 * share)}")
        console.print(bars)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _figures(result: dict[str, Any]) -> list[tuple[str, str, bytes]]:
    """(file stem, caption, PNG bytes) of each figure the result has data for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    if result["per_step"] and result["uniform"] is not None:  # None: groups of one completion (G = 1)
        fig, ax = plt.subplots(figsize=(7, 3.2))
        steps = [r["step"] for r in result["per_step"]]
        ax.stackplot(
            steps,
            [r["all_wrong"] for r in result["per_step"]],
            [r["all_correct"] for r in result["per_step"]],
            labels=["all wrong", "all correct"],
            alpha=0.7,
        )
        ax.plot(steps, [r["d_iid"] for r in result["per_step"]], "k--", label="D_iid")
        ax.set(xlabel="step", ylabel="fraction of groups", ylim=(0, 1), title="Uniform groups per step")
        ax.legend(loc="upper right")
        figures.append(("uniform_per_step", "Uniform groups (rewards all equal) per step", _png(fig)))
        plt.close(fig)
    hist = result["success_histogram"]
    if hist["counts"]:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        width = 0.8 / max(len(hist["rates"]) - 1, 1) if hist["exact"] else 0.09
        ax.bar(hist["rates"], hist["fractions"], width=width)
        ax.set(xlabel="per-prompt success rate c/n", ylabel="share of groups", title="Success histogram")
        figures.append(("success_histogram", "Per-prompt success histogram", _png(fig)))
        plt.close(fig)
    if result["pass_at_k"]:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ks = [int(k) for k in result["pass_at_k"]]
        ax.plot(ks, list(result["pass_at_k"].values()), "o-")
        ax.set(xlabel="k", ylabel="pass@k", ylim=(0, 1.02), title="pass@k from the groups")
        figures.append(("pass_at_k", "pass@k", _png(fig)))
        plt.close(fig)
    return figures


def html_sections(result: dict[str, Any]) -> list[Section]:
    """The report's sections: what was read (and the warnings), the starvation summary, the per-step table
    (sampled), each prompt's fate, the figures."""
    source = result["input"]
    sections = [
        Section(
            "Input",
            [f"Rollout logs: {source['path']}"],
            notes=[f"Warning: {warning}" for warning in result.get("warnings", [])],
            tables=[("What was read", _frame(_input_rows(source), "input", "read"))],
        ),
        Section("Starvation", tables=[("", _frame(_headline_rows(result), "metric", "value"))]),
    ]
    if result["per_step"]:
        header, rows = step_table(result["per_step"])
        sections.append(Section("Per step", tables=[("", pd.DataFrame(rows, columns=header))]))
    fate = result.get("prompt_fate")
    if fate:
        sections.append(Section("Each prompt's fate", [FATE_INTRO], tables=[
            ("", _frame(_fate_rows(fate), "prompts", "count")),
            ("Transitions between consecutive samplings of a prompt", _transition_frame(fate))]))
    figures = _figures(result)
    return [*sections, Section("Figures", figures=figures)] if figures else sections


def _frame(rows: list[tuple[str, str]], *columns: str) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


def write_html(result: dict[str, Any], path: Path) -> Path:
    """Write a self-contained HTML report (tables + embedded PNG figures) to ``path``."""
    path = Path(path)
    atomic_write_text(path, render_html(html_sections(result), TITLE))
    return path
