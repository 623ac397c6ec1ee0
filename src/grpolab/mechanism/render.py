"""Outputs of ``grpolab mechanism``: mechanism.csv (the tidy summary), mechanism_runs.csv (per run),
mechanism.md (one section per measured part, as ``Section``s rendered by ``grpolab.render``, the renderer of
the compare report), mechanism.png (three panels; written when the token shifts were measured) and the
terminal table."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator
from rich.table import Table

from grpolab import advantages
from grpolab.io import atomic_write_bytes, atomic_write_text
from grpolab.mechanism.summary import passk_reading
from grpolab.render import Section, render_markdown

__all__ = ["TITLE", "figure_png", "markdown", "sections", "terminal_table", "update_lines", "write_outputs"]

TITLE = "Mechanism: format breakage, per-token shifts, pass@k, the update's geometry"
FIGURE_CAPTION = "Per-token change, pass@k before and after, answer format: start and end"

_OUTCOME_ORDER = {"wrong": 0, "correct": 1, "all": 2}
_CLASS_ORDER = {"format": 0, "content": 1, "all": 2}
_BARS = [("wrong", "format"), ("wrong", "content"), ("correct", "format"), ("correct", "content")]
_FORMAT_MEASURES = ["eval_unscorable", "eval_greedy_unscorable", "sampled_no_answer_form", "sampled_no_number",
                    "sampled_unscorable", "sampled_accuracy"]


def _pairs(summary: pd.DataFrame) -> list[tuple[str, int]]:
    """(estimator, G) of the summary, in the registry's display order, then by G."""
    pairs = summary[["estimator", "group_size"]].drop_duplicates().itertuples(index=False)
    order = advantages.display_order(summary["estimator"])
    return sorted(((e, int(g)) for e, g in pairs), key=lambda p: (order.index(p[0]), p[1]))


def _ci(row: pd.Series, digits: int = 3, scale: float = 1.0) -> str:
    if row["n_runs"] == 0 or np.isnan(row["mean"]):
        return "not recorded"
    mean, low, high = (row[c] * scale for c in ("mean", "ci_low", "ci_high"))
    if np.isnan(low):  # one run: no interval
        return f"{mean:+.{digits}f}"
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def _plain(row: pd.Series | None, scale: float = 100.0) -> str:
    if row is None or row["n_runs"] == 0 or np.isnan(row["mean"]):
        return "not recorded"
    return f"{row['mean'] * scale:.1f}%"


def _points(row: pd.Series) -> str:
    return "—" if row["n_runs"] == 0 or np.isnan(row["mean"]) else f"{row['mean'] * 100:+.1f}"


def _phase_table(summary: pd.DataFrame, part: str) -> pd.DataFrame:
    """Start, end and change [95% CI] of each measure of ``part``, per estimator and G."""
    rows = summary[summary["part"] == part]
    cells = []
    for estimator, size in _pairs(rows):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size)]
        for measure in sorted(mine["measure"].unique(), key=_measure_key):
            by_phase = {r["phase"]: r for _, r in mine[mine["measure"] == measure].iterrows()}
            change = by_phase["change"]
            cells.append([estimator, size, measure, _plain(by_phase.get("start")), _plain(by_phase.get("end")),
                           _ci(change, 1, 100.0), change["n_runs"]])
    return _text_frame(cells, ["Estimator", "G", "Measure", "Start", "End", "Change, points [95% CI]", "Runs"])


def _text_frame(cells: list[list], columns: list[str]) -> pd.DataFrame:
    """The table as text, each cell formatted as ``str`` formats it."""
    return pd.DataFrame([[str(c) for c in row] for row in cells], columns=columns, dtype=object)


def _measure_key(measure: str) -> tuple[int, int, str]:
    """Format measures in ``_FORMAT_MEASURES`` order; pass@k by k."""
    if measure in _FORMAT_MEASURES:
        return 0, _FORMAT_MEASURES.index(measure), measure
    return 1, int(measure.removeprefix("pass@")) if measure.startswith("pass@") else 0, measure


def _token_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Δ log p and Δ p [95% CI] per (completion outcome, token class), per estimator and G."""
    rows = summary[summary["part"] == "tokens"]
    cells = []
    for estimator, size in _pairs(rows):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size)]
        keyed = sorted(mine[mine["measure"] == "dlogp"].itertuples(),
                       key=lambda r: (_OUTCOME_ORDER[r.outcome], _CLASS_ORDER[r.token_class]))
        for r in keyed:
            dprob = mine[(mine["measure"] == "dprob") & (mine["outcome"] == r.outcome)
                         & (mine["token_class"] == r.token_class)].iloc[0]
            total = mine[(mine["measure"] == "dlogp") & (mine["outcome"] == r.outcome)
                         & (mine["token_class"] == "all")].iloc[0]
            cells.append([estimator, size, r.outcome, int(total["tokens"]), r.token_class, int(r.tokens),
                          _ci(pd.Series(r._asdict()), 4), _ci(dprob, 4), r.n_runs])
    return _text_frame(cells, ["Estimator", "G", "Completions", "Tokens", "Class", "Tokens in class",
                               "Δ log p [95% CI]", "Δ p [95% CI]", "Runs"])


def sections(summary: pd.DataFrame, figure: bytes | None, notes: list[str] | None = None) -> list[Section]:
    """mechanism.md's sections, one per part measured in ``summary``: the format, token, pass@k and update
    tables; ``figure``: mechanism.png's bytes (None: no figure); ``notes``: what the updates part could not
    measure."""
    parts = set(summary["part"])
    chosen = [section for part, section in zip(("format", "tokens", "passk"), _sample_sections(summary, figure),
                                               strict=True) if part in parts]
    if "updates" in parts:
        chosen.append(_updates_section(summary, notes or []))
    return chosen


def _sample_sections(summary: pd.DataFrame, figure: bytes | None) -> list[Section]:
    format_section = Section("1. Format breakage", [
        "`eval_unscorable`: share of sampled eval completions the verifier could not score (eval.jsonl; "
        "'not recorded' when eval.jsonl lacks it). `sampled_*`: the fixed prompts sampled again from each run's "
        "final model (same seed): `no_answer_form` = no `#### N`, `\\boxed{N}` or \"the answer is N\" (gsm8k "
        "verifiers only), `no_number` = no digit at all, `unscorable` = verifier returned None.",
    ], tables=[("", _phase_table(summary, "format"))])
    token_section = Section("2. Per-token change on the start policy's completions", [
        "Content tokens hold an ASCII digit; format tokens are all the others, EOS included. Δ log p is the "
        "token-mean of log p_end - log p_start; Δ p the token-mean of p_end - p_start.",
    ], tables=[("", _token_table(summary))])
    passk_section = Section("3. pass@k before and after (eval.jsonl)", [
        "Reading (95% CIs of the per-run changes): search compression = pass@1 up with pass@k_max not up; "
        "capacity gain = pass@k_max up.",
    ], tables=[("", _phase_table(summary, "passk"))],
        bullets=[f"{e} G={g}: {passk_reading(summary, e, g)}" for e, g in _pairs(summary)],
        figures=[("mechanism", FIGURE_CAPTION, figure)] if figure is not None else [])
    return [format_section, token_section, passk_section]


_UPDATE_COLUMNS = [("successive_cosine", "Successive-update cosine"),
                   ("successive_noise_cosine", "Its value for pure noise"), ("cross_seed_cosine", "Cross-seed cosine"),
                   ("update_norm", "‖W_end − W_start‖"), ("step_update_norm", "Mean ‖ΔW_k‖"),
                   ("adam_rms_ratio", "Adam ‖m̂‖/‖√v̂‖"), ("adam_noise_floor", "Noise floor"),
                   ("adam_over_floor", "Over floor")]


def _updates_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Each update measure's mean [95% CI] over seeds, one row per (estimator, G)."""
    rows = summary[summary["part"] == "updates"]
    cells = []
    for estimator, size in _pairs(rows):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size) & (rows["phase"] == "")]
        by_measure = {r["measure"]: r for _, r in mine.iterrows()}
        values = [_update_cell(by_measure.get(measure)) for measure, _ in _UPDATE_COLUMNS]
        cells.append([estimator, size, *values, int(mine["n_runs"].max())])
    return _text_frame(cells, ["Estimator", "G", *(title for _, title in _UPDATE_COLUMNS), "Runs"])


def _update_cell(row: pd.Series | None) -> str:
    if row is None or row["n_runs"] == 0 or np.isnan(row["mean"]):
        return "not measured"
    if row["n_runs"] == 1:
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _adam_by_checkpoint(summary: pd.DataFrame) -> list[str]:
    """One line per (estimator, G): Adam's ratio over its noise floor at each kept checkpoint (seed means)."""
    rows = summary[(summary["part"] == "updates") & (summary["phase"].str.startswith("step "))
                   & (summary["n_runs"] > 0)]
    lines = []
    for estimator, size in _pairs(rows):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size)]
        mine = mine.assign(step=mine["phase"].str.removeprefix("step ").astype(int)).sort_values("step")
        cells = ", ".join(f"step {r.step}: {r.mean:.3f}" for r in mine.itertuples())
        lines.append(f"{estimator} G={size}, Adam over its noise floor by checkpoint: {cells}")
    return lines


def _updates_section(summary: pd.DataFrame, notes: list[str]) -> Section:
    return Section("4. The update's geometry (from the runs' checkpoints)", [
        "ΔW_k = W at one kept checkpoint minus W at the one before (the first from the start weights); the "
        "successive-update cosine is their mean consecutive cosine, beside its value when every gradient is "
        "zero-mean i.i.d. noise: not 0, since AdamW's momentum carries noise from one interval into the next; "
        "only a cosine above it shows a consistent drift. The cross-seed cosine is the mean cosine between "
        "different seeds' total updates "
        "W_end − W_start (near 0: noise; similar for all seeds: a shared direction). W is the trainable weights "
        "of a full fine-tune, or (lora_alpha/r)·BA under LoRA. Adam ‖m̂‖/‖√v̂‖ is read from the last "
        "checkpoint's bias-corrected moments; its noise floor is its value for zero-mean i.i.d. gradients, "
        "sqrt((1−β1)(1+β1^t)/((1+β1)(1−β1^t))); over floor near 1 means Adam's steps are mostly noise. "
        "Means over seeds [95% Student-t CI].",
    ], tables=[("", _updates_table(summary))], bullets=[*_adam_by_checkpoint(summary), *notes])


def _intro(settings: dict) -> str:
    if not settings.get("prompts"):
        return (f"Compare output: `{settings['out']}`; start policy `{settings['model']}`. No completions were "
                "sampled (parts: " + ", ".join(settings.get("parts", [])) + ").")
    return (
        f"Compare output: `{settings['out']}`. Fixed completions: {settings['prompts']} test prompts x "
        f"{settings['samples']} samples from the start policy `{settings['model']}` (seed {settings['seed']}, "
        f"temperature {settings['temperature']}): {settings['correct']} correct, {settings['wrong']} wrong. "
        "Every run's final model scores the same completions. Means over runs (seeds) with 95% "
        "Student-t CIs; one run gives no interval."
    )


def markdown(summary: pd.DataFrame, settings: dict, figure: bytes | None) -> str:
    """mechanism.md: how the completions were drawn, then the tables of the measured parts, and the link to
    mechanism.png (written next to it; None: no figure)."""
    return render_markdown(sections(summary, figure, settings.get("update_notes")), TITLE, figure_dir="",
                           intro=[_intro(settings)])


def figure_png(summary: pd.DataFrame) -> bytes:
    """mechanism.png, three panels: Δ log p per (outcome, class); pass@k start and end; answer-format rates
    start and end."""
    pairs = _pairs(summary)
    colors = advantages.display_colors(summary["estimator"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    tokens = summary[(summary["part"] == "tokens") & (summary["measure"] == "dlogp")]
    width = 0.8 / max(len(pairs), 1)
    for i, (estimator, size) in enumerate(pairs):
        mine = tokens[(tokens["estimator"] == estimator) & (tokens["group_size"] == size)]
        cells = [mine[(mine["outcome"] == o) & (mine["token_class"] == c)].iloc[0] for o, c in _BARS]
        means = np.array([c["mean"] for c in cells])
        errors = np.abs(np.array([[c["ci_low"] for c in cells], [c["ci_high"] for c in cells]]) - means)
        axes[0].bar(np.arange(len(_BARS)) + i * width, means, width, yerr=np.nan_to_num(errors),
                    label=f"{estimator} G={size}", color=colors[estimator])
        _passk_curves(axes[1], summary, estimator, size, colors[estimator], first=i == 0)
    axes[0].axhline(0, color="black", lw=0.8)
    axes[0].set_xticks(np.arange(len(_BARS)) + width * (len(pairs) - 1) / 2, [f"{o}\n{c}" for o, c in _BARS])
    axes[0].set(title="Per-token change on start-policy completions", ylabel="mean Δ log p")
    axes[0].legend(fontsize=8)
    axes[1].set(title="pass@k before (dashed) and after", xlabel="k", ylabel="pass@k (%)")
    axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1].legend(fontsize=8)
    _format_bars(axes[2], summary, pairs)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _passk_curves(ax, summary: pd.DataFrame, estimator: str, size: int, color: str, *, first: bool) -> None:
    rows = summary[(summary["part"] == "passk") & (summary["estimator"] == estimator)
                   & (summary["group_size"] == size)].sort_values("k")
    for phase, style in (("start", "--"), ("end", "-")):
        curve = rows[rows["phase"] == phase]
        label = f"{estimator} G={size}" if phase == "end" else ("start" if first else None)
        ax.plot(curve["k"], curve["mean"] * 100, style, color="black" if phase == "start" else color,
                marker="o", label=label)


def _format_bars(ax, summary: pd.DataFrame, pairs: list[tuple[str, int]]) -> None:
    rows = summary[(summary["part"] == "format") & (summary["n_runs"] > 0) & (summary["phase"] != "change")
                   & (summary["measure"] != "sampled_accuracy")]
    measures = sorted(rows["measure"].unique(), key=_measure_key)
    width = 0.8 / max(len(pairs), 1)
    colors = advantages.display_colors(summary["estimator"])
    for i, (estimator, size) in enumerate(pairs):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size)]
        end = [mine[(mine["measure"] == m) & (mine["phase"] == "end")]["mean"].mean() * 100 for m in measures]
        start = [mine[(mine["measure"] == m) & (mine["phase"] == "start")]["mean"].mean() * 100 for m in measures]
        x = np.arange(len(measures)) + i * width
        ax.bar(x, end, width, color=colors[estimator], label=f"{estimator} G={size} end")
        ax.scatter(x, start, color="black", marker="_", s=200, label="start" if i == 0 else None, zorder=3)
    ax.set_xticks(np.arange(len(measures)) + width * (len(pairs) - 1) / 2,
                  [m.replace("sampled_", "").replace("_", " ") for m in measures], fontsize=8, rotation=15)
    ax.set(title="Answer format: start (bar ticks) and end", ylabel="% of completions")
    ax.legend(fontsize=8)


def update_lines(summary: pd.DataFrame) -> list[str]:
    """One terminal line per (estimator, G) with the update measures' means over seeds."""
    rows = summary[summary["part"] == "updates"]
    lines = []
    for estimator, size in _pairs(rows):
        mine = rows[(rows["estimator"] == estimator) & (rows["group_size"] == size) & (rows["phase"] == "")]
        mean = {r["measure"]: r["mean"] for _, r in mine.iterrows()}
        lines.append(f"{estimator} G={size} updates: successive cosine {mean['successive_cosine']:.3f} (pure noise "
                     f"{mean['successive_noise_cosine']:.3f}), cross-seed cosine {mean['cross_seed_cosine']:.3f}, "
                     f"‖W_end − W_start‖ {mean['update_norm']:.3g}, Adam over its noise floor "
                     f"{mean['adam_over_floor']:.3f}")
    return lines


def terminal_table(summary: pd.DataFrame) -> Table:
    """The rich table: Δ log p on wrong/correct x format/content, pass@1 and pass@k_max change (the reading
    of the pass@k change is ``passk_reading``, printed below it)."""
    table = Table(title="mean Δ log p per token on start-policy completions; pass@k change (points)")
    for column in ("estimator", "G", *(f"{o}\n{c}" for o, c in _BARS), "Δ\npass@1", "Δ\npass@k"):
        table.add_column(column, justify="left" if column == "estimator" else "right", no_wrap=True)
    for estimator, size in _pairs(summary):
        mine = summary[(summary["estimator"] == estimator) & (summary["group_size"] == size)]
        cells = []
        for outcome, token_class in _BARS:
            row = mine[(mine["part"] == "tokens") & (mine["measure"] == "dlogp") & (mine["outcome"] == outcome)
                       & (mine["token_class"] == token_class)]
            cells.append("—" if row.empty or np.isnan(row.iloc[0]["mean"]) else f"{row.iloc[0]['mean']:+.3f}")
        changes = mine[(mine["part"] == "passk") & (mine["phase"] == "change")].sort_values("k")
        passk = [_points(changes.iloc[i]) if not changes.empty else "—" for i in (0, -1)]
        table.add_row(estimator, str(size), *cells, *passk)
    return table


def write_outputs(out: Path, per_run: pd.DataFrame, summary: pd.DataFrame, settings: dict) -> list[Path]:
    """Write mechanism.csv, mechanism_runs.csv, mechanism.md and (when the token shifts were measured)
    mechanism.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "mechanism.csv", out / "mechanism_runs.csv", out / "mechanism.md"]
    atomic_write_text(paths[0], summary.to_csv(index=False))
    atomic_write_text(paths[1], per_run.to_csv(index=False))
    figure = figure_png(summary) if (summary["part"] == "tokens").any() else None
    atomic_write_text(paths[2], markdown(summary, settings, figure))
    if figure is not None:
        paths.append(out / "mechanism.png")
        atomic_write_bytes(paths[3], figure)
    return paths
